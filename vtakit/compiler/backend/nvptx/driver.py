"""The CUDA driver API through ctypes: load PTX, move arrays, launch kernels.

Only the few driver calls a built module needs (``cuInit``, the device's primary context,
``cuModuleLoadData``, ``cuMemAlloc``/``cuMemFree``, ``cuMemcpyHtoD``/``cuMemcpyDtoH``,
``cuLaunchKernel``, ``cuCtxSynchronize``), so no CUDA Python package is required: ``libcuda``
comes with the NVIDIA driver. Where there is no driver or no GPU, :func:`cuda_driver` raises
:class:`~vtakit.errors.DeviceError`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from vtakit.errors import DeviceError

__all__ = ["CUDADriver", "cuda_driver", "LIBRARY_NAMES"]

LIBRARY_NAMES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")
_lock = threading.Lock()
_driver: "CUDADriver | None" = None


def cuda_driver() -> "CUDADriver":
    """The process's driver, initialised on first use (a DeviceError where no GPU can be used)."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = CUDADriver(_load_library())
        return _driver


def _load_library() -> Any:
    names = [*LIBRARY_NAMES, ctypes.util.find_library("cuda")]
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise DeviceError(f"no CUDA driver library ({', '.join(LIBRARY_NAMES)}) can be loaded, so there is no GPU "
                      "to run on; run the kernels on the CPU with mod.emulate(*arrays) instead")


@dataclass
class CUDADriver:
    """A CUDA driver library with device 0's primary context made current."""

    lib: Any

    def __post_init__(self) -> None:
        self._call("cuInit", ctypes.c_uint(0))
        count = ctypes.c_int(0)
        self._call("cuDeviceGetCount", ctypes.byref(count))
        if count.value < 1:
            raise DeviceError("the CUDA driver finds no GPU; run the kernels on the CPU with mod.emulate(*arrays) "
                              "instead")
        self.device = ctypes.c_int(0)
        self._call("cuDeviceGet", ctypes.byref(self.device), ctypes.c_int(0))
        self.context = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.device)
        self.make_current()

    def _call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            message = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(message))
            text = message.value.decode() if message.value else "unknown error"
            raise DeviceError(f"CUDA driver call {name} failed with status {status}: {text}")

    def make_current(self) -> None:
        """Bind the context to the calling thread (the driver keeps one per thread)."""
        self._call("cuCtxSetCurrent", self.context)

    def load_module(self, ptx: str) -> ctypes.c_void_p:
        module = ctypes.c_void_p()
        self._call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(ptx.encode() + b"\0"))
        return module

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        function = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
        return function

    def alloc(self, nbytes: int) -> int:
        pointer = ctypes.c_uint64(0)
        self._call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(max(1, nbytes)))
        return pointer.value

    def free(self, pointer: int) -> None:
        self._call("cuMemFree_v2", ctypes.c_uint64(pointer))

    def to_device(self, pointer: int, array: np.ndarray) -> None:
        if array.nbytes:
            self._call("cuMemcpyHtoD_v2", ctypes.c_uint64(pointer), ctypes.c_void_p(array.ctypes.data),
                       ctypes.c_size_t(array.nbytes))

    def to_host(self, array: np.ndarray, pointer: int) -> None:
        if array.nbytes:
            self._call("cuMemcpyDtoH_v2", ctypes.c_void_p(array.ctypes.data), ctypes.c_uint64(pointer),
                       ctypes.c_size_t(array.nbytes))

    def launch(self, function: ctypes.c_void_p, grid: tuple[int, int, int], block: tuple[int, int, int],
               pointers: list[int]) -> None:
        """Launch ``function`` with one device pointer per parameter (static shared memory only)."""
        values = [ctypes.c_uint64(p) for p in pointers]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        self._call("cuLaunchKernel", function, *(ctypes.c_uint(n) for n in grid), *(ctypes.c_uint(n) for n in block),
                   ctypes.c_uint(0), ctypes.c_void_p(None), params, ctypes.c_void_p(None))

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")
