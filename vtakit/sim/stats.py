"""What a run reports: ``RunStats`` (DESIGN §2.5), shared by every backend.

The functional simulator fills the data counters only; timed backends add cycles, per-instruction
retire cycles and per-module accounting. Counter names follow VTA's fsim profiler.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vtakit.hw.isa import Stage

__all__ = ["RunStats", "COUNTER_NAMES", "MODULES", "STAGE_MODULES"]

COUNTER_NAMES = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
                 "out_store_nbytes", "gemm_counter", "alu_counter")
STAGE_MODULES = tuple(stage.name.lower() for stage in Stage)  # load, compute, store: fetch's targets
MODULES = ("fetch", *STAGE_MODULES)


@dataclass
class RunStats:
    """Results of one program run on one backend."""

    backend: str
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))
    cycles: int | None = None
    retire_cycles: list[int] | None = None
    busy_cycles: dict[str, int] | None = None
    token_stall_cycles: dict[str, int] | None = None
    memory_stall_cycles: dict[str, int] | None = None
    idle_cycles: dict[str, int] | None = None
    dram_read_bytes: int | None = None
    dram_write_bytes: int | None = None
    sim_seconds: float = 0.0

    @property
    def ideal_cycles(self) -> int:
        """GEMM micro-ops executed: the cycles a perfect machine would need."""
        return self.counters["gemm_counter"]

    @property
    def utilization(self) -> float | None:
        """GEMM micro-ops per cycle (None without timing)."""
        if not self.cycles:
            return None
        return self.ideal_cycles / self.cycles

    @property
    def dram_bandwidth(self) -> float | None:
        """Achieved DRAM bytes per cycle (None without timing)."""
        if not self.cycles or self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return (self.dram_read_bytes + self.dram_write_bytes) / self.cycles

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ideal_cycles=self.ideal_cycles, utilization=self.utilization,
                   dram_bandwidth=self.dram_bandwidth)
        return out
