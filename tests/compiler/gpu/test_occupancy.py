"""The static occupancy estimate against figures from CUDA's occupancy calculator (A100, sm_80)."""

import pytest

from vtakit.compiler.backend.nvptx.occupancy import SM80, occupancy


def test_full_occupancy_when_nothing_limits():
    occ = occupancy(256, 32, 0)
    assert (occ.blocks_per_sm, occ.occupancy, occ.limited_by) == (8, 1.0, "threads")


def test_registers_limit():
    # 128 registers x 256 threads = 32768 per block: two blocks, 16 of 64 warps
    occ = occupancy(256, 128, 0)
    assert (occ.blocks_per_sm, occ.limited_by, occ.occupancy) == (2, "registers", 0.25)
    # 255 registers round up to 256 per thread (8192 per warp): 8 warps of one 256-thread block
    assert occupancy(256, 255, 0).blocks_per_sm == 1


def test_shared_memory_limit_counts_the_reserved_kilobyte():
    # 40 KiB + 1 KiB reserved per block: 164 // 41 = 4 blocks
    occ = occupancy(64, 32, 40 * 1024)
    assert (occ.blocks_per_sm, occ.limited_by) == (4, "shared memory")
    assert occ.occupancy == pytest.approx(4 * 2 / 64)


def test_block_slots_limit_small_blocks():
    occ = occupancy(32, 16, 0)
    assert (occ.blocks_per_sm, occ.limited_by) == (SM80.max_blocks, "blocks")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="threads_per_block must be a positive int, got 0"):
        occupancy(0, 32, 0)
    with pytest.raises(ValueError, match="4096 threads per block exceed the SM's 2048"):
        occupancy(4096, 32, 0)

