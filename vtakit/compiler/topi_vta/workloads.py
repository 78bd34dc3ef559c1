"""Named benchmark workloads: the ResNet-18 convolutions C2-C11 (reference/vta.md §7.2)."""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import CompileError

__all__ = ["Conv2dWorkload", "RESNET18", "get_workload"]


@dataclass(frozen=True)
class Conv2dWorkload:
    """A square-kernel conv2d: input ``batch x ci x h x w``, ``co`` filters of ``kernel^2``."""

    h: int
    w: int
    ci: int
    co: int
    kernel: int
    pad: int
    stride: int
    batch: int = 1

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.batch * self.oh * self.ow * self.co * self.ci * self.kernel * self.kernel

    def __post_init__(self) -> None:
        for name in ("h", "w", "ci", "co", "kernel", "stride", "batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise CompileError(f"conv2d workload: {name} must be a positive int, got {v!r}")
        if not isinstance(self.pad, int) or self.pad < 0:
            raise CompileError(f"conv2d workload: pad must be a non-negative int, got {self.pad!r}")
        if self.oh < 1 or self.ow < 1:
            raise CompileError(f"conv2d workload: a {self.kernel}x{self.kernel} kernel with pad {self.pad} does not "
                               f"fit a {self.h}x{self.w} input")


RESNET18 = {
    "C2": Conv2dWorkload(56, 56, 64, 64, 3, 1, 1),
    "C3": Conv2dWorkload(56, 56, 64, 128, 3, 1, 2),
    "C4": Conv2dWorkload(56, 56, 64, 128, 1, 0, 2),
    "C5": Conv2dWorkload(28, 28, 128, 128, 3, 1, 1),
    "C6": Conv2dWorkload(28, 28, 128, 256, 3, 1, 2),
    "C7": Conv2dWorkload(28, 28, 128, 256, 1, 0, 2),
    "C8": Conv2dWorkload(14, 14, 256, 256, 3, 1, 1),
    "C9": Conv2dWorkload(14, 14, 256, 512, 3, 1, 2),
    "C10": Conv2dWorkload(14, 14, 256, 512, 1, 0, 2),
    "C11": Conv2dWorkload(7, 7, 512, 512, 3, 1, 1),
}


def get_workload(name: str) -> Conv2dWorkload:
    """``resnet18.C2`` ... ``resnet18.C11`` (the prefix is optional)."""
    key = name.split(".", 1)[1] if name.startswith("resnet18.") else name
    if key not in RESNET18:
        raise CompileError(f"unknown workload {name!r}; expected one of "
                           f"{['resnet18.' + k for k in RESNET18]}")
    return RESNET18[key]
