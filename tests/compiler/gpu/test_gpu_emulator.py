"""The GPU emulator on hand-written kernels: results equal numpy, and each class of GPU bug it
exists to catch (shared-memory races, divergent barriers, out-of-bounds accesses, global
write-write races) is reported with the kernel, buffer, element and threads involved."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import vtakit
from vtakit.compiler import ir, te
from vtakit.compiler.backend.nvptx import split_host_device
from vtakit.compiler.backend.nvptx.program import DeviceKernel, DeviceProgram, barrier, is_barrier
from vtakit.compiler.gpu_emulator import Emulator, emulate
from vtakit.compiler.ir_builder import IRBuilder
from vtakit.errors import (CompileError, DivergentBarrierError, GlobalMemoryRaceError, MemoryAccessError,
                           SharedMemoryRaceError)


def _threads(*tags: str) -> dict[str, ir.Var]:
    return {tag: ir.Var(tag.replace("Idx.", "_"), "int32") for tag in tags}


def _program(name: str, params: tuple[ir.Buffer, ...], body: ir.Stmt, tv: dict[str, ir.Var],
             grid: tuple[int, int, int], block: tuple[int, int, int], workspaces: tuple = ()) -> DeviceProgram:
    kernel = DeviceKernel(f"{name}_kernel0", params, body, tv, grid, block)
    return DeviceProgram(name, params, [kernel], list(workspaces))


# ---------------------------------------------------------------------------- element-wise
def _add_program(n: int, dtype: str, threads: int, guard: bool = True) -> DeviceProgram:
    a, b, c = (ir.Buffer(x, (n,), dtype) for x in "ABC")
    tv = _threads("blockIdx.x", "threadIdx.x")
    i = tv["blockIdx.x"] * threads + tv["threadIdx.x"]
    store = c.vstore(i, a[i] + b[i])
    body = ir.IfThenElse(i < n, store) if guard else store
    return _program("add", (a, b, c), body, tv, (-(-n // threads), 1, 1), (threads, 1, 1))


def test_elementwise_int8_wraps_like_numpy() -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, 100, dtype=np.int8) for _ in range(2))
    c = np.zeros(100, np.int8)
    emulate(_add_program(100, "int8", 32), [a, b, c])
    np.testing.assert_array_equal(c, a + b)


def test_elementwise_float32_stays_float32() -> None:
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    c = np.zeros(64, np.float32)
    emulate(_add_program(64, "float32", 16), [a, b, c])
    np.testing.assert_array_equal(c, a + b)


def test_out_of_bounds_thread_index_names_buffer_index_and_thread() -> None:
    # 80 elements, 3 blocks of 32 threads and no guard: thread 16 of block 2 reads A[80]
    prog = _add_program(80, "int32", 32, guard=False)
    a, b, c = np.ones(80, np.int32), np.ones(80, np.int32), np.zeros(80, np.int32)
    with pytest.raises(MemoryAccessError, match=re.escape("A[80] (size 80)") + ".*add_kernel0.*"
                       + re.escape("blockIdx=(2, 0, 0), threadIdx=(16, 0, 0)")):
        emulate(prog, [a, b, c])


def test_argument_mismatch_is_an_error() -> None:
    prog = _add_program(64, "int32", 32)
    with pytest.raises(CompileError, match=r"argument 2 \(C\): expected an array of shape \(64,\) and dtype int32"):
        emulate(prog, [np.zeros(64, np.int32), np.zeros(64, np.int32), np.zeros(63, np.int32)])
    with pytest.raises(CompileError, match="add takes 3 arrays"):
        emulate(prog, [np.zeros(64, np.int32)])


def test_bad_geometry_and_tags_are_errors() -> None:
    a = ir.Buffer("A", (4,), "int32")
    tv = _threads("threadIdx.x")
    body = a.vstore(tv["threadIdx.x"], 1)
    with pytest.raises(CompileError, match=r"kernel k_kernel0: block must be three positive ints .*got \(4, 0, 1\)"):
        emulate(_program("k", (a,), body, tv, (1, 1, 1), (4, 0, 1)), [np.zeros(4, np.int32)])
    bad = {"threadIdx.w": tv["threadIdx.x"]}
    with pytest.raises(CompileError, match=r"unknown thread tags \['threadIdx.w'\]"):
        emulate(_program("k", (a,), body, bad, (1, 1, 1), (4, 1, 1)), [np.zeros(4, np.int32)])
    with pytest.raises(CompileError, match="emulate expects a DeviceProgram, got PrimFunc"):
        emulate(ir.PrimFunc("f", (a,), body), [np.zeros(4, np.int32)])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- tiled GEMM
def _gemm_program(n: int, tile: int, kt: int, threads: int, dtype: str, drop_barrier: int | None = None) -> DeviceProgram:
    """C = A @ B (n x n), one ``tile`` x ``tile`` block of C per block, each of the ``threads`` x
    ``threads`` threads computing (tile/threads)^2 outputs from shared ``kt``-wide slabs of A and B,
    with a barrier after the cooperative fetch and one after the compute (``drop_barrier`` leaves
    out barrier 0 or 1)."""
    a, b, c = (ir.Buffer(x, (n, n), dtype) for x in "ABC")
    tv = _threads("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y")
    bx, by, tx, ty = (tv[t] for t in ("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"))
    per, fetch = tile // threads, tile * kt // (threads * threads)
    ib = IRBuilder()
    a_sh = ib.allocate(dtype, (tile * kt,), "A_shared", scope="shared")
    b_sh = ib.allocate(dtype, (kt * tile,), "B_shared", scope="shared")
    acc = ib.allocate(dtype, (per * per,), "C_local", scope="local")
    with ib.for_range(0, per * per, "z") as z:
        ib.emit(acc.vstore(z, ir.const(0, dtype)))
    with ib.for_range(0, n // kt, "ko") as ko:
        with ib.for_range(0, fetch, "f") as f:
            idx = (ty * threads + tx) * fetch + f
            ib.emit(a_sh.vstore(idx, a[by * tile + idx // kt, ko * kt + idx % kt]))
            ib.emit(b_sh.vstore(idx, b[ko * kt + idx // tile, bx * tile + idx % tile]))
        if drop_barrier != 0:
            ib.emit(barrier())
        with ib.for_range(0, kt, "k") as k:
            with ib.for_range(0, per, "ii") as ii:
                with ib.for_range(0, per, "jj") as jj:
                    z = ii * per + jj
                    ib.emit(acc.vstore(z, acc[z] + a_sh[(ty * per + ii) * kt + k] * b_sh[k * tile + tx * per + jj]))
        if drop_barrier != 1:
            ib.emit(barrier())
    with ib.for_range(0, per, "ii") as ii:
        with ib.for_range(0, per, "jj") as jj:
            ib.emit(c.vstore((by * tile + ty * per + ii, bx * tile + tx * per + jj), acc[ii * per + jj]))
    return _program("gemm", (a, b, c), ib.get(), tv, (n // tile, n // tile, 1), (threads, threads, 1))


def test_shared_memory_tiled_gemm_equals_numpy() -> None:
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-100, 100, (32, 32), dtype=np.int32) for _ in range(2))
    c = np.zeros((32, 32), np.int32)
    emulate(_gemm_program(32, 16, 8, 8, "int32"), [a, b, c])
    np.testing.assert_array_equal(c, a @ b)


@pytest.mark.parametrize("dropped", [0, 1])
def test_gemm_without_a_barrier_is_a_shared_memory_race(dropped: int) -> None:
    a, b, c = np.ones((32, 32), np.int32), np.ones((32, 32), np.int32), np.zeros((32, 32), np.int32)
    prog = _gemm_program(32, 16, 8, 8, "int32", drop_barrier=dropped)
    with pytest.raises(SharedMemoryRaceError, match=r"shared-memory race in kernel gemm_kernel0, blockIdx=\(0, 0, 0\)"
                       r": threadIdx=\(\d+, \d+, 0\) (reads|writes) [AB]_shared\[\d+\], which threadIdx=\(\d+, \d+, 0\) "
                       r"(wrote|read) with no barrier between"):
        emulate(prog, [a, b, c])
    emulate(prog, [a, b, c], check_races=False)  # the race is only reported when asked for


def test_float32_gemm_on_16_blocks_of_one_output_per_thread() -> None:
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    c = np.zeros((32, 32), np.float32)
    emulate(_gemm_program(32, 8, 8, 8, "float32"), [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- barriers
def test_barrier_under_thread_condition_is_divergent() -> None:
    a = ir.Buffer("A", (32,), "int32")
    tv = _threads("threadIdx.x")
    tx = tv["threadIdx.x"]
    body = ir.seq(ir.IfThenElse(tx < 16, barrier()), a.vstore(tx, tx))
    prog = _program("div", (a,), body, tv, (1, 1, 1), (32, 1, 1))
    with pytest.raises(DivergentBarrierError, match=re.escape(
            "divergent barrier in kernel div_kernel0, blockIdx=(0, 0, 0): threadIdx=(0, 0, 0) waits at barrier 1 "
            "of 1 (in body order) while threadIdx=(16, 0, 0) finished")):
        emulate(prog, [np.zeros(32, np.int32)])


def test_threads_at_different_barriers_are_divergent() -> None:
    a = ir.Buffer("A", (8,), "int32")
    tv = _threads("threadIdx.x")
    tx = tv["threadIdx.x"]
    body = ir.seq(ir.IfThenElse(tx % 2 == 0, barrier(), barrier()), a.vstore(tx, tx))
    prog = _program("two", (a,), body, tv, (1, 1, 1), (8, 1, 1))
    with pytest.raises(DivergentBarrierError, match=re.escape(
            "threadIdx=(0, 0, 0) waits at barrier 1 of 2 (in body order) while threadIdx=(1, 0, 0) waits at "
            "barrier 2 of 2")):
        emulate(prog, [np.zeros(8, np.int32)])


def test_grid_wide_sync_is_not_a_block_barrier() -> None:
    a = ir.Buffer("A", (4,), "int32")
    tx = ir.Var("tx", "int32")
    body = ir.seq(ir.Evaluate(ir.Call.make("void", "tvm_storage_sync", ["global"])), a.vstore(tx, tx))
    with pytest.raises(CompileError, match=re.escape(
            "kernel g_kernel0: tvm_storage_sync('global') is not a block barrier; the emulator runs barriers of "
            "scope 'shared' or 'shared.dyn'")):
        emulate(_program("g", (a,), body, {"threadIdx.x": tx}, (1, 1, 1), (4, 1, 1)), [np.zeros(4, np.int32)])


def test_barrier_under_block_uniform_condition_is_fine() -> None:
    # every thread of a block takes the same branch: the barrier is not divergent
    a = ir.Buffer("A", (2, 8), "int32")
    tv = _threads("blockIdx.x", "threadIdx.x")
    bx, tx = tv["blockIdx.x"], tv["threadIdx.x"]
    ib = IRBuilder()
    sh = ib.allocate("int32", (8,), "S", scope="shared")
    ib.emit(sh.vstore(tx, tx * 10 + bx))
    with ib.if_scope(bx == 0):
        ib.emit(barrier())
    with ib.else_scope():
        ib.emit(barrier())
    ib.emit(a.vstore((bx, tx), sh[7 - tx]))
    out = np.zeros((2, 8), np.int32)
    emulate(_program("uni", (a,), ib.get(), tv, (2, 1, 1), (8, 1, 1)), [out])
    np.testing.assert_array_equal(out, [[70 - 10 * t for t in range(8)], [71 - 10 * t for t in range(8)]])


# ---------------------------------------------------------------------------- tree reduction
def _tree_sum(n_blocks: int, threads: int, drop_level: int | None = None) -> DeviceProgram:
    """Out[b] = sum of A[b, :] by a shared-memory tree: halve the active threads each step."""
    a, out = ir.Buffer("A", (n_blocks, threads), "int32"), ir.Buffer("Out", (n_blocks,), "int32")
    tv = _threads("blockIdx.x", "threadIdx.x")
    bx, tx = tv["blockIdx.x"], tv["threadIdx.x"]
    ib = IRBuilder()
    red = ib.allocate("int32", (threads,), "red_buf", scope="shared")
    ib.emit(red.vstore(tx, a[bx, tx]))
    ib.emit(barrier())
    step, level = threads // 2, 0
    while step:
        with ib.if_scope(tx < step):
            ib.emit(red.vstore(tx, red[tx] + red[tx + step]))
        if level != drop_level:
            ib.emit(barrier())
        step, level = step // 2, level + 1
    with ib.if_scope(tx == 0):
        ib.emit(out.vstore(bx, red[0]))
    return _program("tree", (a, out), ib.get(), tv, (n_blocks, 1, 1), (threads, 1, 1))


def test_shared_memory_tree_reduction_equals_numpy() -> None:
    rng = np.random.default_rng(4)
    a = rng.integers(-1000, 1000, (3, 64), dtype=np.int32)
    out = np.zeros(3, np.int32)
    emulate(_tree_sum(3, 64), [a, out])
    np.testing.assert_array_equal(out, a.sum(axis=1))


def test_tree_reduction_missing_a_level_barrier_races() -> None:
    # without the barrier after level 0 (step 32), thread 0 reads red_buf[16] at step 16 before
    # thread 16 writes it at step 32
    a, out = np.ones((1, 64), np.int32), np.zeros(1, np.int32)
    with pytest.raises(SharedMemoryRaceError, match=re.escape(
            "threadIdx=(16, 0, 0) writes red_buf[16], which threadIdx=(0, 0, 0) read")):
        emulate(_tree_sum(1, 64, drop_level=0), [a, out])


# ---------------------------------------------------------------------------- memories
def test_local_memory_is_per_thread_and_shared_per_block() -> None:
    # each thread keeps its own local value across a barrier; each block has its own shared array
    # (a thread reads the slot its neighbour wrote in the same block)
    out = ir.Buffer("Out", (2, 4), "int32")
    tv = _threads("blockIdx.x", "threadIdx.x")
    bx, tx = tv["blockIdx.x"], tv["threadIdx.x"]
    ib = IRBuilder()
    sh = ib.allocate("int32", (4,), "S", scope="shared")
    loc = ib.allocate("int32", (1,), "L", scope="local")
    ib.emit(loc.vstore(0, tx * 100))
    ib.emit(sh.vstore(tx, bx * 10 + tx))
    ib.emit(barrier())
    ib.emit(out.vstore((bx, tx), loc[0] + sh[(tx + 1) % 4]))
    res = np.zeros((2, 4), np.int32)
    emulate(_program("mem", (out,), ib.get(), tv, (2, 1, 1), (4, 1, 1)), [res])
    np.testing.assert_array_equal(res, [[100 * t + (t + 1) % 4 for t in range(4)],
                                        [100 * t + 10 + (t + 1) % 4 for t in range(4)]])


def test_out_of_bounds_shared_and_local_accesses() -> None:
    out = ir.Buffer("Out", (4,), "int32")
    tv = _threads("threadIdx.x")
    tx = tv["threadIdx.x"]
    for scope, size in (("shared", 4), ("local", 2)):
        ib = IRBuilder()
        buf = ib.allocate("int32", (size,), f"{scope}_buf", scope=scope)
        ib.emit(buf.vstore(tx, tx))
        ib.emit(out.vstore(tx, buf[tx]))
        prog = _program("oob", (out,), ib.get(), tv, (1, 1, 1), (4, 1, 1))
        if scope == "shared":
            emulate(prog, [np.zeros(4, np.int32)])  # 4 threads, 4 elements: in bounds
            continue
        with pytest.raises(MemoryAccessError, match=re.escape(
                "out-of-bounds write of local_buf[2] (size 2) in kernel oob_kernel0, blockIdx=(0, 0, 0), "
                "threadIdx=(2, 0, 0)")):
            emulate(prog, [np.zeros(4, np.int32)])


def test_read_of_shared_memory_no_thread_wrote() -> None:
    # a fetch guarded for 3 of the 4 threads: thread 3 reads a slot nobody filled
    out = ir.Buffer("Out", (4,), "float32")
    tv = _threads("threadIdx.x")
    tx = tv["threadIdx.x"]
    ib = IRBuilder()
    sh = ib.allocate("float32", (4,), "S", scope="shared")
    with ib.if_scope(tx < 3):
        ib.emit(sh.vstore(tx, ir.Cast("float32", tx)))
    ib.emit(barrier())
    ib.emit(out.vstore(tx, sh[tx]))
    prog = _program("unset", (out,), ib.get(), tv, (1, 1, 1), (4, 1, 1))
    res = np.zeros(4, np.float32)
    with pytest.raises(MemoryAccessError, match=re.escape(
            "read of uninitialised shared memory S[3] (no thread of the block wrote it before) in kernel "
            "unset_kernel0, blockIdx=(0, 0, 0), threadIdx=(3, 0, 0)")):
        emulate(prog, [res])
    emulate(prog, [res], check_races=False)  # unchecked, the slot holds the poison pattern
    assert res[:3].tolist() == [0, 1, 2] and np.isnan(res[3])


def test_global_write_write_races() -> None:
    out = ir.Buffer("Out", (1,), "int32")
    tv = _threads("blockIdx.x", "threadIdx.x")
    # every thread of one block writes Out[0]
    prog = _program("ww", (out,), out.vstore(0, tv["threadIdx.x"]), tv, (1, 1, 1), (4, 1, 1))
    with pytest.raises(GlobalMemoryRaceError, match=re.escape(
            "blockIdx=(0, 0, 0) threadIdx=(1, 0, 0) writes 1 to Out[0], which blockIdx=(0, 0, 0) threadIdx=(0, 0, 0) "
            "set to 0")):
        emulate(prog, [np.zeros(1, np.int32)])
    # the same value from every thread leaves the same memory whatever the order: no race
    res = np.zeros(1, np.int32)
    emulate(_program("same", (out,), out.vstore(0, 9), tv, (2, 1, 1), (4, 1, 1)), [res])
    assert res[0] == 9
    # thread 0 of every block writes Out[0]: blocks are never ordered
    body = ir.IfThenElse(tv["threadIdx.x"] == 0, out.vstore(0, tv["blockIdx.x"]))
    prog = _program("wwb", (out,), body, tv, (3, 1, 1), (4, 1, 1))
    with pytest.raises(GlobalMemoryRaceError, match=re.escape("blockIdx=(1, 0, 0) threadIdx=(0, 0, 0) writes 1 to Out[0]")):
        emulate(prog, [np.zeros(1, np.int32)])
    # within a block, a barrier orders the two writes
    tx = tv["threadIdx.x"]
    body = ir.seq(ir.IfThenElse(tx == 0, out.vstore(0, 5)), barrier(), ir.IfThenElse(tx == 1, out.vstore(0, 7)))
    res = np.zeros(1, np.int32)
    emulate(_program("ordered", (out,), body, tv, (1, 1, 1), (4, 1, 1)), [res])
    assert res[0] == 7


def _vector_kernel(shift: int, sync: bool) -> DeviceProgram:
    """Each of 4 threads stores a 4-lane vector into shared memory, then (after a barrier, if
    ``sync``) reads its neighbour's ``shift`` slots along and stores it as a vector to global memory."""
    out = ir.Buffer("Out", (16,), "int32")
    tv = _threads("threadIdx.x")
    tx = tv["threadIdx.x"]
    ib = IRBuilder()
    sh = ib.allocate("int32", (16,), "S", scope="shared")
    ib.emit(sh.vstore(ir.Ramp(tx * 4, ir.const(1), 4), ir.Ramp(tx * 10, ir.const(1), 4)))
    if sync:
        ib.emit(barrier())
    ib.emit(out.vstore(ir.Ramp(tx * 4, ir.const(1), 4), sh[ir.Ramp(((tx + shift) % 4) * 4, ir.const(1), 4)]))
    return _program("vec", (out,), ib.get(), tv, (1, 1, 1), (4, 1, 1))


def test_vector_accesses_are_checked_lane_by_lane() -> None:
    res = np.zeros(16, np.int32)
    emulate(_vector_kernel(1, sync=True), [res])
    np.testing.assert_array_equal(res, [10 * ((t + 1) % 4) + lane for t in range(4) for lane in range(4)])
    # without the barrier thread 0 reads lanes 4..7 before thread 1 writes them
    with pytest.raises(SharedMemoryRaceError, match=re.escape(
            "threadIdx=(1, 0, 0) writes S[4], which threadIdx=(0, 0, 0) read")):
        emulate(_vector_kernel(1, sync=False), [res])
    emulate(_vector_kernel(0, sync=False), [res])  # each thread reads its own lanes: no barrier needed
    np.testing.assert_array_equal(res, [10 * t + lane for t in range(4) for lane in range(4)])
    # overlapping vector stores to global memory: lane 0 of thread 1 is lane 2 of thread 0
    out = ir.Buffer("Out", (16,), "int32")
    tx = ir.Var("tx", "int32")
    body = out.vstore(ir.Ramp(tx * 2, ir.const(1), 4), ir.Broadcast(tx, 4))
    with pytest.raises(GlobalMemoryRaceError, match=re.escape(
            "threadIdx=(1, 0, 0) writes 1 to Out[2], which blockIdx=(0, 0, 0) threadIdx=(0, 0, 0) set to 0")):
        emulate(_program("vw", (out,), body, {"threadIdx.x": tx}, (1, 1, 1), (4, 1, 1)), [res])


def test_workspaces_live_between_kernels_and_start_poisoned() -> None:
    n = 16
    a, c = ir.Buffer("A", (n,), "float32"), ir.Buffer("C", (n,), "float32")
    w = ir.Buffer("W", (n,), "float32")
    tx = ir.Var("tx", "int32")
    first = DeviceKernel("k0", (a, w), w.vstore(tx, a[tx] * 2), {"threadIdx.x": tx}, (1, 1, 1), (n, 1, 1))
    second = DeviceKernel("k1", (w, c), c.vstore(tx, w[tx] + 1), {"threadIdx.x": tx}, (1, 1, 1), (n, 1, 1))
    src = np.arange(n, dtype=np.float32)
    res = np.zeros(n, np.float32)
    Emulator(DeviceProgram("two", (a, c), [first, second], [w]))(src, res)
    np.testing.assert_array_equal(res, src * 2 + 1)
    emulate(DeviceProgram("unwritten", (a, c), [second], [w]), [src, res])
    assert np.isnan(res).all()  # the workspace is poison until a kernel writes it


def test_kernel_parameter_unknown_to_the_program_is_an_error() -> None:
    a, stray = ir.Buffer("A", (4,), "int32"), ir.Buffer("Stray", (4,), "int32")
    tx = ir.Var("tx", "int32")
    k = DeviceKernel("k0", (stray,), stray.vstore(tx, 1), {"threadIdx.x": tx}, (1, 1, 1), (4, 1, 1))
    with pytest.raises(CompileError, match=r"kernel k0: parameter Stray is neither a parameter nor a workspace of \['A'\]"):
        emulate(DeviceProgram("p", (a,), [k]), [np.zeros(4, np.int32)])


# ---------------------------------------------------------------------------- all-reduce
def test_all_reduce_left_in_a_kernel_combines_each_row() -> None:
    # threadIdx.x reduces, threadIdx.y picks the row: each row's threads agree on its sum
    rows, cols = 3, 8
    a, out = ir.Buffer("A", (rows, cols), "int32"), ir.Buffer("Out", (rows, cols), "int32")
    tv = _threads("threadIdx.x", "threadIdx.y")
    tx, ty = tv["threadIdx.x"], tv["threadIdx.y"]
    ib = IRBuilder()
    res = ib.allocate("int32", (1,), "red", scope="local")
    ib.emit(ir.AllReduce(te.sum.instantiate("int32"), a[ty, tx], tx < cols - 1, res, (ir.const(0),), tx,
                         "threadIdx.x"))
    ib.emit(out.vstore((ty, tx), res[0]))
    src = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols)
    got = np.zeros((rows, cols), np.int32)
    emulate(_program("ar", (a, out), ib.get(), tv, (1, 1, 1), (cols, rows, 1)), [src, got])
    np.testing.assert_array_equal(got, np.repeat(src[:, :-1].sum(axis=1, keepdims=True), cols, axis=1))


# ---------------------------------------------------------------------------- built schedules
def _shared_gemm_schedule(n: int) -> tuple[te.Schedule, list[te.Tensor]]:
    """TVM's GPU GEMM shape: 16x16 blocks of C, 8x8 threads of 2x2 each, k in slabs of 8 fetched
    cooperatively into shared memory."""
    a = te.placeholder((n, n), "int32", name="A")
    b = te.placeholder((n, n), "int32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    s = te.create_schedule(c.op)
    a_sh, b_sh = s.cache_read(a, "shared", [c]), s.cache_read(b, "shared", [c])
    c_loc = s.cache_write(c, "local")
    by, yi = s[c].split(c.op.axis[0], factor=16)
    bx, xi = s[c].split(c.op.axis[1], factor=16)
    ty, yii = s[c].split(yi, nparts=8)
    tx, xii = s[c].split(xi, nparts=8)
    s[c].reorder(by, bx, ty, tx, yii, xii)
    for axis, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[c].bind(axis, te.thread_axis(tag))
    s[c_loc].compute_at(s[c], tx)
    ko, ki = s[c_loc].split(c_loc.op.reduce_axis[0], factor=8)
    s[c_loc].reorder(ko, ki, *c_loc.op.axis)
    for stage in (a_sh, b_sh):
        s[stage].compute_at(s[c_loc], ko)
        fused = s[stage].fuse(*s[stage].op.axis)
        fy, rest = s[stage].split(fused, nparts=8)
        fx, _ = s[stage].split(rest, nparts=8)
        s[stage].bind(fy, te.thread_axis("threadIdx.y"))
        s[stage].bind(fx, te.thread_axis("threadIdx.x"))
    return s, [a, b, c]


class _StripBarriers(ir.IRMutator):
    """Replaces the ``which``-th barrier of a kernel body (in body order; None: every one) by a no-op."""

    def __init__(self, which: int | None) -> None:
        self.which, self.seen = which, 0

    def visit_Evaluate(self, node: ir.Evaluate) -> ir.Stmt:
        if not is_barrier(node):
            return node
        self.seen += 1
        return ir.Evaluate(ir.const(0)) if self.which in (None, self.seen - 1) else node


def _without_barrier(program: DeviceProgram, which: int | None) -> DeviceProgram:
    kernels = [dataclasses.replace(k, body=_StripBarriers(which).visit(k.body)) for k in program.kernels]
    return dataclasses.replace(program, kernels=kernels)


def _gemm_operands(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(-50, 50, (n, n), dtype=np.int32), rng.integers(-50, 50, (n, n), dtype=np.int32),
            np.zeros((n, n), np.int32)]


def test_built_shared_memory_gemm_equals_numpy() -> None:
    s, args = _shared_gemm_schedule(32)
    mod = vtakit.build(s, args, target="cuda")
    assert sum(is_barrier(n) for k in mod.program.kernels for n in _walk(k.body)) == 2
    a, b, c = _gemm_operands(32)
    mod.emulate(a, b, c)
    np.testing.assert_array_equal(c, a @ b)


@pytest.mark.parametrize("which", [0, 1])
def test_built_gemm_with_a_barrier_stripped_is_a_race(which: int) -> None:
    """ThreadSync puts one barrier before the fetch (the previous slab's readers are done) and one
    after it (the slab is complete): without either, threads of a block race on it."""
    s, args = _shared_gemm_schedule(32)
    program = _without_barrier(vtakit.build(s, args, target="cuda").program, which)
    with pytest.raises(SharedMemoryRaceError, match=r"kernel main_kernel0, blockIdx=\(0, 0, 0\): .* [AB]\.shared\["):
        emulate(program, _gemm_operands(32))


def test_built_kernel_launched_with_too_many_threads_reads_out_of_bounds() -> None:
    x = te.placeholder((64,), "float32", name="x")
    y = te.compute((64,), lambda i: x[i] * 2, name="y")
    s = te.create_schedule(y.op)
    bx, tx = s[y].split(y.op.axis[0], factor=32)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    program = vtakit.build(s, [x, y], target="cuda").program
    (kernel,) = program.kernels
    wide = dataclasses.replace(program, kernels=[dataclasses.replace(kernel, block=(64, 1, 1))])
    src, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    emulate(program, [src, out])
    np.testing.assert_array_equal(out, src * 2)
    # block 1 overlaps block 0's upper half (rewriting the same values there: no race), and its own
    # upper half reads beyond x
    with pytest.raises(MemoryAccessError, match=re.escape("out-of-bounds read of x[64] (size 64) in kernel "
                                                          "main_kernel0, blockIdx=(1, 0, 0), threadIdx=(32, 0, 0)")):
        emulate(wide, [src, out])


def test_cross_thread_reduction_lowered_and_native_agree_with_numpy() -> None:
    """A reduction bound to threadIdx.x: the backend's shared-memory tree (with its barriers) and the
    all-reduce the emulator runs natively (the program before LowerThreadAllreduce) both equal numpy."""
    x = te.placeholder((5, 64), "int32", name="x")
    k = te.reduce_axis((0, 64), name="k")
    y = te.compute((5,), lambda i: te.sum(x[i, k], axis=k), name="y")
    s = te.create_schedule(y.op)
    s[y].bind(y.op.axis[0], te.thread_axis("blockIdx.x"))
    s[y].bind(k, te.thread_axis("threadIdx.x"))
    src = np.random.default_rng(6).integers(-1000, 1000, (5, 64), dtype=np.int32)
    mod = vtakit.build(s, [x, y], target="cuda")
    lowered, native = np.zeros(5, np.int32), np.zeros(5, np.int32)
    mod.emulate(src, lowered)
    unlowered = split_host_device(vtakit.lower(s, [x, y]))
    assert any(isinstance(n, ir.AllReduce) for k_ in unlowered.kernels for n in _walk(k_.body))
    emulate(unlowered, [src, native])
    np.testing.assert_array_equal(lowered, src.sum(axis=1))
    np.testing.assert_array_equal(native, src.sum(axis=1))


def _walk(body: ir.Stmt) -> list:
    out: list = []
    ir.walk(body, out.append)
    return out
