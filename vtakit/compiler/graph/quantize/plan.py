"""Which nodes of a float graph become quantised operators, and where int8 and float meet.

The plan is structural (no scales yet): it walks the graph in order and decides, per node,

* ``Conv`` (2-D, constant weight and bias; any group count and dilation) -> ``qnn.conv2d``, except the
  first convolution with ``skip_first_conv`` (TVM VTA's ``skip_conv_layers=[0]``);
* ``Gemm`` (``transA=0``, constant ``B``, per-column or absent ``C``) and ``MatMul`` with a constant 2-D
  weight, on 2-D data -> ``qnn.dense``;
* ``Add`` of two same-shaped tensors at least one of which is already int8 -> ``qnn.add``;
* a ``Relu`` (or ``Clip`` with min 0 and a max) that is the only reader of a conv/dense/add output is
  folded into the quantised op's clip;
* ``MaxPool``, ``Flatten``, ``Reshape``, ``Identity`` and ``Relu`` on an int8 tensor run on int8 as they
  are (same scale);
* everything else stays float.

A float value an int8 operator reads gets one ``qnn.quantize`` (named ``<value>_int8``); an int8 value
a float operator (or a graph output) reads gets one ``qnn.dequantize`` that writes the value's original
name, so every float name of the quantised graph means what it meant in the float graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node, unique_name
from vtakit.compiler.graph.quantize.options import QuantizeOptions

__all__ = ["Step", "Plan", "plan_quantization", "INT8_PASSTHROUGH"]

#: operators that run on int8 tensors unchanged (quantised in, quantised out, one scale)
INT8_PASSTHROUGH = frozenset({"MaxPool", "Flatten", "Reshape", "Identity", "Relu"})


@dataclass
class Step:
    """One node of the quantised graph, before its scales are known.

    ``kind`` is ``conv2d``, ``dense`` or ``add`` (a qnn op replacing ``node``), ``int8`` (``node`` run on
    int8), ``float`` (``node`` unchanged), ``quantize`` or ``dequantize``. ``inputs`` and ``output`` are
    names in the quantised graph; ``result`` is the float value a qnn op's output stands for (after a
    folded activation) and ``pre_activation`` the float value before it."""

    kind: str
    node: Node | None
    inputs: list[str]
    output: str
    result: str = ""
    pre_activation: str = ""
    relu: bool = False
    clip_max: float | None = None


@dataclass
class Plan:
    """The steps in order, the float value whose calibrated range sets each int8 value's scale, and the
    float values whose scales must be powers of two (``qnn.add`` rescales by shifts)."""

    steps: list[Step]
    scale_of: dict[str, str]
    power2: set[str] = field(default_factory=set)

    @property
    def calibrated(self) -> list[str]:
        """The float values calibration must measure (thresholds for scales)."""
        return list(dict.fromkeys(self.scale_of.values()))

    @property
    def per_channel(self) -> list[str]:
        """The float conv/dense outputs before any folded activation (their accumulator range, per channel)."""
        return list(dict.fromkeys(s.pre_activation for s in self.steps if s.kind in ("conv2d", "dense")))


def _float_tensor(g: Graph, name: str, rank: int | None = None) -> bool:
    if not name or name in g.constants or name not in g.types:
        return False
    ty = g.types[name]
    return ty.dtype == "float32" and (rank is None or len(ty.shape) == rank)


def _float32_constant_input(g: Graph, node: Node, k: int, rank: int | None = None) -> np.ndarray | None:
    name = node.inputs[k] if len(node.inputs) > k else ""
    value = g.constants.get(name) if name else None
    if value is None or value.dtype != np.float32 or (rank is not None and value.ndim != rank):
        return None
    return value


def _optional_input(node: Node, k: int) -> str:
    return node.inputs[k] if len(node.inputs) > k else ""


def conv_quantizable(g: Graph, node: Node) -> bool:
    """A 2-D Conv on a run-time float32 tensor with a constant weight and (optional) constant bias."""
    bias = _optional_input(node, 2)
    return (len(node.outputs) == 1 and _float_tensor(g, node.inputs[0], 4) and _float32_constant_input(g, node, 1, 4) is not None
            and (not bias or _float32_constant_input(g, node, 2, 1) is not None))


def dense_weight(g: Graph, node: Node) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(W (N, K), bias (N,) or None)`` of a Gemm or MatMul that ``qnn.dense`` computes, else None."""
    if len(node.outputs) != 1 or not _float_tensor(g, node.inputs[0], 2):
        return None
    b = _float32_constant_input(g, node, 1, 2)
    if b is None:
        return None
    if node.op == "MatMul":
        return np.ascontiguousarray(b.T), None
    a = node.attrs
    if a.get("transA", 0):
        return None
    w = (b if a.get("transB", 0) else b.T).astype(np.float64) * float(a.get("alpha", 1.0))
    n = w.shape[0]
    bias = None
    if _optional_input(node, 2) and float(a.get("beta", 1.0)) != 0.0:
        c = g.constants.get(node.inputs[2])
        if c is None or not np.issubdtype(c.dtype, np.floating) or c.size not in (1, n) or (
                c.ndim == 2 and c.shape[-1] != n) or c.ndim > 2:
            return None
        bias = np.broadcast_to(c.reshape(-1).astype(np.float64), (n,)) * float(a.get("beta", 1.0))
    return w, bias


def plan_quantization(g: Graph, opts: QuantizeOptions) -> Plan:
    """The quantisation plan of a typed float graph (see the module docstring)."""
    consumers = g.consumers()
    taken = set(g.inputs) | set(g.constants) | {o for n in g.nodes for o in n.outputs}
    steps: list[Step] = []
    scale_of: dict[str, str] = {}
    power2: set[str] = set()
    int8_of: dict[str, str] = {}
    float_ok = set(g.inputs) | set(g.constants)
    folded: set[int] = set()
    first_conv = next((n for n in g.nodes if n.op == "Conv"), None) if opts.skip_first_conv else None

    def fresh(hint: str) -> str:
        name = unique_name(hint, taken)
        taken.add(name)
        return name

    def need_int8(name: str) -> str:
        if name not in int8_of:
            q = fresh(f"{name}_int8")
            steps.append(Step("quantize", None, [name], q, result=name))
            int8_of[name], scale_of[q] = q, name
        return int8_of[name]

    def need_float(name: str) -> str:
        if name not in float_ok:
            steps.append(Step("dequantize", None, [int8_of[name]], name))
            float_ok.add(name)
        return name

    def fold(node: Node) -> tuple[str, bool, float | None]:
        out = node.outputs[0]
        users = consumers.get(out, [])
        if out in g.outputs or len(users) != 1 or users[0].inputs[0] != out:
            return out, False, None
        user = users[0]
        if user.op == "Relu":
            folded.add(id(user))
            return user.outputs[0], True, None
        if user.op == "Clip" and len(user.inputs) >= 3 and all(user.inputs[1:3]):
            lo, hi = g.constants.get(user.inputs[1]), g.constants.get(user.inputs[2])
            if lo is not None and hi is not None and lo.size == 1 and hi.size == 1 and float(lo) == 0 and float(hi) > 0:
                folded.add(id(user))
                return user.outputs[0], True, float(hi)
        return out, False, None

    def emit(kind: str, node: Node, inputs: list[str]) -> None:
        result, relu, clip_max = fold(node)
        out = fresh(f"{result}_int8")
        steps.append(Step(kind, node, inputs, out, result, node.outputs[0], relu, clip_max))
        int8_of[result], scale_of[out] = out, result

    for node in g.nodes:
        if id(node) in folded:
            continue
        if node.op == "Conv" and node is not first_conv and conv_quantizable(g, node):
            emit("conv2d", node, [need_int8(node.inputs[0])])
        elif node.op in ("Gemm", "MatMul") and dense_weight(g, node) is not None:
            emit("dense", node, [need_int8(node.inputs[0])])
        elif (node.op == "Add" and len(node.outputs) == 1 and all(_float_tensor(g, i) for i in node.inputs)
              and g.types[node.inputs[0]] == g.types[node.inputs[1]] == g.types[node.outputs[0]]
              and any(i in int8_of for i in node.inputs)):
            a, b = need_int8(node.inputs[0]), need_int8(node.inputs[1])
            emit("add", node, [a, b])
            power2.update((scale_of[a], scale_of[b], scale_of[int8_of[steps[-1].result]]))
        elif (node.op in INT8_PASSTHROUGH and node.inputs[0] in int8_of and _float_tensor(g, node.outputs[0])
              and all(not o or not consumers.get(o) and o not in g.outputs for o in node.outputs[1:])):
            src = int8_of[node.inputs[0]]
            out = fresh(f"{node.outputs[0]}_int8")
            steps.append(Step("int8", node, [src, *node.inputs[1:]], out, node.outputs[0]))
            int8_of[node.outputs[0]], scale_of[out] = out, scale_of[src]
        else:
            ins = [i if not i or i in float_ok else need_float(i) for i in node.inputs]
            steps.append(Step("float", node, ins, node.outputs[0]))
            float_ok.update(node.outputs)
    for name in g.outputs:
        need_float(name)
    return Plan(steps, scale_of, power2)
