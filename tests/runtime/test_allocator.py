"""The DRAM allocator: alignment, first fit, coalescing, reservations and every error."""

import pytest

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
