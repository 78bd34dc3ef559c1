"""GPU thread extents are cross-checked when a schedule is lowered (one extent per thread index
and kernel, CUDA's limits), with a ScheduleError naming the axis, the extents and the thread tag."""

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler.lower.thread_extent import MAX_THREADS_PER_BLOCK, THREAD_LIMITS
from vtakit.errors import ScheduleError


def _producer_in_block(producer_threads: int, consumer_threads: int):
    """B = A + 1 computed per block of C = 2 B; both bind threadIdx.x inside the same blockIdx.x loop."""
    A = te.placeholder((64,), "int32", name="A")
    B = te.compute((64,), lambda p: A[p] + 1, name="B")
    C = te.compute((64,), lambda c: B[c] * 2, name="C")
    s = te.create_schedule(C.op)
    bx, ci = s[C].split(C.op.axis[0], factor=32)
    co, ct = s[C].split(ci, factor=consumer_threads)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ct, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], bx)
    bo, bt = s[B].split(B.op.axis[0], factor=producer_threads)
    s[B].bind(bt, te.thread_axis("threadIdx.x"))
    return s, [A, C]


def test_two_extents_of_one_thread_index_in_a_kernel():
    s, args = _producer_in_block(16, 32)
    with pytest.raises(ScheduleError, match=r"stage C: axis c\.inner\.inner is bound to threadIdx\.x with extent 32, "
                                            r"but axis p\.inner of stage B is bound to threadIdx\.x with extent 16 "
                                            r"in the same kernel"):
        vtakit.lower(s, args)


def test_equal_extents_in_a_kernel_lower_and_run():
    s, args = _producer_in_block(16, 16)
    mod = vtakit.build(s, args, target="interpreter")
    a = np.arange(64, dtype="int32")
    c = np.zeros(64, "int32")
    mod(a, c)
    np.testing.assert_array_equal(c, (a + 1) * 2)


def test_separate_kernels_may_use_different_extents():
    """Two root stages are two kernels (as TVM's SplitHostDevice cuts them): no conflict."""
    A = te.placeholder((64,), "int32", name="A")
    B = te.compute((64,), lambda p: A[p] + 1, name="B")
    C = te.compute((64,), lambda c: B[c] * 2, name="C")
    s = te.create_schedule(C.op)
    for stage, threads in ((s[B], 16), (s[C], 32)):
        bx, tx = stage.split(stage.op.axis[0], factor=threads)
        stage.bind(bx, te.thread_axis("blockIdx.x"))
        stage.bind(tx, te.thread_axis("threadIdx.x"))
    text = str(vtakit.lower(s, [A, C]))
    assert text.count('"threadIdx.x"') == 2


@pytest.mark.parametrize("tag", ["threadIdx.x", "threadIdx.z", "blockIdx.y"])
def test_extent_above_the_limit(tag):
    limit = THREAD_LIMITS[tag]
    A = te.placeholder((2 * (limit + 1),), "int8", name="A")
    B = te.compute(A.shape, lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    outer, inner = s[B].split(B.op.axis[0], factor=limit + 1)
    s[B].bind(inner, te.thread_axis(tag))
    with pytest.raises(ScheduleError, match=rf"stage B: axis i\.inner is bound to {tag} with extent {limit + 1}, "
                                            rf"above the limit of {limit}"):
        vtakit.lower(s, [A, B])


def test_threads_per_block_above_the_limit():
    A = te.placeholder((64, 32), "int32", name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=rf"threadIdx\.y 64 \(axis i of stage B\) x threadIdx\.x 32 \(axis j of "
                                            rf"stage B\) = 2048 threads per block, above the limit of "
                                            rf"{MAX_THREADS_PER_BLOCK}"):
        vtakit.lower(s, [A, B])


def test_unknown_thread_index():
    A = te.placeholder((8,), "int32", name="A")
    B = te.compute(A.shape, lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.w"))
    with pytest.raises(ScheduleError, match=r"stage B: axis i is bound to unknown thread index 'threadIdx\.w'"):
        vtakit.lower(s, [A, B])
