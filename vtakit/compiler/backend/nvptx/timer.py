"""Timing a GPU kernel program on the GPU, its operands resident in device memory.

``CUDAModule.__call__`` copies every operand in and the outputs back on each call, which is right
for running a kernel once but measures PCIe, not the kernels. :func:`time_kernels` copies the
operands in once, launches the module's kernels ``number`` times per measurement (synchronising
after each batch), copies the results back once, and returns the mean seconds per launch of each
of ``repeat`` measurements, as TVM's ``time_evaluator`` does. It needs a GPU: where the CUDA driver
finds none it raises the driver's :class:`~vtakit.errors.DeviceError`.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from vtakit.compiler.backend.nvptx.split import allocation_bytes
from vtakit.errors import ArgumentError

__all__ = ["time_kernels"]


def time_kernels(module: Any, arrays: Sequence[np.ndarray], number: int = 10, repeat: int = 3) -> list[float]:
    """Seconds per run of ``module``'s kernels (a :class:`~vtakit.compiler.backend.nvptx.CUDAModule`) on
    ``arrays`` (one per parameter; the outputs are written back into them), ``repeat`` means of
    ``number`` runs each, after one warm-up run."""
    if not isinstance(number, int) or number < 1 or not isinstance(repeat, int) or repeat < 1:
        raise ArgumentError(f"time_kernels: number and repeat must be positive ints, got {number!r} and {repeat!r}")
    program = module.program
    if len(arrays) != len(program.params):
        raise ArgumentError(f"{module.name} takes {len(program.params)} arguments, got {len(arrays)}")
    driver, functions = module._load()   # the module's PTX is loaded (and JIT-compiled) once
    driver.make_current()
    pointers: dict[Any, int] = {}
    try:
        for buf, array in zip(program.params, arrays):
            pointers[buf.data] = driver.alloc(array.nbytes)
            driver.to_device(pointers[buf.data], np.ascontiguousarray(array))
        for buf in program.workspaces:
            pointers[buf.data] = driver.alloc(allocation_bytes(buf))

        def run() -> None:
            for kernel, function in zip(program.kernels, functions):
                driver.launch(function, kernel.grid, kernel.block, [pointers[b.data] for b in kernel.params])

        run()
        driver.synchronize()
        results = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                run()
            driver.synchronize()
            results.append((time.perf_counter() - start) / number)
        for buf, array in zip(program.params, arrays):
            if array.flags.writeable:
                driver.to_host(array, pointers[buf.data])
        return results
    finally:
        for pointer in pointers.values():
            driver.free(pointer)
