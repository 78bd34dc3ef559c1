"""Conv2d workloads (:class:`Conv2dWorkload`) and the named benchmark ones: the ResNet-18
convolutions C2-C11 (reference/vta.md §7.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from vtakit.errors import CompileError

__all__ = ["Conv2dWorkload", "RESNET18", "get_workload"]


def _ints(value: object, n: int, name: str, minimum: int) -> tuple[int, ...]:
    """``value`` (an int, or ``n`` ints) as a tuple of ``n`` ints >= ``minimum``."""
    vals = (value,) * n if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        vals = tuple(vals)
    except TypeError:
        vals = ()
    if len(vals) != n or any(isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in vals):
        what = "positive" if minimum > 0 else "non-negative"
        raise CompileError(f"conv2d workload: {name} must be a {what} int or {n} {what} ints, got {value!r}")
    return vals


@dataclass(frozen=True)
class Conv2dWorkload:
    """A conv2d: input ``batch x ci x h x w``, ``co`` filters of ``kh x kw``.

    ``Conv2dWorkload(h, w, ci, co, kernel, pad, stride, batch=1)`` takes ints (a square kernel, the
    same pad on every side, one stride) or ``kernel=(kh, kw)``, ``pad=(top, left, bottom, right)``
    and ``stride=(sh, sw)``. The pad order is ONNX's for 2-D: its ``pads`` attribute is
    ``(begin_h, begin_w, end_h, end_w)`` = (top, left, bottom, right). The fields are normalised to
    those tuples (``wl.kernel == (3, 3)``); :attr:`kh` ... :attr:`stride_w` name their parts.

    :attr:`key` is the one flat, JSON-friendly tuple of ints that names a workload (tuning task
    arguments, log records, kernel dedup); :meth:`from_key` inverts it.
    """

    h: int
    w: int
    ci: int
    co: int
    kernel: int | tuple[int, int]
    pad: int | tuple[int, int, int, int]
    stride: int | tuple[int, int]
    batch: int = 1

    def __post_init__(self) -> None:
        for name in ("h", "w", "ci", "co", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CompileError(f"conv2d workload: {name} must be a positive int, got {v!r}")
        object.__setattr__(self, "kernel", _ints(self.kernel, 2, "kernel", 1))
        object.__setattr__(self, "pad", _ints(self.pad, 4, "pad", 0))
        object.__setattr__(self, "stride", _ints(self.stride, 2, "stride", 1))
        if self.oh < 1 or self.ow < 1:
            raise CompileError(f"conv2d workload: a {self.kh}x{self.kw} kernel with pad {self.pad} (top, left, "
                               f"bottom, right) does not fit a {self.h}x{self.w} input")

    @property
    def kh(self) -> int:
        return self.kernel[0]

    @property
    def kw(self) -> int:
        return self.kernel[1]

    @property
    def pad_top(self) -> int:
        return self.pad[0]

    @property
    def pad_left(self) -> int:
        return self.pad[1]

    @property
    def pad_bottom(self) -> int:
        return self.pad[2]

    @property
    def pad_right(self) -> int:
        return self.pad[3]

    @property
    def stride_h(self) -> int:
        return self.stride[0]

    @property
    def stride_w(self) -> int:
        return self.stride[1]

    @property
    def oh(self) -> int:
        return (self.h + self.pad_top + self.pad_bottom - self.kh) // self.stride_h + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pad_left + self.pad_right - self.kw) // self.stride_w + 1

    @property
    def macs(self) -> int:
        return self.batch * self.oh * self.ow * self.co * self.ci * self.kh * self.kw

    @property
    def key(self) -> tuple[int, ...]:
        """``(h, w, ci, co, kh, kw, pad_top, pad_left, pad_bottom, pad_right, stride_h, stride_w, batch)``."""
        return (self.h, self.w, self.ci, self.co, *self.kernel, *self.pad, *self.stride, self.batch)

    @classmethod
    def from_key(cls, key: Sequence[int]) -> "Conv2dWorkload":
        """The workload of a :attr:`key` (13 ints), or of the older 7-int form ``(h, w, ci, co,
        kernel, pad, stride)`` (square kernel, symmetric pad, one stride, batch 1) that earlier
        tuning logs hold."""
        key = tuple(key)
        if not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in key):
            raise CompileError(f"conv2d workload key {key!r} must hold ints only")
        key = tuple(int(k) for k in key)
        if len(key) == 7:
            return cls(*key)
        if len(key) == 13:
            h, w, ci, co, kh, kw, pt, pl, pb, pr, sh, sw, batch = key
            return cls(h, w, ci, co, (kh, kw), (pt, pl, pb, pr), (sh, sw), batch)
        raise CompileError(f"conv2d workload key {key!r}: expected 13 ints (h, w, ci, co, kh, kw, pad_top, "
                           "pad_left, pad_bottom, pad_right, stride_h, stride_w, batch) or the older 7 "
                           "(h, w, ci, co, kernel, pad, stride)")


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
