"""The InjectDMAIntrin pass on hand-built ``dma_copy`` nests (small configuration: 4 scalars per
SRAM entry): loads and stores become ``vta.load_buffer_2d`` / ``vta.store_buffer_2d`` with the entry
loops absorbed, rows/columns and the DRAM row stride derived from the nest, contiguous loops merged,
further loops kept as host loops, ``if_then_else(cond, x, 0)`` turned into zero padding, and the
queue and memory type chosen by scope and dtype; nests it cannot copy are rejected with the reason.
Semantics: a model of the two DMAs (rows of ``x_pad0 + x_size + x_pad1`` entries, zeros in the padding)
run by the interpreter must produce the DRAM result the loops did."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter, Pointer
from vtakit.compiler.vta import get_env
from vtakit.compiler.vta.dma import inject_dma_intrin
from vtakit.compiler.vta.env import ACC_SCOPE, INP_SCOPE, LOAD_2D, QID_COMPUTE, QID_LOAD, QID_STORE, STORE_2D, coproc_scope_of
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import MemId

ENV = get_env(VTAConfig.small())
LANES = ENV.lanes(ACC_SCOPE)
assert LANES == ENV.lanes(INP_SCOPE) == 4
I, J, L = ir.Var("i"), ir.Var("j"), ir.Var("l")
X = ir.Buffer("X", (4, 5, LANES), "int32")        # DRAM: 4 rows of 5 entries
Y = ir.Buffer("Y", (4, 5, LANES), "int8")


def _copy(exts: tuple[int, ...], store: ir.BufferStore) -> ir.Stmt:
    body: ir.Stmt = store
    for v, e in reversed(list(zip((I, J, L), exts))):
        body = ir.For(v, ir.const(0), ir.const(e), ir.ForKind.SERIAL, body)
    return ir.AttrStmt(ir.const(0), f"pragma_{ENV.dma_copy}", ir.const(1), body)


def _sram(rows: int, cols: int, scope: str = ACC_SCOPE, dtype: str = "int32") -> ir.Buffer:
    return ir.Buffer("sram", (rows * cols * LANES,), dtype, scope)


def _tile_load(sram: ir.Buffer, rows: int, cols: int, col0: int = 0, src: ir.Buffer = X) -> ir.Stmt:
    """sram[i, j, l] = src[i, col0 + j, l] (rows x cols entries)."""
    return _copy((rows, cols, LANES), ir.BufferStore(sram, src[I * 5 * LANES + (J + col0) * LANES + L],
                                                     (I * cols * LANES + J * LANES + L,)))


def _tile_store(sram: ir.Buffer, rows: int, cols: int, col0: int = 0) -> ir.Stmt:
    """Y[i, col0 + j, l] = int8(sram[i, j, l])."""
    return _copy((rows, cols, LANES), ir.BufferStore(Y, ir.Cast("int8", sram[I * cols * LANES + J * LANES + L]),
                                                     (I * 5 * LANES + (J + col0) * LANES + L,)))


def _func(sram: ir.Buffer, *stmts: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (X, Y), ir.Allocate(sram, ir.seq(*stmts)), {})


def _load_2d(mem, sram: Pointer, dram: Pointer, y_size, x_size, x_stride, y0, y1, x0, x1) -> int:
    row = x0 + x_size + x1
    for y in range(y0 + y_size + y1):
        for x in range(row):
            at = sram.offset + (y * row + x) * LANES
            if y0 <= y < y0 + y_size and x0 <= x < x0 + x_size:
                src = dram.offset + ((y - y0) * x_stride + (x - x0)) * LANES
                sram.array[at:at + LANES] = dram.array[src:src + LANES]
            else:
                sram.array[at:at + LANES] = 0
    return 0


def _store_2d(sram: Pointer, dram: Pointer, y_size, x_size, x_stride) -> int:
    for y in range(y_size):
        for x in range(x_size):
            src, dst = sram.offset + (y * x_size + x) * LANES, dram.offset + (y * x_stride + x) * LANES
            dram.array[dst:dst + LANES] = sram.array[src:src + LANES].astype(np.int64).astype(dram.array.dtype)
    return 0


def _shape(buf: ir.Buffer) -> tuple[int, ...]:
    return tuple(ir.int_value(e) for e in buf.shape)


def outputs(func: ir.PrimFunc, seed: int = 0) -> np.ndarray:
    src = func.params[0]
    x = np.random.default_rng(seed).integers(-1000, 1000, _shape(src)).astype(src.dtype)
    y = np.full(_shape(Y), 99, np.int8)
    Interpreter(func, {LOAD_2D: _load_2d, STORE_2D: _store_2d})(x, y)
    return y


def _injected(func: ir.PrimFunc) -> ir.PrimFunc:
    after = inject_dma_intrin(ENV)(func)
    assert not ir.contains(after.body, ir.BufferStore)
    np.testing.assert_array_equal(outputs(after), outputs(func))
    return after


def _dmas(func: ir.PrimFunc) -> list[tuple[str, int | None, tuple[Any, ...]]]:
    """(op, queue, integer arguments) of each DMA call, with the queue of the scope around it."""
    found: list = []

    def visit(s: Any, q: int | None) -> None:
        if isinstance(s, ir.AttrStmt) and coproc_scope_of(s) is not None:
            q = coproc_scope_of(s)
        if isinstance(s, ir.Call) and s.op in (LOAD_2D, STORE_2D):
            found.append((s.op, q, tuple(ir.int_value(a) if isinstance(a, ir.IntImm) else a for a in s.args)))
        for c in ir.children(s):
            visit(c, q)

    visit(func.body, None)
    return found


def _offset(ptr: ir.Call) -> int | None:
    return ir.int_value(ptr.args[2])


def test_a_tile_of_a_wider_tensor_is_one_load_and_one_store_with_the_row_stride():
    sram = _sram(3, 2)
    after = _injected(_func(sram, _tile_load(sram, 3, 2, col0=1), _tile_store(sram, 3, 2, col0=1)))
    (load, q_load, largs), (store, q_store, sargs) = _dmas(after)
    assert (load, q_load, store, q_store) == (LOAD_2D, QID_COMPUTE, STORE_2D, QID_STORE)
    assert largs[0] == MemId.ACC and largs[3:] == (3, 2, 5, 0, 0, 0, 0)      # 3 rows of 2 entries, stride 5
    assert _offset(largs[2]) == LANES and _offset(largs[1]) == 0               # starts at column 1
    assert sargs[2:] == (3, 2, 5) and _offset(sargs[1]) == LANES
    assert not ir.contains(after.body, ir.For)


def test_contiguous_rows_merge_into_one_run_of_columns():
    sram = _sram(4, 5)
    after = _injected(_func(sram, _tile_load(sram, 4, 5), _tile_store(sram, 4, 5)))
    (_, _, largs), (_, _, sargs) = _dmas(after)
    assert largs[3:6] == (1, 20, 20) and sargs[2:] == (1, 20, 20)


def test_an_input_load_goes_on_the_load_queue_and_int8_into_the_accumulator_is_acc_8bit():
    x8 = ir.Buffer("X", (4, 5, LANES), "int8")
    inp = _sram(2, 2, INP_SCOPE, "int8")
    func = ir.PrimFunc("f", (x8, Y), ir.Allocate(inp, _tile_load(inp, 2, 2, src=x8)), {})
    ((_, q, args),) = _dmas(inject_dma_intrin(ENV)(func))
    assert q == QID_LOAD and args[0] == MemId.INP
    acc = _sram(2, 2)
    func = ir.PrimFunc("f", (x8, Y), ir.Allocate(acc, _tile_load(acc, 2, 2, src=x8)), {})
    ((_, q, args),) = _dmas(inject_dma_intrin(ENV)(func))
    assert q == QID_COMPUTE and args[0] == MemId.ACC_8BIT


def test_a_padding_condition_becomes_zero_padding_before_and_after():
    sram = _sram(3, 2)
    # rows i >= 2 and column j < 1 are padding: the valid data is rows [0, 2) of column 1
    cond = ir.And(ir.GE(J, ir.const(1)), ir.LT(I, ir.const(2)))
    value = ir.Call("int32", "if_then_else", (cond, X[I * 5 * LANES + J * LANES + L], ir.const(0)))
    load = _copy((3, 2, LANES), ir.BufferStore(sram, value, (I * 2 * LANES + J * LANES + L,)))
    after = _injected(_func(sram, load, _tile_store(sram, 3, 2)))
    (_, _, args), _ = _dmas(after)
    assert args[3:] == (2, 1, 5, 0, 1, 1, 0)          # y 2 rows + 1 after; x 1 before + 1 column
    assert _offset(args[2]) == LANES                  # the first valid entry: row 0, column 1


def test_a_non_mergeable_outer_loop_stays_a_host_loop():
    # k steps 8 entries in SRAM over a 2 x 2 block: one DMA per k, on both sides
    sram = ir.Buffer("sram", (2 * 8 * LANES,), "int32", ACC_SCOPE)
    k = ir.Var("k")

    def nest(store: ir.BufferStore) -> ir.Stmt:
        body: ir.Stmt = store
        for v, e in ((L, LANES), (J, 2), (I, 2), (k, 2)):
            body = ir.For(v, ir.const(0), ir.const(e), ir.ForKind.SERIAL, body)
        return ir.AttrStmt(ir.const(0), f"pragma_{ENV.dma_copy}", ir.const(1), body)

    dram = (k * 2 + I) * 5 * LANES + J * LANES + L
    on_chip = k * 8 * LANES + I * 2 * LANES + J * LANES + L
    load = nest(ir.BufferStore(sram, X[dram], (on_chip,)))
    store = nest(ir.BufferStore(Y, ir.Cast("int8", sram[on_chip]), (dram,)))
    after = _injected(_func(sram, load, store))
    loops: list[ir.For] = []
    ir.walk(after.body, lambda n: loops.append(n) if isinstance(n, ir.For) else None)
    assert [lp.loop_var for lp in loops] == [k, k]
    (_, _, largs), (_, _, sargs) = _dmas(after)
    assert largs[3:6] == (2, 2, 5) and sargs[2:] == (2, 2, 5)


def test_extent_one_loops_drop_out():
    sram = _sram(1, 3)
    after = _injected(_func(sram, _tile_load(sram, 1, 3, col0=2), _tile_store(sram, 1, 3, col0=2)))
    (_, _, args), _ = _dmas(after)
    assert args[3:6] == (1, 3, 3) and _offset(args[2]) == 2 * LANES


def _rejects(stmt: ir.Stmt, match: str, sram: ir.Buffer | None = None) -> None:
    sram = sram or _sram(3, 2)
    with pytest.raises(CompileError, match=match):
        inject_dma_intrin(ENV)(_func(sram, stmt))


def test_nests_it_cannot_copy_are_rejected_with_the_reason():
    sram = _sram(3, 2)
    padded = ir.Call("int32", "if_then_else", (ir.GE(J, ir.const(1)), X[I * 20 + J * 4 + L], ir.const(7)))
    _rejects(_copy((3, 2, LANES), ir.BufferStore(sram, padded, (I * 8 + J * 4 + L,))),
             r"dma_copy into sram: the padding value 7 is not 0")
    _rejects(_copy((3, 2, LANES), ir.BufferStore(sram, X[I * 20 + J * 4 + L] + 1, (I * 8 + J * 4 + L,))),
             r"a DMA copies a buffer, but the value is")
    # lanes walked in the wrong order: the entry is not contiguous in SRAM
    _rejects(_copy((3, 2, LANES), ir.BufferStore(sram, X[I * 20 + J * 4 + L], (I * 8 + J + L * 2,))),
             r"does not walk whole SRAM entries of 4 scalars")
    # an int8 destination in the accumulator
    _rejects(_tile_load(_sram(3, 2, ACC_SCOPE, "int8"), 3, 2), r"local.acc_buffer holds int32, not int8",
             _sram(3, 2, ACC_SCOPE, "int8"))


def test_a_store_needs_int8_and_global_to_global_is_no_dma():
    sram = _sram(3, 2)
    y32 = ir.Buffer("Y32", (4, 5, LANES), "int32")
    store32 = _copy((3, 2, LANES), ir.BufferStore(y32, sram[I * 8 + J * 4 + L], (I * 20 + J * 4 + L,)))
    _rejects(store32, r"the accelerator stores int8 .* but Y32 is int32; cast the result to int8")
    glob = _copy((3, 2, LANES), ir.BufferStore(Y, ir.Cast("int8", X[I * 20 + J * 4 + L]), (I * 20 + J * 4 + L,)))
    _rejects(glob, r"cannot copy X \(global\) to Y \(global\)")


def test_guards_symbolic_extents_and_loops_from_nonzero_mins_are_rejected():
    sram = _sram(3, 2)
    guard = ir.For(I, ir.const(0), ir.const(3), ir.ForKind.SERIAL,
                   ir.IfThenElse(ir.LT(I, ir.const(2)), ir.BufferStore(sram, X[I], (I,))))
    _rejects(ir.AttrStmt(ir.const(0), f"pragma_{ENV.dma_copy}", ir.const(1), guard), r"the loop nest has a guard")
    n = ir.Var("n")
    symbolic = ir.For(I, ir.const(0), n, ir.ForKind.SERIAL, ir.BufferStore(sram, X[I], (I,)))
    _rejects(ir.AttrStmt(ir.const(0), f"pragma_{ENV.dma_copy}", ir.const(1), symbolic),
             r"loop i has the non-constant extent n")
    shifted = ir.For(I, ir.const(1), ir.const(3), ir.ForKind.SERIAL, ir.BufferStore(sram, X[I], (I,)))
    _rejects(ir.AttrStmt(ir.const(0), f"pragma_{ENV.dma_copy}", ir.const(1), shifted), r"loop i starts at 1, expected 0")
