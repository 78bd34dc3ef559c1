"""Schedules the NVPTX backend tests build: TVM's GPU tutorials in small sizes."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit import te
from vtakit.compiler.backend.nvptx import ptxas_path

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas (the CUDA toolkit) is not installed")


def shared_gemm(n: int = 32, k: int = 32, tile: int = 8, dtype: str = "float32", fetch_threads: int | None = None,
                double_buffer: bool = False):
    """TVM's GEMM tutorial: shared-memory tiles of A and B per k step, a local accumulator; the
    tiles are fetched by ``fetch_threads`` (default ``tile``) threads along threadIdx.x, and with
    ``double_buffer`` the next A tile is fetched while the current one is used."""
    A = te.placeholder((n, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    kk = te.reduce_axis((0, k), "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, kk] * B[kk, j], axis=kk), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    bi, ti = s[C].split(s[C].op.axis[0], factor=tile)
    bj, tj = s[C].split(s[C].op.axis[1], factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, _ = s[CL].split(s[CL].op.reduce_axis[0], factor=tile)
    for X in (AA, BB):
        s[X].compute_at(s[CL], ko)
        s[X].bind(s[X].op.axis[0], te.thread_axis("threadIdx.y"))
        fetch = s[X].op.axis[1]
        if fetch_threads is not None:
            fetch, _ = s[X].split(fetch, nparts=fetch_threads)
        s[X].bind(fetch, te.thread_axis("threadIdx.x"))
    if double_buffer:
        s[AA].double_buffer()
    return s, [A, B, C]


def elementwise(n: int = 1000, threads: int = 128):
    """exp, tanh, sigmoid, sqrt and a cast on a vector whose length the block does not divide."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: te.exp(A[i]) * te.tanh(A[i]) + te.sigmoid(A[i]) * te.sqrt(te.abs(A[i]))
                   + (A[i] * 4).astype("int32").astype("float32"), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=threads)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def elementwise_ref(a: np.ndarray) -> np.ndarray:
    sigmoid = 1 / (1 + np.exp(-a))
    return (np.exp(a) * np.tanh(a) + sigmoid * np.sqrt(np.abs(a)) + np.trunc(a * 4)).astype("float32")


def row_sum(rows: int, cols: int, factor: int, dtype: str = "int32", rfactor: bool = True):
    """A cross-thread row reduction, with rfactor (TVM's reduction tutorial) or the reduce axis's
    inner part bound to threadIdx.x directly; ``factor`` threads per row, 4 rows per block."""
    A = te.placeholder((rows, cols), dtype, name="A")
    k = te.reduce_axis((0, cols), "k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=factor)
    tx = te.thread_axis("threadIdx.x")
    if rfactor:
        BF = s.rfactor(B, ki)
        xo, xi = s[B].split(s[B].op.axis[0], factor=4)
        s[B].bind(s[B].op.reduce_axis[0], tx)
        s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    else:
        xo, xi = s[B].split(B.op.axis[0], factor=4)
        s[B].bind(ki, tx)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    s[B].set_store_predicate(tx.var.equal(0))
    return s, [A, B]


def two_kernels(n: int = 64):
    """``S[i] = sum_k 2 X[i, k]`` with the doubled matrix a root stage of its own: two kernels and
    a workspace between them."""
    X = te.placeholder((n, n), "float32", name="X")
    E = te.compute((n, n), lambda i, j: X[i, j] * 2, name="E")
    k = te.reduce_axis((0, n), "k")
    S = te.compute((n,), lambda i: te.sum(E[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    for stage, (outer, inner) in ((E, E.op.axis), (S, s[S].split(S.op.axis[0], factor=32))):
        s[stage].bind(outer, te.thread_axis("blockIdx.x"))
        s[stage].bind(inner, te.thread_axis("threadIdx.x"))
    return s, [X, S]
