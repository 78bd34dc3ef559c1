"""Matrix multiply on the accelerator, written by hand with tensor expressions and tensorize.

This is TVM's VTA tutorial "Simple Matrix Multiply" ported to vtakit: the same declaration, the
same schedule (SRAM scopes, DMA pragmas, GEMM tensorization), then the whole round trip on a
simulated device: pack numpy data into the accelerator's blocked layout, copy it to device DRAM,
build, call, read the result back, unpack and compare with numpy.

Run it as it is: ``python examples/vta_matrix_multiply.py [--backend fsim|cycle|rtl]``.
"""

from __future__ import annotations

import argparse

import numpy as np

import vtakit
from vtakit import te
from vtakit.compiler import vta
from vtakit.runtime.packing import pack_matrix, unpack_matrix


def declare(env: vta.VTAEnv, o: int, n: int, m: int) -> tuple[te.Tensor, ...]:
    """C (o*BATCH x m*BLOCK_OUT) = A (o*BATCH x n*BLOCK_IN) . B^T, in the packed layouts."""
    A = te.placeholder((o, n, env.BATCH, env.BLOCK_IN), name="A", dtype=env.inp_dtype)
    B = te.placeholder((m, n, env.BLOCK_OUT, env.BLOCK_IN), name="B", dtype=env.wgt_dtype)
    A_buf = te.compute((o, n, env.BATCH, env.BLOCK_IN), lambda *i: A(*i), "A_buf")        # copies into SRAM
    B_buf = te.compute((m, n, env.BLOCK_OUT, env.BLOCK_IN), lambda *i: B(*i), "B_buf")
    ko = te.reduce_axis((0, n), name="ko")
    ki = te.reduce_axis((0, env.BLOCK_IN), name="ki")
    C_buf = te.compute(
        (o, m, env.BATCH, env.BLOCK_OUT),
        lambda bo, co, bi, ci: te.sum(
            A_buf[bo, ko, bi, ki].astype(env.acc_dtype) * B_buf[co, ko, ci, ki].astype(env.acc_dtype),
            axis=[ko, ki]),
        name="C_buf")
    C = te.compute((o, m, env.BATCH, env.BLOCK_OUT), lambda *i: C_buf(*i).astype(env.inp_dtype), name="C")
    return A, B, A_buf, B_buf, C_buf, C


def schedule(env: vta.VTAEnv, A_buf: te.Tensor, B_buf: te.Tensor, C_buf: te.Tensor, C: te.Tensor) -> te.Schedule:
    s = te.create_schedule(C.op)
    s[A_buf].set_scope(env.inp_scope)           # the on-chip buffers
    s[B_buf].set_scope(env.wgt_scope)
    s[C_buf].set_scope(env.acc_scope)
    ko, ki = s[C_buf].op.reduce_axis
    s[A_buf].compute_at(s[C_buf], ko)           # load one block column of A and B per ko
    s[B_buf].compute_at(s[C_buf], ko)
    s[A_buf].pragma(s[A_buf].op.axis[0], env.dma_copy)
    s[B_buf].pragma(s[B_buf].op.axis[0], env.dma_copy)
    s[C].pragma(s[C].op.axis[0], env.dma_copy)  # store the result from the accumulator
    bo, co, bi, ci = s[C_buf].op.axis
    s[C_buf].reorder(ko, bo, co, bi, ci, ki)
    s[C_buf].tensorize(bi, env.gemm)            # one (BATCH x BLOCK_IN) . (BLOCK_IN x BLOCK_OUT) GEMM
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cycle", help="fsim, cycle or rtl (default cycle)")
    args = parser.parse_args()

    env = vta.get_env()                          # VTA's default: 1x16x16, int8 x int8 -> int32
    o, n, m = 1, 16, 16                          # batch blocks, input and output channel blocks
    A, B, A_buf, B_buf, C_buf, C = declare(env, o, n, m)
    s = schedule(env, A_buf, B_buf, C_buf, C)
    print(vta.lower(s, [A, B, C], env))          # the loop IR with DMA, micro-op and token intrinsics
    my_gemm = vtakit.build(s, [A, B, C], target=env.target, config=env, name="my_gemm")

    dev = vtakit.Device(env.config, backend=args.backend)
    rng = np.random.default_rng(0)
    A_orig = rng.integers(-128, 128, size=(o * env.BATCH, n * env.BLOCK_IN), dtype=np.int8)
    B_orig = rng.integers(-128, 128, size=(m * env.BLOCK_OUT, n * env.BLOCK_IN), dtype=np.int8)
    A_dev = dev.array(pack_matrix(A_orig, env.BATCH, env.BLOCK_IN))      # 2-D -> packed 4-D, into DRAM
    B_dev = dev.array(pack_matrix(B_orig, env.BLOCK_OUT, env.BLOCK_IN))
    C_dev = dev.empty((o, m, env.BATCH, env.BLOCK_OUT), C.dtype)
    stats = my_gemm(A_dev, B_dev, C_dev)

    C_got = unpack_matrix(C_dev.numpy())                                    # packed 4-D -> 2-D
    C_ref = (A_orig.astype(np.int32) @ B_orig.T.astype(np.int32)).astype(np.int8)   # the cast wraps, as on VTA
    np.testing.assert_array_equal(C_got, C_ref)
    print(f"my_gemm on {args.backend}: {C_got.shape[0]}x{C_got.shape[1]}x{A_orig.shape[1]} int8 GEMM equals numpy; "
          f"{len(my_gemm.template.insns)} instructions, {stats.counters['gemm_counter']} GEMM micro-ops, "
          f"{'no timing on fsim' if stats.cycles is None else f'{stats.cycles} cycles'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
