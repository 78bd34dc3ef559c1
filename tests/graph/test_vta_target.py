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

    def conv_residual(self, x: str, residual: str, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(1, 1), relu=True,
                      residual_lshift=0, residual_shift=0) -> str:
        """A ``qnn.conv2d`` with a fused residual add (input 4): as many filters as ``residual`` has channels."""
        from vtakit.compiler.graph.ops.qnn import residual_requantize

        name = self._fresh("convres")
        ci, co = self.types[x].shape[1], self.types[residual].shape[1]
        w = self.rng.integers(-128, 128, (co, ci, *kernel)).astype(np.int8)
        attrs = {"strides": tuple(strides), "pads": tuple(pads), "dilations": (1, 1), "group": 1}
        acc = conv2d_accumulate(self.values[x], w, attrs)
        shift, addend = self._requant(acc, co, relu)
        shift = max(0, shift - residual_lshift)      # the conv's part on the residual's (finer) scale
        addend = (addend - rounding_addend(shift + residual_lshift) + rounding_addend(shift)
                  + (rounding_addend(residual_shift) << shift)).astype(np.int32)
        attrs.update(shift=shift, pre_shift=0, clip=(0, 127) if relu else (-128, 127),
                     residual_lshift=residual_lshift, residual_shift=residual_shift)
        consts = {f"{name}_w": w, f"{name}_b": addend}
        self.constants.update(consts)
        for k, v in consts.items():
            self.types[k] = TensorType(v.shape, v.dtype.name)
        out = f"{name}_out"
        self.nodes.append(Node("qnn.conv2d", [x, *consts, "", residual], [out], attrs, name))
        self.values[out] = residual_requantize(acc, addend, shift, attrs["clip"], self.values[residual],
                                               residual_lshift, residual_shift)
        self.types[out] = TensorType(self.values[out].shape, "int8")
        return out

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


def _run(mod: vg.NetModule, inputs: dict, backend: str) -> list[np.ndarray]:
    """``mod.run`` on ``backend`` (a module whose layers all fell back to the CPU takes no backend)."""
    return mod.run(inputs, backend=backend) if mod.is_accelerated else mod.run(inputs)


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


def residual_pool_dense_net() -> tuple[Net, str, str]:
    """conv -> maxpool -> conv -> residual add -> conv (stride 2, asymmetric pads) -> flatten -> dense
    -> dense: the network, its logits and the residual sum."""
    net = Net((1, 3, 9, 7), seed=1)
    a = net.conv("x", 20)
    p = net.op("MaxPool", [a], {"kernel_shape": (2, 2), "strides": (1, 1), "pads": (0, 0, 1, 1)})
    b = net.conv(p, 20)
    r = net.add(b, p)
    c = net.conv(r, 36, kernel=(3, 3), pads=(0, 1, 2, 0), strides=(2, 2))
    d = net.dense(net.op("Flatten", [c], {"axis": 1}), 68, relu=True)
    return net, net.dense(d, 10), r


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_residual_maxpool_flatten_dense(config):
    net, e, r = residual_pool_dense_net()
    mod = _check(net, [e, r], config, backends=("fsim", "cycle"))
    steps = {s.name: s for s in mod.plan.steps}
    layers = [n.name for n in net.nodes if n.op.startswith("qnn.")]
    assert len(layers) == 6 and {steps[n].target for n in layers} == {"vta"}
    # dense -> dense passes its packed tensor directly: no CPU layout step between them
    assert [s.ops[0] for s in mod.plan.steps][-3:] == ["vta.dense", "vta.dense", "vta.unpack_matrix"]


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("lshift, rshift", [(0, 0), (0, 1), (2, 1), (1, 3)])
def test_conv_with_a_fused_residual(config, lshift, rshift):
    """A conv whose residual comes from the CPU (the packed graph input), one whose residual is an
    accelerator layer's output (strided 1x1 shortcut, odd channels); a conv reads a fused conv's output."""
    net = Net((1, 20, 8, 6), seed=21)
    a = net.conv_residual("x", "x", relu=False, residual_lshift=lshift, residual_shift=rshift)
    s = net.conv(a, 36, kernel=(1, 1), pads=(0, 0, 0, 0), strides=(2, 2), relu=False)
    b = net.conv(a, 36, strides=(2, 2))
    c = net.conv_residual(b, s, residual_lshift=lshift, residual_shift=rshift)
    d = net.conv(c, 12)
    mod = _check(net, [d, a], config, backends=("fsim", "cycle"))
    steps = {s.name: s for s in mod.plan.steps}
    assert all(steps[n.name].target == "vta" for n in net.nodes)
    assert [s.ops[0] for s in mod.plan.steps].count("vta.pack_nchw") == 1      # x packed once, read twice
    assert len(steps[c.removesuffix("_out")].args) == 5                      # data, weight, addend, residual, out


def test_quantizer_fuses_residual_adds_and_the_accelerator_runs_them():
    """Conv -> Add(other) -> Relu becomes one qnn.conv2d with a residual; with fuse_residual=False the
    add stays a qnn.add (vta.add); both are bit-exact on fsim and cycle, debug_run tensors included."""
    g = _odd_channel_model()
    calib = np.random.default_rng(3).standard_normal((4, 3, 11, 9)).astype(np.float32)
    x = {"data": calib[:1]}
    for fuse in (True, False):
        q = vg.quantize(g, calib, skip_first_conv=False, fuse_residual=fuse)
        fused = [n for n in q.nodes if n.op == "qnn.conv2d" and len(n.inputs) > 4]
        assert len(fused) == (1 if fuse else 0) and sum(n.op == "qnn.add" for n in q.nodes) == (0 if fuse else 1)
        ref = vg.evaluate(q, x, keep_all=True)
        llvm = vg.build(q, target="llvm").debug_run(x)
        mod = vg.build(q, target="vta", config=SMALL)
        ops = [s.ops[0] for s in mod.plan.steps]
        assert ("vta.add" in ops) != fuse
        for backend in ("fsim", "cycle"):
            seen = mod.debug_run(x, backend=backend)
            for name in [n for n in seen if n in ref and n in llvm and n not in q.constants]:
                np.testing.assert_array_equal(seen[name], ref[name], err_msg=f"{backend} {name} vs reference")
                np.testing.assert_array_equal(seen[name], llvm[name], err_msg=f"{backend} {name} vs llvm")


def test_values_between_accelerator_layers_stay_in_dram():
    net = Net((1, 3, 7, 9), seed=2)
    y = net.conv(net.conv("x", 20), 36)
    mod = vg.build(net.graph([y]), target="vta", config=SMALL)
    kinds = [s.ops[0] for s in mod.plan.steps]
    assert kinds == ["vta.pack_nchw", "vta.conv2d", "vta.conv2d", "vta.unpack_nchw"]
    values = mod.plan.values
    assert values["x"].space == "host" and values[y].space == "host"
    for step in mod.plan.steps:
        if step.target == "vta":
            assert all(values[a].space == "dram" and values[a].offset % 64 == 0 for a in step.args)
    assert mod.plan.dram_bytes > 0 and mod.plan.config == SMALL.to_dict()


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_layers_that_cannot_run_on_the_accelerator_fall_back_with_a_reason(config):
    net = Net((1, 4, 12, 12), seed=3)
    a = net.conv("x", 8, dilations=(2, 2), pads=(2, 2, 2, 2))
    b = net.conv(a, 8, group=8)
    c = net.conv(b, 8, kernel=(11, 11), pads=(5, 5, 5, 5)) if config == SMALL else net.conv(b, 8)
    d = net.conv(c, 8)
    mod = _check(net, [d], config, expect_cpu=("conv1", "conv2") + (("conv3",) if config == SMALL else ()))
    steps = {s.name: s for s in mod.plan.steps}
    assert "dilation" in steps["conv1"].note
    assert "grouped conv" in steps["conv2"].note
    if config == SMALL:
        assert "tiling" in steps["conv3"].note, steps["conv3"].note
    assert steps["conv4"].target == "vta"
    assert mod.stats.notes["conv1"] == steps["conv1"].note


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_few_groups_run_as_one_conv_with_a_block_diagonal_weight(config):
    net = Net((1, 6, 7, 9), seed=12)
    a = net.conv("x", 20, group=2)
    b = net.conv(a, 36, group=4, kernel=(1, 1), pads=(0, 0, 0, 0))
    mod = _check(net, [b], config, backends=("fsim", "cycle"))
    steps = {s.name: s for s in mod.plan.steps}
    for layer, group in (("conv1", 2), ("conv2", 4)):
        assert steps[layer].target == "vta" and f"group={group}" in steps[layer].note


def test_multiplier_needs_alu_mul_only_when_negative():
    net = Net((1, 4, 6, 6), seed=4)
    y = net.conv("x", 8)
    g = net.graph([y])
    node = g.nodes[0]
    g.constants["m"] = np.full(8, 31, np.int32)        # 5 set bits: 5 shift-and-add terms, noted
    g.types["m"] = TensorType((8,), "int32")
    node.inputs.append("m")
    node.attrs["shift"] += 5
    ref = vg.evaluate(g, net.sample)[y]
    mod = vg.build(g, target="vta", config=SMALL)
    step = next(s for s in mod.plan.steps if s.name == "conv1")
    assert step.target == "vta" and "shift-and-add: 5 terms per output" in step.note, step.note
    np.testing.assert_array_equal(_run(mod, net.sample, "fsim")[0], ref)
    g.constants["m"] = np.full(8, -31, np.int32)       # negative: 28 set bits in two's complement
    ref = vg.evaluate(g, net.sample)[y]
    mod = vg.build(g, target="vta", config=SMALL)
    step = next(s for s in mod.plan.steps if s.name == "conv1")
    assert step.target == "llvm" and "needs ALU_MUL" in step.note
    np.testing.assert_array_equal(_run(mod, net.sample, "fsim")[0], ref)
    mod = vg.build(g, target="vta", config=SMALL.replace(alu_mul=True))
    assert next(s for s in mod.plan.steps if s.name == "conv1").target == "vta"
    for backend in ("fsim", "cycle"):
        np.testing.assert_array_equal(mod.run(net.sample, backend=backend)[0], ref)
    g.constants["m"] = np.arange(8, dtype=np.int32) - 3       # per-channel multipliers: a packed tensor
    ref = vg.evaluate(g, net.sample)[y]
    mod = vg.build(g, target="vta", config=SMALL.replace(alu_mul=True))
    assert len(mod.plan.steps[1].args) == 5 and mod.plan.steps[1].target == "vta"
    np.testing.assert_array_equal(mod.run(net.sample, backend="fsim")[0], ref)


def test_float_graph_and_bad_config_are_graph_errors():
    g = Graph([Node("Relu", ["x"], ["y"], {}, "relu")], ["x"], ["y"], {"x": TensorType((1, 4), "float32")})
    with pytest.raises(GraphError, match=r"vtakit.graph.quantize\(graph, calibration\)"):
        vg.build(g, target="vta")
    net = Net((1, 3, 5, 5))
    with pytest.raises(GraphError, match="VTAConfig"):
        vg.build(net.graph([net.conv("x", 4)]), target="vta", config={"LOG_BLOCK": 4})


def test_identical_layers_share_one_kernel_and_extract_tasks():
    net = Net((1, 16, 8, 8), seed=5)
    y = "x"
    for _ in range(3):
        y = net.conv(y, 16)
    y = net.conv(y, 32, kernel=(1, 1), pads=(0, 0, 0, 0), strides=(2, 2))
    g = net.graph([y])
    for layer in net.nodes[:3]:   # identical requantisation: identical kernels
        layer.attrs["shift"] = net.nodes[0].attrs["shift"]
    g = net.graph([y])
    mod = vg.build(g, target="vta", config=DEFAULT)
    vta_kernels = {s.kernel for s in mod.plan.steps if s.target == "vta"}
    assert len(vta_kernels) == 2
    tasks = vg.extract_tasks(g, target="vta", config=DEFAULT)
    assert sorted((t.template, t.workload, t.count) for t in tasks) == [
        ("vta.conv2d", (8, 8, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1), 3),
        ("vta.conv2d", (8, 8, 16, 32, 1, 1, 0, 0, 0, 0, 2, 2, 1), 1)]


def test_tuning_log_picks_knobs_and_falls_back_to_the_default_tiler(tmp_path):
    from vtakit.compiler.autotune.measure import MeasureErrorNo, MeasureInput, MeasureResult
    from vtakit.compiler.autotune.record import TuningRecord
    from vtakit.compiler.autotune.task import create_task
    from vtakit.compiler.autotune.templates.vta import conv2d_knobs
    from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
    from vtakit.compiler.vta.env import get_env

    net = Net((1, 8, 8, 8), seed=6)
    a = net.conv("x", 8)
    b = net.conv(a, 16, strides=(2, 2))
    g = net.graph([b])
    tasks = {t.workload: t for t in vg.extract_tasks(g, target="vta", config=SMALL)}
    key = Conv2dWorkload(8, 8, 8, 8, 3, 1, 1).key
    assert key in tasks and tasks[key].template == "vta.conv2d"
    task = create_task("vta.conv2d", key, "vta", SMALL)
    default = choose_conv2d_tiles(get_env(SMALL), Conv2dWorkload.from_key(key), 2)
    space = task.config_space
    entity = next(space.get(i) for i in range(len(space))
                  if conv2d_knobs(space.get(i)) != default and conv2d_knobs(space.get(i)).oc_nthread == 1
                  and conv2d_knobs(space.get(i)).h_nthread == 1 and conv2d_knobs(space.get(i)).tile_h == 2)
    record = TuningRecord.of(MeasureInput(task, entity), MeasureResult((1000.0,), MeasureErrorNo.NO_ERROR), 0.0)
    log = tmp_path / "tune.log"
    log.write_text(record.to_json() + "\n")
    mod = vg.build(g, target="vta", config=SMALL, tuning_log=str(log))
    steps = {s.name: s for s in mod.plan.steps}
    assert steps["conv1"].target == "vta" and "tuning log" in steps["conv1"].note
    assert steps["conv2"].target == "vta" and steps["conv2"].note == ""      # not in the log: default tiler
    ref = vg.evaluate(g, net.sample)[b]
    np.testing.assert_array_equal(mod.run(net.sample, backend="fsim")[0], ref)
    with pytest.raises(GraphError, match="tuning_log"):
        vg.build(g, target="llvm", tuning_log=str(log))


def _odd_channel_model():
    """A float CNN with channel counts that are not whole blocks (3, 20, 36, 68), a 3x1 kernel, a
    strided 1x1 shortcut, a residual add, max pooling and a classifier."""
    import onnx
    from onnx import TensorProto, helper

    from vtakit.compiler.graph.zoo import ModelBuilder

    b = ModelBuilder(7)
    x = b.node("Relu", [b.batch_norm(b.conv("data", 3, 20, 3, 1, [1, 1, 1, 1]), 20)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    y = b.node("Relu", [b.batch_norm(b.conv(x, 20, 36, (3, 1), 2, [1, 0, 1, 0]), 36)])
    y = b.batch_norm(b.conv(y, 36, 36, 3, 1, [1, 1, 1, 1]), 36)
    s = b.batch_norm(b.conv(x, 20, 36, 1, 2, [0, 0, 0, 0]), 36)
    x = b.node("Relu", [b.node("Add", [y, s])])
    x = b.node("Relu", [b.conv(x, 36, 68, 3, 1, [0, 1, 2, 1])])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.constant(b.he_normal((10, 68), 68), "fc_w")
    b.nodes.append(helper.make_node("Gemm", [x, w], ["logits"], name="fc", transB=1))
    model = b.model([helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 11, 9])],
                    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], "odd")
    assert isinstance(model, onnx.ModelProto)
    return vg.from_onnx(model)


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_quantized_odd_channel_network_matches_reference_and_llvm(config):
    g = _odd_channel_model()
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((8, 3, 11, 9)).astype(np.float32)
    q = vg.quantize(g, calib, skip_first_conv=False)
    x = {"data": calib[:1]}
    ref = vg.evaluate(q, x, keep_all=True)
    llvm = vg.build(q, target="llvm").debug_run(x)
    mod = vg.build(q, target="vta", config=config)
    layers = [n for n in q.nodes if n.op in ("qnn.conv2d", "qnn.dense", "qnn.add")]
    steps = {s.name: s for s in mod.plan.steps}
    assert len(layers) == 6 and all(steps[n.name].target == "vta" for n in layers)    # the add fused into a conv
    for backend in ("fsim", "cycle"):
        np.testing.assert_array_equal(mod.run(x, backend=backend)[0], ref["logits"])
        seen = mod.debug_run(x, backend=backend)
        boundary = [n for n in seen if n in ref and n in llvm and n not in q.constants]
        assert any(n.endswith("int8") for n in boundary), boundary
        for name in boundary:
            np.testing.assert_array_equal(seen[name], ref[name], err_msg=f"{backend} {name} vs reference")
            np.testing.assert_array_equal(seen[name], llvm[name], err_msg=f"{backend} {name} vs llvm")


def test_quantized_float_scales_run_with_and_without_alu_mul():
    g = _odd_channel_model()
    calib = np.random.default_rng(1).standard_normal((4, 3, 11, 9)).astype(np.float32)
    q = vg.quantize(g, calib, scales="float", weight_granularity="channel")
    x = {"data": calib[:1]}
    ref = vg.evaluate(q, x)["logits"]
    mult = [n.name for n in q.nodes if n.op in ("qnn.conv2d", "qnn.dense") and len(n.inputs) > 3 and n.inputs[3]]
    assert mult
    mod = vg.build(q, target="vta", config=SMALL)       # shift-and-add, one term per set bit
    steps = {s.name: s for s in mod.plan.steps}
    assert all(steps[n].target == "vta" for n in mult), [(n, steps[n].note) for n in mult]
    assert any("shift-and-add:" in steps[n].note for n in mult)
    np.testing.assert_array_equal(_run(mod, x, "fsim")[0], ref)
    mod = vg.build(q, target="vta", config=SMALL.replace(alu_mul=True))
    steps = {s.name: s for s in mod.plan.steps}
    for name in mult:    # every shift runs (tests/graph/test_graph_multiplier.py)
        assert steps[name].target == "vta", (name, steps[name].note)
    np.testing.assert_array_equal(_run(mod, x, "fsim")[0], ref)


def test_saved_accelerator_module_runs_after_load(tmp_path):
    net = Net((1, 3, 7, 9), seed=8)
    y = net.conv(net.conv("x", 20), 36, kernel=(3, 1), pads=(1, 0, 1, 0))
    d = net.dense(net.op("Flatten", [y], {"axis": 1}), 10)
    g = net.graph([d])
    path = tmp_path / "net.vtapkg"
    vg.build(g, target="vta", config=SMALL).save(path)
    mod = vg.load(path)
    assert mod.is_accelerated and [s.note for s in mod.plan.steps][0].startswith("pack")
    np.testing.assert_array_equal(mod.run(net.sample, backend="fsim")[0], vg.evaluate(g, net.sample)[d])


@pytest.mark.parametrize("op, shape, params, out_shape", [
    ("vta.pack_nchw", (1, 20, 3, 5), {"batch": 1, "block": 8}, (1, 3, 3, 5, 1, 8)),
    ("vta.unpack_nchw", (2, 3, 3, 5, 1, 8), {}, (2, 20, 3, 5)),
    ("vta.pack_matrix", (3, 36), {"rows": 2, "cols": 16}, (2, 3, 2, 16)),
    ("vta.unpack_matrix", (2, 3, 2, 16), {}, (3, 36)),
    ("vta.repack_nchw", (1, 5, 2, 3, 1, 4), {"batch": 1, "channels": 20, "block": 8}, (1, 3, 2, 3, 1, 8)),
])
def test_layout_steps_compile_to_their_references(op, shape, params, out_shape):
    """The CPU layout steps' TE computes equal the runtime's numpy layout kernels (the repack runs only
    on configurations with BLOCK_IN != BLOCK_OUT, so it is checked here on its own)."""
    x = np.random.default_rng(9).integers(-128, 128, shape).astype(np.int8)
    g = Graph([Node(op, ["x"], ["y"], {"params": params, "out_shape": out_shape}, "layout")], ["x"], ["y"],
              {"x": TensorType(shape, "int8")})
    from vtakit.compiler.graph.passes import run_passes
    g = run_passes(g, ["InferType"])
    ref = vg.evaluate(g, {"x": x})["y"]
    np.testing.assert_array_equal(vg.build(g, target="llvm").run({"x": x})[0], ref)


@pytest.mark.parametrize("config", [DEFAULT, VTAConfig.small(LOG_BATCH=1)], ids=["default", "small-batch2"])
def test_batch_of_three_with_residual_and_dense(config):
    """Batch 3 (zero-padded to whole BATCH blocks on a 2-batch configuration), a residual add of two
    accelerator outputs, flatten, dense -> dense with 3 rows."""
    net = Net((3, 5, 6, 7), seed=11)
    a = net.conv("x", 20)
    b = net.conv(a, 20)
    r = net.add(a, b)
    d = net.dense(net.op("Flatten", [r], {"axis": 1}), 12, relu=True)
    _check(net, [net.dense(d, 7), r], config, backends=("fsim", "cycle"))


def test_packed_graph_evaluates_to_the_original_values():
    """``optimize(qgraph, "vta")`` holds the packed operators, whose numpy references reproduce the
    quantised graph exactly (the golden model of VTAGraphPack)."""
    net = Net((1, 3, 7, 9), seed=13)
    a = net.conv("x", 20)
    r = net.add(net.conv(a, 20), a)
    d = net.dense(net.op("Flatten", [r], {"axis": 1}), 10)
    g = net.graph([d])
    packed = vg.optimize(g, "vta", config=SMALL)
    ops = {n.op for n in packed.nodes}
    assert {"vta.conv2d", "vta.add", "vta.dense", "vta.pack_nchw", "vta.pack_matrix", "vta.unpack_nchw",
            "vta.unpack_matrix"} <= ops and not any(op.startswith("qnn.") for op in ops)
    np.testing.assert_array_equal(vg.evaluate(packed, net.sample)[d], vg.evaluate(g, net.sample)[d])
