"""The compiled timing solver (vtakit/sim/csrc/timing_core.c) against the Python solver it transcribes.

The cycle backend's default path times a program with the C core and takes the data from fsim;
``simulate(engine="python")`` runs :class:`vtakit.sim.cycle._Solver` alone. Here the two must
agree exactly -- every ``RunStats`` field but ``sim_seconds``, every instruction's timing, the read
bursts, the token-queue log, the arbiter decisions (``events``), the DRAM, the final SRAM state and
the trace file -- on random programs over the corner configurations the solver-vs-stepping tests
use, on the corpus and on DMA edge shapes; deadlocks and erroneous programs raise the same error
on both; and the core declines (never crashes, never loops) on malformed streams.

These tests force compiled cores on (whatever ``VTAKIT_NATIVE`` says) and skip when the core is
not built, unless ``VTAKIT_REQUIRE_NATIVE=1``.
"""

import json
import os

import numpy as np
import pytest

from tests.programs import run_program
from tests.sim.test_cycle import (SMALL, SOLVER_CONFIGS, _corpus_and_edges, _deadlocks, _gemm_program, _launch,
                                  _launch_program, _load, _nop)
from vtakit.errors import DeadlockError, ProgramError, SimError
from vtakit.hw import isa
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.runtime.random_program import random_program
from vtakit.sim import cycle, native
from vtakit.sim.backend import Launch
from vtakit.sim.cycle import _Solver, native_timing, simulate
from vtakit.sim.program import Program, Segment

RANDOM_PER_CONFIG = 150          # x 7 configurations: 1050 random programs
TRACED_PER_CONFIG = 12


@pytest.fixture(autouse=True)
def native_on(monkeypatch):
    """The compiled core, whatever the environment says (skip if this build lacks it)."""
    monkeypatch.setenv("VTAKIT_NATIVE", "1")
    if native.core("_timing_core") is None:
        if os.environ.get("VTAKIT_REQUIRE_NATIVE") == "1":
            pytest.fail("vtakit.sim._timing_core is not built")
        pytest.skip("vtakit.sim._timing_core is not built")


def _python(program):
    """The Python solver's full result: stats, timing, events, bursts, token log, DRAM."""
    _, launch = _launch_program(program)
    solver = _Solver(launch)
    cycles = solver.run()
    stats = solver.stats(cycles, 0.0)
    return stats, solver.timings(), solver.events, solver.bursts(), solver.token_log(), launch.dram.tobytes()


def _native(program):
    """The same from the default path, which must have taken the compiled core."""
    _, launch = _launch_program(program)
    run = simulate(launch)
    assert run.engine == "native", f"{program.name}: the compiled core declined ({native_timing(launch)!r})"
    run.stats.sim_seconds = 0.0
    return (run.stats, run.timing, run.events, cycle._native_bursts(run.detail), cycle._native_token_log(run.detail),
            launch.dram.tobytes())


def _assert_same(program):
    got, want = _native(program), _python(program)
    for what, a, b in zip(("stats", "timing", "events", "bursts", "token log", "DRAM"), got, want):
        assert a == b, f"{program.name}: {what} differ"


def _outcome(program, tmp_path, engine):
    """Everything a run reports, including its trace file, or the error it raises."""
    trace = tmp_path / f"{engine}.json"
    _, launch = _launch_program(program, trace)
    try:
        run = simulate(launch, engine=engine)
    except SimError as exc:
        return type(exc).__name__, str(exc)
    assert run.engine == ("native" if engine == "auto" else "solver")
    run.stats.sim_seconds = 0.0
    machine = run.machine           # the final SRAM state (fsim's machine on the native path)
    state = [getattr(machine, name).tobytes() for name in ("uop", "inp", "wgt", "acc", "out")]
    state += [mask.tobytes() for mask in machine.written.values()]
    return (run.stats, [vars(t) for t in run.timing], run.events, launch.dram.tobytes(), state,
            json.loads(trace.read_text()))


# ---------------------------------------------------------------------------- equal to the Python solver
@pytest.mark.parametrize("config_name", SOLVER_CONFIGS)
def test_random_programs_equal_the_python_solver(config_name):
    config = SOLVER_CONFIGS[config_name]
    for seed in range(RANDOM_PER_CONFIG):
        _assert_same(random_program(config, 3000 + seed))


@pytest.mark.slow
@pytest.mark.parametrize("config_name", SOLVER_CONFIGS)
def test_many_random_programs_equal_the_python_solver(config_name):
    config = SOLVER_CONFIGS[config_name]
    for seed in range(2000):
        _assert_same(random_program(config, 20000 + seed))


@pytest.mark.parametrize("config_name", SOLVER_CONFIGS)
def test_traces_equal_the_python_solvers(config_name, tmp_path):
    config = SOLVER_CONFIGS[config_name]
    for seed in range(TRACED_PER_CONFIG):
        program = random_program(config, 7000 + seed)
        assert _outcome(program, tmp_path, "auto") == _outcome(program, tmp_path, "python"), program.name


@pytest.mark.parametrize("config_name", SOLVER_CONFIGS)
def test_corpus_and_dma_edges_equal_the_python_solver(config_name, tmp_path):
    for program in _corpus_and_edges(SOLVER_CONFIGS[config_name]):
        assert _outcome(program, tmp_path, "auto") == _outcome(program, tmp_path, "python"), program.name


def _dma_program(config, loads):
    """One LOAD per (memory type, rows, columns, stride, DRAM byte offset, pads) then a FINISH."""
    insns = []
    for mem, y, x, stride, offset, pads in loads:
        elem = {MemId.INP: config.inp_elem_bytes, MemId.WGT: config.wgt_elem_bytes, MemId.ACC: config.acc_elem_bytes,
                MemId.UOP: 4}[mem]
        on_load = mem in (MemId.INP, MemId.WGT)          # pushes a token compute waits for before FINISH
        insns.append(_load(mem, 0, offset // elem, y, x, stride=stride, y_pad_0=pads, x_pad_1=pads, push_next=on_load))
    insns += [GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True) for mem, *_ in loads if mem in (MemId.INP, MemId.WGT)]
    insns.append(FinishInsn())
    return Program(config, insns, [], segments=[Segment(0x1000, bytes(0x1e000), "data")], dram_size=0x20000)


@pytest.mark.parametrize("config_name", ["small", "default", "bus512_L3", "tight"])
def test_bursts_cut_at_4k_and_256_beats(config_name):
    """Rows crossing 4 KiB pages, rows longer than 256 beats, strides wrapping pages, with padding longer
    and shorter than the DRAM latency, concurrent LOADs on load and compute."""
    config = SOLVER_CONFIGS[config_name]

    def width(depth, y, pads):           # the widest rows of y data rows that fit the SRAM with their padding
        return max(1, min(depth // (y + pads) - pads, 400))
    for pads in (0, 1, 15):            # 15: more pad entries than the DRAM latency
        if width(config.inp_depth, 2, pads) + pads > config.inp_depth // (2 + pads):
            continue
        x_inp, x_acc = width(config.inp_depth, 2, pads), width(config.acc_depth, 2, pads)
        loads = [(MemId.INP, 2, x_inp, x_inp + 7, 0x1ff0, pads),
                 (MemId.WGT, 1, width(config.wgt_depth, 1, 0), 0, 0x2fc0, 0),
                 (MemId.ACC, 2, x_acc, 300, 0x3f00, pads),
                 (MemId.UOP, 1, min(config.uop_depth, 600), 0, 0x8ff0, 0)]
        _assert_same(_dma_program(config, loads))


def test_long_gemm_is_one_event():
    insns, uops = _gemm_program(SMALL, 64, (32, 32), moving=False)
    program = Program(SMALL, insns, uops, uop_addr=0x100, segments=[Segment(0x1000, bytes(range(256)) * 16, "data")],
                      dram_size=0x4000)
    got = _native(program)
    assert got[0].retire_cycles[4] - got[0].retire_cycles[3] == (1 << 16) + 10   # GEMM: N + 10 on SMALL
    assert got[2] < 20
    _assert_same(program)


# ---------------------------------------------------------------------------- errors: same as the Python solver
@pytest.mark.parametrize("index", range(5))
def test_deadlocks_decline_and_raise_the_python_solvers_error(index, tmp_path):
    program = list(_deadlocks())[index]
    _, launch = _launch_program(program)
    assert native_timing(launch) == "deadlock"
    outcome = _outcome(program, tmp_path, "auto")
    assert outcome[0] == "DeadlockError" and outcome == _outcome(program, tmp_path, "python")


def test_data_errors_are_fsims(tmp_path):
    """A race and a read of a never-written entry: the core times them (they are fine as far as timing
    goes), fsim reports the error, the same as on the Python solver."""
    race = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1), _load(MemId.ACC, 0, 0x1000 // SMALL.acc_elem_bytes, 1, 1),
            _load(MemId.INP, 0, 0x1000 // SMALL.inp_elem_bytes, 1, 1),
            _load(MemId.WGT, 0, 0x1000 // SMALL.wgt_elem_bytes, 1, 1, push_next=True),
            _load(MemId.INP, 0, 0x2000 // SMALL.inp_elem_bytes, 1, 1),
            GemmInsn(uop_bgn=0, uop_end=1, iter_out=1, iter_in=1, pop_prev=True), FinishInsn()]
    unwritten = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1),
                 AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=1, uop_bgn=0, uop_end=1, iter_out=1),
                 FinishInsn()]
    for insns, error in ((race, "RaceError"), (unwritten, "MemoryAccessError")):
        program = Program(SMALL, insns, [Uop(0, 0, 0)], uop_addr=0x100,
                          segments=[Segment(0x1000, bytes(range(256)) * 8, "data")], dram_size=0x4000)
        _, launch = _launch_program(program)
        assert isinstance(native_timing(launch), tuple)
        outcome = _outcome(program, tmp_path, "auto")
        assert outcome[0] == error and outcome == _outcome(program, tmp_path, "python")


def test_program_errors_are_fsims():
    """What check_program rejects, the core declines or times; either way the error is fsim's."""
    programs = [Program(SMALL, [GemmInsn(uop_bgn=0, uop_end=0)]),                           # no FINISH
                Program(SMALL, [GemmInsn(uop_bgn=0, uop_end=0, push_next=True), _nop(Opcode.STORE, pop_prev=True),
                                FinishInsn()]),                                             # FINISH does not wait
                Program(SMALL, [GemmInsn(uop_bgn=0, uop_end=0, push_next=True), FinishInsn()]),   # unbalanced
                Program(SMALL, [_nop(Opcode.LOAD, pop_prev=True), FinishInsn()]),         # illegal flag
                Program(SMALL, [AluInsn(alu_opcode=AluOp.MUL, uop_bgn=0, uop_end=0), FinishInsn()])]
    for program in programs:
        errors = []
        for engine in ("auto", "python"):
            _, launch = _launch_program(program)
            with pytest.raises(ProgramError) as info:
                simulate(launch, engine=engine)
            errors.append(str(info.value))
        assert errors[0] == errors[1]


def test_fsim_deadlock_falls_back_to_the_python_solver(monkeypatch):
    """Should fsim ever see a deadlock the core did not, the Python solver runs and reports it."""
    calls = []

    def deadlocked(*args, **kwargs):
        calls.append(args)
        raise DeadlockError("fsim says so")
    monkeypatch.setattr(cycle, "_fsim_simulate", deadlocked)
    _, launch = _launch(SMALL, [FinishInsn()])
    run = simulate(launch)
    assert calls and run.engine == "solver" and run.stats.cycles > 0


def test_unknown_engine():
    _, launch = _launch(SMALL, [FinishInsn()])
    with pytest.raises(SimError, match=r"unknown cycle-model engine 'c'; expected one of \['auto', 'python'\]"):
        simulate(launch, engine="c")


def test_turned_off_runs_the_python_solver(monkeypatch):
    _, launch = _launch(SMALL, [FinishInsn()])
    assert simulate(launch).engine == "native"
    assert simulate(launch, engine="python").engine == "solver"
    monkeypatch.setenv("VTAKIT_NATIVE", "0")
    assert native_timing(launch) is None and simulate(launch).engine == "solver"


def test_backend_uses_the_core():
    program = random_program(SMALL, 5)
    dram, stats = run_program(program, "cycle")
    fsim_dram, fsim_stats = run_program(program, "fsim")
    assert np.array_equal(dram, fsim_dram) and stats.counters == fsim_stats.counters
    stats.sim_seconds = 0.0
    assert stats == _python(program)[0]


# ---------------------------------------------------------------------------- malformed streams decline
def _solve(stream, config=SMALL, dram=1 << 16):
    layout, params = cycle._native_params(config)
    return native.core("_timing_core").solve(stream, layout, params, 0, dram)


def _word(opcode, **fields):
    """One encoded instruction with raw field values (no class checks), via the layout table."""
    word = opcode
    for field in isa.layout(opcode, SMALL):
        if field.name in fields:
            word |= (fields[field.name] & ((1 << field.width) - 1)) << field.offset
    return word.to_bytes(16, "little")


FINISH = _word(Opcode.FINISH)


MALFORMED = [
    (b"", "stream length"),
    (FINISH[:15], "stream length"),
    (FINISH + FINISH, "FINISH not last"),
    (_word(Opcode.GEMM), "no FINISH"),
    ((5).to_bytes(16, "little") + FINISH, "opcode"),
    ((7).to_bytes(16, "little") + FINISH, "opcode"),
    (_word(Opcode.GEMM, push_next=1) + FINISH, "unbalanced tokens"),
    (_word(Opcode.LOAD, memory_type=MemId.INP, pop_prev=1) + FINISH, "illegal flag"),
    (_word(Opcode.STORE, memory_type=MemId.OUT, push_next=1) + FINISH, "illegal flag"),
    (_word(Opcode.STORE, memory_type=MemId.INP, x_size=1, y_size=1) + FINISH, "illegal instruction"),
    (_word(Opcode.STORE, memory_type=MemId.OUT, x_size=1, y_size=1, x_pad_0=1) + FINISH, "illegal instruction"),
    (_word(Opcode.LOAD, memory_type=MemId.OUT, x_size=1, y_size=1) + FINISH, "illegal instruction"),
    (_word(Opcode.LOAD, memory_type=7) + FINISH, "memory type"),
    (_word(Opcode.ALU, alu_opcode=AluOp.MUL) + FINISH, "illegal instruction"),
    (_word(Opcode.ALU, alu_opcode=6) + FINISH, "illegal instruction"),
    (_word(Opcode.LOAD, memory_type=MemId.INP, x_size=1000, y_size=1000, x_stride=1000) + FINISH,
     "DMA larger than DRAM"),
    (_word(Opcode.GEMM, pop_prev=1, push_prev=1) + _word(Opcode.LOAD, memory_type=MemId.INP, pop_next=1, push_next=1)
     + FINISH, "deadlock"),
]


@pytest.mark.parametrize("stream, reason", MALFORMED, ids=[reason for _, reason in MALFORMED])
def test_malformed_streams_decline(stream, reason):
    assert _solve(stream) == reason


def test_bad_configuration_and_layout():
    layout, params = cycle._native_params(SMALL)
    core = native.core("_timing_core")
    assert core.solve(FINISH, layout, (0,) + params[1:], 0, 1 << 16) == "configuration"
    with pytest.raises(ValueError, match="layout table of 3 bytes"):
        core.solve(FINISH, b"abc", params, 0, 1 << 16)


def test_not_encodable_declines_and_python_reports():
    """An instruction the encoder rejects (a field too wide): the core is not asked; the Python solver runs."""
    insns = [MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, x_size=1 << 20, y_size=1, x_stride=1 << 20),
             FinishInsn()]
    launch = Launch(SMALL, insns, np.zeros(1 << 16, dtype=np.uint8), 0x8000)
    assert native_timing(launch) == "not encodable"
    with pytest.raises(SimError) as auto:
        simulate(launch)
    launch = Launch(SMALL, insns, np.zeros(1 << 16, dtype=np.uint8), 0x8000)
    with pytest.raises(SimError) as python:
        simulate(launch, engine="python")
    assert (type(auto.value), str(auto.value)) == (type(python.value), str(python.value))


def test_garbage_streams_never_crash(monkeypatch):
    """Random words with valid and invalid opcodes, any field values: the core answers (a result or a
    reason) and never crashes or hangs; what it times, it times as the Python solver does (its timing
    alone: the data effects, which would reject most of these, are switched off)."""
    monkeypatch.setattr(cycle, "check_finish", lambda *args: None)
    rng = np.random.default_rng(0)
    dram = np.zeros(1 << 20, dtype=np.uint8)
    answered = 0
    for trial in range(3000):
        n = int(rng.integers(1, 12))
        words = rng.integers(0, 1 << 63, size=(n, 2), dtype=np.int64).astype(np.uint64)
        words[:, 0] &= ~np.uint64(7)
        words[:, 0] |= rng.choice([0, 1, 2, 4, 5], size=n).astype(np.uint64)
        if trial % 2:            # mostly token-free, with a FINISH last: more of them get timed
            words[:, 0] &= ~np.uint64(0b1111000)
            words[-1] = (3, 0)
        stream = words.astype("<u8").tobytes()
        result = _solve(stream, dram=1 << 20)
        if isinstance(result, str):
            continue
        answered += 1
        solver = _Solver(Launch(SMALL, isa.decode(stream, SMALL), dram, 0, encoded=stream))
        solver.apply = lambda insn, index, validate: None
        cycles = solver.run()
        assert result[0] == cycles and result[1] == solver.retired and result[5] == solver.events
    assert answered > 100
