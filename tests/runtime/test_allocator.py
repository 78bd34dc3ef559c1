"""The DRAM allocator: alignment, first fit, coalescing, reservations and every error."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vtakit.errors import AllocationError
from vtakit.runtime.allocator import Allocator


def test_alignment_and_first_fit_reuse():
    a = Allocator(4096, alignment=64)
    x = a.alloc(10)
    y = a.alloc(100, alignment=256)
    assert x == 0 and y == 256
    z = a.alloc(30)                      # first fit: the gap after x
    assert z == 64
    assert a.used == 140 and a.available == 4096 - 140
    a.free(x)
    assert a.alloc(5) == 0               # the freed block is reused


def test_free_coalesces_neighbours():
    a = Allocator(300, alignment=1)
    blocks = [a.alloc(100) for _ in range(3)]
    with pytest.raises(AllocationError, match="out of device memory"):
        a.alloc(1)
    a.free(blocks[0])
    a.free(blocks[2])
    a.free(blocks[1])                    # joins both neighbours into one free block
    assert a.alloc(300) == 0


def test_zero_byte_allocations_get_distinct_addresses():
    a = Allocator(256, alignment=16)
    assert a.alloc(0) != a.alloc(0)


def test_exhaustion_names_sizes():
    a = Allocator(1024, alignment=64)
    a.alloc(600)
    with pytest.raises(AllocationError, match=r"cannot allocate 500 bytes.*largest free block 424"):
        a.alloc(500)


def test_double_free_and_unknown_address():
    a = Allocator(1024)
    x = a.alloc(10)
    a.free(x)
    with pytest.raises(AllocationError, match="double free of device buffer at 0x0"):
        a.free(x)
    with pytest.raises(AllocationError, match="free of 0x7, which is not the start of a live device buffer"):
        a.free(7)


def test_reserve_fixed_ranges():
    a = Allocator(4096, alignment=64)
    a.reserve(1000, 24)
    assert a.owner(1004, 8) == 1000 and a.owner(1020, 8) is None
    assert a.alloc(2000) == 1024          # allocation skips the reservation
    with pytest.raises(AllocationError, match=r"overlaps live buffer\(s\) at \['0x3e8'\]"):
        a.reserve(990, 20)
    with pytest.raises(AllocationError, match="outside device DRAM"):
        a.reserve(4000, 200)
    a.free(1000)
    a.reserve(990, 20)


@pytest.mark.parametrize("kwargs, message", [
    (dict(size=0), "DRAM size 0 must be positive"),
    (dict(size=64, alignment=3), "alignment 3 must be a power of two"),
])
def test_bad_construction(kwargs, message):
    with pytest.raises(AllocationError, match=message):
        Allocator(**kwargs)


def test_bad_alloc_arguments():
    a = Allocator(64)
    with pytest.raises(AllocationError, match="negative size"):
        a.alloc(-1)
    with pytest.raises(AllocationError, match="alignment 12 must be a power of two"):
        a.alloc(4, alignment=12)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 300), st.sampled_from([1, 16, 64, 256])), max_size=60))
def test_random_alloc_free_sequences_keep_blocks_disjoint(ops):
    """Against a model: live blocks never overlap, are aligned, and freeing all restores one block."""
    a = Allocator(4096, alignment=16)
    live: dict[int, int] = {}
    for is_alloc, size, align in ops:
        if is_alloc or not live:
            try:
                addr = a.alloc(size, align)
            except AllocationError:
                assert not _model_fits(live, max(size, 1), align), (live, size, align)
                continue
            assert addr % align == 0 and addr + size <= 4096
            for other, n in live.items():
                assert addr + max(size, 1) <= other or other + max(n, 1) <= addr
            live[addr] = size
        else:
            addr = sorted(live)[size % len(live)]
            a.free(addr)
            del live[addr]
        assert a.blocks() == live and a.used == sum(live.values())
    for addr in list(live):
        a.free(addr)
    assert a.alloc(4096) == 0


def _model_fits(live: dict[int, int], need: int, align: int, size: int = 4096) -> bool:
    """Whether some aligned gap between the model's live blocks holds ``need`` bytes."""
    cursor = 0
    for start in sorted(live) + [size]:
        addr = -(-cursor // align) * align
        if addr + need <= start:
            return True
        if start < size:
            cursor = start + max(live[start], 1)
    return False
