"""What a run reports: ``RunStats`` (docs/architecture.md §3), shared by every backend.

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


@dataclass(repr=False)
class RunStats:
    """Results of one program run on one backend.

    ``print(stats)`` gives a one-line summary; :meth:`describe` every figure, the per-instruction
    retire cycles only when asked for (a layer has thousands).
    """

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

    def __repr__(self) -> str:
        parts = [f"backend={self.backend!r}"]
        if self.cycles is not None:
            parts.append(f"cycles={self.cycles}")
        if self.utilization is not None:
            parts.append(f"utilization={self.utilization:.1%}")
        parts += [f"gemm_counter={self.counters.get('gemm_counter')}", f"alu_counter={self.counters.get('alu_counter')}"]
        if self.retire_cycles is not None:
            parts.append(f"retire_cycles=[{len(self.retire_cycles)} instructions]")
        parts.append(f"sim_seconds={self.sim_seconds:.3f}")
        return f"RunStats({', '.join(parts)})"

    def describe(self, retire_cycles: bool = False) -> str:
        """Every figure of the run, one per line; the retire cycle of each instruction with ``retire_cycles``."""
        rows: list[tuple[str, Any]] = [("backend", self.backend), ("cycles", self.cycles),
                                       ("ideal cycles", self.ideal_cycles)]
        if self.utilization is not None:
            rows.append(("utilization", f"{self.utilization:.1%}"))
        rows += list(self.counters.items())
        if self.dram_read_bytes is not None:
            rows += [("dram read bytes", self.dram_read_bytes), ("dram write bytes", self.dram_write_bytes)]
        for what, cycles in (("busy", self.busy_cycles), ("token stall", self.token_stall_cycles),
                             ("memory stall", self.memory_stall_cycles), ("idle", self.idle_cycles)):
            if cycles is not None:
                rows.append((f"{what} cycles", ", ".join(f"{m} {c}" for m, c in cycles.items())))
        rows.append(("sim seconds", f"{self.sim_seconds:.3f}"))
        if self.retire_cycles is not None:
            rows.append(("retire cycles", " ".join(map(str, self.retire_cycles)) if retire_cycles
                         else f"{len(self.retire_cycles)} instructions (describe(retire_cycles=True) lists them)"))
        width = max(len(key) for key, _ in rows)
        return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ideal_cycles=self.ideal_cycles, utilization=self.utilization,
                   dram_bandwidth=self.dram_bandwidth)
        return out
