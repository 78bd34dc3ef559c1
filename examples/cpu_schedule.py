"""A matrix multiply scheduled for the host CPU: the same TE, two schedules, timed against numpy.

The declaration says what to compute; the schedule says how: tile the output into blocks that
stay in cache, put the reduction between the tile loops, vectorise the innermost loop and run the
outer tiles on all cores. ``vtakit.build(..., target="llvm")`` compiles each schedule with
llvmlite; the module is called TVM-style, with the output among the arguments.

Run it as it is: ``python examples/cpu_schedule.py [--size N]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

import vtakit
from vtakit import te


def declare(n: int) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def default_schedule(C: te.Tensor) -> te.Schedule:
    return te.create_schedule(C.op)              # i, j, k in order: strided reads of B


def tiled_schedule(C: te.Tensor, tile: int = 32, lanes: int = 8) -> te.Schedule:
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=4)
    jio, jii = s[C].split(ji, factor=lanes)
    s[C].reorder(io, jo, ko, ii, ki, jio, jii)   # B's rows are read contiguously in the inner loops
    s[C].vectorize(jii)
    s[C].unroll(ki)
    s[C].parallel(io)
    return s


def best_seconds(run: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="N of the N x N x N matrix multiply (default 256)")
    args = parser.parse_args()
    n = args.size
    A, B, C = declare(n)
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    expect = a @ b
    gflop = 2 * n ** 3 / 1e9
    print(vtakit.lower(tiled_schedule(C), [A, B, C]))    # the loop nest the tiled schedule produces
    print(f"{n}x{n}x{n} float32 matrix multiply")
    for name, s in (("default schedule", default_schedule(C)), ("tiled schedule", tiled_schedule(C))):
        mod = vtakit.build(s, [A, B, C], target="llvm")
        c = np.zeros((n, n), np.float32)
        mod(a, b, c)
        np.testing.assert_allclose(c, expect, rtol=1e-4)    # checked against numpy before it is timed
        seconds = best_seconds(lambda: mod(a, b, c))
        print(f"  {name:17s} {seconds * 1e3:8.2f} ms  {gflop / seconds:7.2f} GFLOP/s  (equals numpy)")
    seconds = best_seconds(lambda: a @ b)
    print(f"  {'numpy (BLAS)':17s} {seconds * 1e3:8.2f} ms  {gflop / seconds:7.2f} GFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
