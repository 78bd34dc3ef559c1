"""The blocked, double-buffered GEMM built with ProgramBuilder, checked against numpy on fsim."""

import numpy as np
import pytest

from vtakit.errors import AllocationError, ConfigError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import GemmInsn
from vtakit.runtime import Device, ProgramBuilder
from vtakit.runtime.blocked_gemm import (GemmTiling, bench_gemm, build_gemm, gemm_program, plan_gemm,
                                         plan_gemm_threads, reference_gemm, requant_shift)
from vtakit.runtime.packing import pack_matrix, unpack_matrix
from vtakit.runtime.random_program import coverage
from vtakit.runtime.replay import run_fresh

SMALL = VTAConfig.small()


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("config, m, n, k", [
    (SMALL, 16, 16, 32), (SMALL, 8, 32, 512), (VTAConfig(), 64, 64, 64), (VTAConfig(), 256, 256, 256),
])
def test_bench_gemm_is_correct(config, m, n, k, vthreads):
    result = bench_gemm(m, n, k, config=config, vthreads=vthreads)
    assert result.correct
    assert result.ideal_cycles == m * n * k // config.macs_per_cycle
    assert result.cycles is None and result.utilization is None and result.sim_seconds > 0
    assert set(result.to_dict()) == {"correct", "cycles", "ideal_cycles", "utilization", "sim_seconds",
                                     "useful_macs", "ideal_macs", "vthreads"}
    assert result.vthreads == vthreads
    assert result.useful_macs == result.ideal_macs == m * n * k


@pytest.mark.parametrize("config, m, n, k", [(SMALL, 6, 10, 7), (VTAConfig(), 24, 40, 24), (VTAConfig(), 1, 16, 100)])
def test_sizes_that_are_not_whole_blocks_are_zero_padded(config, m, n, k):
    result = bench_gemm(m, n, k, config=config, backend="cycle")
    assert result.correct
    pad = [-(-size // block) * block for size, block in ((m, config.batch), (n, config.block_out),
                                                          (k, config.block_in))]
    assert result.useful_macs == m * n * k < result.ideal_macs == pad[0] * pad[1] * pad[2]
    assert result.ideal_cycles * config.macs_per_cycle == result.ideal_macs


@pytest.mark.parametrize("depth, vthreads", [(1, 1), (2, 2), (3, 3)])
def test_small_queues(depth, vthreads):
    config = VTAConfig.small(token_queue_depth=depth, cmd_queue_depth=1)
    assert bench_gemm(32, 32, 64, config=config, vthreads=vthreads).correct
    with pytest.raises(ConfigError, match=f"vthreads={depth + 1} needs TOKEN_QUEUE_DEPTH >= {depth + 1}"):
        plan_gemm(config, 32, 32, 64, depth + 1)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_vthreads_is_a_maximum_bounded_by_the_token_queues(depth):
    """As for the compiled ops, asking for more threads than TOKEN_QUEUE_DEPTH uses fewer and says so."""
    config = VTAConfig.small(token_queue_depth=depth)
    result = bench_gemm(32, 32, 64, config=config, vthreads=depth + 5)
    assert result.correct and result.vthreads == depth
    assert plan_gemm_threads(config, 32, 32, 64, depth + 5) == (depth, plan_gemm(config, 32, 32, 64, depth))


def test_vthreads_is_bounded_by_the_work_and_the_buffers():
    assert plan_gemm_threads(SMALL, 1, 4, 4, 8)[0] == 1          # one block: one unit of work
    assert bench_gemm(1, 4, 4, config=SMALL, vthreads=8).vthreads == 1
    tiny = VTAConfig.small(log_uop_buff_size=5)               # 8 micro-ops: none for each of 3 threads
    threads, tiling = plan_gemm_threads(tiny, 16, 16, 64, 3)
    assert threads == 2 and tiling == plan_gemm(tiny, 16, 16, 64, 2)
    assert plan_gemm_threads(VTAConfig(), 256, 256, 256, 100)[0] == 8  # the planner's own limit


@pytest.mark.parametrize("vthreads", [0, -1, 2.5, True, "2"])
def test_bad_vthreads(vthreads):
    with pytest.raises(ConfigError, match=f"vthreads={vthreads!r} must be a positive integer"):
        plan_gemm_threads(SMALL, 16, 16, 16, vthreads)


def test_explicit_small_tiles_many_chunks_and_three_threads():
    """Tiles of one block each: many tiles and K chunks, so every token path is exercised."""
    cfg = SMALL
    m, n, k = 4, 8, 16
    rng = np.random.default_rng(2)
    a_host = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    w_host = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    dev = Device(cfg, dram_size=1 << 16)
    a, w = dev.array(pack_matrix(a_host, cfg.batch, cfg.block_in)), dev.array(pack_matrix(w_host, 4, 4))
    c = dev.empty((m, n // 4, 1, 4), np.int8)
    b = ProgramBuilder(cfg, dev)
    build_gemm(b, a, w, c, m, n, k, vthreads=3, shift=5, tiling=GemmTiling(1, 1, 1))
    program = b.finish()
    assert "token_queue_overflow" not in coverage(program)
    dev.run(program)
    np.testing.assert_array_equal(unpack_matrix(c.numpy()), reference_gemm(a_host, w_host, 5))
    gemms = [i for i in program.insns if isinstance(i, GemmInsn) and not i.reset_reg]
    assert len(gemms) == (m * n // 4) * (k // 4)


def test_plan_fits_each_thread_s_share():
    for cfg in (SMALL, VTAConfig()):
        for vt in (1, 2, 3):
            t = plan_gemm(cfg, 256, 256, 1024, vt)
            assert t.tm * t.tk <= cfg.inp_depth // vt and t.tn * t.tk <= cfg.wgt_depth // vt
            assert t.tm * t.tn <= cfg.acc_depth // vt
            assert 256 // cfg.batch % t.tm == 0 and 256 // cfg.block_out % t.tn == 0
            assert 1024 // cfg.block_in % t.tk == 0


def test_self_contained_program_runs_anywhere_and_matches_numpy():
    program = gemm_program(SMALL, 8, 8, 16, vthreads=2, seed=4)
    _, dram = run_fresh(program)
    seg = {s.name: s for s in program.segments}
    a = unpack_matrix(np.frombuffer(seg["A"].data, np.int8).reshape(8, 4, 1, 4))
    w = unpack_matrix(np.frombuffer(seg["W"].data, np.int8).reshape(2, 4, 4, 4))
    c = dram[seg["C"].addr:seg["C"].end].view(np.int8).reshape(8, 2, 1, 4)
    np.testing.assert_array_equal(unpack_matrix(c), reference_gemm(a, w, requant_shift(16)))


@pytest.mark.parametrize("m, n, k, vthreads, error, message", [
    (0, 16, 16, 1, ConfigError, "M=0 must be a positive integer"),
    (16, 16, 16, 0, ConfigError, "vthreads=0 must be a positive integer"),
    (16, 16, 16 << 20, 1, ConfigError, "K/BLOCK_IN=1048576 and N/BLOCK_OUT=1 must be at most 65535"),
    (1 << 15, 1 << 15, 1 << 15, 1, AllocationError, "more than the 1073741824 byte limit"),
])
def test_bad_sizes(m, n, k, vthreads, error, message):
    with pytest.raises(error, match=message):
        bench_gemm(m, n, k, vthreads=vthreads)


def test_requant_shift_keeps_results_in_range():
    rng = np.random.default_rng(0)
    for k in (16, 256, 4096):
        a = rng.integers(-128, 128, size=(64, k), dtype=np.int8)
        w = rng.integers(-128, 128, size=(64, k), dtype=np.int8)
        out = reference_gemm(a, w, requant_shift(k))
        saturated = np.mean(np.abs(out.astype(int)) >= 127)
        assert 0.0 < saturated < 0.3 and len(np.unique(out)) > 100


def test_too_many_threads_for_the_buffers():
    tiny = VTAConfig.small(log_uop_buff_size=4)             # 4 micro-ops: no room for 3x3 kernels
    with pytest.raises(ConfigError, match="vthreads=3 leaves less than one SRAM entry per thread"):
        plan_gemm(tiny, 4, 4, 4, vthreads=3)
