"""The compiled timing solver (vtakit/sim/csrc/timing_core.c) at its edges.

test_cycle_native.py checks the core against the Python solver on the corner configurations the
solver-vs-stepping tests use. This file attacks it with inputs those tests do not draw:

* configurations outside SOLVER_CONFIGS (latency 1 .. 100,000, one outstanding read or a thousand,
  queue depths 1 and 255, buses of 32 .. 512 bits, elements of 1 byte .. 4 KiB, ALU MUL);
* timing-only differentials on structured streams with extreme fields (rows of 65535 elements,
  padding-only loads, DRAM bases near 2^32, GEMMs of 2^41 micro-ops, instruction addresses at the
  end of DRAM and not 64-byte aligned, thousands of instructions), where the data effects are
  switched off so that the timing of streams fsim would reject is compared too;
* values at the edges of int64 (a DRAM latency of 2^63 - 1, a read window of 2^61 bursts), which
  the core must decline or time exactly, never crash on;
* garbage layout tables and parameters passed to ``solve`` directly;
* the fallbacks' inputs: numpy instruction addresses, instruction subclasses, numpy fields.

Memory safety was checked out of tree (the core built with -fsanitize=address,undefined and
loaded in place of the installed one; valgrind memcheck); see the lead's report. Here only the
behaviour is checked, so these tests run against whatever core is installed.
"""

import dataclasses

import numpy as np
import pytest

from tests.sim.test_cycle import SMALL, _launch_program
from vtakit.errors import DeadlockError, ProgramError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.runtime.random_program import random_program
from vtakit.sim import cycle, native
from vtakit.sim.backend import Launch
from vtakit.sim.cycle import _Solver, native_timing, simulate


@pytest.fixture(autouse=True)
def native_on(monkeypatch):
    """The compiled core, whatever the environment says (skip if this build lacks it)."""
    monkeypatch.setenv("VTAKIT_NATIVE", "1")
    if native.core("_timing_core") is None:
        pytest.skip("vtakit.sim._timing_core is not built")


def _config(**changes):
    return SMALL.replace(**changes)


# Configurations no other native test uses (each valid: VTAConfig validates them).
AUDIT_CONFIGS = {
    "L1000": dict(dram_latency=1000),
    "L100k_O1": dict(dram_latency=100000, dram_outstanding=1),
    "O64_L2": dict(dram_outstanding=64, dram_latency=2),
    "O1000_L50": dict(dram_outstanding=1000, dram_latency=50),
    "Qc100_Qt255": dict(cmd_queue_depth=100, token_queue_depth=255),
    "Qc3_Qt1_O5": dict(cmd_queue_depth=3, token_queue_depth=1, dram_outstanding=5),
    "bus128": dict(bus_width=128),
    "bus256_L5": dict(bus_width=256, dram_latency=5),
    "bus512_O1": dict(bus_width=512, dram_outstanding=1),
    "bus32_O2_L1": dict(bus_width=32, dram_outstanding=2, dram_latency=1),
    "mul": dict(alu_mul=True),
    "big_elem": dict(log_batch=2, log_block_in=6, log_block_out=6, log_inp_buff_size=18, log_wgt_buff_size=18,
                     log_acc_buff_size=18, bus_width=128, dram_latency=4),
    "big_elem512": dict(log_batch=3, log_block_in=5, log_block_out=6, log_inp_buff_size=17, log_wgt_buff_size=17,
                        log_acc_buff_size=18, bus_width=512, dram_latency=3, dram_outstanding=2),
    "tiny_elem512": dict(log_batch=0, log_block_in=0, log_block_out=0, bus_width=512, dram_latency=2),
    "tiny_elem32_Qc1": dict(log_block_in=1, log_block_out=0, bus_width=32, dram_latency=3, dram_outstanding=1,
                            cmd_queue_depth=1),
}


# ---------------------------------------------------------------------------- timing-only differential
def _word(config, opcode, **fields):
    """One encoded instruction with raw field values (no class checks)."""
    word = int(opcode)
    for field in isa.layout(opcode, config):
        if field.name in fields:
            word |= (int(fields[field.name]) & ((1 << field.width) - 1)) << field.offset
    return word.to_bytes(16, "little")


def _python_timing(config, stream, insn_addr, dram, monkeypatch):
    """The Python solver's timing of ``stream`` with data effects off (so anything it can time, it times)."""
    monkeypatch.setattr(cycle, "check_finish", lambda *args: None)
    solver = _Solver(Launch(config, isa.decode(stream, config), dram, insn_addr, encoded=stream))
    solver.apply = lambda insn, index, validate: None
    cycles = solver.run()
    return cycles, solver, solver.stats(cycles, 0.0)


def _differential(config, stream, insn_addr, dram, monkeypatch):
    """The core's answer for ``stream`` equals the Python solver's in every field, or the core declines
    (and, if it says "deadlock", the Python solver deadlocks too). Returns the core's verdict."""
    layout, params = cycle._native_params(config)
    result = native.core("_timing_core").solve(stream, layout, params, insn_addr, dram.size)
    if isinstance(result, str):
        if result == "deadlock":
            with pytest.raises(DeadlockError):
                _python_timing(config, stream, insn_addr, dram, monkeypatch)
        return result
    cycles, solver, stats = _python_timing(config, stream, insn_addr, dram, monkeypatch)
    got_cycles, retired, s, read_bytes, write_bytes, events, detail = result
    assert (got_cycles, retired, events) == (cycles, solver.retired, solver.events)
    names = ("fetch", "load", "compute", "store")
    want = tuple(getattr(stats, kind)[name] for kind in ("busy_cycles", "token_stall_cycles", "memory_stall_cycles")
                 for name in names)
    assert tuple(s) == want and (read_bytes, write_bytes) == (stats.dram_read_bytes, stats.dram_write_bytes)
    assert [vars(t) for t in cycle._native_timings(detail)] == [vars(t) for t in solver.timings()]
    assert cycle._native_bursts(detail) == solver.bursts()
    assert cycle._native_token_log(detail) == solver.token_log()
    return "timed"


_SIZES = [1, 2, 3, 15, 16, 17, 63, 64, 65, 255, 256, 257, 511, 512, 1023, 1024, 4095, 4096, 65535]
_BASES = [0, 1, 2, 3, 0xff, 0x100, 0xfff, 0x1000, 0xffff, (1 << 32) - 1, (1 << 32) - 2, (1 << 32) - 17,
          (1 << 31) - 1, 1 << 31]
# (producer opcode, memory type, push flag, consumer opcode, memory type, pop flag) per token queue
_QUEUES = [(Opcode.LOAD, MemId.INP, "push_next", Opcode.GEMM, None, "pop_prev"),
           (Opcode.GEMM, None, "push_prev", Opcode.LOAD, MemId.INP, "pop_next"),
           (Opcode.GEMM, None, "push_next", Opcode.STORE, MemId.OUT, "pop_prev"),
           (Opcode.STORE, MemId.OUT, "push_prev", Opcode.GEMM, None, "pop_next")]


def _structured(rng, config, n, budget):
    """``n`` random legal instructions with extreme DMA and micro-op fields, tokens balanced (producers
    prepended, consumers appended), often shuffled (deadlocks included), FINISH last. At most
    ``budget`` DMA elements in all, so that the Python solver stays quick."""
    words, pushes, pops = [], [0] * 4, [0] * 4

    def flag(name, queue, push, chance, fields):
        if rng.random() < chance:
            fields[name] = 1
            (pushes if push else pops)[queue] += 1

    def size():
        return int(rng.choice(_SIZES)) if rng.random() < .6 else int(rng.integers(0, 1 << 16))
    for _ in range(n):
        kind = rng.choice(["load", "compute_load", "store", "gemm", "alu", "nop"], p=[.3, .15, .15, .2, .15, .05])
        if kind in ("load", "compute_load", "store"):
            x = size() if rng.random() < .9 else 0
            y = int(rng.choice([0, 1, 1, 2, 3, 7, 16, 300, 65535])) if rng.random() < .8 else int(rng.integers(1 << 16))
            if x * y > budget:
                y = budget // max(x, 1)
            budget -= x * y
            base = int(rng.choice(_BASES)) if rng.random() < .5 else int(rng.integers(1 << 32))
            fields = dict(x_size=x, y_size=y, dram_base=base, sram_base=int(rng.integers(1 << 16)))
            if kind == "store":
                fields.update(memory_type=MemId.OUT, x_stride=x)
                flag("pop_prev", 2, False, .4, fields)
                flag("push_prev", 3, True, .3, fields)
                words.append(_word(config, Opcode.STORE, **fields))
                continue
            fields["x_stride"] = (int(rng.choice([0, 1, x, x + 1, x + 7, 256, 4096])) if rng.random() < .8
                                  else int(rng.integers(1 << 16))) & 0xffff
            for pad in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"):
                fields[pad] = int(rng.integers(16)) if rng.random() < .3 else 0
            if kind == "load":
                fields["memory_type"] = int(rng.choice([MemId.INP, MemId.WGT]))
                flag("pop_next", 1, False, .3, fields)
                flag("push_next", 0, True, .4, fields)
            else:
                fields["memory_type"] = int(rng.choice([MemId.UOP, MemId.ACC, MemId.ACC_8BIT]))
                flag("pop_prev", 0, False, .2, fields)
                flag("pop_next", 3, False, .1, fields)
                flag("push_prev", 1, True, .2, fields)
                flag("push_next", 2, True, .2, fields)
            words.append(_word(config, Opcode.LOAD, **fields))
        elif kind in ("gemm", "alu"):
            if rng.random() < .1:          # the widest micro-op loop: 2^41 micro-ops
                fields = dict(iter_out=(1 << 14) - 1, iter_in=(1 << 14) - 1, uop_bgn=0, uop_end=(1 << 13) - 1)
            else:                          # uop_end < uop_bgn included (no micro-ops)
                fields = dict(iter_out=int(rng.integers(5)), iter_in=int(rng.integers(5)),
                              uop_bgn=int(rng.integers(8)), uop_end=int(rng.integers(12)))
            flag("pop_prev", 0, False, .3, fields)
            flag("pop_next", 3, False, .2, fields)
            flag("push_prev", 1, True, .3, fields)
            flag("push_next", 2, True, .3, fields)
            if kind == "alu":
                fields["alu_opcode"] = int(rng.integers(4 + int(config.alu_mul)))
            words.append(_word(config, Opcode.ALU if kind == "alu" else Opcode.GEMM, **fields))
        else:
            words.append(_word(config, Opcode.LOAD, memory_type=MemId.OUT, x_size=0))
    head = []
    for q, (producer, producer_mem, push, consumer, consumer_mem, pop) in enumerate(_QUEUES):
        for _ in range(pushes[q] - pops[q]):
            words.append(_word(config, consumer, **{pop: 1}, **({"memory_type": consumer_mem} if consumer_mem else {})))
        for _ in range(pops[q] - pushes[q]):
            head.append(_word(config, producer, **{push: 1}, **({"memory_type": producer_mem} if producer_mem else {})))
    if rng.random() < .5:
        rng.shuffle(words)
    return b"".join(head + words + [_word(config, Opcode.FINISH)])


_BIG_DRAM = None


def _big_dram():
    """A 4 GiB DRAM (calloc'd: untouched pages cost nothing), so DMAs anywhere in 32 bits get timed."""
    global _BIG_DRAM
    if _BIG_DRAM is None:
        _BIG_DRAM = np.zeros(1 << 32, dtype=np.uint8)
    return _BIG_DRAM


def _campaign(seeds, monkeypatch, long_every=50):
    verdicts = {}
    configs = [_config(**changes) for changes in AUDIT_CONFIGS.values()]
    for seed in seeds:
        rng = np.random.default_rng(seed)
        config = configs[seed % len(configs)]
        long = seed % long_every == 0
        n = int(rng.choice([1000, 3000])) if long else int(rng.choice([1, 3, 10, 40, 200]))
        stream = _structured(rng, config, n, budget=1 << 12 if long else 1 << 15)
        dram = _big_dram() if rng.random() < .7 else np.zeros(1 << 16, dtype=np.uint8)
        where = int(rng.integers(4))
        insn_addr = (0, 16 * int(rng.integers(4)), dram.size - len(stream),      # unaligned to 64 B; at the end
                     16 * int(rng.integers(max(1, (dram.size - len(stream)) // 16))))[where]
        verdict = _differential(config, stream, insn_addr, dram, monkeypatch)
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return verdicts


def test_structured_streams_time_as_the_python_solver(monkeypatch):
    verdicts = _campaign(range(600), monkeypatch)
    assert verdicts["timed"] > 250 and verdicts["deadlock"] > 50, verdicts


@pytest.mark.slow
def test_many_structured_streams_time_as_the_python_solver(monkeypatch):
    verdicts = _campaign(range(100000, 120000), monkeypatch)
    assert verdicts["timed"] > 8000, verdicts


# ---------------------------------------------------------------------------- whole runs, new configurations
@pytest.mark.parametrize("name", AUDIT_CONFIGS)
def test_random_programs_on_new_configurations(name, tmp_path):
    """simulate(): the native path equals engine="python" in stats, timing, DRAM and trace."""
    config = _config(**AUDIT_CONFIGS[name])
    for seed in range(6):
        program = random_program(config, 41000 + seed)
        outcomes = []
        for engine in ("auto", "python"):
            trace = tmp_path / f"{engine}.json"
            _, launch = _launch_program(program, trace)
            run = simulate(launch, engine=engine)
            assert run.engine == ("native" if engine == "auto" else "solver")
            run.stats.sim_seconds = 0.0
            outcomes.append((run.stats, [vars(t) for t in run.timing], run.events, launch.dram.tobytes(),
                             trace.read_text()))
        assert outcomes[0] == outcomes[1], (name, seed)


@pytest.mark.parametrize("name", ["Qc3_Qt1_O5", "bus512_O1", "O1000_L50", "tiny_elem32_Qc1"])
def test_long_random_programs(name):
    """Random programs of ~1500 instructions (the instruction buffer refilled hundreds of times)."""
    program = random_program(_config(**AUDIT_CONFIGS[name]), 3, max_insns=4000, max_tasks=400)
    assert len(program.insns) > 1000
    assert _run_outcome(program, "auto") == _run_outcome(program, "python")


# ---------------------------------------------------------------------------- int64 edges
def _finish_and_loads(config):
    """Two LOADs (one on load, one on compute) and FINISH: a program with read bursts."""
    return [MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=0x100, y_size=2, x_size=3, x_stride=3,
                    push_next=True),
            MemInsn(opcode=Opcode.LOAD, memory_type=MemId.ACC, dram_base=0x80, y_size=1, x_size=2, x_stride=2),
            GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True), FinishInsn()]


def test_huge_command_queue():
    """CMD_QUEUE_DEPTH past int64 (VTAConfig bounds it below only): the timing core's parameters raised
    OverflowError; depths beyond the program are exactly infinite. (Whole runs: fsim's core too.)"""
    config = _config(cmd_queue_depth=1 << 70)
    insns = _finish_and_loads(config)
    huge = native_timing(Launch(config, insns, np.zeros(1 << 16, np.uint8), 0x8000))
    deep = native_timing(Launch(_config(cmd_queue_depth=64), insns, np.zeros(1 << 16, np.uint8), 0x8000))
    assert isinstance(huge, tuple) and huge == deep
    python = _Solver(Launch(config, insns, np.zeros(1 << 16, np.uint8), 0x8000))
    assert python.run() == huge[0] and python.retired == huge[1]


def _both_engines(config, insns):
    outcomes = []
    for engine in ("auto", "python"):
        launch = Launch(config, list(insns), np.zeros(1 << 16, dtype=np.uint8), 0x8000)
        run = simulate(launch, engine=engine)
        run.stats.sim_seconds = 0.0
        outcomes.append((run.stats, [vars(t) for t in run.timing], run.events))
    return outcomes


@pytest.mark.parametrize("window", [1 << 40, (1 << 61) + 1, (1 << 63) - 1, 1 << 70])
def test_huge_read_window_is_timed_exactly(window):
    """DRAM_OUTSTANDING beyond any number of bursts: the window never fills. The core used to allocate
    window * 8 bytes (wrapping to 8 bytes for 2^61 + 1: a heap overflow), the Python solver a list of
    that many entries (MemoryError); both now size it by the bursts the program can have."""
    config = _config(dram_outstanding=window)
    assert isinstance(native_timing(Launch(config, _finish_and_loads(config), np.zeros(1 << 16, np.uint8), 0x8000)),
                      tuple)
    auto, python = _both_engines(config, _finish_and_loads(config))
    assert auto == python
    assert auto == _both_engines(_config(dram_outstanding=64), _finish_and_loads(config))[1]


@pytest.mark.parametrize("latency", [(1 << 31) + 5, (1 << 32) + 3])
def test_whole_runs_beyond_2_31_cycles(latency):
    """Random programs whose DRAM latency puts every cycle past 2^31 (and 2^32): data and timing agree."""
    config = _config(dram_latency=latency, dram_outstanding=3)
    for seed in (9, 10):
        program = random_program(config, seed)
        auto = _run_outcome(program, "auto")
        assert auto == _run_outcome(program, "python") and auto[0].cycles > 10 * latency


@pytest.mark.parametrize("latency", [1 << 40, (1 << 40) + 1, 1 << 61, 1 << 62, (1 << 63) - 1, 1 << 70])
def test_huge_latency_is_declined_or_exact(latency):
    """A DRAM latency near 2^63 overflowed the core's int64 cycles (it answered 6 cycles for a FINISH
    alone, the Python solver 2^63 + 6): beyond 2^40 it now declines and the Python solver runs. From
    2^62 on, the Python engines took present cycles for their "never" sentinel (a false deadlock)."""
    config = _config(dram_latency=latency)
    result = native_timing(Launch(config, [FinishInsn()], np.zeros(1 << 16, np.uint8), 0))
    assert result == "configuration" if latency > 1 << 40 else isinstance(result, tuple)
    auto, python = _both_engines(config, _finish_and_loads(config))
    assert auto == python and auto[0].cycles > latency


def test_cycles_beyond_2_60_are_declined(monkeypatch):
    """GEMMs of 2^41 micro-ops each (the default configuration's widest loop): cycles far beyond 2^31
    are exact; past 2^60 the core declines (no int64 overflow, no NEVER sentinel reached)."""
    config = VTAConfig()
    gemm = _word(config, Opcode.GEMM, iter_out=(1 << 14) - 1, iter_in=(1 << 14) - 1, uop_bgn=0, uop_end=(1 << 13) - 1)
    micro = ((1 << 14) - 1) ** 2 * ((1 << 13) - 1)
    finish = _word(config, Opcode.FINISH)
    dram = np.zeros(1 << 20, dtype=np.uint8)
    assert _differential(config, gemm * 100 + finish, 0, dram, monkeypatch) == "timed"
    layout, params = cycle._native_params(config)
    result = native.core("_timing_core").solve(gemm * 100 + finish, layout, params, 0, dram.size)
    assert result[0] > 100 * micro > 1 << 47
    count = (1 << 60) // micro + 2
    assert native.core("_timing_core").solve(gemm * count + finish, layout, params, 0, dram.size) == \
        "cycles beyond 2^60"


# ---------------------------------------------------------------------------- garbage given to solve() directly
def test_garbage_layouts_and_parameters_are_refused():
    core = native.core("_timing_core")
    layout, params = cycle._native_params(SMALL)
    finish = _word(SMALL, Opcode.FINISH)
    table = np.frombuffer(layout, dtype=np.int32).reshape(8, len(native.FIELDS), 3).copy()
    x_size = native.FIELDS.index("x_size")
    for row, value in (((0, x_size, 0), 1 << 20), ((0, x_size, 1), 64), ((0, x_size, 1), 40),
                       ((3, 0, 0), 128), ((3, 0, 0), -1), ((0, x_size, 2), 7)):
        bad = table.copy()
        bad[row] = value
        with pytest.raises(ValueError, match="layout table with a field"):
            core.solve(finish, bad.tobytes(), params, 0, 1 << 16)
    for k, value in ((2, -1), (2, 1 << 41), (4, 1 << 17), (6, 1 << 17), (8, 1 << 17)):   # L, bus, out, elements
        bad = list(params)
        bad[k] = value
        assert core.solve(finish, layout, tuple(bad), 0, 1 << 16) == "configuration", k
    assert core.solve(finish, layout, params, -16, 1 << 16) == "configuration"
    rng = np.random.default_rng(5)
    for _ in range(300):                  # random tables that pass the check: the core answers
        random = table.copy()
        random[:, :, 1] = np.minimum(random[:, :, 1], rng.integers(0, 21, size=random.shape[:2]))
        try:
            answer = core.solve(bytes(rng.integers(0, 256, 16 * int(rng.integers(1, 9)), dtype=np.uint8)),
                                random.tobytes(), params, 0, 1 << 16)
        except ValueError:
            continue
        assert isinstance(answer, (str, tuple))


# ---------------------------------------------------------------------------- the fallbacks' inputs
@pytest.mark.parametrize("kind", [np.uint32, np.int64, np.uint64, int])
def test_numpy_instruction_addresses(kind):
    """A numpy unsigned instruction address made the Python solver's fetch arithmetic wrap (a false
    deadlock at cycle 0 with engine="python" while the native path ran the program)."""
    program = random_program(SMALL, 11)
    outcomes = []
    for engine in ("auto", "python"):
        _, launch = _launch_program(program)
        launch = dataclasses.replace(launch, insn_addr=kind(launch.insn_addr))
        run = simulate(launch, engine=engine)
        run.stats.sim_seconds = 0.0
        outcomes.append((run.stats, [vars(t) for t in run.timing], launch.dram.tobytes()))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_non_integer_instruction_address(engine):
    _, launch = _launch_program(random_program(SMALL, 11))
    launch = dataclasses.replace(launch, insn_addr=float(launch.insn_addr))
    with pytest.raises(ProgramError, match=r"instruction address \d+\.0 is not an integer"):
        simulate(launch, engine=engine)


class _Gemm(GemmInsn):
    pass


class _Mem(MemInsn):
    pass


def _variants(insns):
    """The program as instruction subclasses, with numpy-int fields, with plain-int enum fields."""
    def rebuild(insn, convert):
        cls = {GemmInsn: _Gemm, MemInsn: _Mem}.get(type(insn), type(insn)) if convert is None else type(insn)
        values = vars(insn) if convert is None else {k: convert(k, v) for k, v in vars(insn).items()}
        return cls(**values)

    def numpy_int(name, value):
        return np.int64(value) if type(value) is int else value

    def plain_int(name, value):
        return int(value) if name in ("opcode", "memory_type", "alu_opcode") else value
    return {"subclasses": [rebuild(i, None) for i in insns], "numpy fields": [rebuild(i, numpy_int) for i in insns],
            "plain-int enums": [rebuild(i, plain_int) for i in insns]}


@pytest.mark.parametrize("seed", range(4))
def test_instruction_variants_equal_the_python_solver(seed):
    program = random_program(SMALL, 500 + seed)
    for name, insns in _variants(list(program.insns)).items():
        outcomes = []
        for engine in ("auto", "python"):
            _, launch = _launch_program(program)
            launch = dataclasses.replace(launch, insns=insns, encoded=None)
            try:
                run = simulate(launch, engine=engine)
            except SimError as exc:
                outcomes.append((type(exc).__name__, str(exc)))
                continue
            run.stats.sim_seconds = 0.0
            outcomes.append((run.stats, [vars(t) for t in run.timing], launch.dram.tobytes()))
        assert outcomes[0] == outcomes[1], name


@pytest.mark.parametrize("kind", ["strided array", "bytearray", "memoryview", "list", "str"])
def test_any_encoded_stream_object(kind):
    """Launch.encoded as a buffer other than bytes, or not a buffer at all: the native path used to raise
    (ValueError: ndarray is not C-contiguous; TypeError: a bytes-like object is required) where
    engine="python", which times the instructions, ran."""
    program = random_program(SMALL, 3)
    raw = program.encoded_insns()
    encoded = {"strided array": np.repeat(np.frombuffer(raw, np.uint8), 2)[::2], "bytearray": bytearray(raw),
               "memoryview": memoryview(raw), "list": list(raw), "str": "x" * len(raw)}[kind]
    outcomes = []
    for engine in ("auto", "python"):
        _, launch = _launch_program(program)
        run = simulate(dataclasses.replace(launch, encoded=encoded), engine=engine)
        assert run.engine == ("native" if engine == "auto" else "solver")
        run.stats.sim_seconds = 0.0
        outcomes.append((run.stats, [vars(t) for t in run.timing], launch.dram.tobytes()))
    assert outcomes[0] == outcomes[1]


# ---------------------------------------------------------------------------- mutants: errors and deadlocks
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def _mutant(program, rng):
    """``program`` with one token edge moved: a flag cleared on one instruction and the same flag set on
    another of its module (the queue stays balanced), or a push/pop pair added in reverse order.
    Mostly deadlocks, races and reads of unwritten entries."""
    insns = list(program.insns)
    if len(insns) < 3:
        return None
    for _ in range(20):
        i, j = sorted(rng.choice(len(insns) - 1, size=2, replace=False))
        flag = _FLAGS[int(rng.integers(4))]
        a, b = insns[i], insns[j]
        if isa.stage_of(a) != isa.stage_of(b) or getattr(a, flag) == getattr(b, flag):
            continue
        insns[i] = dataclasses.replace(a, **{flag: not getattr(a, flag)})
        insns[j] = dataclasses.replace(b, **{flag: not getattr(b, flag)})
        return dataclasses.replace(program, insns=insns)
    return None


def _run_outcome(program, engine):
    _, launch = _launch_program(program)
    try:
        run = simulate(launch, engine=engine)
    except SimError as exc:
        return type(exc).__name__, str(exc)
    run.stats.sim_seconds = 0.0
    return run.stats, [vars(t) for t in run.timing], run.events, launch.dram.tobytes()


def _mutant_campaign(configs, seeds):
    kinds = {}
    for name in configs:
        config = _config(**AUDIT_CONFIGS[name])
        for seed in seeds:
            rng = np.random.default_rng(seed)
            program = _mutant(random_program(config, 52000 + seed), rng)
            if program is None:
                continue
            auto, python = _run_outcome(program, "auto"), _run_outcome(program, "python")
            assert auto == python, (name, seed)
            kind = auto[0] if isinstance(auto[0], str) else "ran"
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def test_token_mutants_fail_alike():
    """Deadlocks (the same DeadlockError text, cycle and module states), races, unwritten reads and
    programs that still run: the native path and engine="python" report the same."""
    kinds = _mutant_campaign(["Qc3_Qt1_O5", "bus32_O2_L1", "L1000", "big_elem"], range(25))
    assert kinds.get("DeadlockError", 0) >= 10 and len(kinds) >= 3, kinds


@pytest.mark.slow
def test_many_token_mutants_fail_alike():
    kinds = _mutant_campaign(list(AUDIT_CONFIGS), range(200))
    assert kinds.get("DeadlockError", 0) >= 200, kinds


# ---------------------------------------------------------------------------- every 4 KiB offset
@pytest.mark.parametrize("name", ["bus32_O2_L1", "bus512_O1", "big_elem", "tiny_elem512"])
def test_bursts_at_every_page_offset(name, monkeypatch):
    """LOADs starting at every element offset of a 4 KiB page (and of the last page below 2^32), rows of
    1, 255, 256, 257 beats and of a page +- one element, two rows with strides that cross pages: the
    core cuts and times the bursts as the Python solver does."""
    config = _config(**AUDIT_CONFIGS[name])
    dram = _big_dram()
    for mem, elem in ((MemId.INP, config.inp_elem_bytes), (MemId.ACC, config.acc_elem_bytes)):
        beat = min(elem, config.bus_bytes)
        k = elem // beat
        widths = sorted({max(1, w) for w in (1, 255 // k, 256 // k, 257 // k + 1, 4096 // elem - 1, 4096 // elem,
                                              4096 // elem + 1)})
        offsets = range(0, 4096, elem)
        words = []
        for n, offset in enumerate(offsets):
            x = widths[n % len(widths)]
            base = (offset if n % 2 else (1 << 32) - 4096 + offset) // elem
            words.append(_word(config, Opcode.LOAD, memory_type=mem, x_size=x, y_size=2, x_stride=x + n % 3,
                               dram_base=base, push_next=int(mem == MemId.INP)))
            if mem == MemId.INP:
                words.append(_word(config, Opcode.GEMM, pop_prev=1))
        stream = b"".join(words) + _word(config, Opcode.FINISH)
        assert _differential(config, stream, 0, dram, monkeypatch) == "timed"
