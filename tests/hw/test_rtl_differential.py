"""rtl == fsim, byte for byte: the whole corpus, default-config programs and random programs.

Every RTL run goes through the session cache (rtl_cache.py), so the cycle-model tests reuse it.
"""

import numpy as np
import pytest

from tests.hw.rtl_cache import rtl_run
from tests.programs import CASES, Unsupported, run_program
from vtakit.hw.config import VTAConfig
from vtakit.runtime.random_program import random_program

SMALL = VTAConfig.small()
DEFAULT = VTAConfig()
#: Short programs on the default configuration: every memory type (elements span several beats).
DEFAULT_PROGRAMS = ("acc_roundtrip", "acc8_roundtrip", "pad_inp_1232", "pad_acc_1232", "gemm_epilogue",
                    "alu_shr_tensor", "alu_add_imm", "relu_clip", "blocked_gemm_vt2", "token_burst",
                    "fetch_burst")
RANDOM_SEEDS = range(60)


def _program(name, config):
    try:
        return CASES[name](config).program
    except Unsupported as exc:
        pytest.skip(str(exc))


def _assert_same(program, rtl_cache_dir):
    expected, _ = run_program(program, "fsim")
    result = rtl_run(program, rtl_cache_dir)
    diff = np.flatnonzero(result.dram != expected)
    assert diff.size == 0, f"{program.name}: DRAM differs from fsim at byte(s) {diff[:8].tolist()}"
    assert len(result.retire_cycles) == len(program.insns)
    assert result.cycles == max(result.retire_cycles) == result.retire_cycles[-1]


@pytest.mark.parametrize("name", CASES)
def test_corpus_small(name, rtl_cache_dir):
    _assert_same(_program(name, SMALL), rtl_cache_dir)


@pytest.mark.parametrize("name", DEFAULT_PROGRAMS)
def test_corpus_default(name, rtl_cache_dir):
    _assert_same(_program(name, DEFAULT), rtl_cache_dir)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_program_small(seed, rtl_cache_dir):
    _assert_same(random_program(SMALL, seed), rtl_cache_dir)


#: Configurations whose DMA and queue paths differ from the small one: narrow and wide buses,
#: batch 2, and every queue and the memory system at their tightest; and the optional ALU opcodes.
EXOTIC = {
    "bus32": SMALL.replace(bus_width=32),
    "bus256": SMALL.replace(bus_width=256),
    "batch2": SMALL.replace(log_batch=1),
    "tight": SMALL.replace(dram_latency=1, dram_outstanding=1, cmd_queue_depth=1, token_queue_depth=1),
    "requant_mul": SMALL.replace(alu_requant=True, alu_mul=True),   # every ALU opcode, REQUANT in both forms
    "default_bus512": DEFAULT.replace(bus_width=512, dram_outstanding=2),
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("config_name", EXOTIC)
def test_random_program_other_configs(config_name, seed, rtl_cache_dir):
    _assert_same(random_program(EXOTIC[config_name], 1000 + seed), rtl_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200))
def test_random_program_campaign_small(seed, rtl_cache_dir):
    """The long campaign (run with -m slow): more random programs, longer, up to 3 virtual threads."""
    _assert_same(random_program(SMALL, 10_000 + seed, max_insns=400), rtl_cache_dir)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30))
def test_random_program_campaign_default(seed, rtl_cache_dir):
    _assert_same(random_program(DEFAULT, 20_000 + seed), rtl_cache_dir)


def test_bursts_split_at_4k_and_256_beats(rtl_cache_dir):
    """A 400-beat row across a 4 KiB boundary, strided rows across boundaries, narrow stores across
    one; the harness DRAM model rejects any burst that crosses 4 KiB (AXI4)."""
    from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, MemId, MemInsn, Opcode, Uop
    from vtakit.sim.program import Program, Segment

    config = SMALL.replace(bus_width=32)            # an ACC element is 4 beats: 100 elements are 400 beats
    acc_bytes, out_bytes = config.acc_elem_bytes, config.out_elem_bytes
    src = 0x1000 - 7 * acc_bytes
    dst = 0x3000 - 5 * out_bytes
    data = np.random.default_rng(7).integers(0, 256, 0x2000, dtype=np.uint8).tobytes()

    def mem(opcode, kind, sram, dram, y, x, stride, **flags):
        return MemInsn(opcode=opcode, memory_type=kind, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                       x_stride=stride, **flags)
    insns = [
        mem(Opcode.LOAD, MemId.UOP, 0, 0x100 // 4, 1, 1, 1),
        mem(Opcode.LOAD, MemId.ACC, 0, src // acc_bytes, 1, 100, 100),
        mem(Opcode.LOAD, MemId.ACC, 100, src // acc_bytes - 3, 2, 12, 40),
        AluInsn(alu_opcode=AluOp.SHR, use_imm=True, imm=0, uop_bgn=0, uop_end=1, iter_out=124, dst_factor_out=1,
                push_next=True),
        mem(Opcode.STORE, MemId.OUT, 0, dst // out_bytes, 2, 62, 1030, pop_prev=True, push_prev=True),
        FinishInsn(pop_next=True),
    ]
    program = Program(config, insns, [Uop(0, 0, 0)], uop_addr=0x100, name="bursts_4k_256",
                      segments=[Segment(0x0A00, data, "acc")], dram_size=0x5000)
    _assert_same(program, rtl_cache_dir)
