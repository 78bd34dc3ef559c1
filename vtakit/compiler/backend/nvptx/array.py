"""Arrays in GPU memory, so that operands can stay on the device between module calls.

TVM's ``tvm.nd.array(a, tvm.cuda())``: :func:`cuda_array` copies a numpy array to the GPU,
:meth:`CUDAArray.empty` allocates one there, :meth:`CUDAArray.numpy` copies it back. A built
:class:`~vtakit.compiler.backend.nvptx.CUDAModule` takes them in place of numpy arrays and then
copies nothing. The memory is freed with :meth:`CUDAArray.free` or when the array is collected.
Where there is no GPU, creating one raises :class:`~vtakit.errors.DeviceError`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vtakit.compiler.backend.nvptx.driver import CUDADriver, cuda_driver
from vtakit.errors import ArgumentError, DeviceError

__all__ = ["CUDAArray", "cuda_array"]


class CUDAArray:
    """A C-contiguous array of ``shape`` and ``dtype`` in the GPU's global memory."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, driver: CUDADriver | None = None) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        if any(n < 0 for n in self.shape):
            raise ArgumentError(f"CUDAArray: negative extent in shape {self.shape}")
        self._driver = driver or cuda_driver()
        self._driver.make_current()
        self.pointer: int | None = self._driver.alloc(self.nbytes)

    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: Any = "float32") -> "CUDAArray":
        return cls(shape, dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"<CUDAArray {self.shape} {self.dtype}{' (freed)' if self.pointer is None else ''}>"

    def _live(self) -> int:
        if self.pointer is None:
            raise DeviceError(f"{self!r} was freed")
        return self.pointer

    def copyfrom(self, array: np.ndarray) -> "CUDAArray":
        """Copy a numpy array of the same shape and dtype into this one."""
        if not isinstance(array, np.ndarray) or array.shape != self.shape or array.dtype != self.dtype:
            got = f"{array.shape} {array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
            raise ArgumentError(f"copyfrom: expected a {self.shape} {self.dtype} numpy array, got {got}")
        self._driver.make_current()
        self._driver.to_device(self._live(), np.ascontiguousarray(array))
        return self

    def numpy(self) -> np.ndarray:
        """A copy of the array's contents on the host."""
        out = np.empty(self.shape, self.dtype)
        self._driver.make_current()
        self._driver.to_host(out, self._live())
        return out

    def free(self) -> None:
        if self.pointer is not None:
            self._driver.make_current()
            self._driver.free(self.pointer)
            self.pointer = None

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 -- the driver may already be gone at interpreter exit
            pass


def cuda_array(array: np.ndarray) -> CUDAArray:
    """A copy of ``array`` in GPU memory."""
    if not isinstance(array, np.ndarray):
        raise ArgumentError(f"cuda_array expects a numpy array, got {type(array).__name__}")
    return CUDAArray(array.shape, array.dtype).copyfrom(array)
