"""docs/timing.md checked on the RTL: the rules that can be isolated, and the performance goals.

Each test builds a tiny program whose schedule docs/timing.md predicts exactly and compares
retire cycles. The performance acceptance of the RTL issue (F, streaming loads, overlap) is
asserted here on the default configuration.
"""

import numpy as np
import pytest

from tests.hw.rtl_cache import rtl_run
from tests.programs import CASES, run_program
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.hw.pipeline import LOAD_PREP_CYCLES, finish_delay
from vtakit.sim.program import Program, Segment

DEFAULT = VTAConfig()
SMALL = VTAConfig.small()
# docs/timing.md §4: a queued GEMM (ALU) without tokens retires N + F_GEMM (N + F_ALU) cycles after the previous
# compute instruction: F_GEMM = 9 + T with T the registered adder-tree stages (2 on the default configuration),
# F_ALU = 9 (no micro-op here reads the entry the one before it writes)
F_GEMM = 11
F_ALU = 9


def _load(mem, sram, dram, y, x, **kw):
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=kw.pop("stride", x), **kw)


def _store(sram, dram, y, x, **kw):
    return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram, dram_base=dram, y_size=y,
                   x_size=x, x_stride=x, **kw)


def _run(config, insns, uops=(), dram_size=1 << 16, uop_addr=0x100):
    rng = np.random.default_rng(len(insns))
    data = rng.integers(0, 256, dram_size - 0x1000, dtype=np.uint8).tobytes()
    program = Program(config, list(insns), list(uops), uop_addr=uop_addr, segments=[Segment(0x1000, data, "data")],
                      dram_size=dram_size)
    fsim_dram, _ = run_program(program, "fsim")
    dram, stats = run_program(program, "rtl")
    assert np.array_equal(dram, fsim_dram)
    return stats


@pytest.mark.parametrize("config", [SMALL, SMALL.replace(dram_latency=5), DEFAULT.replace(bus_width=128)],
                         ids=["small", "small-L5", "default-bus128"])
def test_finish_only_program(config):
    """Fetch: request presented in cycle 1, accepted in 2 (the registered grant), first beat at 2 + L,
    complete, dispatch, take, start, retire."""
    stats = _run(config, [FinishInsn()])
    beats = max(1, 16 // config.bus_bytes)
    complete = 2 + config.dram_latency + beats - 1
    assert stats.cycles == stats.retire_cycles[0] == complete + 5    # dispatch, take, start, e = s, retire
    assert stats.busy_cycles["compute"] == 2                          # EXEC (s) and the retire cycle


@pytest.mark.parametrize("n_uops,iters", [(16, (1, 1)), (7, (3, 2)), (1, (1, 1))])
def test_gemm_retires_n_plus_f_after_previous(n_uops, iters):
    """Acceptance: a GEMM (ALU) of N micro-ops retires N + F_GEMM (N + F_ALU) cycles after the previous compute
    instruction."""
    cfg = DEFAULT
    uops = [Uop(i % 8, i % 16, i % 32) for i in range(n_uops)]
    loop = dict(uop_bgn=0, uop_end=n_uops, iter_out=iters[0], iter_in=iters[1], dst_factor_out=1)
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, n_uops),
             _load(MemId.INP, 0, 0x1000 // cfg.inp_elem_bytes, 1, 32),
             _load(MemId.WGT, 0, 0x2000 // cfg.wgt_elem_bytes, 1, 32, push_next=True),
             GemmInsn(reset_reg=True, pop_prev=True, **loop),
             GemmInsn(src_factor_in=1, wgt_factor_out=2, **loop),
             AluInsn(alu_opcode=AluOp.MAX, use_imm=True, imm=0, **loop),
             FinishInsn()]
    stats = _run(cfg, insns, uops)
    r = stats.retire_cycles
    n = n_uops * iters[0] * iters[1]
    assert r[4] - r[3] == n + F_GEMM and r[5] - r[4] == n + F_ALU
    assert (F_GEMM, F_ALU) == (4 + finish_delay(cfg, False), 4 + finish_delay(cfg, True))
    assert F_GEMM <= 12
    assert stats.counters["gemm_counter"] == n and stats.counters["alu_counter"] == n


@pytest.mark.parametrize("x_size,base", [(8, 0x2000), (16, 0x2000), (16, 0x2800)],
                         ids=["one-burst", "two-bursts", "4KiB-split"])
def test_long_load_streams_one_beat_per_cycle(x_size, base):
    """Acceptance: after DRAM_LATENCY a load streams one bus beat per cycle, across bursts and 4 KiB."""
    cfg = DEFAULT
    e = cfg.wgt_elem_bytes
    insns = [_load(MemId.WGT, 0, base // e, 1, 1), _load(MemId.WGT, 0, base // e, 1, x_size, push_next=True),
             FinishInsn(pop_prev=True)]
    stats = _run(cfg, insns, dram_size=1 << 15)
    beats = x_size * e // cfg.bus_bytes
    r = stats.retire_cycles
    # take r0+1, start r0+2, s = r0+3, prepared in s, s+1 (LOAD_PREP_CYCLES), request presented at s+2 and
    # accepted at s+3 (the registered grant; the next burst two cycles later, 256 beats on), beats
    # s+3+L .. s+2+L+beats, retire +1
    assert r[1] - r[0] == 4 + LOAD_PREP_CYCLES + cfg.dram_latency + beats


def test_store_timing():
    """STORE: W beats in s .. s+T-1, last B in s+T, retire s+T+1."""
    cfg = DEFAULT
    insns = [_load(MemId.UOP, 0, 0x100 // 4, 1, 1),
             _load(MemId.ACC, 0, 0x1000 // cfg.acc_elem_bytes, 1, 4),
             AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=1, uop_bgn=0, uop_end=1, iter_out=4, dst_factor_out=1,
                     push_next=True),
             _store(0, 0x3000 // cfg.out_elem_bytes, 1, 1, pop_prev=True),
             _store(0, 0x3000 // cfg.out_elem_bytes, 2, 2, push_prev=True),
             FinishInsn(pop_next=True)]
    stats = _run(cfg, insns, [Uop(0, 0, 0)])
    r = stats.retire_cycles
    beats = 4 * cfg.out_elem_bytes // cfg.bus_bytes
    assert r[4] - r[3] == 3 + beats + 1


def test_double_buffered_gemm_overlaps_modules(rtl_cache_dir):
    """Acceptance: with 2 virtual threads the modules overlap (cycles < sum of busy cycles)."""
    program = CASES["blocked_gemm_vt2"](DEFAULT).program
    result = rtl_run(program, rtl_cache_dir)
    busy = result.busy_cycles
    assert result.cycles < busy["load"] + busy["compute"] + busy["store"]
