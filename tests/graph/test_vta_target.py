"""The ``vta`` graph target: quantised networks with accelerator layers on the VTA simulators.

Hand-built ``qnn`` networks (random int8 weights, addends from ``rounding_addend(shift)`` plus a
bias, each shift chosen from the layer's accumulator range so that outputs do not all saturate)
are built for ``target="vta"`` and run on the ``fsim`` and ``cycle`` backends; outputs and every
boundary tensor (through ``debug_run``) equal the numpy reference (:func:`vtakit.graph.evaluate`)
and the CPU integer build (``target="llvm"``) bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import vtakit.graph as vg
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.ops.qnn import conv2d_accumulate
from vtakit.errors import GraphError
from vtakit.hw.config import VTAConfig
from vtakit.runtime.packing import requantize, rounding_addend

SMALL, DEFAULT = VTAConfig.small(), VTAConfig()


class Net:
    """A qnn network built layer by layer on one sample input (whose values choose the shifts)."""

    def __init__(self, shape: tuple[int, ...], seed: int = 0, name: str = "x") -> None:
        self.rng = np.random.default_rng(seed)
        self.sample = {name: self.rng.integers(-128, 128, shape).astype(np.int8)}
        self.nodes: list[Node] = []
        self.types = {name: TensorType(shape, "int8")}
        self.constants: dict[str, np.ndarray] = {}
        self.values = dict(self.sample)
        self.inputs = [name]
        self.count = 0

    def _fresh(self, op: str) -> str:
        self.count += 1
        return f"{op}{self.count}"

    def _requant(self, acc: np.ndarray, channels: int, relu: bool) -> tuple[int, np.ndarray]:
        peak = max(1, int(np.abs(acc.astype(np.int64)).max()))
        shift = max(0, int(np.ceil(np.log2(peak / 100))))
        bias = self.rng.integers(-peak // 8 - 1, peak // 8 + 1, channels)
        return shift, (bias + rounding_addend(shift)).astype(np.int32)

    def conv(self, x: str, co: int, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(1, 1), relu=True, dilations=(1, 1),
             group=1) -> str:
        name = self._fresh("conv")
        ci = self.types[x].shape[1]
        w = self.rng.integers(-128, 128, (co, ci // group, *kernel)).astype(np.int8)
        attrs = {"strides": tuple(strides), "pads": tuple(pads), "dilations": tuple(dilations), "group": group}
        acc = conv2d_accumulate(self.values[x], w, attrs)
        shift, addend = self._requant(acc, co, relu)
        attrs.update(shift=shift, pre_shift=0, clip=(0, 127) if relu else (-128, 127))
        return self._add_node("qnn.conv2d", [x], {f"{name}_w": w, f"{name}_b": addend}, attrs, name, acc)

    def dense(self, x: str, n: int, relu=False) -> str:
        name = self._fresh("fc")
        k = self.types[x].shape[1]
        w = self.rng.integers(-128, 128, (n, k)).astype(np.int8)
        acc = (self.values[x].astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
        shift, addend = self._requant(acc, n, relu)
        attrs = {"shift": shift, "pre_shift": 0, "clip": (0, 127) if relu else (-128, 127)}
        return self._add_node("qnn.dense", [x], {f"{name}_w": w, f"{name}_b": addend}, attrs, name, acc)

    def _add_node(self, op, ins, consts, attrs, name, acc) -> str:
        self.constants.update(consts)
        for k, v in consts.items():
            self.types[k] = TensorType(v.shape, v.dtype.name)
        out = f"{name}_out"
        self.nodes.append(Node(op, [*ins, *consts], [out], attrs, name))
        addend = consts[list(consts)[1]]
        self.values[out] = requantize(acc, addend, attrs["shift"], attrs["clip"])
        self.types[out] = TensorType(self.values[out].shape, "int8")
        return out

    def add(self, a: str, b: str, relu=True) -> str:
        name = self._fresh("add")
        attrs = {"lshift_a": 0, "lshift_b": 0, "addend": rounding_addend(1), "shift": 1,
                 "clip": (0, 127) if relu else (-128, 127)}
        return self.op("qnn.add", [a, b], attrs, name)

    def op(self, op: str, ins: list[str], attrs: dict, name: str | None = None) -> str:
        name = name or self._fresh(op.lower())
        out = f"{name}_out"
        node = Node(op, ins, [out], attrs, name)
        self.nodes.append(node)
        g = self.graph([out])
        self.values = vg.evaluate(g, self.sample, keep_all=True)
        self.types[out] = TensorType(self.values[out].shape, self.values[out].dtype.name)
        return out

    def graph(self, outputs: list[str]) -> Graph:
        from vtakit.compiler.graph.passes import run_passes
        g = Graph(list(self.nodes), list(self.inputs), list(outputs), dict(self.types), dict(self.constants), "net")
        return run_passes(g, ["InferType"])


def _unsaturated(values: np.ndarray) -> float:
    return float(np.mean((values > -128) & (values < 127)))


def _check(net: Net, outputs: list[str], config: VTAConfig, backends=("fsim",), expect_cpu=()) -> vg.NetModule:
    g = net.graph(outputs)
    ref = vg.evaluate(g, net.sample, keep_all=True)
    mod = vg.build(g, target="vta", config=config)
    steps = {s.name: s for s in mod.plan.steps}
    for layer in expect_cpu:
        assert steps[layer].target == "llvm" and steps[layer].note, (layer, steps[layer])
    llvm = vg.build(g, target="llvm").debug_run(net.sample)
    for backend in backends:
        got = mod.run(net.sample, backend=backend)
        for name, value in zip(outputs, got):
            np.testing.assert_array_equal(value, ref[name], err_msg=f"{backend} output {name}")
        seen = mod.debug_run(net.sample, backend=backend)
        common = [n for n in seen if n in ref and n in llvm and n not in g.constants]
        for name in common:
            np.testing.assert_array_equal(seen[name], ref[name], err_msg=f"{backend} {name} vs reference")
            np.testing.assert_array_equal(seen[name], llvm[name], err_msg=f"{backend} {name} vs llvm")
    for name in outputs:
        assert _unsaturated(ref[name]) > 0.2, name
    return mod


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_conv_chain_odd_channels_and_sizes(config):
    net = Net((1, 3, 7, 9))
    y = net.conv("x", 20)
    y = net.conv(y, 36, kernel=(3, 1), pads=(1, 0, 1, 0))
    y = net.conv(y, 20, kernel=(1, 1), pads=(0, 0, 0, 0), strides=(2, 1), relu=False)
    mod = _check(net, [y], config, backends=("fsim", "cycle"))
    assert [s.target for s in mod.plan.steps].count("vta") == 3
