"""Named CPU layout kernels: the pack / unpack steps at the borders of accelerator regions.

A network built for the accelerator moves a tensor between the CPU's NCHW (or ``(M, K)``) layout
and the accelerator's blocked layouts (:mod:`vtakit.runtime.packing`) only where it crosses
between a CPU layer and an accelerator layer. Those steps are plain numpy functions of a name and
a few integer parameters, so a saved network can rebuild them from its plan:
``LayoutKernel.from_json(kernel.to_json())`` is the same kernel. Each kernel is called, as every
graph-executor kernel, with its input array then its output array and writes the output in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from vtakit.errors import ArgumentError
from vtakit.runtime.packing import pack_matrix, pack_nchw, unpack_matrix, unpack_nchw

__all__ = ["LayoutKernel", "LAYOUT_KERNELS", "layout_kernel"]


def _pack_nchw(x: np.ndarray, out: np.ndarray, batch: int, block: int) -> None:
    out[...] = pack_nchw(x, batch, block)


def _unpack_nchw(x: np.ndarray, out: np.ndarray) -> None:
    out[...] = unpack_nchw(x, out.shape)


def _pack_matrix(x: np.ndarray, out: np.ndarray, rows: int, cols: int) -> None:
    out[...] = pack_matrix(x, rows, cols)


def _unpack_matrix(x: np.ndarray, out: np.ndarray) -> None:
    out[...] = unpack_matrix(x, out.shape)


def _repack_nchw(x: np.ndarray, out: np.ndarray, batch: int, channels: int, block: int) -> None:
    """A packed NCHW tensor of one channel block to another (BLOCK_OUT -> BLOCK_IN), padding kept zero."""
    full = unpack_nchw(x)
    out[...] = pack_nchw(full[:, :channels], batch, block)


#: kernel name -> function(input, output, **params)
LAYOUT_KERNELS: dict[str, Callable[..., None]] = {
    "pack_nchw": _pack_nchw,
    "unpack_nchw": _unpack_nchw,
    "pack_matrix": _pack_matrix,
    "unpack_matrix": _unpack_matrix,
    "repack_nchw": _repack_nchw,
}


@dataclass(frozen=True)
class LayoutKernel:
    """The layout kernel ``name`` with its integer ``params``: ``kernel(x, out)`` writes ``out``."""

    name: str
    params: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in LAYOUT_KERNELS:
            raise ArgumentError(f"unknown layout kernel {self.name!r}; expected one of {sorted(LAYOUT_KERNELS)}")
        object.__setattr__(self, "params", {k: int(v) for k, v in dict(self.params).items()})

    @property
    def key(self) -> str:
        """A string naming the kernel and its parameters (equal kernels share it)."""
        return "layout:" + self.name + "".join(f",{k}={v}" for k, v in sorted(self.params.items()))

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        LAYOUT_KERNELS[self.name](x, out, **self.params)

    def bind(self, x: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        function, params = LAYOUT_KERNELS[self.name], dict(self.params)
        return lambda: function(x, out, **params)

    def to_json(self) -> dict[str, Any]:
        return {"layout_kernel": self.name, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LayoutKernel":
        try:
            return cls(str(data["layout_kernel"]), dict(data.get("params", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"malformed layout kernel {data!r}: {exc}") from None

    def __hash__(self) -> int:
        return hash(self.key)


def layout_kernel(name: str, **params: int) -> LayoutKernel:
    """The layout kernel ``name`` with ``params`` (see :data:`LAYOUT_KERNELS`)."""
    return LayoutKernel(name, params)
