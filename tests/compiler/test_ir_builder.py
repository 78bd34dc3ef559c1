"""The imperative IR builder."""

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.interpreter import run
from vtakit.compiler.ir_builder import IRBuilder
from vtakit.errors import CompileError


def test_builder_nests_loops_ifs_attrs_and_allocations():
    out = ir.Buffer("out", (6,), "int32")
    ib = IRBuilder()
    ib.scope_attr(ir.const(0), "pragma_test", 1)
    tmp = ib.allocate("int32", (6,), name="tmp", scope="local")
    with ib.for_range(0, 6, name="i") as i:
        ib.emit(ir.BufferStore(tmp, i * i, (i,)))
    with ib.for_range(0, 6, name="j") as j:
        with ib.if_scope(j < 3):
            ib.emit(ir.BufferStore(out, ir.BufferLoad(tmp, (j,)), (j,)))
        with ib.else_scope():
            t = ib.let("t", j * 10)
            ib.emit(ir.BufferStore(out, t, (j,)))
    stmt = ib.get()
    assert isinstance(stmt, ir.AttrStmt) and isinstance(stmt.body, ir.Allocate)
    assert stmt.body.buffer.scope == "local"
    o = np.zeros(6, np.int32)
    run(ir.PrimFunc("f", (out,), stmt), o)
    np.testing.assert_array_equal(o, [0, 1, 4, 30, 40, 50])


def test_builder_errors():
    ib = IRBuilder()
    with pytest.raises(CompileError, match="else_scope must directly follow"):
        with ib.else_scope():
            pass
    with pytest.raises(CompileError, match="for_range kind"):
        with ib.for_range(0, 2, kind="sideways"):
            pass
    with pytest.raises(CompileError, match="expects a statement or expression"):
        ib.emit("x")


def test_get_inside_an_open_scope():
    ib = IRBuilder()
    scope = ib.for_range(0, 2)
    scope.__enter__()
    with pytest.raises(CompileError, match="inside an open scope"):
        ib.get()
