"""fsim's compiled core (csrc/fsim_core.c) against its Python engine: same results, same errors.

Every accepted program must leave byte-identical DRAM, SRAM arrays, written masks, counters and
stall statistics on both engines, and the core must not decline it (declines are counted: zero
on the corpus, random programs and compiled workloads). Every program the Python engine rejects
the core must decline, leaving DRAM byte-identical, so that fsim then raises the Python error.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings

from tests.programs import CASES, Unsupported
from tests.programs.runner import insn_address
from tests.sim.test_fsim_corpus import CONFIGS
from tests.sim.test_fsim_schedule import CONFIG as SCHEDULE_CONFIG, token_programs
from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, RaceError, SimError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.runtime.random_program import random_program
from vtakit.sim import fsim, native
from vtakit.sim.backend import Launch
from vtakit.sim.machine import POP_QUEUES, PUSH_QUEUES
from vtakit.sim.program import Program

pytestmark = pytest.mark.skipif(native.core("_fsim_core") is None, reason="the compiled fsim core is not built")

SMALL = VTAConfig.small()
SRAMS = ("uop", "inp", "wgt", "acc", "out", "_written")
# the decline reason's start for each error class of the Python engine
REASONS = {RaceError: ("data race",), DeadlockError: ("deadlock",),
           MemoryAccessError: ("uninitialised read", "out of range"),
           ProgramError: ("illegal instruction", "FINISH", "unbalanced tokens")}


def _reason_kind(reason: str) -> str:
    """A decline reason without its ``instruction N:`` prefix."""
    return reason.split(": ", 1)[1] if reason.startswith("instruction ") else reason


def _both(config: VTAConfig, insns: list, dram: np.ndarray, encoded: bytes | None = None):
    """Run on both engines, each on its own copy of ``dram``: (python run or error, native run or
    decline reason, python DRAM, native DRAM)."""
    py_dram, native_dram = dram.copy(), dram.copy()
    try:
        py = fsim.simulate(config, insns, py_dram, engine="python")
    except SimError as exc:
        py = exc
    run, reason = fsim._native_run(config, insns, native_dram, encoded, True)
    return py, (run if run is not None else reason), py_dram, native_dram


def assert_same(config: VTAConfig, insns: list, dram: np.ndarray, encoded: bytes | None = None) -> None:
    """The native core accepts the program and leaves exactly the Python engine's state."""
    py, nat, py_dram, native_dram = _both(config, insns, dram, encoded)
    assert not isinstance(py, Exception), f"the Python engine rejects the program: {py}"
    assert not isinstance(nat, str), f"the native core declined a valid program: {nat}"
    assert np.array_equal(py_dram, native_dram), f"DRAM differs at {np.flatnonzero(py_dram != native_dram)[:8]}"
    for name in SRAMS:
        assert np.array_equal(getattr(py.machine, name), getattr(nat.machine, name)), name
    assert nat.machine.counters == py.machine.counters and nat.stats.counters == py.stats.counters
    assert (nat.fetch_stalls, nat.push_stalls) == (py.fetch_stalls, py.push_stalls)
    assert nat.stats.backend == "fsim" and nat.stats.sim_seconds > 0


def assert_declined(config: VTAConfig, insns: list, dram: np.ndarray) -> tuple[SimError, str]:
    """The Python engine rejects the program; the core declines it with a reason of the same kind
    and leaves DRAM byte-identical. Returns (Python's error, the core's reason)."""
    py, nat, py_dram, native_dram = _both(config, insns, dram)
    assert isinstance(py, SimError), "the Python engine accepts the program"
    assert isinstance(nat, str), f"the native core completed a program the Python engine rejects: {py}"
    assert np.array_equal(native_dram, dram), "a declined native run changed DRAM"
    assert _reason_kind(nat).startswith(REASONS[type(py)]), (nat, py)
    return py, nat


def _program_dram(program: Program) -> tuple[np.ndarray, bytes]:
    encoded = program.encoded_insns()
    addr = insn_address(program)
    dram = program.initial_dram(addr + len(encoded))
    dram[addr:addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return dram, encoded


# ---------------------------------------------------------------------------- accepted programs
@pytest.mark.parametrize("config_name", CONFIGS)
def test_corpus_native_equals_python(config_name):
    ran = 0
    for name in CASES:
        try:
            program = CASES[name](CONFIGS[config_name]).program
        except Unsupported:
            continue
        dram, encoded = _program_dram(program)
        assert_same(program.config, list(program.insns), dram, encoded)
        ran += 1
    assert ran >= 30


@pytest.mark.parametrize("config_name", CONFIGS)
def test_random_programs_native_equals_python(config_name):
    """200 seeds on each corner configuration: 1000 random programs, none declined."""
    for seed in range(200):
        program = random_program(CONFIGS[config_name], seed)
        dram, encoded = _program_dram(program)
        assert_same(program.config, list(program.insns), dram, encoded if seed % 2 else None)


@pytest.mark.parametrize("blocks", [dict(log_block_in=5, log_block_out=3), dict(log_block_in=6, log_block_out=2,
                                                                               log_batch=1)], ids=["32x8", "2x64x4"])
def test_wide_blocks(blocks):
    """block_in 32 and 64: the GEMM kernel's vector paths past one 16-byte register."""
    config = VTAConfig.small(log_inp_buff_size=12, log_wgt_buff_size=14, log_acc_buff_size=13, log_uop_buff_size=12,
                             **blocks)
    for seed in range(50):
        program = random_program(config, seed)
        assert_same(config, list(program.insns), program.initial_dram())


def test_alu_mul_and_every_alu_op():
    config = VTAConfig.small(alu_mul=True)
    for seed in range(40):
        program = random_program(config, seed)
        assert_same(config, list(program.insns), program.initial_dram())
    assert any(isinstance(x, AluInsn) and x.alu_opcode == AluOp.MUL
               for seed in range(40) for x in random_program(config, seed).insns)


@pytest.fixture
def differential_fsim(monkeypatch):
    """Make the fsim backend run every launch on both engines and compare; returns the launch count."""
    launches = []
    original = fsim.execute

    def execute(launch: Launch):
        assert_same(launch.config, list(launch.insns), launch.dram, launch.encoded)
        launches.append(len(launch.insns))
        return original(launch)

    monkeypatch.setattr(fsim, "execute", execute)
    return launches


@pytest.mark.parametrize("vthreads", [1, 2])
def test_compiled_conv2d_and_dense(differential_fsim, vthreads):
    from vtakit.compiler.topi_vta import Conv2dWorkload
    from vtakit.compiler.topi_vta.bench import run_conv2d, run_dense
    assert run_conv2d(Conv2dWorkload(6, 6, 8, 12, 3, 1, 1), SMALL, vthreads=vthreads).correct
    assert run_conv2d(Conv2dWorkload(4, 4, 16, 32, 3, 1, 1), VTAConfig(), vthreads=vthreads).correct
    assert run_dense(16, 32, 16, SMALL, vthreads=vthreads).correct
    assert len(differential_fsim) == 3


@pytest.mark.parametrize("config, m, n, k", [(SMALL, 8, 32, 512), (VTAConfig(), 64, 64, 64)])
def test_blocked_gemm(differential_fsim, config, m, n, k):
    from vtakit.runtime.blocked_gemm import bench_gemm
    for vthreads in (1, 2):
        assert bench_gemm(m, n, k, config=config, vthreads=vthreads).correct
    assert len(differential_fsim) == 2


def test_exotic_instruction_objects_run_natively():
    """numpy ints and instruction subclasses encode through isa's reference path; same results."""
    program = CASES["blocked_gemm_vt2"](SMALL).program

    class Tagged(GemmInsn):
        pass

    insns = [dataclasses.replace(x, sram_base=np.int64(x.sram_base)) if isinstance(x, MemInsn) else
             Tagged(**{f.name: getattr(x, f.name) for f in dataclasses.fields(x)}) if type(x) is GemmInsn else x
             for x in program.insns]
    assert_same(SMALL, insns, program.initial_dram())


# ---------------------------------------------------------------------------- the engines' plumbing
def test_simulate_and_execute_use_the_core_and_python_can_be_forced(monkeypatch):
    program = CASES["gemm_epilogue"](SMALL).program
    calls = []
    real = native.core("_fsim_core")

    class Spy:
        @staticmethod
        def run(*args):
            calls.append(len(args[1]))
            return real.run(*args)

    monkeypatch.setattr(native, "core", lambda name: Spy)
    dram, encoded = _program_dram(program)
    fsim.simulate(SMALL, list(program.insns), dram.copy())
    fsim.execute(Launch(SMALL, list(program.insns), dram.copy(), encoded=encoded))
    assert calls == [len(encoded)] * 2
    fsim.simulate(SMALL, list(program.insns), dram.copy(), engine="python")
    fsim.simulate(SMALL, list(program.insns), dram.copy(), rng=random.Random(0))
    assert len(calls) == 2
    machine = fsim.run_native(Launch(SMALL, list(program.insns), dram.copy(), encoded=encoded))
    reference = fsim.simulate(SMALL, list(program.insns), dram.copy(), engine="python").machine
    assert machine.counters == reference.counters and np.array_equal(machine.acc, reference.acc)
    with pytest.raises(SimError, match=r"unknown fsim engine 'numba'; expected one of \['auto', 'python'\]"):
        fsim.simulate(SMALL, list(program.insns), dram.copy(), engine="numba")


def test_instructions_may_come_as_any_iterable():
    program = CASES["gemm_epilogue"](SMALL).program
    dram, _ = _program_dram(program)
    reference = fsim.simulate(SMALL, list(program.insns), dram.copy(), engine="python")
    for insns in (tuple(program.insns), iter(program.insns)):
        run = fsim.simulate(SMALL, insns, dram.copy())
        assert run.machine.counters == reference.machine.counters and np.array_equal(run.machine.acc,
                                                                                        reference.machine.acc)


def test_native_can_be_turned_off(monkeypatch):
    program = CASES["gemm_epilogue"](SMALL).program
    monkeypatch.setenv("VTAKIT_NATIVE", "0")
    launch = Launch(SMALL, list(program.insns), program.initial_dram())
    assert fsim.run_native(launch) is None
    assert fsim._native_run(SMALL, launch.insns, launch.dram, None, True) == (
        None, "the compiled core is not available")


def test_check_races_off_is_honoured():
    """A racy program completes natively with check_races=False, as it does on Python."""
    insns = _gemm_program(out_token=False)
    dram = np.zeros(4096, dtype=np.uint8)
    py_dram, native_dram = dram.copy(), dram.copy()
    py = fsim.simulate(SMALL, insns, py_dram, engine="python", check_races=False)
    run, reason = fsim._native_run(SMALL, insns, native_dram, None, False)
    assert run is not None, reason
    assert np.array_equal(py_dram, native_dram) and run.machine.counters == py.machine.counters
    assert fsim._native_run(SMALL, insns, dram.copy(), None, True)[1].startswith("instruction 5: data race on")


# ---------------------------------------------------------------------------- rejected programs
def _load(mem, sram, dram, y, x, **kw):
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=x, **kw)


def _store(sram, dram, y, x, **kw):
    return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=x, **kw)


def _gemm_program(*, inp_token=True, out_token=True):
    return [_load(MemId.UOP, 0, 0, 1, 1), GemmInsn(reset_reg=True),
            _load(MemId.WGT, 0, 0, 1, 1), _load(MemId.INP, 0, 0, 1, 1, push_next=inp_token),
            GemmInsn(pop_prev=inp_token, push_next=out_token),
            _store(0, 64, 1, 1, pop_prev=out_token, push_prev=True), FinishInsn(pop_next=True)]


def _after_stores(tail):
    """Two ordered stores that write DRAM, then ``tail``: a declined run must undo both."""
    alu = AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=3, uop_bgn=0, uop_end=1, iter_out=4, dst_factor_out=1)
    return [_load(MemId.UOP, 0, 0, 1, 1), _load(MemId.ACC, 0, 8, 1, 4), alu.__class__(**{
        **{f.name: getattr(alu, f.name) for f in dataclasses.fields(alu)}, "push_next": True}),
        _store(0, 100, 1, 4, pop_prev=True), _store(0, 120, 2, 2, push_prev=True),
        AluInsn(pop_next=True, alu_opcode=AluOp.ADD, use_imm=True, imm=1), *tail]


ERROR_PROGRAMS = {
    "race_inp": (_gemm_program(inp_token=False), RaceError),
    "race_out": (_gemm_program(out_token=False), RaceError),
    "uninitialised_after_stores": (_after_stores([GemmInsn(uop_bgn=0, uop_end=1, push_next=False),
                                                  FinishInsn()]), MemoryAccessError),
    "out_of_range_after_stores": (_after_stores([_store(0, 1 << 20, 1, 1), FinishInsn()]), MemoryAccessError),
    "store_past_dram_end_after_stores": (_after_stores([AluInsn(push_next=True, uop_end=1, use_imm=True),
                                                        _store(0, 1020, 1, 4, pop_prev=True, push_prev=True),
                                                        FinishInsn(pop_next=True)]), MemoryAccessError),
    "race_on_dram_after_stores": (_after_stores([AluInsn(push_next=True, uop_end=1, use_imm=True),
                                                 _store(0, 200, 1, 1, pop_prev=True, push_prev=True),
                                                 _load(MemId.ACC, 4, 50, 1, 1), FinishInsn(pop_next=True)]),
                                  RaceError),
    "deadlock_after_stores": (_after_stores([_load(MemId.INP, 0, 0, 1, 1, pop_next=True, push_next=True),
                                             AluInsn(pop_prev=True, push_prev=True, uop_end=1, use_imm=True),
                                             FinishInsn()]), DeadlockError),
    "uninitialised_acc": ([x for x in _gemm_program() if not (isinstance(x, GemmInsn) and x.reset_reg)],
                          MemoryAccessError),
    "uninitialised_alu_src": ([_load(MemId.UOP, 0, 0, 1, 1), _load(MemId.ACC, 0, 0, 1, 1),
                               AluInsn(uop_end=1, iter_out=2, src_factor_out=1), FinishInsn()], MemoryAccessError),
    "finish_not_last": ([FinishInsn(), _load(MemId.UOP, 0, 0, 1, 1)], ProgramError),
    "unbalanced": ([_load(MemId.INP, 0, 0, 1, 1, push_next=True), FinishInsn()], ProgramError),
    "illegal_flag": ([_load(MemId.INP, 0, 0, 1, 1, push_prev=True), FinishInsn()], ProgramError),
    "store_padding": ([_store(0, 0, 1, 1).__class__(**{**dataclasses.asdict(_store(0, 0, 1, 1)), "x_pad_0": 1}),
                       FinishInsn()], ProgramError),
    "mul_without_alu_mul": ([AluInsn(alu_opcode=AluOp.MUL), FinishInsn()], ProgramError),
    "finish_does_not_wait": ([_load(MemId.INP, 0, 0, 1, 1), FinishInsn()], ProgramError),
    "uop_range": ([GemmInsn(uop_bgn=0, uop_end=SMALL.uop_depth + 1), FinishInsn()], MemoryAccessError),
    "index_range": ([_load(MemId.UOP, 0, 0, 1, 1), GemmInsn(reset_reg=True, iter_out=SMALL.acc_depth + 1,
                                                            dst_factor_out=1), FinishInsn()], MemoryAccessError),
}


@pytest.mark.parametrize("name", ERROR_PROGRAMS)
def test_declined_run_leaves_dram_untouched_then_python_raises(name):
    insns, error = ERROR_PROGRAMS[name]
    dram = np.random.default_rng(1).integers(0, 256, 1024, dtype=np.uint8)
    dram[:16] = 0                                   # micro-op words: all indices 0
    py, reason = assert_declined(SMALL, insns, dram)
    assert type(py) is error, (py, reason)
    # through the public entry point: DRAM as Python leaves it, the Python error raised
    expected = dram.copy()
    with pytest.raises(error) as info:
        fsim.simulate(SMALL, insns, expected, engine="python")
    with pytest.raises(error, match=str(info.value).replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]").replace("+", r"\+").replace("*", r"\*").replace(".", r"\.")):
        fsim.simulate(SMALL, insns, dram)
    assert np.array_equal(dram, expected)


def test_dram_the_core_cannot_take_is_left_to_python():
    program = CASES["gemm_epilogue"](SMALL).program
    dram = program.initial_dram()
    strided = np.zeros(2 * len(dram), dtype=np.uint8)[::2]
    strided[:] = dram
    assert fsim._native_run(SMALL, list(program.insns), strided, None, True) == (
        None, "DRAM is not a writable contiguous 1-D uint8 array")
    assert np.array_equal(strided, dram)
    assert fsim._native_run(SMALL, list(program.insns), bytearray(dram.tobytes()), None, True) == (
        None, "DRAM is not a numpy array")
    assert fsim._native_run(SMALL, list(program.insns), dram.view(np.int8), None, True) == (
        None, "DRAM is not a 1-D uint8 array")
    with pytest.raises(MemoryAccessError, match="DRAM image must be a 1-D uint8 numpy array, got int8"):
        fsim.simulate(SMALL, list(program.insns), dram.view(np.int8))


def test_unencodable_instruction_is_left_to_python():
    insns = [_load(MemId.INP, 1 << 16, 0, 1, 1), FinishInsn()]     # sram_base beyond its 16-bit field
    assert fsim._native_run(SMALL, insns, np.zeros(64, dtype=np.uint8), None, True) == (
        None, "the instructions cannot be encoded")
    with pytest.raises(MemoryAccessError, match="INP entries"):
        fsim.simulate(SMALL, insns, np.zeros(64, dtype=np.uint8))


def _queue(insn, flag: str, config: VTAConfig) -> int:
    """The token queue ``flag`` of ``insn`` pops or pushes."""
    stage = fsim.checked_stage(insn, config)
    return dict(POP_QUEUES[stage] + PUSH_QUEUES[stage])[flag]


def _mutants(config: VTAConfig, seeds: range):
    """Random programs with one token dropped: its push and the matching pop (a race when it ordered
    conflicting accesses), or only the push or only the pop (unbalanced)."""
    rng = random.Random(7)
    for seed in seeds:
        insns = list(random_program(config, seed).insns)
        flagged = [(i, flag) for i, x in enumerate(insns[:-1])
                   for flag in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(x, flag)]
        if not flagged:
            continue
        i, flag = rng.choice(flagged)
        queue = _queue(insns[i], flag, config)
        insns[i] = dataclasses.replace(insns[i], **{flag: False})
        if rng.random() < 0.9:   # drop a token's other end on the same queue too: still balanced
            kind = "push" if flag.startswith("pop") else "pop"
            partners = [(j, f) for j, x in enumerate(insns[:-1]) for f in (kind + "_prev", kind + "_next")
                        if getattr(x, f) and _queue(x, f, config) == queue]
            if partners:
                j, other = rng.choice(partners)
                insns[j] = dataclasses.replace(insns[j], **{other: False})
        yield insns, random_program(config, seed).initial_dram()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(insns=token_programs())
def test_token_programs_complete_or_deadlock_alike(insns):
    """Random token-only programs on queues of depth 2: completed (with the same stall statistics),
    deadlocked or breaking a FINISH rule on both engines alike."""
    config = SCHEDULE_CONFIG
    py, nat, _, _ = _both(config, insns, np.zeros(64, dtype=np.uint8))
    if isinstance(py, Exception):
        assert isinstance(nat, str) and _reason_kind(nat).startswith(REASONS[type(py)]), (nat, py)
    else:
        assert not isinstance(nat, str), nat
        assert (nat.fetch_stalls, nat.push_stalls, nat.stats.counters) == (py.fetch_stalls, py.push_stalls,
                                                                           py.stats.counters)


@pytest.mark.parametrize("config", [SMALL, VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1)],
                         ids=["small", "shallow"])
def test_core_declines_exactly_what_python_rejects(config):
    """Mutated random programs: the core completes a program iff the Python engine does, with the same
    state; where Python raises RaceError (or any error) the core declines with that kind of reason."""
    outcomes = {}
    for insns, dram in _mutants(config, range(300)):
        py, nat, py_dram, native_dram = _both(config, insns, dram)
        if isinstance(py, Exception):
            assert isinstance(nat, str), f"the native core completed a program the Python engine rejects: {py}"
            assert np.array_equal(native_dram, dram)
            assert _reason_kind(nat).startswith(REASONS[type(py)]), (nat, py)
        else:
            assert not isinstance(nat, str), f"declined a valid program: {nat}"
            assert np.array_equal(py_dram, native_dram)
        name = type(py).__name__ if isinstance(py, Exception) else "ok"
        outcomes[name] = outcomes.get(name, 0) + 1
    assert outcomes.get("RaceError", 0) >= 20 and outcomes.get("ok", 0) >= 20, outcomes


# ---------------------------------------------------------------------------- long campaigns
@pytest.mark.slow
@pytest.mark.parametrize("config_name", CONFIGS)
def test_random_program_campaign(config_name):
    """2000 more random programs per corner configuration (seeds past the quick test's), none declined."""
    for seed in range(200, 2200):
        program = random_program(CONFIGS[config_name], seed)
        assert_same(program.config, list(program.insns), program.initial_dram())


@pytest.mark.slow
@pytest.mark.parametrize("config", [SMALL, VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1), VTAConfig()],
                         ids=["small", "shallow", "default"])
def test_mutant_campaign(config):
    """2000 mutated random programs per configuration: completed alike or declined where Python raises."""
    for insns, dram in _mutants(config, range(300, 2300)):
        py, nat, py_dram, native_dram = _both(config, insns, dram)
        if isinstance(py, Exception):
            assert isinstance(nat, str) and np.array_equal(native_dram, dram), py
            assert _reason_kind(nat).startswith(REASONS[type(py)]), (nat, py)
        else:
            assert not isinstance(nat, str), f"declined a valid program: {nat}"
            assert np.array_equal(py_dram, native_dram)
