"""Accelerator plans by hand: a host int8 input packed by a CPU step into accelerator DRAM, two
accelerator dense layers (program templates built by ``topi_vta.dense``) with packed weights and
addends placed in DRAM once, and a CPU step unpacking the result to a host output. Checked against
the numpy reference of the same operators on fsim, cycle and rtl, through the GraphExecutor and
through NetModule (backends, devices, last_stats, profile, trace, save/load)."""

from __future__ import annotations

import functools
import inspect
import json
import zipfile

import numpy as np
import pytest

import vtakit
from vtakit import graph as vg
from vtakit.compiler import te, topi_vta
from vtakit.compiler.backend.llvm_object import compile_object, load_object
from vtakit.compiler.graph.lowering import lower_tensors
from vtakit.compiler.graph.module import AccelStats, NetModule, Profile
from vtakit.compiler.vta.env import get_env
from vtakit.errors import ArgumentError, GraphError
from vtakit.hw.config import VTAConfig
from vtakit.runtime import packing
from vtakit.runtime.device import Device
from vtakit.runtime.graph_executor import GraphExecutor, Plan, Step, ValueInfo
from vtakit.runtime.layout_kernels import LayoutKernel
from vtakit.runtime.template import ProgramTemplate

CONFIG = VTAConfig.small()
M, K, N1, N2 = 4, 16, 8, 8          # x (M, K) -> dense1 (N1) -> dense2 (N2); whole blocks of the small config
SHIFT, CLIP = 4, (-100, 100)
ALIGN = 64


# -- the hand-made network --------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _template(n: int, k: int) -> ProgramTemplate:
    env = get_env(CONFIG)
    s, tensors = topi_vta.dense(env, M, n, k, shift=SHIFT, clip=CLIP)
    assert len(tensors) == 4 and tensors[2].dtype == "int32"   # data, weight, addend, out
    return vtakit.build(s, tensors, target="vta", config=CONFIG).template


def _requantize(acc: np.ndarray, addend: np.ndarray) -> np.ndarray:
    """The operator's own numpy epilogue (whatever its signature: the addend is named by it)."""
    params = inspect.signature(topi_vta.requantize).parameters
    name = "addend" if "addend" in params else "bias"
    return topi_vta.requantize(acc, shift=SHIFT, clip=CLIP, **{name: addend})


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": rng.integers(-8, 8, (N1, K), dtype=np.int8), "a1": rng.integers(-200, 200, N1).astype(np.int32),
            "w2": rng.integers(-8, 8, (N2, N1), dtype=np.int8), "a2": rng.integers(-200, 200, N2).astype(np.int32)}


def _reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    h = _requantize(topi_vta.dense_reference(x, w["w1"]), w["a1"])
    return _requantize(topi_vta.dense_reference(h, w["w2"]), w["a2"])


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(100 + seed).integers(-128, 128, (M, K), dtype=np.int8)


def _packed_constants(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    b, bi, bo = CONFIG.batch, CONFIG.block_in, CONFIG.block_out
    return {"w1p": packing.pack_matrix(w["w1"], bo, bi), "a1p": packing.pack_bias(w["a1"], b, bo),
            "w2p": packing.pack_matrix(w["w2"], bo, bi), "a2p": packing.pack_bias(w["a2"], b, bo)}


def _plan(note: str = "") -> Plan:
    b, bi, bo = CONFIG.batch, CONFIG.block_in, CONFIG.block_out
    host = {"x": ((M, K), "int8"), "y": ((M, N2), "int8")}
    dram = {"xp": ((M // b, K // bi, b, bi), "int8"), "w1p": ((N1 // bo, K // bi, bo, bi), "int8"),
            "a1p": ((N1 // bo, b, bo), "int32"), "h": ((M // b, N1 // bo, b, bo), "int8"),
            "w2p": ((N2 // bo, N1 // bi, bo, bi), "int8"), "a2p": ((N2 // bo, b, bo), "int32"),
            "yp": ((M // b, N2 // bo, b, bo), "int8")}
    values: dict[str, ValueInfo] = {}
    offset = 0
    for name, (shape, dtype) in host.items():
        values[name] = ValueInfo(name, shape, dtype, offset)
        offset += ALIGN * -(-values[name].nbytes // ALIGN)
    arena = offset
    offset = 0
    for name, (shape, dtype) in dram.items():
        values[name] = ValueInfo(name, shape, dtype, offset, "dram")
        offset += ALIGN * -(-values[name].nbytes // ALIGN)
    steps = (Step("pack_x", 0, ("x", "xp"), 1, ("layout_transform",), "llvm", note),
             Step("dense1", 1, ("xp", "w1p", "a1p", "h"), 1, ("qnn.dense",), "vta"),
             Step("dense2", 2, ("h", "w2p", "a2p", "yp"), 1, ("qnn.dense",), "vta"),
             Step("unpack_y", 3, ("yp", "y"), 1, ("layout_transform",), "llvm"))
    return Plan(values, ("x",), ("y",), steps, arena, offset, CONFIG.to_dict())


def _pack(x: np.ndarray, xp: np.ndarray) -> None:
    xp[...] = packing.pack_matrix(x, CONFIG.batch, CONFIG.block_in)


def _unpack(yp: np.ndarray, y: np.ndarray) -> None:
    y[...] = packing.unpack_matrix(yp)


def _kernels() -> list:
    return [_pack, _template(N1, K), _template(N2, N1), _unpack]


def _executor(backend: str = "fsim", w: dict[str, np.ndarray] | None = None, **kw) -> GraphExecutor:
    w = _weights() if w is None else w
    return GraphExecutor(_plan(**kw), _kernels(), _packed_constants(w), Device(CONFIG, backend, dram_size=1 << 20))


def _module(w: dict[str, np.ndarray] | None = None, **kw) -> NetModule:
    w = _weights() if w is None else w
    return NetModule(_plan(**kw), _kernels(), _packed_constants(w), target="vta")


# -- the executor -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["fsim", "cycle"])
def test_outputs_match_the_reference_bit_for_bit_and_a_second_run_takes_new_inputs(backend):
    w = _weights()
    ex = _executor(backend, w)
    for seed in (0, 1):
        x = _inputs(seed)
        out = ex.run([x])
        np.testing.assert_array_equal(out[0], _reference(x, w))
        names = [n for n, _ in ex.step_stats]
        assert names == ["dense1", "dense2"]
        cycles = [s.cycles for _, s in ex.step_stats]
        assert all(c is None for c in cycles) if backend == "fsim" else all(c > 0 for c in cycles)


def test_dram_values_are_views_of_device_dram_and_weights_are_placed_once(monkeypatch):
    w = _weights()
    ex = _executor("fsim", w)
    device = ex.device
    used = device.allocator.used
    address = ex.address("w1p")
    view = ex._views["w1p"]
    assert np.shares_memory(view, device.dram) and view.ctypes.data == device.dram[address:].ctypes.data
    np.testing.assert_array_equal(view, _packed_constants(w)["w1p"])

    def no_constants(*args, **kwargs):
        raise AssertionError("a constant was handled after the executor was created")
    monkeypatch.setattr(GraphExecutor, "_constant", staticmethod(no_constants))
    monkeypatch.setattr(GraphExecutor, "_dram_view", no_constants)
    x = _inputs(0)
    np.testing.assert_array_equal(ex.run([x])[0], _reference(x, w))
    assert device.allocator.used == used                     # nothing placed or leaked per run
    # The weights live only in DRAM: clearing them there changes the next run (they are not re-copied).
    device.dram[address:address + view.nbytes] = 0
    zero = dict(w, w1=np.zeros_like(w["w1"]))
    np.testing.assert_array_equal(ex.run([x])[0], _reference(x, zero))


def test_debug_run_returns_host_and_dram_values():
    w = _weights()
    ex = _executor("fsim", w)
    x = _inputs(2)
    values = ex.debug_run({"x": x})
    assert {"x", "xp", "w1p", "a1p", "h", "w2p", "a2p", "yp", "y"} <= set(values)
    np.testing.assert_array_equal(values["xp"], packing.pack_matrix(x, CONFIG.batch, CONFIG.block_in))
    h = _requantize(topi_vta.dense_reference(x, w["w1"]), w["a1"])
    np.testing.assert_array_equal(packing.unpack_matrix(values["h"]), h)
    np.testing.assert_array_equal(values["y"], _reference(x, w))
    assert not np.shares_memory(values["h"], ex.device.dram)   # copies


def test_profile_rows_carry_the_accelerator_figures_on_cycle():
    ex = _executor("cycle")
    outputs, rows = ex.profile([_inputs(0)])
    assert [r.target for r in rows] == ["llvm", "vta", "vta", "llvm"]
    for r in rows[1:3]:
        assert r.cycles > 0 and 0 < r.utilization <= 1 and r.ideal_cycles > 0
        assert r.dram_bytes > 0 and r.accel_seconds == pytest.approx(r.cycles / (CONFIG.clock_mhz * 1e6))
        assert set(r.stalls) == {"token", "memory"} and "load" in r.stalls["token"]
    assert rows[0].cycles is None and rows[0].seconds > 0           # a CPU step: timed, no cycles


def test_profile_on_fsim_has_no_cycles_or_stalls():
    _, rows = _executor("fsim").profile([_inputs(0)])
    assert all(r.cycles is None and r.stalls is None and r.utilization is None for r in rows)
    assert rows[1].ideal_cycles > 0 and rows[1].dram_bytes > 0


def test_whole_network_trace(tmp_path):
    ex = _executor("cycle")
    path = tmp_path / "net.json"
    _, rows = ex.profile([_inputs(0)], trace=path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    d1 = [e for e in slices if e["name"].startswith("dense1: ")]
    d2 = [e for e in slices if e["name"].startswith("dense2: ")]
    assert d1 and d2
    c1 = rows[1].cycles
    assert max(e["ts"] + e["dur"] for e in d1) <= c1 + 1
    assert min(e["ts"] for e in d2) >= c1                      # shifted past the first program
    assert max(e["ts"] + e["dur"] for e in d2) <= c1 + rows[2].cycles + 1
    assert {e["name"] for e in slices if e["pid"] == 1} == {"pack_x", "unpack_y"}   # the host track
    assert doc["otherData"]["cycles"] == c1 + rows[2].cycles
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json"]


def test_interrupted_profile_leaves_no_trace_and_the_executor_usable(tmp_path):
    w = _weights()
    ex = _executor("cycle", w)
    ex.run([_inputs(0)])
    before = ex.step_stats
    call = ex._calls[2]
    original = call.program

    def run(program, trace=None, _run=ex.device.run):
        if program is original and trace is not None:
            raise KeyboardInterrupt
        return _run(program, trace=trace)
    ex.device.run = run
    path = tmp_path / "net.json"
    with pytest.raises(KeyboardInterrupt):
        ex.profile([_inputs(1)], trace=path)
    assert list(tmp_path.iterdir()) == []
    assert ex.step_stats == before                          # the last complete run's statistics
    del ex.device.run
    x = _inputs(3)
    np.testing.assert_array_equal(ex.run([x])[0], _reference(x, w))


def test_interrupted_run_keeps_the_executor_usable():
    w = _weights()
    ex = _executor("fsim", w)
    calls = ex._calls
    ex._calls = [calls[0], calls[1], _interrupt, calls[3]]
    with pytest.raises(KeyboardInterrupt):
        ex.run([_inputs(0)])
    assert ex.step_stats == []
    ex._calls = calls
    x = _inputs(1)
    np.testing.assert_array_equal(ex.run([x])[0], _reference(x, w))
    assert len(ex.step_stats) == 2


def _interrupt(*args):
    raise KeyboardInterrupt


def test_long_runs_show_progress_on_stderr_and_quick_ones_do_not(capsys, monkeypatch):
    import time

    from vtakit import progress
    previous = progress.set_enabled(True)
    try:
        ex = _executor("fsim")
        ex.run([_inputs(0)])
        assert capsys.readouterr().err == ""
        monkeypatch.setattr(progress, "DELAY_SECONDS", 0.05)
        calls = ex._calls
        ex._calls = [lambda: (time.sleep(0.4), calls[0]()), *calls[1:]]
        ex.run([_inputs(0)])
        assert "running the network" in capsys.readouterr().err
    finally:
        progress.set_enabled(previous)


def test_a_dropped_executor_gives_its_dram_back():
    device = Device(CONFIG, "fsim", dram_size=1 << 20)
    ex = GraphExecutor(_plan(), _kernels(), _packed_constants(_weights()), device)
    ex.run([_inputs(0)])
    assert device.allocator.used >= ex.plan.dram_bytes
    del ex
    import gc
    gc.collect()
    assert device.allocator.used == 0


def test_trace_needs_the_cycle_backend(tmp_path):
    with pytest.raises(ArgumentError, match="cycle backend"):
        _executor("fsim").profile([_inputs(0)], trace=tmp_path / "t.json")
    with pytest.raises(ArgumentError, match=r"\.json"):
        _executor("cycle").profile([_inputs(0)], trace=tmp_path / "t.vcd")


def test_plan_checks():
    plan, kernels, consts = _plan(), _kernels(), _packed_constants(_weights())
    with pytest.raises(ArgumentError, match="needs a Device"):
        GraphExecutor(plan, kernels, consts)
    other = Device(VTAConfig.small(log_acc_buff_size=12), "fsim", dram_size=1 << 20)
    with pytest.raises(ArgumentError, match="LOG_ACC_BUFF_SIZE=11 vs 12"):
        GraphExecutor(plan, kernels, consts, other)
    device = Device(CONFIG, "fsim", dram_size=1 << 20)
    steps = list(plan.steps)
    steps[1] = Step("dense1", 1, ("x", "w1p", "a1p", "h"), 1, (), "vta")
    with pytest.raises(ArgumentError, match=r"dense1.*\['x'\].*not in DRAM"):
        GraphExecutor(Plan(plan.values, plan.inputs, plan.outputs, tuple(steps), plan.arena_bytes, plan.dram_bytes,
                           plan.config), kernels, consts, device)
    with pytest.raises(ArgumentError, match="take a ProgramTemplate"):
        GraphExecutor(plan, [_pack, _pack, _template(N2, N1), _unpack], consts, device)
    with pytest.raises(ArgumentError, match="cannot place the network's 2097152 bytes"):
        GraphExecutor(Plan(plan.values, plan.inputs, plan.outputs, plan.steps, plan.arena_bytes, 2 << 20, plan.config),
                      kernels, consts, device)
    with pytest.raises(ArgumentError, match="outside the 64-byte DRAM region"):
        GraphExecutor(Plan(plan.values, plan.inputs, plan.outputs, plan.steps, plan.arena_bytes, 64, plan.config),
                      kernels, consts, device)


def test_plan_json_keeps_notes_and_old_plans_load():
    plan = _plan(note="no accelerator kernel for this layout")
    data = json.loads(json.dumps(plan.to_json()))
    assert Plan.from_json(data) == plan
    assert len(data["steps"][0]) == 7 and len(data["steps"][1]) == 6
    for s in data["steps"]:
        del s[6:]
    assert Plan.from_json(data).steps[0].note == ""


# -- NetModule --------------------------------------------------------------------------------------
def test_module_runs_on_backends_with_last_stats():
    w = _weights()
    mod = _module(w)
    assert mod.is_accelerated and mod.config == CONFIG
    x = _inputs(0)
    np.testing.assert_array_equal(mod.run([x])[0], _reference(x, w))
    stats = mod.last_stats
    assert isinstance(stats, AccelStats) and stats.backend == "fsim" and stats.cycles is None
    assert [n for n, _ in stats.steps] == ["dense1", "dense2"] and stats.ideal_cycles > 0 and stats.dram_bytes > 0
    fsim_device = mod.device("fsim")
    x2 = _inputs(1)
    np.testing.assert_array_equal(mod.run({"x": x2}, backend="cycle")[0], _reference(x2, w))
    stats = mod.last_stats
    assert stats.backend == "cycle" and stats.cycles == sum(s.cycles for _, s in stats.steps) > 0
    assert stats.utilization == pytest.approx(stats.ideal_cycles / stats.cycles)
    np.testing.assert_array_equal(mod.run([x])[0], _reference(x, w))
    assert mod.device("fsim") is fsim_device                 # one device per backend, kept
    assert fsim_device.dram_size >= mod.plan.dram_bytes


def test_module_on_a_given_device():
    w = _weights()
    mod = _module(w)
    device = Device(CONFIG, "cycle", dram_size=1 << 20)
    x = _inputs(4)
    np.testing.assert_array_equal(mod.run([x], device=device)[0], _reference(x, w))
    assert mod.last_stats.backend == "cycle" and mod.last_stats.cycles > 0
    used = device.allocator.used
    mod.run([x], device=device)
    assert device.allocator.used == used                     # the executor for this device is reused
    for _ in range(5):                                       # a few devices' executors are kept, not every one
        mod.run([x], device=Device(CONFIG, "fsim", dram_size=1 << 20))
    assert len(mod._user_executors) == 4
    other = Device(VTAConfig.small(bus_width=128), "fsim")
    with pytest.raises(ArgumentError, match="BUS_WIDTH=64 vs 128"):
        mod.run([x], device=other)


def test_module_argument_errors():
    mod = _module()
    with pytest.raises(ArgumentError, match=r"'quantum'.*\['cycle', 'fsim', 'rtl', 'verilator'\]"):
        mod.run([_inputs(0)], backend="quantum")
    cpu = vg.build(_cpu_graph())
    assert not cpu.is_accelerated and cpu.config is None
    x = np.ones((2, 8), np.float32)
    for kwargs in ({"backend": "fsim"}, {"device": Device(CONFIG)}):
        with pytest.raises(ArgumentError, match="runs on the CPU only; backend/device apply to accelerator modules"):
            cpu.run([x], **kwargs)
    profile = cpu.profile([x])
    assert profile.total_cycles == 0 and profile.utilization is None and profile.accel_seconds == 0.0
    assert profile.cpu_share == 1.0 and profile.cpu_seconds == profile.total_seconds
    assert cpu.last_stats is None


def _cpu_graph():
    from vtakit.compiler.graph.ir import Graph, Node, TensorType
    g = Graph([Node("Relu", ["x"], ["y"])], ["x"], ["y"])
    g.types = {"x": TensorType((2, 8), "float32"), "y": TensorType((2, 8), "float32")}
    return g


def test_module_profile_totals_table_and_json(tmp_path):
    w = _weights()
    mod = _module(w, note="layout change stays on the CPU")
    x = _inputs(5)
    profile = mod.profile([x], trace=tmp_path / "t.json")
    assert isinstance(profile, Profile)
    np.testing.assert_array_equal(profile.outputs[0], _reference(x, w))
    accel = [r for r in profile.layers if r.target == "vta"]
    assert profile.total_cycles == sum(r.cycles for r in accel) == mod.last_stats.cycles
    assert profile.ideal_cycles == sum(r.ideal_cycles for r in accel)
    assert profile.utilization == pytest.approx(profile.ideal_cycles / profile.total_cycles)
    assert profile.accel_seconds == pytest.approx(profile.total_cycles / (CONFIG.clock_mhz * 1e6))
    cpu = sum(r.seconds for r in profile.layers if r.target != "vta")
    assert profile.cpu_seconds == pytest.approx(cpu)
    assert profile.cpu_share == pytest.approx(cpu / (cpu + profile.accel_seconds))
    text = str(profile)
    head = text.splitlines()[0].split()
    assert head[:5] == ["layer", "ops", "target", "shape", "us"] and "cycles" in head and "note" in head
    assert "layout change stays on the CPU" in text and f"{accel[0].cycles:,}" in text
    data = json.loads(json.dumps(profile.to_json()))
    for key in ("total_cycles", "ideal_cycles", "utilization", "accel_seconds", "cpu_seconds", "cpu_share"):
        assert key in data
    assert data["layers"][1]["cycles"] == accel[0].cycles and data["layers"][0]["note"]
    json.loads((tmp_path / "t.json").read_text())
    fsim = mod.profile([x], backend="fsim")
    assert fsim.total_cycles is None and fsim.accel_seconds is None and fsim.cpu_share is None
    assert "no timing" in str(fsim)


def test_module_debug_run_on_the_accelerator():
    w = _weights()
    mod = _module(w)
    x = _inputs(6)
    values = mod.debug_run([x], backend="cycle")
    np.testing.assert_array_equal(values["y"], _reference(x, w))
    assert values["xp"].shape == (M // CONFIG.batch, K // CONFIG.block_in, CONFIG.batch, CONFIG.block_in)
    assert mod.last_stats.cycles > 0


def test_rtl_run_of_the_small_plan():
    w = _weights()
    mod = _module(w)
    x = _inputs(7)
    np.testing.assert_array_equal(mod.run([x], backend="rtl")[0], _reference(x, w))
    stats = mod.last_stats
    assert stats.backend == "rtl" and 0 < stats.cycles < 50_000


# -- saving -----------------------------------------------------------------------------------------
def _object_pack_kernel():
    """The pack step as a compiled CPU kernel (object code, as a build makes them)."""
    b, bi = CONFIG.batch, CONFIG.block_in
    x = te.placeholder((M, K), "int8", name="x")
    xp = te.compute((M // b, K // bi, b, bi), lambda i, j, r, c: x[i * b + r, j * bi + c], name="xp")
    return compile_object(lower_tensors([x], [xp], "pack_x"), "test_accel_pack_x")


def _saved_module(w):
    """Object code packs, the templates multiply, a named layout kernel unpacks: every kernel kind."""
    pack, unpack = _object_pack_kernel(), LayoutKernel("unpack_matrix")
    kernels = [load_object(pack), _template(N1, K), _template(N2, N1), unpack]
    objects = [pack, None, None, unpack.to_json()]
    return NetModule(_plan(note="stays on the CPU"), kernels, _packed_constants(w), target="vta",
                     kernel_objects=objects)


def test_save_and_load_an_accelerator_module(tmp_path):
    w = _weights()
    mod = _saved_module(w)
    x = _inputs(8)
    want = mod.run([x])[0]
    np.testing.assert_array_equal(want, _reference(x, w))
    path = tmp_path / "net.vtapkg"
    mod.save(path)
    loaded = vg.load(path)
    assert loaded.is_accelerated and loaded.config == CONFIG and loaded.plan == mod.plan
    np.testing.assert_array_equal(loaded.run([x])[0], want)
    np.testing.assert_array_equal(loaded.run([x], backend="cycle")[0], want)
    assert loaded.last_stats.cycles > 0
    assert loaded.plan.steps[0].note == "stays on the CPU"
    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read("meta.json"))
    assert meta["version"] == 2 and [k["kind"] for k in meta["kernels"]] == ["object", "vta", "vta", "layout"]


def _rewrite(path, tmp_path, change) -> object:
    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read("meta.json"))
        parts = {n: z.read(n) for n in z.namelist()}
    change(meta)
    bad = tmp_path / "bad.vtapkg"
    with zipfile.ZipFile(bad, "w") as z:
        for name, data in parts.items():
            z.writestr(name, json.dumps(meta) if name == "meta.json" else data)
    return bad


def _set_template(meta, key, value):
    meta["kernels"][1]["template"][key] = value


@pytest.mark.parametrize("change, message", [
    (lambda m: _set_template(m, "insns", "!!!not base64"), "damaged: kernel 1"),
    (lambda m: _set_template(m, "relocations", [[10_000, 0, 2]]), "damaged: kernel 1.*instruction index"),
    (lambda m: m["kernels"][1].update(kind="gpu"), "kind 'gpu'"),
    (lambda m: m["plan"].update(config={"LOG_BATCH": "many"}), "configuration"),
    (lambda m: m["plan"]["steps"][1].__setitem__(1, 0), "disagree on where it runs"),
    (lambda m: m["plan"]["steps"][1].__setitem__(1, 9), "does not hold"),
    (lambda m: m["kernels"][3].update(layout_kernel="transpose"), "damaged: kernel 3.*unknown layout kernel"),
])
def test_damaged_accelerator_packages_are_clear_errors(tmp_path, change, message):
    path = tmp_path / "net.vtapkg"
    _saved_module(_weights()).save(path)
    with pytest.raises(GraphError, match=message):
        vg.load(_rewrite(path, tmp_path, change))
