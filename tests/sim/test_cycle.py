"""The cycle model (backend ``cycle``) against the RTL: cycle-exact, byte-exact, and its own contract.

Every comparison with the RTL goes through the session cache of tests/hw/rtl_cache.py (the same
programs the RTL tests run, so a full session runs each on the RTL once). The programs are the
shared corpus and the RTL tests' random programs on ``VTAConfig.small()``, the RTL tests' short
default-configuration programs, a compiled default-configuration layer (ResNet-18 C10 with two
virtual threads), and (``slow``) a campaign of 200 default-configuration random programs, plus the
RTL tests' random programs on unusual configurations. Each comparison checks the final DRAM,
``cycles``, every retire cycle (their number first) and the busy-cycle counters.

The default engine (the solver) is also checked against the stepping model, and that against
evaluating every cycle, on many more programs than the RTL could run: random programs over corner
configurations, the corpus, DMA edge shapes and deadlocks, comparing stats, every instruction's
timing, the DRAM and the timeline.
"""

import json

import numpy as np
import pytest

from tests.hw.rtl_cache import RtlResult, rtl_run, session_cache_dir
from tests.hw.test_rtl_differential import DEFAULT_PROGRAMS, EXOTIC, RANDOM_SEEDS
from tests.programs import CASES, Unsupported, run_program
from tests.programs.runner import insn_address
from vtakit.compiler.topi_vta.bench import CLIP, compile_conv2d, conv2d_data, range_shift
from vtakit.compiler.topi_vta.workloads import RESNET18
from vtakit.compiler.vta.env import get_env
from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, RaceError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.runtime import Device
from vtakit.runtime.random_program import random_program
from vtakit.sim.backend import Launch
from vtakit.sim.cycle import simulate
from vtakit.sim.program import Program, Segment
from vtakit.sim.stats import RunStats

SMALL = VTAConfig.small()
DEFAULT = VTAConfig()
SLOW_SEEDS = range(200)


@pytest.fixture(scope="session")
def rtl_cache_dir(tmp_path_factory, worker_id):
    return session_cache_dir(tmp_path_factory, worker_id)


def first_divergence(program: Program, rtl_cache_dir) -> str | None:
    """None when cycle == rtl on ``program``; else the first difference, for the assertion message."""
    expected = rtl_run(program, rtl_cache_dir)
    dram, stats = run_program(program, "cycle")
    if len(stats.retire_cycles) != len(expected.retire_cycles):
        return (f"{program.name}: {len(stats.retire_cycles)} retire cycles, the RTL {len(expected.retire_cycles)} "
                f"(the program has {len(program.insns)} instructions)")
    for index, (want, got) in enumerate(zip(expected.retire_cycles, stats.retire_cycles)):
        if want != got:
            return (f"{program.name}: instruction {index} ({isa.disasm(program.insns[index])}) retires in cycle "
                    f"{got}, the RTL in {want}")
    if stats.cycles != expected.cycles:
        return f"{program.name}: {stats.cycles} cycles, the RTL {expected.cycles}"
    busy = {name: stats.busy_cycles[name] for name in expected.busy_cycles}
    if busy != expected.busy_cycles:
        return f"{program.name}: busy cycles {busy}, the RTL {expected.busy_cycles}"
    diff = np.flatnonzero(dram != expected.dram)
    if diff.size:
        return f"{program.name}: DRAM differs from the RTL at byte(s) {diff[:8].tolist()}"
    return None


def _corpus(name, config):
    try:
        return CASES[name](config).program
    except Unsupported as exc:
        pytest.skip(str(exc))


# ---------------------------------------------------------------------------- cycle == rtl
@pytest.mark.parametrize("name", CASES)
def test_corpus_small_matches_rtl(name, rtl_cache_dir):
    assert first_divergence(_corpus(name, SMALL), rtl_cache_dir) is None


@pytest.mark.parametrize("name", DEFAULT_PROGRAMS)
def test_corpus_default_matches_rtl(name, rtl_cache_dir):
    assert first_divergence(_corpus(name, DEFAULT), rtl_cache_dir) is None


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_small_matches_rtl(seed, rtl_cache_dir):
    assert len(RANDOM_SEEDS) >= 50
    assert first_divergence(random_program(SMALL, seed), rtl_cache_dir) is None


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("config_name", EXOTIC)
def test_random_other_configs_match_rtl(config_name, seed, rtl_cache_dir):
    """Narrow and wide buses, batch 2, every queue and the memory system at their tightest."""
    assert first_divergence(random_program(EXOTIC[config_name], 1000 + seed), rtl_cache_dir) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_random_default_matches_rtl(seed, rtl_cache_dir):
    assert first_divergence(random_program(DEFAULT, seed), rtl_cache_dir) is None


def _run_compiled_c10_on_rtl(config, rtl_cache_dir):
    """Compile ResNet-18 C10 with 2 virtual threads for ``config`` and run it on the RTL: the RTL
    computes numpy's result and the cycle model equals it in cycles, every retire cycle, busy cycles
    and DRAM. Returns the compiled layer, its program and the RTL run."""
    wl = RESNET18["C10"]
    data = conv2d_data(get_env(config), wl)
    shift = range_shift(data.acc, data.addend, CLIP)
    compiled = compile_conv2d(wl, config, vthreads=2, shift=shift, clip=CLIP)
    expect = data.expect(shift, CLIP)
    dev = Device(config)
    arrays = [dev.array(h) for h in data.host] + [dev.empty(expect.shape, np.int8)]
    program = compiled.module.program_for(*arrays)
    assert first_divergence(program, rtl_cache_dir) is None
    rtl = rtl_run(program, rtl_cache_dir)
    out = arrays[-1]
    got = rtl.dram[out.phys_addr:out.phys_addr + out.nbytes].view(np.int8).reshape(expect.shape)
    np.testing.assert_array_equal(got, expect)
    return compiled, program, rtl


@pytest.mark.slow  # a minute of RTL simulation; the verilator backend's slow tests also check a compiled C4 on rtl
def test_compiled_resnet_layer_matches_rtl(rtl_cache_dir):
    """A compiled default-configuration layer (ResNet-18 C10, 2 virtual threads; ~30-60 s of RTL)."""
    compiled, program, rtl = _run_compiled_c10_on_rtl(DEFAULT, rtl_cache_dir)
    assert compiled.threads == 2
    assert len(rtl.retire_cycles) == len(program.insns) and rtl.cycles > 0


@pytest.mark.slow  # about 3 minutes of RTL simulation on a loaded 2-core machine
def test_compiled_layer_with_fused_epilogue_and_early_store_tokens_matches_rtl(rtl_cache_dir):
    """ResNet-18 C10 with ALU_REQUANT, BIAS_PRELOAD and GEMM_OUT_REQUANT (bias resets, requantising
    GEMM write-backs, store tokens moved to each thread's last GEMM by the code generator) on the RTL
    (measured at f95cacd: 33,636 cycles, all 305 retire cycles equal)."""
    config = DEFAULT.replace(alu_requant=True, bias_preload=True, gemm_out_requant=True)
    compiled, _, _ = _run_compiled_c10_on_rtl(config, rtl_cache_dir)
    insns = compiled.module.template.insns
    assert any(isinstance(i, GemmInsn) and i.push_next and not i.reset_reg for i in insns)   # a hoisted push


def test_first_divergence_counts_the_retire_cycles(rtl_cache_dir, monkeypatch):
    """A retire list shorter than the other is a difference, not a shorter comparison."""
    program = _corpus("acc_roundtrip", SMALL)
    dram, stats = run_program(program, "cycle")
    same = RtlResult(dram, stats.cycles, list(stats.retire_cycles), dict(stats.busy_cycles))
    monkeypatch.setitem(globals(), "rtl_run", lambda p, d: same)
    assert first_divergence(program, rtl_cache_dir) is None
    short = RtlResult(dram, stats.cycles, list(stats.retire_cycles)[:-1], dict(stats.busy_cycles))
    monkeypatch.setitem(globals(), "rtl_run", lambda p, d: short)
    n = len(stats.retire_cycles)
    assert first_divergence(program, rtl_cache_dir) == (f"acc_roundtrip: {n} retire cycles, the RTL {n - 1} "
                                                        f"(the program has {len(program.insns)} instructions)")


# ---------------------------------------------------------------------------- the contract on its own
def _launch(config, insns, uops=(), dram_size=1 << 16, trace=None):
    rng = np.random.default_rng(len(insns))
    data = rng.integers(0, 256, dram_size - 0x1000, dtype=np.uint8).tobytes()
    program = Program(config, list(insns), list(uops), uop_addr=0x100, segments=[Segment(0x1000, data, "data")],
                      dram_size=dram_size)
    return _launch_program(program, trace)


def _launch_program(program, trace=None):
    addr = insn_address(program)
    encoded = program.encoded_insns()
    dram = program.initial_dram(addr + len(encoded))
    dram[addr:addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return program, Launch(program.config, list(program.insns), dram, addr, trace)


def _load(mem, sram, dram, y, x, **kw):
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=kw.pop("stride", x), **kw)


def _edge_program(config: VTAConfig) -> Program:
    """DMA shapes random programs rarely draw: empty rows with and without padding, bursts cut at
    4 KiB and (default configuration) at 256 beats, a STORE of zero rows."""
    e_inp, e_wgt, e_acc, e_out = (config.inp_elem_bytes, config.wgt_elem_bytes, config.acc_elem_bytes,
                                  config.out_elem_bytes)
    wgt_x = min(config.wgt_depth, 9)
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1),
             _load(MemId.UOP, 1, 0x100 // 4, 0, 3),                                   # y = 0, no pads: e = s
             _load(MemId.ACC, 0, 0x1000 // e_acc, 1, 4),
             _load(MemId.ACC, 8, 0x1000 // e_acc, 0, 2, y_pad_0=1, y_pad_1=2),        # pads only
             _load(MemId.INP, 0, 0x1000 // e_inp, 0, 2, x_pad_0=1, x_pad_1=1),        # no rows at all
             _load(MemId.WGT, 0, (0x3000 - 2 * e_wgt) // e_wgt, 1, wgt_x),            # across 4 KiB
             _load(MemId.WGT, 16, 0x2000 // e_wgt, 1, wgt_x),                         # 256-beat cap (default)
             _load(MemId.INP, 0, (0x5000 - 2 * e_inp) // e_inp, 2, 3, stride=40, x_pad_0=2, push_next=True),
             AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=3, uop_bgn=0, uop_end=1, iter_out=4, dst_factor_out=1,
                     pop_prev=True, push_next=True),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=0x7000 // e_out, y_size=0,
                     x_size=2, x_stride=2, pop_prev=True),
             MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=(0x8000 - e_out) // e_out,
                     y_size=2, x_size=2, x_stride=2, push_prev=True),
             FinishInsn(pop_next=True)]
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 0x6000, dtype=np.uint8).tobytes()
    return Program(config, insns, [Uop(0, 0, 0)], uop_addr=0x100, segments=[Segment(0x1000, data, "data")],
                   dram_size=0x9000, name=f"dma_edges_{config.model}")


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_dma_edge_shapes_match_rtl(config, rtl_cache_dir):
    assert first_divergence(_edge_program(config), rtl_cache_dir) is None


def _gemm_program(config, n_uops, iters, moving=True):
    uops = [Uop(i % 8, i % 16, i % 32) for i in range(n_uops)]
    loop = dict(uop_bgn=0, uop_end=n_uops, iter_out=iters[0], iter_in=iters[1], dst_factor_out=1)
    factors = dict(src_factor_in=1, wgt_factor_out=2) if moving else {}
    return [_load(MemId.UOP, 0, 0x100 // 4, 1, n_uops),
            _load(MemId.INP, 0, 0x1000 // config.inp_elem_bytes, 1, 32),
            _load(MemId.WGT, 0, 0x2000 // config.wgt_elem_bytes, 1, 32, push_next=True),
            GemmInsn(reset_reg=True, pop_prev=True, **loop),
            GemmInsn(**factors, **loop),
            AluInsn(alu_opcode=AluOp.MAX, use_imm=True, imm=0, **loop),
            FinishInsn()], uops


@pytest.mark.parametrize("config", [SMALL, SMALL.replace(dram_latency=5), DEFAULT.replace(bus_width=128)],
                         ids=["small", "small-L5", "default-bus128"])
def test_finish_only_program(config):
    """docs/timing.md §2-§5: request presented in cycle 1 and accepted in 2 (the registered grant), last
    beat, dispatch, take, start, e = s, retire."""
    _, launch = _launch(config, [FinishInsn()])
    stats = simulate(launch).stats
    beats = max(1, 16 // config.bus_bytes)
    assert stats.cycles == stats.retire_cycles[0] == 2 + config.dram_latency + beats - 1 + 5
    assert stats.busy_cycles["compute"] == 2


@pytest.mark.parametrize("n_uops,iters", [(16, (1, 1)), (7, (3, 2)), (1, (1, 1))])
def test_gemm_and_alu_retire_n_plus_f_after_the_previous(n_uops, iters):
    """docs/timing.md §4: N + 11 for a GEMM on the default configuration (two tree stages), N + 9 for an ALU
    (none of whose micro-ops reads the entry the one before it writes)."""
    insns, uops = _gemm_program(DEFAULT, n_uops, iters)
    _, launch = _launch(DEFAULT, insns, uops)
    r = simulate(launch).stats.retire_cycles
    n = n_uops * iters[0] * iters[1]
    assert r[4] - r[3] == n + 11 and r[5] - r[4] == n + 9


def test_long_gemm_is_one_event():
    """Event-driven: a GEMM of 2**20 micro-ops costs a handful of evaluated cycles, not a million."""
    insns, uops = _gemm_program(DEFAULT, 1024, (32, 32), moving=False)
    _, launch = _launch(DEFAULT, insns, uops)
    run = simulate(launch)
    r = run.stats.retire_cycles
    assert r[4] - r[3] == (1 << 20) + 11
    assert run.events < 400 and run.stats.cycles > 3 << 20


JUMP_CONFIGS = {"small": SMALL, "tight": SMALL.replace(dram_latency=1, dram_outstanding=1, cmd_queue_depth=1,
                                                        token_queue_depth=1),
                "O2_L7": SMALL.replace(dram_outstanding=2, dram_latency=7), "default": DEFAULT}
SOLVER_CONFIGS = {**JUMP_CONFIGS, "Q2_O3": SMALL.replace(cmd_queue_depth=2, token_queue_depth=2, dram_outstanding=3),
                  "bus32": SMALL.replace(bus_width=32), "bus512_L3": DEFAULT.replace(bus_width=512, dram_latency=3)}


def _corpus_and_edges(config: VTAConfig) -> list[Program]:
    """The DMA edge program and every corpus program that fits ``config``."""
    programs = [_edge_program(config)]
    for name in CASES:
        try:
            programs.append(CASES[name](config).program)
        except Unsupported:
            pass
    return programs


def _outcome(program, tmp_path, **engine):
    """Everything a run reports, including its timeline, or the error it raises."""
    trace = tmp_path / f"{'stepping' if engine else 'solver'}.json"
    _, launch = _launch_program(program, trace)
    try:
        run = simulate(launch, **engine)
    except SimError as exc:
        return type(exc).__name__, str(exc)
    run.stats.sim_seconds = 0.0
    return run.stats, [vars(t) for t in run.timing], launch.dram.tobytes(), json.loads(trace.read_text())


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("config_name", JUMP_CONFIGS)
def test_jumping_equals_evaluating_every_cycle(config_name, seed):
    """The stepping model only skips cycles in which nothing can happen: evaluating every cycle
    agrees, and so does the default solver."""
    program = random_program(JUMP_CONFIGS[config_name], 500 + seed)
    runs = []
    for engine in ({}, {"stepping": True}, {"every_cycle": True}):
        _, launch = _launch_program(program)
        runs.append(simulate(launch, **engine))
        runs[-1].stats.sim_seconds = 0.0
    solved, jumped, stepped = runs
    assert solved.stats == jumped.stats == stepped.stats
    assert solved.timing == jumped.timing == stepped.timing
    assert stepped.events == stepped.stats.cycles and jumped.events < stepped.events


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("config_name", SOLVER_CONFIGS)
def test_solver_equals_stepping_model(config_name, seed, tmp_path):
    """The solver reports what the cycle-by-cycle transcription of docs/timing.md does: stats,
    every instruction's timing, the DRAM and the timeline (DMA bursts, token-queue counters)."""
    program = random_program(SOLVER_CONFIGS[config_name], 800 + seed)
    assert _outcome(program, tmp_path) == _outcome(program, tmp_path, stepping=True)


@pytest.mark.parametrize("config_name", SOLVER_CONFIGS)
def test_solver_equals_stepping_model_on_corpus_and_dma_edges(config_name, tmp_path):
    for program in _corpus_and_edges(SOLVER_CONFIGS[config_name]):
        assert _outcome(program, tmp_path) == _outcome(program, tmp_path, stepping=True), program.name


def test_stats_partition_the_cycles():
    program = CASES["blocked_gemm_vt2"](DEFAULT).program
    _, stats = run_program(program, "cycle")
    for name in ("load", "compute", "store"):
        busy, token, idle = stats.busy_cycles[name], stats.token_stall_cycles[name], stats.idle_cycles[name]
        assert busy + token + idle == stats.cycles and min(busy, token, idle) >= 0
        assert 0 <= stats.memory_stall_cycles[name] <= busy
    assert stats.memory_stall_cycles["load"] > 0                  # DRAM latency shows up
    assert stats.busy_cycles["fetch"] + stats.idle_cycles["fetch"] == stats.cycles
    assert stats.utilization == stats.counters["gemm_counter"] / stats.cycles
    assert stats.dram_read_bytes >= sum(stats.counters[k] for k in ("inp_load_nbytes", "wgt_load_nbytes",
                                                                    "acc_load_nbytes", "uop_load_nbytes"))
    assert stats.dram_write_bytes == stats.counters["out_store_nbytes"]
    assert 0 < stats.dram_bandwidth <= 2 * DEFAULT.bus_bytes


def test_counters_equal_fsim():
    program = random_program(SMALL, 3)
    fsim_dram, fsim = run_program(program, "fsim")
    dram, cycle = run_program(program, "cycle")
    assert np.array_equal(dram, fsim_dram)
    assert cycle.counters == fsim.counters


def test_two_virtual_threads_hide_memory_latency():
    """A memory-bound GEMM shape (one row block, many weights): 2 virtual threads take fewer cycles."""
    from vtakit.runtime.blocked_gemm import bench_gemm
    one = bench_gemm(16, 256, 256, backend="cycle", vthreads=1)
    two = bench_gemm(16, 256, 256, backend="cycle", vthreads=2)
    assert one.correct and two.correct
    assert two.cycles < one.cycles


# ---------------------------------------------------------------------------- timeline
def test_trace_tracks_do_not_overlap_and_end_at_cycles(tmp_path):
    path = tmp_path / "run.json"
    program = CASES["blocked_gemm_vt2"](SMALL).program
    device = Device(SMALL, backend="cycle")
    stats = device.run(program, trace=path)
    trace = json.loads(path.read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"fetch", "load", "compute", "store"} <= set(names)
    for track, tid in names.items():
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["tid"] == tid)
        assert all(e["dur"] > 0 for e in slices if e["tid"] == tid)
        assert all(a_end <= b_begin for (_, a_end), (b_begin, _) in zip(spans, spans[1:])), track
    module_ends = [e["ts"] + e["dur"] for e in slices if e["tid"] in (names["load"], names["compute"], names["store"])]
    assert max(module_ends) == stats.cycles
    compute = [e["name"] for e in slices if e["tid"] == names["compute"] and e["cat"] == "exec"]
    assert compute[-1] == isa.disasm(program.insns[-1])          # FINISH, named by its disassembly
    kinds = {e["cat"] for e in slices}
    assert {"exec", "token", "memory"} <= kinds
    counters = {}
    for e in sorted((e for e in trace["traceEvents"] if e["ph"] == "C"), key=lambda e: e["ts"]):
        counters.setdefault(e["name"], []).append(e["args"]["tokens"])
    assert len(counters) == 4
    for values in counters.values():   # every queue within its depth, and empty at the end (balanced)
        assert all(0 <= v <= SMALL.token_queue_depth for v in values) and values[-1] == 0
    assert max(max(v) for v in counters.values()) >= 1


def test_trace_needs_a_json_path(tmp_path):
    _, launch = _launch(SMALL, [FinishInsn()], trace=tmp_path / "run.vcd")
    with pytest.raises(SimError, match=r"must end in \.json"):
        simulate(launch)


# ---------------------------------------------------------------------------- errors, like the other backends
def _nop(opcode, **flags):
    return MemInsn(opcode=opcode, memory_type=MemId.OUT if opcode == Opcode.STORE else MemId.INP, x_size=0, **flags)


def test_circular_token_wait_is_a_deadlock():
    program = Program(SMALL, [_nop(Opcode.STORE, pop_prev=True, push_prev=True),
                              GemmInsn(uop_bgn=0, uop_end=0, pop_next=True, push_next=True), FinishInsn()])
    with pytest.raises(DeadlockError) as info:
        run_program(program, "cycle")
    message = str(info.value)
    assert "store: instruction 0" in message and "compute->store" in message
    assert "compute: instruction 1" in message and "store->compute" in message


def test_full_command_queue_deadlock():
    depth = SMALL.cmd_queue_depth
    insns = ([_nop(Opcode.STORE, pop_prev=True, push_prev=True) for _ in range(depth + 2)]
             + [GemmInsn(uop_bgn=0, uop_end=0, push_next=True) for _ in range(depth + 2)]
             + [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True) for _ in range(depth + 1)]
             + [FinishInsn(pop_next=True)])
    with pytest.raises(DeadlockError, match="fetch: .* waits for room in the store command queue"):
        run_program(Program(SMALL, insns), "cycle")


def test_full_token_queue_deadlock():
    """Load blocks pushing into a full load->compute queue while compute waits for store, whose
    instructions sit behind a full compute command queue: fsim and cycle both report a deadlock."""
    tokens, commands = SMALL.token_queue_depth, SMALL.cmd_queue_depth
    insns = ([_nop(Opcode.LOAD, push_next=True) for _ in range(tokens + 1)]
             + [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True) for _ in range(commands + 2)]
             + [_nop(Opcode.STORE, push_prev=True) for _ in range(commands + 2)]
             + [GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True) for _ in range(tokens + 1)] + [FinishInsn()])
    program = Program(SMALL, insns)
    with pytest.raises(DeadlockError):
        run_program(program, "fsim")
    with pytest.raises(DeadlockError, match="load: .* waits to push a token to load->compute") as info:
        run_program(program, "cycle")
    assert "waits to pop a token from store->compute" in str(info.value)
    assert "waits for room in the compute command queue" in str(info.value)


def _deadlocks():
    """Deadlocks of every kind: token cycles, a full command queue, full token queues, one behind DMA."""
    c_depth, t_depth = SMALL.cmd_queue_depth, SMALL.token_queue_depth
    gemm = dict(uop_bgn=0, uop_end=0)
    yield Program(SMALL, [_nop(Opcode.STORE, pop_prev=True, push_prev=True),
                          GemmInsn(**gemm, pop_next=True, push_next=True), FinishInsn()])
    yield Program(SMALL, [_nop(Opcode.STORE, pop_prev=True, push_prev=True)] * (c_depth + 2)
                  + [GemmInsn(**gemm, push_next=True)] * (c_depth + 2)
                  + [GemmInsn(**gemm, pop_next=True)] * (c_depth + 1) + [FinishInsn(pop_next=True)])
    yield Program(SMALL, [_nop(Opcode.LOAD, push_next=True)] * (t_depth + 1)
                  + [GemmInsn(**gemm, pop_next=True)] * (c_depth + 2)
                  + [_nop(Opcode.STORE, push_prev=True)] * (c_depth + 2)
                  + [GemmInsn(**gemm, pop_prev=True)] * (t_depth + 1) + [FinishInsn()])
    yield Program(SMALL, [_nop(Opcode.STORE, push_prev=True)] * (t_depth + 1)
                  + [GemmInsn(**gemm, push_next=True)] * t_depth
                  + [GemmInsn(**gemm, push_prev=True, push_next=True), _nop(Opcode.LOAD, pop_next=True)]
                  + [GemmInsn(**gemm, pop_next=True)] * (t_depth + 1)
                  + [_nop(Opcode.STORE, pop_prev=True)] * (t_depth + 1) + [FinishInsn()])
    config = DEFAULT.replace(token_queue_depth=2, cmd_queue_depth=2)
    load = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=0x1000 // config.inp_elem_bytes, y_size=2,
                   x_size=3, x_stride=3, y_pad_0=1, x_pad_1=2, push_next=True)
    yield Program(config, [load] * 3 + [GemmInsn(**gemm, pop_next=True, push_next=True),
                                        _nop(Opcode.STORE, pop_prev=True, push_prev=True)]
                  + [GemmInsn(**gemm, pop_prev=True)] * 3 + [FinishInsn()],
                  segments=[Segment(0x1000, bytes(range(256)) * 4, "data")], dram_size=0x2000)


class _TaggedMem(MemInsn):
    """Instruction subclasses are legal instructions (fsim and the encoder accept them)."""


class _TaggedGemm(GemmInsn):
    pass


class _TaggedFinish(FinishInsn):
    pass


def test_solver_takes_instruction_subclasses_and_int_opcodes(tmp_path):
    """The solver classifies instructions as the rest of the stack does (isinstance, ==), not by
    exact type or enum identity: same stats, timing, DRAM and timeline as the plain program."""
    def program(mem, gemm, finish, store):
        insns = [mem(opcode=Opcode.LOAD, memory_type=MemId.UOP, dram_base=0x100 // 4),
                 mem(opcode=Opcode.LOAD, memory_type=MemId.ACC, dram_base=0x1000 // SMALL.acc_elem_bytes, x_size=2,
                     x_stride=2),
                 mem(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=0x1000 // SMALL.inp_elem_bytes, x_size=2,
                     x_stride=2),
                 mem(opcode=Opcode.LOAD, memory_type=MemId.WGT, dram_base=0x1000 // SMALL.wgt_elem_bytes, x_size=2,
                     x_stride=2, push_next=True),
                 gemm(uop_bgn=0, uop_end=1, iter_out=2, dst_factor_out=1, src_factor_out=1, wgt_factor_out=1,
                      pop_prev=True),
                 AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=3, uop_bgn=0, uop_end=1, iter_out=2,
                         dst_factor_out=1, push_next=True),
                 mem(opcode=store, memory_type=MemId.OUT, dram_base=0x3000 // SMALL.out_elem_bytes, y_size=2,
                     x_stride=5, pop_prev=True, push_prev=True),
                 finish(pop_next=True)]
        return Program(SMALL, insns, [Uop(0, 0, 0)], uop_addr=0x100,
                       segments=[Segment(0x1000, bytes(range(256)) * 16, "data")], dram_size=0x4000)
    plain = _outcome(program(MemInsn, GemmInsn, FinishInsn, Opcode.STORE), tmp_path)
    assert isinstance(plain[0], RunStats)
    for variant in (program(_TaggedMem, _TaggedGemm, _TaggedFinish, Opcode.STORE),
                    program(MemInsn, GemmInsn, FinishInsn, int(Opcode.STORE))):
        assert _outcome(variant, tmp_path) == _outcome(variant, tmp_path, stepping=True) == plain


def test_solver_reports_the_error_of_cycle_order(tmp_path):
    """The solver walks the store module ahead while compute waits for DRAM, so it would read OUT
    entry 0 before the racing ALU writes it (uninitialised); in cycle order the ALU writes first and
    the read is a race. The solver reports what the stepping model (and fsim) report."""
    def load(mem, sram, count):
        return _load(mem, sram, 0x1000 // {MemId.UOP: 4, MemId.ACC: SMALL.acc_elem_bytes}.get(mem, 1), 1, count)

    def store(sram, dram, count, **flags):
        return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram, dram_base=dram // SMALL.out_elem_bytes,
                       y_size=1, x_size=count, x_stride=count, **flags)
    alu = dict(alu_opcode=AluOp.ADD, use_imm=True, imm=1, iter_out=1)
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 2), load(MemId.ACC, 0, 80),
             AluInsn(uop_bgn=1, uop_end=2, **{**alu, "iter_out": 64}, dst_factor_out=1, push_next=True),  # OUT 8..71
             load(MemId.ACC, 100, 4),
             AluInsn(uop_bgn=0, uop_end=1, **alu),                     # OUT 0, once that LOAD is done
             store(8, 0x3000, 64, pop_prev=True),                      # 64 write beats: ends after it
             store(0, 0x3400, 1, push_prev=True),                      # OUT 0, racing with the ALU
             FinishInsn(pop_next=True)]
    program = Program(SMALL, insns, [Uop(0, 0, 0), Uop(8, 0, 0)], uop_addr=0x100,
                      segments=[Segment(0x1000, bytes(range(256)) * 8, "data")], dram_size=0x4000)
    solved = _outcome(program, tmp_path)
    assert solved[0] == "RaceError" and "data race on OUT entry 0" in solved[1]
    assert solved == _outcome(program, tmp_path, stepping=True)
    with pytest.raises(RaceError, match="data race on OUT entry 0"):
        run_program(program, "fsim")


@pytest.mark.parametrize("index", range(5))
def test_solver_reports_the_stepping_models_deadlock(index, tmp_path):
    """Same cycle (docs/timing.md §6), same blocked modules and fetch head."""
    program = list(_deadlocks())[index]
    solved = _outcome(program, tmp_path)
    assert solved[0] == "DeadlockError" and solved == _outcome(program, tmp_path, stepping=True)


def test_solver_wake_tables_follow_the_queues():
    """The solver wakes a queue's consumer when it pushes and its producer when it pops."""
    from vtakit.sim import cycle
    from vtakit.sim.machine import POP_QUEUES, PUSH_QUEUES
    for m, stage in enumerate((isa.Stage.LOAD, isa.Stage.COMPUTE, isa.Stage.STORE)):
        assert cycle.MODULES[m] == stage.name.lower()
        for _, q in POP_QUEUES[stage]:
            assert cycle._CONSUMER[q] == m
        for _, q in PUSH_QUEUES[stage]:
            assert cycle._PRODUCER[q] == m


def test_misaligned_instruction_address():
    _, launch = _launch(SMALL, [FinishInsn()])
    launch.insn_addr += 4
    with pytest.raises(ProgramError, match="not 16-byte aligned"):
        simulate(launch)


def test_instruction_stream_past_dram():
    _, launch = _launch(SMALL, [FinishInsn()])
    launch.insn_addr = launch.dram.size
    with pytest.raises(MemoryAccessError, match="runs past the end of DRAM"):
        simulate(launch)


def test_program_errors_come_from_fsims_checks():
    with pytest.raises(ProgramError, match="no FINISH"):
        run_program(Program(SMALL, [GemmInsn(uop_bgn=0, uop_end=0)]), "cycle")
    # FINISH that does not wait for the store module
    insns = [GemmInsn(uop_bgn=0, uop_end=0, push_next=True), _nop(Opcode.STORE, pop_prev=True), FinishInsn()]
    with pytest.raises(ProgramError, match="does not wait for"):
        run_program(Program(SMALL, insns), "cycle")


def test_races_are_detected():
    """LOAD INP and a GEMM reading it with no token between them: a data race, as on fsim."""
    cfg = SMALL
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1), _load(MemId.ACC, 0, 0x1000 // cfg.acc_elem_bytes, 1, 1),
             _load(MemId.INP, 0, 0x1000 // cfg.inp_elem_bytes, 1, 1),
             _load(MemId.WGT, 0, 0x1000 // cfg.wgt_elem_bytes, 1, 1, push_next=True),
             _load(MemId.INP, 0, 0x2000 // cfg.inp_elem_bytes, 1, 1),
             GemmInsn(uop_bgn=0, uop_end=1, iter_out=1, iter_in=1, pop_prev=True),
             FinishInsn()]
    _, launch = _launch(cfg, insns, [Uop(0, 0, 0)])
    with pytest.raises(RaceError, match="data race on INP entry 0"):
        simulate(launch)


def test_model_constants_match_the_rtl():
    """The few structural constants the model restates (sim may not import the Amaranth RTL)."""
    from vtakit.hw import bus, fetch, memory_master
    from vtakit.sim import cycle
    assert (cycle.FETCH_BURST, cycle.FETCH_DEPTH) == (fetch.FETCH_BURST, fetch.FETCH_DEPTH)
    assert (cycle._MAX_BURST, cycle._BOUNDARY) == (bus.MAX_BURST_BEATS, bus.BOUNDARY_BYTES)
    assert ("fetch",) + tuple(cycle.MODULES[m] for m in cycle._READ_PRIORITY) == memory_master.READ_PRIORITY


# ---------------------------------------------------------------------------- short-program fast paths
@pytest.mark.parametrize("op", list(AluOp))
@pytest.mark.parametrize("use_imm", [False, True])
def test_scalar_alu_path_equals_vectorised(op, use_imm, monkeypatch):
    """The Python path for small ALU chunks gives the numpy path's acc/out bit for bit, in strict
    micro-op order (repeated and overlapping dst/src entries, extreme values, every operation)."""
    from vtakit.sim import machine as machine_module

    config = VTAConfig.small().replace(alu_mul=True) if op == AluOp.MUL else VTAConfig.small()
    rng = np.random.default_rng(int(op) * 2 + use_imm)
    for trial in range(20):
        n = int(rng.integers(1, 24))
        dst = rng.integers(0, 8, n).astype(np.int64)
        src = rng.integers(0, 8, n).astype(np.int64)
        imm = int(rng.integers(-(1 << 15), 1 << 15))
        insn = AluInsn(alu_opcode=op, use_imm=use_imm, imm=imm)
        start = rng.integers(-(1 << 31), 1 << 31, (config.acc_depth, config.batch, config.block_out), dtype=np.int64)
        start[:4] = rng.choice([-(1 << 31), (1 << 31) - 1, -1, 0, 1], start[:4].shape)
        results = []
        for lanes in (1 << 30, 0):     # scalar path, then vectorised path
            monkeypatch.setattr(machine_module, "_SMALL_ALU_LANES", lanes)
            m = machine_module.Machine(config, np.zeros(64, np.uint8))
            m.acc[:] = start.astype(np.int32)
            m._alu_chunk(insn, dst, None if use_imm else src)
            results.append((m.acc.copy(), m.out.copy(), m.written["out"].copy()))
        for got, want in zip(*results):
            np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_small_gemm_path_equals_restructured(config, monkeypatch):
    """The int64 path for small GEMM chunks sums the same products per destination as the
    restructured float path (steady weight/destination axes, repeated destinations)."""
    from vtakit.sim import machine as machine_module

    rng = np.random.default_rng(7)
    m = machine_module.Machine(config, np.zeros(64, np.uint8))
    m.inp[:] = rng.integers(-128, 128, m.inp.shape)
    m.wgt[:] = rng.integers(-128, 128, m.wgt.shape)
    m.wgt[0] = m.inp[0] = -128                      # the extreme products
    m._inp_f[:] = m.inp                             # the float copies the machine keeps in step
    m._wgt_t[:] = m.wgt.transpose(0, 2, 1)
    for shape in [(1, 1, 1), (1, 1, 4), (2, 3, 4), (4, 4, 4), (3, 1, 5)]:
        for steady in (False, True):
            dst, src, wgt = (rng.integers(0, 6, shape) for _ in range(3))
            if steady:   # a weight constant along the inner loop, a destination constant along the outer
                wgt = np.broadcast_to(wgt[:, :1], shape).copy()
                dst = np.broadcast_to(dst[:1], shape).copy()
            got = []
            for small in (1 << 30, 0):
                monkeypatch.setattr(machine_module, "_SMALL_GEMM", small)
                got.append(m._accumulated_products(dst, src, wgt))
            (d_small, s_small), (d_big, s_big) = got
            np.testing.assert_array_equal(d_small, d_big)
            np.testing.assert_array_equal(s_small, s_big)
            assert s_small.dtype == s_big.dtype == np.int64
