"""Turn a quantisation plan and calibrated thresholds into the quantised graph: scales, int8 weights,
int32 addends, shifts and multipliers, and the qnn nodes that carry them.

Requantisation of a conv/dense with input scale ``s_in``, weight scales ``s_w[c]`` and output scale
``s_out`` (accumulator scale ``s_in * s_w[c]``):

* power-of-two scales, one weight scale: ``shift = log2(s_out) - log2(s_in) - log2(s_w)``, ``addend =
  round(b / (s_in * s_w)) + rounding_addend(shift)``;
* otherwise (float scales, or one weight scale per channel) the fixed-point form: ``multiplier[c] ~
  s_in * s_w[c] / s_out * 2**(shift + pre_shift)`` (:func:`.scales.fixed_point`), ``addend =
  round(b / (s_in * s_w[c])) + rounding_addend(pre_shift)``.

``qnn.add`` brings both operands to the finer scale by left shifts and shifts the sum to the output
scale (``addend = rounding_addend(shift)``); its operand and result scales are powers of two.

Residual fusion (TVM VTA's fused shortcut add; option ``fuse_residual``, on by default):
a ``qnn.add`` one of whose operands is a ``qnn.conv2d`` output that nothing else reads (power-of-two
form, no ReLU/clip of its own) becomes that conv with a ``residual`` input (:mod:`..ops.qnn`).
With the add's common (finer) operand exponent ``fine``, the conv's operand shift ``la``, the other
operand's ``lb``, and the add's ``shift``/``addend``/``clip``, the fused conv requantises its
accumulator straight to ``fine`` (``shift' = shift_conv - la``), adds ``residual << lb`` and shifts
by the add's ``shift``: ``residual_lshift = lb``, ``residual_shift = shift``, ``addend' =
round(b / acc_scale) + rounding_addend(shift') + (addend_add << shift')``, clip the add's; the
common part ``m = min(lb, shift)`` of the two residual shifts moves into the conv's shift
(``shift' + m``, ``lb - m``, ``shift - m``: the same sum, rounded once). The
conv's own int8 rounding and clip disappear (the sum is taken on the finer accumulator scale).
Adds whose shifts do not fit stay separate ``qnn.add`` nodes.
"""

from __future__ import annotations

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node, unique_name
from vtakit.compiler.graph.op import normalize_attrs
from vtakit.compiler.graph.ops.nn import conv_window
from vtakit.compiler.graph.passes import run_passes
from vtakit.compiler.graph.quantize.calibration import TensorStats, threshold
from vtakit.compiler.graph.quantize.options import QuantizeOptions
from vtakit.compiler.graph.quantize.plan import Plan, Step, dense_weight
from vtakit.compiler.graph.quantize.scales import (ACC_HEADROOM, MULTIPLIER_ERROR_KEY, QMAX, bias_in_acc_units,
                                                   check_shift, exponent, fixed_point, quantize_bias, quantize_weight, scale_for,
                                                   weight_scales)
from vtakit.errors import GraphError
from vtakit.runtime.packing import SHIFT_RANGE, rounding_addend

__all__ = ["realize"]


class _Realizer:
    def __init__(self, g: Graph, plan: Plan, stats: dict[str, TensorStats], opts: QuantizeOptions) -> None:
        self.g, self.plan, self.stats, self.opts = g, plan, stats, opts
        self.taken = set(g.inputs) | set(g.constants) | {o for n in g.nodes for o in n.outputs} | {
            s.output for s in plan.steps}
        self.constants: dict[str, np.ndarray] = {}
        self._scales: dict[str, float] = {}
        self.multiplier_errors: dict[str, float] = {}     # multiplier_bits: {layer: relative scale error}

    # -- scales ---------------------------------------------------------------------------------
    def scale(self, int8_value: str) -> float:
        """The scale of an int8 value of the quantised graph."""
        src = self.plan.scale_of[int8_value]
        if src not in self._scales:
            t = threshold(self.stats[src], self.opts.method, self.opts.percentile)
            power2 = self.opts.scales == "power2" or src in self.plan.power2
            self._scales[src] = float(scale_for(t, power2))
        return self._scales[src]

    def constant(self, hint: str, value: np.ndarray) -> str:
        name = unique_name(hint, self.taken)
        self.taken.add(name)
        self.constants[name] = value
        return name

    def clip(self, step: Step, s_out: float) -> tuple[int, int]:
        hi = QMAX if step.clip_max is None else int(min(QMAX, np.rint(step.clip_max / s_out)))
        return (0 if step.relu else -128), hi

    # -- layers ---------------------------------------------------------------------------------
    def requantized(self, step: Step, layer: str, w: np.ndarray, bias: np.ndarray | None,
                    attrs: dict) -> Node:
        """The qnn.conv2d / qnn.dense node of ``step``: weight ``w`` (output channels on axis 0)."""
        x = step.inputs[0]
        s_in, s_out = self.scale(x), self.scale(step.output)
        power2 = self.opts.scales == "power2"
        s_w = weight_scales(w, self.opts.weight_granularity == "channel", power2)
        wq = quantize_weight(w, s_w)
        acc_scale = s_in * s_w
        ins = [x, self.constant(f"{layer}_weight_int8", wq)]
        if not self.opts.multiplier_form:
            shift = check_shift(exponent(s_out) - exponent(s_in) - exponent(float(s_w[0])), layer)
            addend = quantize_bias(bias, acc_scale, rounding_addend(shift), layer)
            ins.append(self.constant(f"{layer}_addend", addend))
            attrs.update(shift=shift, pre_shift=0)
        else:
            bias_q = bias_in_acc_units(bias, acc_scale)
            stats = self.stats[step.pre_activation]
            amax = stats.channel_amax if stats.channel_amax is not None else np.full(len(s_w), stats.amax)
            calibrated = ACC_HEADROOM * amax / acc_scale
            hard = 128.0 * np.abs(wq.reshape(len(wq), -1).astype(np.int64)).sum(axis=1) + np.abs(bias_q)
            # |acc + addend| <= bound: twice the calibrated range, never more than the worst case
            bound = np.maximum(np.minimum(calibrated, hard), 1.0)
            multiplier, shift, pre_shift = fixed_point(acc_scale / s_out, bound, layer, self.opts.multiplier_bits,
                                                       self.multiplier_errors)
            addend = quantize_bias(bias, acc_scale, rounding_addend(pre_shift), layer)
            ins += [self.constant(f"{layer}_addend", addend), self.constant(f"{layer}_multiplier", multiplier)]
            attrs.update(shift=shift, pre_shift=pre_shift)
        attrs["clip"] = self.clip(step, s_out)
        op = "qnn.conv2d" if step.kind == "conv2d" else "qnn.dense"
        return Node(op, ins, [step.output], normalize_attrs(op, attrs, layer), layer)

    def conv2d(self, step: Step) -> Node:
        node = step.node
        layer = node.name or node.outputs[0]
        w = self.g.constants[node.inputs[1]]
        bias = self.g.constants[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
        win = conv_window("Conv", self.g.type_of(node.inputs[0]).shape, w.shape, node.attrs)
        attrs = {"strides": tuple(win.strides), "dilations": tuple(win.dilations), "group": int(node.attrs["group"]),
                 "pads": (win.pads_begin[0], win.pads_begin[1], win.pads_end[0], win.pads_end[1])}
        return self.requantized(step, layer, w, bias, attrs)

    def dense(self, step: Step) -> Node:
        node = step.node
        w, bias = dense_weight(self.g, node)
        return self.requantized(step, node.name or node.outputs[0], w, bias, {})

    def add(self, step: Step) -> Node:
        node = step.node
        layer = node.name or node.outputs[0]
        e_a, e_b = exponent(self.scale(step.inputs[0])), exponent(self.scale(step.inputs[1]))
        s_out = self.scale(step.output)
        fine = min(e_a, e_b)
        for k, e in (("lshift_a", e_a), ("lshift_b", e_b)):
            if e - fine > SHIFT_RANGE[1]:
                raise GraphError(f"quantize: layer {layer!r} needs {k} = {e - fine}, outside [0, {SHIFT_RANGE[1]}]; "
                                 "its operands' scales are too far apart")
        shift = check_shift(exponent(s_out) - fine, layer)
        attrs = {"lshift_a": e_a - fine, "lshift_b": e_b - fine, "addend": rounding_addend(shift), "shift": shift,
                 "clip": self.clip(step, s_out)}
        return Node("qnn.add", list(step.inputs), [step.output], normalize_attrs("qnn.add", attrs, layer), layer)

    def node(self, step: Step) -> Node:
        if step.kind == "quantize":
            return Node("qnn.quantize", list(step.inputs), [step.output],
                        {"scale": self.scale(step.output), "zero_point": 0, "dtype": "int8"}, f"quantize_{step.result}")
        if step.kind == "dequantize":
            return Node("qnn.dequantize", list(step.inputs), [step.output],
                        {"scale": self.scale(step.inputs[0]), "zero_point": 0}, f"dequantize_{step.output}")
        if step.kind in ("conv2d", "dense", "add"):
            return getattr(self, step.kind)(step)
        node = step.node
        outputs = [step.output, *node.outputs[1:]] if step.kind == "int8" else list(node.outputs)
        return Node(node.op, list(step.inputs), outputs, dict(node.attrs), node.name)

    def fuse_residuals(self, nodes: list[Node]) -> list[Node]:
        """``nodes`` with each ``qnn.add`` that can be fused into the conv producing one of its
        operands replaced by that conv with a residual input (see the module)."""
        producer = {o: n for n in nodes for o in n.outputs}
        readers: dict[str, int] = {}
        for n in nodes:
            for i in n.inputs:
                if i:
                    readers[i] = readers.get(i, 0) + 1
        fused: dict[int, Node] = {}
        removed: set[int] = set()
        for add in nodes:
            if add.op != "qnn.add":
                continue
            for k in (0, 1):
                new = self.fused_conv(add, k, producer, readers, removed)
                if new is not None:
                    fused[id(add)] = new
                    removed.add(id(producer[add.inputs[k]]))
                    break
        return [fused.get(id(n), n) for n in nodes if id(n) not in removed]

    def fused_conv(self, add: Node, k: int, producer: dict[str, Node], readers: dict[str, int],
                   removed: set[int]) -> Node | None:
        """The conv producing operand ``k`` of ``add`` with the other operand fused as its residual, or None."""
        value, other = add.inputs[k], add.inputs[1 - k]
        conv = producer.get(value)
        if (conv is None or conv.op != "qnn.conv2d" or id(conv) in removed or value == other
                or readers.get(value) != 1 or value in self.g.outputs or len(conv.inputs) > 3
                or int(conv.attrs["pre_shift"]) != 0 or tuple(conv.attrs["clip"]) != (-128, 127)
                or other in self.g.constants or other in self.constants):
            return None
        a = add.attrs
        la, lb = (int(a["lshift_a"]), int(a["lshift_b"]))[::1 if k == 0 else -1]
        shift_c, add_shift, add_addend = int(conv.attrs["shift"]), int(a["shift"]), int(a["addend"])
        shift = shift_c - la
        if add_addend == rounding_addend(add_shift):
            # ((c + (r << lb)) >> sh) == ((c >> m) + (r << (lb - m))) >> (sh - m): shift the conv by m more
            # (one rounding instead of two) and save the residual's SHL and SHR on the accelerator
            m = min(lb, add_shift)
            shift, lb, add_shift = shift + m, lb - m, add_shift - m
            add_addend = rounding_addend(add_shift)
        lo, hi = SHIFT_RANGE
        if not (lo <= shift <= hi and 0 <= lb <= 31 and 0 <= add_shift <= 31) or (add_addend and shift < 0):
            return None
        addend_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
        old = self.constants.get(addend_name, self.g.constants.get(addend_name))
        bias = np.zeros((), np.int64) if old is None else np.asarray(old).astype(np.int64) - rounding_addend(shift_c)
        addend = bias + rounding_addend(shift) + (add_addend << max(shift, 0))
        if addend.min() < -(1 << 31) or addend.max() >= 1 << 31:
            return None
        layer = conv.name or value
        ins = [conv.inputs[0], conv.inputs[1], self.constant(f"{layer}_residual_addend", addend.astype(np.int32)),
               "", other]
        attrs = dict(conv.attrs, shift=shift, clip=tuple(a["clip"]), residual_lshift=lb, residual_shift=add_shift)
        return Node("qnn.conv2d", ins, list(add.outputs), normalize_attrs("qnn.conv2d", attrs, layer), layer)

    def graph(self) -> Graph:
        nodes = [self.node(s) for s in self.plan.steps]
        if self.opts.fuse_residual:
            nodes = self.fuse_residuals(nodes)
        used = {i for n in nodes for i in n.inputs if i}
        constants = {k: v for k, v in self.g.constants.items() if k in used}
        constants.update({k: v for k, v in self.constants.items() if k in used})
        types = {k: self.g.types[k] for k in self.g.inputs}
        out = Graph(nodes, list(self.g.inputs), list(self.g.outputs), types, constants, self.g.name)
        if self.multiplier_errors:
            out.metadata[MULTIPLIER_ERROR_KEY] = dict(self.multiplier_errors)
        return run_passes(out.verify(), ["InferType"])


def realize(g: Graph, plan: Plan, stats: dict[str, TensorStats], opts: QuantizeOptions) -> Graph:
    """The quantised graph of ``plan`` over the float graph ``g`` with calibration ``stats``."""
    return _Realizer(g, plan, stats, opts).graph()
