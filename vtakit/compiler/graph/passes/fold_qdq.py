"""FoldQDQ: the QuantizeLinear / DequantizeLinear pairs of a pre-quantised (QDQ) model become integer layers.

A QDQ model (what ``onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)``
writes) keeps its float operators and marks every tensor's quantisation with a ``QuantizeLinear`` ->
``DequantizeLinear`` pair; the importer turns those into ``qnn.quantize`` / ``qnn.dequantize`` and
this pass rewrites the patterns whose integer meaning the accelerator computes:

* ``qnn.dequantize(x_q), W, [b] -> Conv -> [Relu] -> qnn.quantize`` becomes one ``qnn.conv2d``;
  ``Gemm`` (``transA = 0``) and 2-D ``MatMul`` become ``qnn.dense``. ``W`` is an int8 constant the
  importer recorded with its scale (per tensor, or per output channel), the data is int8 with zero
  point 0, the output int8 with zero point 0. The int32 bias is the model's quantised bias (or the
  float bias divided by ``s_x * s_w`` and rounded).
* ``qnn.dequantize(a), qnn.dequantize(b) -> Add -> qnn.quantize`` becomes ``qnn.add`` when the ratios
  ``s_a / s_y`` and ``s_b / s_y`` are powers of two (or ``qdq_scales="power2"`` rounds them);
  otherwise it stays in float.
* ``qnn.dequantize -> MaxPool | Flatten | Reshape | Identity | Relu -> qnn.quantize`` with one scale and
  zero point on both sides (``Relu``: zero point 0) runs the operator on the int8 values; a ``Relu``
  on the int8 output of a ``qnn.conv2d`` / ``qnn.dense`` / ``qnn.add`` is folded into its clip.
* ``qnn.quantize(qnn.dequantize(q))`` with the same parameters is ``q``.

Anything else -- a non-zero activation zero point (onnxruntime's default for activations), uint8
activations, a weight that is not a recorded int8 constant -- stays as float operators between
``qnn.dequantize`` and ``qnn.quantize``: exact ONNX semantics, run on the CPU.

The rescale ``M = s_x * s_w / s_y`` (per output channel; computed in float32 as onnxruntime does)
is realised by :func:`realise`: in the fixed-point form of the ``qnn`` layers (``qdq_scales="exact"``,
the default) or rounded to powers of two (``"power2"``, which records each layer's relative scale
error in ``graph.metadata["qdq_scale_error"]``). The mode is read from ``graph.metadata["qdq_scales"]``
(``from_onnx(..., qdq_scales=)`` sets it). ``from_onnx(..., qdq_multiplier_bits=k)``
(``graph.metadata["qdq_multiplier_bits"]``) rounds each "exact" multiplier to the nearest value with at
most ``k`` set bits: configurations without ALU_MUL realise a multiplier by shift-and-add, one term per
set bit, so fewer bits run faster; the relative scale errors go to ``qdq_scale_error`` as well.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node, TensorType, unique_name
from vtakit.compiler.graph.passes.eliminate_dead_nodes import eliminate_dead_nodes
from vtakit.compiler.graph.passes.registry import graph_pass
from vtakit.errors import GraphError
from vtakit.runtime.packing import nearest_with_set_bits

__all__ = ["fold_qdq", "realise", "Realisation", "QDQ_SCALES", "MODE_KEY", "ERROR_KEY", "CONSTANTS_KEY",
           "MULTIPLIER_BITS", "BITS_KEY", "accumulator_bound", "conv2d_attrs", "check_multiplier_bits"]

#: the values of ``from_onnx(..., qdq_scales=)``
QDQ_SCALES = ("exact", "power2")
#: ``graph.metadata`` keys: the realisation mode, the per-layer error bounds of "power2", and the
#: int8 weights the importer dequantised (internal: the pass consumes and removes it)
MODE_KEY = "qdq_scales"
ERROR_KEY = "qdq_scale_error"
CONSTANTS_KEY = "qdq_constants"
#: ``graph.metadata`` key of ``from_onnx(..., qdq_multiplier_bits=)``: "exact" multipliers rounded to at
#: most that many set bits (errors in ``qdq_scale_error`` too)
BITS_KEY = "qdq_multiplier_bits"
#: a fixed-point multiplier lies in [2**(MULTIPLIER_BITS-1), 2**MULTIPLIER_BITS) (16-bit signed MUL operand)
MULTIPLIER_BITS = 15
_INT32_MAX = (1 << 31) - 1
_PASS_THROUGH = ("MaxPool", "Flatten", "Reshape", "Identity")
_CLIPPED = ("qnn.conv2d", "qnn.dense", "qnn.add")


@dataclass(frozen=True)
class Realisation:
    """How a layer's int32 accumulator is requantised: the ``qnn.conv2d`` / ``qnn.dense`` attributes
    ``shift`` and ``pre_shift``, the per-channel ``multiplier`` (None: shift only) and int32 ``addend``
    (bias plus rounding), and ``error``: the largest relative error of the realised scale against M."""

    shift: int
    pre_shift: int
    multiplier: np.ndarray | None
    addend: np.ndarray
    error: float


def accumulator_bound(weight_rows: np.ndarray, non_negative: bool = False) -> np.ndarray:
    """Per output channel, the largest ``|acc|`` an int8 input can give with these int8 weight rows (one
    row per output channel): ``128 * sum(|w|)`` for inputs in [-128, 127] -- at most ``128 * 128 * K`` for
    a reduction of length K, usually far less -- and ``127 * max(sum(w+), sum(w-))`` for inputs known
    to lie in [0, 127] (the output of a ReLU-clipped layer, or a max-pool of one)."""
    rows = np.asarray(weight_rows, np.int64).reshape(weight_rows.shape[0], -1)
    if non_negative:
        return 127 * np.maximum(np.clip(rows, 0, None).sum(axis=1), np.clip(-rows, 0, None).sum(axis=1))
    return 128 * np.abs(rows).sum(axis=1)


def check_multiplier_bits(bits: object) -> int | None:
    """``bits`` if it is None or an int in [1, MULTIPLIER_BITS], else a GraphError."""
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MULTIPLIER_BITS):
        raise GraphError(f"qdq_multiplier_bits={bits!r} must be None or an int in [1, {MULTIPLIER_BITS}] (the set "
                         "bits of each fixed-point multiplier: without ALU_MUL each set bit costs a shift-and-add term)")
    return bits


def realise(scale: np.ndarray, bias: np.ndarray, bound: np.ndarray, mode: str = "exact",
            multiplier_bits: int | None = None) -> Realisation | None:
    """The requantisation of ``acc * scale`` (per channel; ``acc`` includes ``bias``, |acc - bias| <= ``bound``).

    ``"exact"``: ``m = round(scale * 2**E)`` with the largest channel's ``m`` in [2**14, 2**15) (one
    ``E`` for all channels: a channel whose scale is smaller keeps fewer bits), then
    ``((acc + bias + 2**(p-1)) >> p) * m + 2**(s-1) >> s`` with ``s = E - p``. ``p`` (``pre_shift``) is
    the least for which ``ceil((bound + |bias| + 2**(p-1)) / 2**p) * m + 2**(s-1) <= 2**31 - 1`` for every
    channel: the int32 product cannot overflow for any int8 input; with ``multiplier_bits`` each ``m``
    is then rounded to the nearest value with at most that many set bits (shift-and-add on
    configurations without ALU_MUL; ``error`` says by how much). ``"power2"``: every scale rounded
    to the nearest power of two (a plain shift when the channels agree, otherwise power-of-two
    multipliers). None when the scale cannot be realised (a non-positive scale, a shift out of range).
    """
    scale = np.asarray(scale, np.float64).reshape(-1)
    bias = np.broadcast_to(np.asarray(bias, np.int64).reshape(-1), scale.shape)
    bound = np.broadcast_to(np.asarray(bound, np.int64).reshape(-1), scale.shape)
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        return None
    if mode == "power2":
        exps = np.array([_nearest_power2(s) for s in scale], np.int64)  # realised scale 2**exps
        error = float(np.max(np.abs(np.exp2(exps.astype(np.float64)) / scale - 1)))
        if np.all(exps == exps[0]):
            shift = int(-exps[0])
            if not -32 <= shift <= 31:
                return None
            addend = bias + (1 << (shift - 1) if shift > 0 else 0)
            if np.any(np.abs(bound) + np.abs(addend) > _INT32_MAX):
                return None
            return Realisation(shift, 0, None, addend.astype(np.int32), error)
        mult = np.left_shift(np.int64(1), (exps - exps.min()).astype(np.int64))
        if mult.max() >= 1 << MULTIPLIER_BITS:
            return None
        r = _fixed_point(mult, -int(exps.min()), bias, bound)
        return None if r is None else Realisation(r.shift, r.pre_shift, r.multiplier, r.addend, error)
    if mode != "exact":
        raise GraphError(f"qdq_scales must be one of {list(QDQ_SCALES)}, got {mode!r}")
    top = float(scale.max())
    exp = (MULTIPLIER_BITS - 1) - math.floor(math.log2(top))
    if round(top * 2.0 ** exp) >= 1 << MULTIPLIER_BITS:
        exp -= 1
    mult = np.rint(scale * 2.0 ** exp).astype(np.int64)
    if check_multiplier_bits(multiplier_bits) is not None:
        mult = nearest_with_set_bits(mult, multiplier_bits)
    if np.any(mult < 1):
        return None
    error = float(np.max(np.abs(mult * 2.0 ** -exp / scale - 1)))
    r = _fixed_point(mult, exp, bias, bound)
    return None if r is None else Realisation(r.shift, r.pre_shift, r.multiplier, r.addend, error)


def _nearest_power2(s: float) -> int:
    """The integer k with 2**k nearest to ``s`` in relative error."""
    lo = math.floor(math.log2(s))
    return min((lo, lo + 1), key=lambda k: abs(2.0 ** k / s - 1))


def _fixed_point(mult: np.ndarray, exp: int, bias: np.ndarray, bound: np.ndarray) -> Realisation | None:
    """``acc * mult / 2**exp`` with the least pre-shift that keeps every int32 step in range."""
    for pre in range(0, 32):
        shift = exp - pre
        if not -32 <= shift <= 31:
            continue
        addend = bias + (1 << (pre - 1) if pre > 0 else 0)
        total = bound + np.abs(addend)
        if np.any(total > _INT32_MAX):
            return None
        shifted = -(-total // (1 << pre))                   # ceil(total / 2**pre): |t >> pre| at most this
        if np.all(shifted * mult + (1 << (shift - 1) if shift > 0 else 0) <= _INT32_MAX):
            return Realisation(shift, pre, mult.astype(np.int32), addend.astype(np.int32), 0.0)
    return None


# ---------------------------------------------------------------------------- the pass
@dataclass
class _Quant:
    """A recorded int8 constant: its integer values, scale, zero point and axis (per-axis scales)."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int


class _Folder:
    def __init__(self, g: Graph) -> None:
        self.g = g
        self.mode = g.metadata.get(MODE_KEY, "exact")
        if self.mode not in QDQ_SCALES:
            raise GraphError(f"qdq_scales must be one of {list(QDQ_SCALES)}, got {self.mode!r}")
        self.records: dict[str, Any] = dict(g.metadata.get(CONSTANTS_KEY, {}))
        self.bits = check_multiplier_bits(g.metadata.get(BITS_KEY))
        self.errors: dict[str, float] = {}
        self.names = set(g.types) | set(g.constants) | set(g.inputs) | {o for n in g.nodes for o in n.outputs}

    # -- graph queries -----------------------------------------------------------------------
    def refresh(self) -> None:
        live = set(self.g.outputs)
        kept = []
        for node in reversed(self.g.nodes):        # drop what the rewrites left unread
            if any(o in live for o in node.outputs):
                kept.append(node)
                live.update(i for i in node.inputs if i)
        self.g.nodes = kept[::-1]
        self.producers = self.g.producers()
        self.consumers = self.g.consumers()

    def sole_consumer(self, value: str) -> Node | None:
        users = self.consumers.get(value, [])
        if len(users) != 1 or value in self.g.outputs:
            return None
        return users[0]

    def dequantized(self, value: str, dtype: str = "int8") -> tuple[str, float, int] | None:
        """(q, scale, zero point) when ``value`` is ``qnn.dequantize(q)`` of a ``dtype`` tensor."""
        node = self.producers.get(value)
        if node is None or node.op != "qnn.dequantize" or self.g.type_of(node.inputs[0]).dtype != dtype:
            return None
        return node.inputs[0], float(node.attrs["scale"]), int(node.attrs["zero_point"])

    def quantizer(self, value: str) -> Node | None:
        """The int8, zero-point-0 ``qnn.quantize`` that alone reads ``value``."""
        node = self.sole_consumer(value)
        if node is None or node.op != "qnn.quantize" or node.attrs["dtype"] != "int8" or node.attrs["zero_point"]:
            return None
        return node

    def non_negative(self, value: str) -> bool:
        """Whether the int8 ``value`` is known to lie in [0, 127]: a layer clipped at 0, or a Relu, MaxPool
        or reshape of such a value."""
        node = self.producers.get(value)
        while node is not None and node.op in (*_PASS_THROUGH, "Relu"):
            if node.op == "Relu":
                return True
            node = self.producers.get(node.inputs[0])
        return node is not None and node.op in _CLIPPED and node.attrs["clip"][0] >= 0

    def weight(self, name: str) -> _Quant | None:
        rec = self.records.get(name)
        if rec is None:
            return None
        q = _Quant(*rec)
        if q.values.dtype != np.int8 or np.any(q.zero_point != 0):
            return None
        return q

    def constant(self, value: np.ndarray, hint: str) -> str:
        name = unique_name(hint, self.names)
        self.names.add(name)
        value = np.ascontiguousarray(value)
        self.g.constants[name] = value
        self.g.types[name] = TensorType(value.shape, value.dtype.name)
        return name

    # -- rewrites ----------------------------------------------------------------------------
    def run(self) -> Graph:
        changed = True
        while changed:
            changed = False
            for rule in (self.pass_through, self.layer, self.add, self.relu_into_clip, self.requantize_pair):
                self.refresh()
                for node in list(self.g.nodes):
                    if node in self.g.nodes and rule(node):
                        changed = True
                        self.refresh()
        return self.g

    def replace(self, old: Sequence[Node], new: Node) -> None:
        """Put ``new`` where the last of ``old`` was and drop the others (their inputs become dead)."""
        last = max(self.g.nodes.index(n) for n in old)
        gone = {id(n) for n in old}
        nodes = []
        for i, n in enumerate(self.g.nodes):
            if i == last:
                nodes.append(new)
            elif id(n) not in gone:
                nodes.append(n)
        self.g.nodes = nodes

    def pass_through(self, node: Node) -> bool:
        """``dequantize -> op -> quantize`` (same scale and zero point) -> ``op`` on the integers."""
        if node.op not in (*_PASS_THROUGH, "Relu") or not node.inputs:
            return False
        src = self.producers.get(node.inputs[0])
        if src is None or src.op != "qnn.dequantize":
            return False
        dtype = self.g.type_of(src.inputs[0]).dtype
        q = self.sole_consumer(node.outputs[0])
        if q is None or q.op != "qnn.quantize" or q.attrs["dtype"] != dtype \
                or q.attrs["scale"] != src.attrs["scale"] or q.attrs["zero_point"] != src.attrs["zero_point"]:
            return False
        if node.op == "Relu" and (src.attrs["zero_point"] != 0 or dtype != "int8"):
            return False
        moved = Node(node.op, [src.inputs[0], *node.inputs[1:]], [q.outputs[0]], dict(node.attrs), node.name)
        self.g.types[q.outputs[0]] = TensorType(self.g.type_of(q.outputs[0]).shape, dtype)
        self.replace([node, q], moved)
        return True

    def _output(self, node: Node) -> tuple[Node, list[Node], tuple[int, int]] | None:
        """The ``qnn.quantize`` ending a layer (through an optional Relu), the nodes it replaces, its clip."""
        q = self.quantizer(node.outputs[0])
        if q is not None:
            return q, [node, q], (-128, 127)
        relu = self.sole_consumer(node.outputs[0])
        if relu is not None and relu.op == "Relu":
            q = self.quantizer(relu.outputs[0])
            if q is not None:
                return q, [node, relu, q], (0, 127)
        return None

    def layer(self, node: Node) -> bool:
        """Conv / Gemm / MatMul between dequantized int8 data and weights and a quantize -> qnn op."""
        if node.op not in ("Conv", "Gemm", "MatMul"):
            return False
        data = self.dequantized(node.inputs[0])
        w = self.weight(node.inputs[1]) if len(node.inputs) > 1 else None
        out = self._output(node)
        if data is None or data[2] != 0 or w is None or out is None:
            return False
        q_x, s_x, _ = data
        q, replaced, clip = out
        s_y = float(q.attrs["scale"])
        bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
        bias = self.g.constants.get(bias_name) if bias_name else None
        if bias_name and bias is None:
            return False
        xs = self.g.type_of(q_x).shape
        if node.op == "Conv":
            if len(xs) != 4 or w.values.ndim != 4:
                return False
            weight, w_axis, alpha, beta = w.values, 0, 1.0, 1.0
            attrs = conv2d_attrs(node, xs, w.values.shape)
            op = "qnn.conv2d"
        else:
            if len(xs) != 2 or w.values.ndim != 2:
                return False
            trans_b = node.op == "Gemm" and bool(node.attrs["transB"])
            if node.op == "Gemm" and node.attrs["transA"]:
                return False
            weight, w_axis = (w.values, 0) if trans_b else (w.values.T, 1)
            alpha = float(node.attrs["alpha"]) if node.op == "Gemm" else 1.0
            beta = float(node.attrs["beta"]) if node.op == "Gemm" else 1.0
            attrs, op = {}, "qnn.dense"
        channels = weight.shape[0]
        s_w = np.asarray(w.scale, np.float32).reshape(-1)
        if s_w.size not in (1, channels) or (s_w.size > 1 and w.axis % w.values.ndim != w_axis):
            return False
        s_w = np.broadcast_to(s_w, (channels,))
        # M = s_x * s_w / s_y in float32, as onnxruntime's integer kernels compute it
        scale = (np.float32(s_x) * s_w / np.float32(s_y)).astype(np.float32).astype(np.float64) * alpha
        bias_int = np.zeros(channels, np.int64)
        if bias is not None and beta != 0.0:
            b = np.asarray(bias, np.float64)
            if b.size not in (1, channels):
                return False
            b = np.broadcast_to(b.reshape(-1), (channels,)) * beta
            bias_int = np.rint(b / (np.float64(s_x) * s_w.astype(np.float64) * alpha)).astype(np.int64)
        r = realise(scale, bias_int, accumulator_bound(weight, self.non_negative(q_x)), self.mode, self.bits)
        if r is None:
            return False
        label = node.name or q.outputs[0]
        if self.mode == "power2" or self.bits is not None:
            self.errors[label] = r.error
        inputs = [q_x, self.constant(np.ascontiguousarray(weight, np.int8), f"{label}_weight_q"),
                  self.constant(r.addend, f"{label}_addend")]
        if r.multiplier is not None:
            inputs.append(self.constant(r.multiplier, f"{label}_multiplier"))
        new = Node(op, inputs, [q.outputs[0]], {**attrs, "shift": r.shift, "pre_shift": r.pre_shift,
                                                 "clip": clip}, node.name)
        self.replace(replaced, new)
        return True

    def add(self, node: Node) -> bool:
        """``dequantize(a) + dequantize(b) -> quantize`` with power-of-two scale ratios -> ``qnn.add``."""
        if node.op != "Add" or len(node.inputs) != 2:
            return False
        a, b = self.dequantized(node.inputs[0]), self.dequantized(node.inputs[1])
        out = self._output(node)
        if a is None or b is None or a[2] or b[2] or out is None:
            return False
        if self.g.type_of(a[0]).shape != self.g.type_of(b[0]).shape:
            return False
        q, replaced, clip = out
        s_y = float(np.float32(q.attrs["scale"]))
        exps, error = [], 0.0
        for s in (a[1], b[1]):
            ratio = float(np.float32(s)) / s_y
            k = _nearest_power2(ratio)
            err = abs(2.0 ** k / ratio - 1)
            if self.mode == "exact" and err > 1e-7:
                return False
            exps.append(k)
            error = max(error, err)
        shift = max(0, -min(exps))
        la, lb = exps[0] + shift, exps[1] + shift
        if max(la, lb) > 23 or shift > 31:
            return False
        label = node.name or q.outputs[0]
        if self.mode == "power2":
            self.errors[label] = error
        new = Node("qnn.add", [a[0], b[0]], [q.outputs[0]],
                   {"lshift_a": la, "lshift_b": lb, "addend": (1 << (shift - 1)) if shift else 0, "shift": shift,
                    "clip": clip}, node.name)
        self.replace(replaced, new)
        return True

    def relu_into_clip(self, node: Node) -> bool:
        """An int8 ``Relu`` that alone reads a qnn layer's output becomes the layer's clip."""
        if node.op != "Relu" or self.g.type_of(node.inputs[0]).dtype != "int8":
            return False
        src = self.producers.get(node.inputs[0])
        if src is None or src.op not in _CLIPPED or self.sole_consumer(node.inputs[0]) is not node:
            return False
        lo, hi = src.attrs["clip"]
        new = Node(src.op, list(src.inputs), [node.outputs[0]], {**src.attrs, "clip": (max(lo, 0), hi)}, src.name)
        self.replace([src, node], new)
        return True

    def requantize_pair(self, node: Node) -> bool:
        """``quantize(dequantize(q))`` with the parameters of the dequantize is ``q``: readers read ``q``."""
        if node.op != "qnn.quantize":
            return False
        src = self.producers.get(node.inputs[0])
        if src is None or src.op != "qnn.dequantize" or node.outputs[0] in self.g.outputs:
            return False
        if self.g.type_of(src.inputs[0]).dtype != node.attrs["dtype"] or src.attrs["scale"] != node.attrs["scale"] \
                or src.attrs["zero_point"] != node.attrs["zero_point"]:
            return False
        old, new = node.outputs[0], src.inputs[0]
        self.g.nodes = [n for n in self.g.nodes if n is not node]
        for n in self.g.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        return True


def conv2d_attrs(node: Node, x_shape: Sequence[int], w_shape: Sequence[int]) -> dict[str, Any]:
    """A Conv node's window as ``qnn.conv2d`` attributes (explicit pads, auto_pad resolved)."""
    from vtakit.compiler.graph.ops.nn import conv_window

    win = conv_window("Conv", x_shape, w_shape, node.attrs)
    return {"strides": tuple(win.strides), "dilations": tuple(win.dilations), "group": int(node.attrs["group"]),
            "pads": (win.pads_begin[0], win.pads_begin[1], win.pads_end[0], win.pads_end[1])}


@graph_pass("FoldQDQ")
def fold_qdq(graph: Graph) -> Graph:
    """The QDQ patterns of ``graph`` as qnn layers (see the module docstring); ``graph.metadata``
    gains ``qdq_scale_error`` under ``qdq_scales="power2"``."""
    g = graph.copy()
    for node in g.nodes:            # the rewrites change node inputs in place: own the nodes
        node.inputs = list(node.inputs)
    folder = _Folder(g)
    g = folder.run()
    g.metadata.pop(CONSTANTS_KEY, None)
    errors = {**g.metadata.get(ERROR_KEY, {}), **folder.errors}    # the importer's QLinear layers, then these
    if folder.bits is not None and errors:
        g.metadata[ERROR_KEY] = errors
    if folder.mode == "power2" and errors:
        g.metadata[ERROR_KEY] = errors
        worst = max(errors, key=errors.get)
        warnings.warn(f"qdq_scales='power2' rounded the requantisation scales of {len(errors)} layer(s) to "
                      f"powers of two; the largest relative scale error is {errors[worst]:.3g} (layer "
                      f"{worst!r}); per layer in graph.metadata['{ERROR_KEY}']", stacklevel=4)
    return eliminate_dead_nodes.function(g)
