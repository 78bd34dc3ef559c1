"""A GPU kernel program as a saved network module keeps it: its PTX and each kernel's launch.

A network built for the ``cuda`` target saves, per kernel program, the PTX (every ``__global__``
function of one fused group) and each function's launch geometry: ``GPUKernelCode.from_json(
code.to_json(), code.ptx)`` is the same record. It lets a saved module's PTX be read and checked
(ptxas, another machine's driver) without the compiler. It is not a callable kernel: the emulator
needs the lowered loop IR, which the file does not hold, so calling it raises an error that says to
build the network again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from vtakit.errors import ArgumentError

__all__ = ["GPUKernelLaunch", "GPUKernelCode"]


def _triple(value: Any, what: str) -> tuple[int, int, int]:
    values = tuple(int(v) for v in value)
    if len(values) != 3 or min(values) < 1:
        raise ArgumentError(f"{what} must be three positive ints, got {value!r}")
    return values  # type: ignore[return-value]


@dataclass(frozen=True)
class GPUKernelLaunch:
    """One ``__global__`` function of a program: its name, grid and block, static shared bytes."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "grid": list(self.grid), "block": list(self.block),
                "shared_bytes": self.shared_bytes}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "GPUKernelLaunch":
        try:
            return cls(str(data["name"]), _triple(data["grid"], "grid"), _triple(data["block"], "block"),
                       int(data.get("shared_bytes", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"malformed GPU kernel launch {data!r}: {exc}") from None


@dataclass(frozen=True)
class GPUKernelCode:
    """The PTX of one kernel program, the architecture it was generated for, and its kernels in launch order."""

    ptx: str
    arch: str
    kernels: tuple[GPUKernelLaunch, ...]

    def to_json(self) -> dict[str, Any]:
        """Everything but the PTX (a saved module stores it in a file of its own)."""
        return {"arch": self.arch, "kernels": [k.to_json() for k in self.kernels]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], ptx: str) -> "GPUKernelCode":
        try:
            kernels = tuple(GPUKernelLaunch.from_json(k) for k in data["kernels"])
            return cls(str(ptx), str(data["arch"]), kernels)
        except (KeyError, TypeError) as exc:
            raise ArgumentError(f"malformed GPU kernel program {data!r}: {exc}") from None

    def __call__(self, *arrays: Any) -> None:
        raise ArgumentError(f"kernels {[k.name for k in self.kernels]} were loaded from a saved module, which keeps "
                            "their PTX only; build the network again with vtakit.graph.build(..., target='cuda') to "
                            "run it on a GPU or emulate it")
