"""Static occupancy: how many blocks of a kernel fit on one streaming multiprocessor, without a GPU.

What CUDA's occupancy calculator computes from a kernel's launch and ptxas's resource report: the
blocks an SM holds at once are limited by its warps, its register file (allocated per warp in
units of 256 registers), its shared memory (allocated per block in units of 128 bytes, plus 1 KiB
the system reserves per block) and its block slots; the occupancy is the resident warps over the
SM's maximum. The limits are those of an A100 (sm_80) by default, the figures the GPU benchmark
reports when there is no GPU to measure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["SMLimits", "SM80", "Occupancy", "occupancy"]


@dataclass(frozen=True)
class SMLimits:
    """One streaming multiprocessor's resources (CUDA's "compute capability" table)."""

    name: str
    registers: int = 65536
    max_threads: int = 2048
    shared_bytes: int = 164 * 1024
    max_blocks: int = 32
    warp_size: int = 32
    register_unit: int = 256         # registers are allocated per warp in units of this many
    shared_unit: int = 128           # shared memory is allocated per block in units of this many bytes
    reserved_shared_per_block: int = 1024


SM80 = SMLimits("sm_80")


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM, the resource that limits them, and the share of the SM's warps used."""

    threads_per_block: int
    registers_per_thread: int
    shared_per_block: int
    blocks_per_sm: int
    limited_by: str
    occupancy: float

    def to_dict(self) -> dict:
        return asdict(self)


def occupancy(threads_per_block: int, registers_per_thread: int, shared_per_block: int,
              limits: SMLimits = SM80) -> Occupancy:
    """The static occupancy of a kernel launched with ``threads_per_block`` threads that uses
    ``registers_per_thread`` registers and ``shared_per_block`` bytes of shared memory."""
    for what, value in (("threads_per_block", threads_per_block), ("registers_per_thread", registers_per_thread),
                        ("shared_per_block", shared_per_block)):
        if not isinstance(value, int) or value < (1 if what == "threads_per_block" else 0):
            raise ValueError(f"occupancy: {what} must be a {'positive' if what == 'threads_per_block' else 'non-negative'}"
                             f" int, got {value!r}")
    if threads_per_block > limits.max_threads:
        raise ValueError(f"occupancy: {threads_per_block} threads per block exceed the SM's {limits.max_threads}")
    warps = -(-threads_per_block // limits.warp_size)
    max_warps = limits.max_threads // limits.warp_size
    per_warp_regs = -(-registers_per_thread * limits.warp_size // limits.register_unit) * limits.register_unit
    shared = -(-shared_per_block // limits.shared_unit) * limits.shared_unit + limits.reserved_shared_per_block
    bounds = {
        "threads": max_warps // warps,
        "registers": limits.registers // (per_warp_regs * warps) if per_warp_regs else limits.max_blocks,
        "shared memory": limits.shared_bytes // shared,
        "blocks": limits.max_blocks,
    }
    limited_by = min(bounds, key=lambda k: bounds[k])
    blocks = bounds[limited_by]
    return Occupancy(threads_per_block, registers_per_thread, shared_per_block, blocks, limited_by,
                     blocks * warps / max_warps)
