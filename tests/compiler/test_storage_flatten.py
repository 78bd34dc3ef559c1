"""The StorageFlatten pass (``lower/flatten.py``) on hand-built IR: the index arithmetic of row-major,
strided, offset and symbolic-shape buffers, one flat buffer per storage (views share it, parameters
keep their N-d buffers in ``params``), allocations and all-reduce targets flattened, and the flat
function computing what the N-d one did (interpreter, exact)."""

from __future__ import annotations

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.arith import simplify
from vtakit.compiler.interpreter import run
from vtakit.compiler.lower.flatten import buffer_size, buffer_strides, flat_index, flatten_storage

I, J = ir.Var("i"), ir.Var("j")


def _nest(n0: int, n1: int, body: ir.Stmt) -> ir.Stmt:
    return ir.For(I, ir.const(0), ir.const(n0), ir.ForKind.SERIAL,
                  ir.For(J, ir.const(0), ir.const(n1), ir.ForKind.SERIAL, body))


def _accesses(func: ir.PrimFunc) -> list[ir.BufferLoad | ir.BufferStore]:
    found: list = []
    ir.walk(func.body, lambda n: found.append(n) if isinstance(n, (ir.BufferLoad, ir.BufferStore)) else None)
    return found


def _value_at(e: ir.PrimExpr, **values: int) -> int:
    """``e`` evaluated with I, J (and named shape variables) set."""
    env = {I: values.get("i", 0), J: values.get("j", 0)}
    env.update({v: values[v.name] for v in _vars(e) if v.name in values})
    out = simplify(ir.substitute(e, env))
    assert isinstance(out, ir.IntImm), f"{e} did not fold to a constant: {out}"
    return out.value


def _vars(e: ir.PrimExpr) -> list[ir.Var]:
    found: list[ir.Var] = []
    ir.walk(e, lambda n: found.append(n) if isinstance(n, ir.Var) else None)
    return found


def test_row_major_strides_size_and_index():
    buf = ir.Buffer("X", (3, 4, 5), "int8")
    assert [ir.int_value(s) for s in buffer_strides(buf)] == [20, 5, 1]
    assert ir.int_value(buffer_size(buf)) == 60
    k = ir.Var("k")
    index = flat_index(buf, (I, J, k))
    for i, j, kk in ((0, 0, 0), (2, 3, 4), (1, 0, 2)):
        assert ir.int_value(simplify(ir.substitute(index, {I: i, J: j, k: kk}))) == i * 20 + j * 5 + kk


def test_explicit_strides_and_elem_offset_enter_the_index_and_size():
    buf = ir.Buffer("X", (2, 3), "int32", strides=(ir.const(8), ir.const(2)), elem_offset=ir.const(5))
    assert [ir.int_value(s) for s in buffer_strides(buf)] == [8, 2]
    assert ir.int_value(buffer_size(buf)) == 16                  # outermost stride x extent
    for i, j in ((0, 0), (1, 2), (1, 0)):
        assert _value_at(flat_index(buf, (I, J)), i=i, j=j) == 5 + 8 * i + 2 * j


def test_symbolic_shapes_give_symbolic_strides():
    n, m = ir.Var("n"), ir.Var("m")
    buf = ir.Buffer("S", (n, m), "float32")
    strides = buffer_strides(buf)
    assert strides[0] is m and ir.int_value(strides[1]) == 1
    assert _value_at(buffer_size(buf), n=3, m=7) == 21
    assert _value_at(flat_index(buf, (I, J)), i=2, j=5, m=7) == 19


def test_parameters_keep_their_shape_and_the_body_uses_one_flat_twin_per_storage():
    a, b = ir.Buffer("A", (4, 6), "int32"), ir.Buffer("B", (4, 6), "int32")
    func = ir.PrimFunc("f", (a, b), _nest(4, 6, ir.BufferStore(b, a[I, J] + a[3 - I, J], (I, J))), {})
    flat = flatten_storage(func)
    assert flat.params == func.params and flat.params[0].shape == a.shape
    by_data: dict[ir.Var, set[int]] = {}
    for acc in _accesses(flat):
        assert acc.buffer.ndim == 1 and len(acc.indices) == 1
        assert ir.int_value(acc.buffer.shape[0]) == 24
        by_data.setdefault(acc.buffer.data, set()).add(id(acc.buffer))
    assert set(by_data) == {a.data, b.data} and all(len(ids) == 1 for ids in by_data.values())


def test_a_strided_offset_view_reads_its_window_of_the_parameter():
    a, b = ir.Buffer("A", (4, 6), "int32"), ir.Buffer("B", (4, 6), "int32")
    # the 2x3 window of A at row 1, column 2 (element 8), stepping through A's rows
    view = ir.Buffer("Av", (2, 3), "int32", data=a.data, strides=(ir.const(6), ir.const(1)), elem_offset=ir.const(8))
    tmp = ir.Buffer("T", (2, 3), "int32", "local")
    body = ir.Allocate(tmp, ir.seq(_nest(2, 3, ir.BufferStore(tmp, view[I, J] * 2, (I, J))),
                                   _nest(2, 3, ir.BufferStore(b, tmp[I, J] + 1, (J, I + 1)))))
    func = ir.PrimFunc("f", (a, b), body, {})
    flat = flatten_storage(func)
    alloc = flat.body
    assert isinstance(alloc, ir.Allocate) and alloc.buffer.ndim == 1 and ir.int_value(alloc.buffer.shape[0]) == 6
    assert alloc.buffer.data is tmp.data and alloc.buffer.scope == "local"
    reads_a = [x for x in _accesses(flat) if isinstance(x, ir.BufferLoad) and x.buffer.data is a.data]
    assert [_value_at(reads_a[0].indices[0], i=i, j=j) for i, j in ((0, 0), (1, 2))] == [8, 8 + 6 + 2]
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (4, 6)).astype(np.int32)
    out0, out1 = np.zeros((4, 6), np.int32), np.zeros((4, 6), np.int32)
    run(func, x, out0)
    run(flat, x, out1)
    np.testing.assert_array_equal(out1, out0)
    assert out0[2, 1] == x[1, 4] * 2 + 1                        # B[j=2, i+1=1] = Av[0, 2] = A[1, 4]


def test_flattening_twice_changes_no_index():
    a, b = ir.Buffer("A", (3, 5), "int32"), ir.Buffer("B", (5, 3), "int32")
    func = ir.PrimFunc("f", (a, b), _nest(3, 5, ir.BufferStore(b, a[I, J], (J, I))), {})
    once = flatten_storage(func)
    twice = flatten_storage(once)
    assert all(ir.structural_equal(x.indices, y.indices) for x, y in zip(_accesses(once), _accesses(twice)))
    rng = np.random.default_rng(1)
    x = rng.integers(-100, 100, (3, 5)).astype(np.int32)
    outs = [np.zeros((5, 3), np.int32) for _ in range(3)]
    for f, out in zip((func, once, twice), outs):
        run(f, x, out)
    np.testing.assert_array_equal(outs[1], x.T)
    np.testing.assert_array_equal(outs[2], outs[0])


def test_symbolic_shape_parameters_flatten_and_run():
    n = ir.Var("n")
    a, b = ir.Buffer("A", (n, 4), "int32"), ir.Buffer("B", (n, 4), "int32")
    body = ir.For(I, ir.const(0), n, ir.ForKind.SERIAL,
                  ir.For(J, ir.const(0), ir.const(4), ir.ForKind.SERIAL, ir.BufferStore(b, a[I, J] - J, (I, J))))
    func = ir.PrimFunc("f", (a, b), body, {})
    flat = flatten_storage(func)
    store = _accesses(flat)[0]
    assert isinstance(store, ir.BufferStore) and _value_at(store.indices[0], i=2, j=3) == 11
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = np.zeros((3, 4), np.int32)
    run(flat, x, out)
    np.testing.assert_array_equal(out, x - np.arange(4, dtype=np.int32))


def test_an_all_reduce_target_is_flattened():
    acc = ir.Buffer("acc", (2, 2), "float32", "local")
    x = ir.Buffer("X", (8,), "float32")
    t = ir.Var("tx")
    red = ir.AllReduce(None, x[t], ir.const(True), acc, (ir.const(1), ir.const(0)), t, "threadIdx.x")
    func = ir.PrimFunc("f", (x,), ir.Allocate(acc, red), {})
    flat = flatten_storage(func)
    found: list[ir.AllReduce] = []
    ir.walk(flat.body, lambda n: found.append(n) if isinstance(n, ir.AllReduce) else None)
    (out,) = found
    assert out.buffer.ndim == 1 and out.buffer.data is acc.data and ir.int_value(simplify(out.indices[0])) == 2
    assert flat.body.buffer is out.buffer
