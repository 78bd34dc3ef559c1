"""StorageReuse (in-place storage for element-wise stages) against the reference interpreter.

Positive cases show the allocations that disappear and that results are unchanged. Each soundness
case is one where aliasing would be wrong: the pass must keep the buffers apart, and with the one
condition that protects it switched off (monkeypatched to accept) the interpreter's result differs
from numpy or the run fails, so every condition is shown to be needed.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

import vtakit
from vtakit.compiler import ir, te
from vtakit.compiler.interpreter import Interpreter
from vtakit.compiler.lower import storage_reuse as sr
from vtakit.compiler.scope import MemoryInfo
from vtakit.compiler.transform import PassContext

SC = "local.test_buf"
OTHER = "local.other_buf"
N = 8


def _ctx(reuse: bool = True, scopes=(SC,)) -> PassContext:
    passes = [(1, sr.storage_reuse_pass(scopes))] if reuse else []
    return PassContext(config={"tir.add_lower_pass": passes},
                       memory_scopes={SC: MemoryInfo(32, 1 << 20, 32), OTHER: MemoryInfo(32, 1 << 20, 32)})


def _lower(s, args, reuse=True, scopes=(SC,)) -> ir.PrimFunc:
    with _ctx(reuse, scopes):
        return vtakit.lower(s, args)


def _allocs(func: ir.PrimFunc) -> list[str]:
    names: list[str] = []
    ir.walk(func.body, lambda n: names.append(n.buffer.name) if isinstance(n, ir.Allocate) else None)
    return names


def _run(func: ir.PrimFunc, *inputs: np.ndarray, out_shape=(N,)) -> np.ndarray:
    out = np.zeros(out_shape, np.int32)
    Interpreter(func)(*inputs, out)
    return out


def _x(shape=(N,), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-100, 100, shape).astype(np.int32)


def _stages(*fs, scope=SC, shape=(N,), out=None):
    """A chain of element-wise stages ``f_k(previous)`` in ``scope`` after a copy of the input;
    ``out`` (default: a copy of the last stage) computes the global output from the stages."""
    a = te.placeholder(shape, "int32", name="A")
    stages = [te.compute(shape, lambda *i: a(*i), name="B0")]
    for k, f in enumerate(fs):
        prev = stages[-1]
        stages.append(te.compute(shape, lambda *i, prev=prev, f=f: f(prev, i), name=f"B{k + 1}"))
    last = stages[-1]
    res = te.compute(shape, (lambda *i: last(*i)) if out is None else (lambda *i: out(stages, i)), name="out")
    s = te.create_schedule(res.op)
    for t in stages:
        s[t].set_scope(scope)
    return s, [a, res], stages


# ---------------------------------------------------------------------------- it reuses
def test_chain_shares_one_buffer():
    s, args, _ = _stages(lambda b, i: b(*i) + 1, lambda b, i: b(*i) * 3, lambda b, i: b(*i) >> 1)
    func = _lower(s, args)
    assert _allocs(func) == ["B0"]
    assert sorted(_allocs(_lower(s, args, reuse=False))) == ["B0", "B1", "B2", "B3"]
    x = _x()
    np.testing.assert_array_equal(_run(func, x), ((x + 1) * 3) >> 1)
    assert sr.scope_peak_bits(func, SC) == N * 32
    assert sr.scope_peak_bits(_lower(s, args, reuse=False), SC) == 4 * N * 32


def test_two_dimensional_and_vector_stages():
    shape = (4, 8)
    s, args, (b0, b1, b2) = _stages(lambda b, i: b(*i) - 5, lambda b, i: te.max(b(*i), 0), shape=shape)
    for t in (b1, b2):
        s[t].vectorize(s[t].op.axis[1])
    func = _lower(s, args)
    assert ir.contains(func.body, ir.Ramp) and _allocs(func) == ["B0"]
    x = _x(shape)
    np.testing.assert_array_equal(_run(func, x, out_shape=shape), np.maximum(x - 5, 0))


def test_other_scopes_and_dtypes_keep_their_buffers():
    s, args, (b0, b1) = _stages(lambda b, i: b(*i) + 1)
    s[b1].set_scope(OTHER)
    assert sorted(_allocs(_lower(s, args, scopes=(SC, OTHER)))) == ["B0", "B1"]
    s, args, _ = _stages(lambda b, i: b(*i) + 1)
    assert sorted(_allocs(_lower(s, args, scopes=(OTHER,)))) == ["B0", "B1"]   # SC is not reused
    a = te.placeholder((N,), "int32", name="A")
    b0 = te.compute((N,), lambda i: a[i], name="B0")
    b1 = te.compute((N,), lambda i: (b0[i] + 1).astype("int16"), name="B1")
    res = te.compute((N,), lambda i: b1[i].astype("int32"), name="out")
    s = te.create_schedule(res.op)
    s[b0].set_scope(SC)
    s[b1].set_scope(SC)
    assert sorted(_allocs(_lower(s, [a, res]))) == ["B0", "B1"]


def test_attached_stages_reuse_inside_the_loop():
    """Stages computed at an outer loop of the output allocate there; they still chain."""
    shape = (4, 8)
    s, args, stages = _stages(lambda b, i: b(*i) + 2, lambda b, i: b(*i) * 5, shape=shape)
    res = args[1]
    for t in stages:
        s[t].compute_at(s[res], s[res].op.axis[0])
    func = _lower(s, args)
    assert _allocs(func) == ["B0"]
    x = _x(shape)
    np.testing.assert_array_equal(_run(func, x, out_shape=shape), (x + 2) * 5)


# ---------------------------------------------------------------------------- soundness
def _wrong_without(monkeypatch, condition: str, func_of, x, expect, out_shape=(N,)):
    """``func_of()`` lowers with the pass; it keeps the result; with ``condition`` accepting
    everything the result is wrong (or the run fails)."""
    good = func_of()
    np.testing.assert_array_equal(_run(good, x, out_shape=out_shape), expect)
    with monkeypatch.context() as m:
        m.setattr(sr, condition, lambda *a, **k: True)
        bad = func_of()
        assert len(_allocs(bad)) < len(_allocs(good)), f"ignoring {condition} should alias"
        try:
            got = _run(bad, x, out_shape=out_shape)
        except vtakit.errors.VtakitError:
            return
        assert not np.array_equal(got, expect), f"aliasing without {condition} should be wrong"


def test_later_reader_keeps_the_producer(monkeypatch):
    s, args, _ = _stages(lambda b, i: b(*i) + 1, lambda b, i: b(*i) * 2,
                         out=lambda st, i: st[2](*i) + st[1](*i))        # B1 is read after B2
    assert sorted(_allocs(_lower(s, args))) == ["B0", "B2"]              # B1 took B0; B2 did not take B1
    x = _x()
    _wrong_without(monkeypatch, "_is_last_use", lambda: _lower(s, args), x, (x + 1) * 2 + (x + 1))


@pytest.mark.parametrize("name,f,ref", [
    ("reversed", lambda b, i: b(N - 1 - i[0]) + 1, lambda x: x[::-1] + 1),
    ("shifted", lambda b, i: te.if_then_else(i[0] > 0, b(i[0] - 1), 0) + 1,
     lambda x: np.concatenate([[0], x[:-1]]) + 1),
])
def test_other_index_keeps_the_producer(monkeypatch, name, f, ref):
    s, args, _ = _stages(f)
    assert sorted(_allocs(_lower(s, args))) == ["B0", "B1"]
    x = _x()
    _wrong_without(monkeypatch, "_reads_at_store_address", lambda: _lower(s, args), x, ref(x))


def test_broadcast_read_keeps_the_producer(monkeypatch):
    shape = (4, 8)
    s, args, _ = _stages(lambda b, i: b(i[0], 0) * 2 + b(*i), shape=shape)
    assert sorted(_allocs(_lower(s, args))) == ["B0", "B1"]
    x = _x(shape)
    _wrong_without(monkeypatch, "_reads_at_store_address", lambda: _lower(s, args), x, x[:, :1] * 2 + x, shape)


# hand-written IR for the cases a schedule does not produce
X = ir.Buffer("X", (N,), "int32")
Y = ir.Buffer("Y", (N,), "int32")


def _buf(name, n=N, scope=SC):
    return ir.Buffer(name, (n,), "int32", scope)


def _loop(name, n, body_of):
    v = ir.Var(name)
    return ir.For(v, ir.const(0), ir.const(n), ir.ForKind.SERIAL, body_of(v))


def _func(body) -> ir.PrimFunc:
    return ir.PrimFunc("f", (X, Y), body)


def _fill(a):
    return _loop("i0", N, lambda i: ir.BufferStore(a, ir.BufferLoad(X, (i,)), (i,)))


def _drain(b):
    return _loop("i9", N, lambda i: ir.BufferStore(Y, ir.BufferLoad(b, (i,)), (i,)))


def _reused(body) -> ir.PrimFunc:
    return sr.reuse_storage(_func(body), [SC])


def test_element_stored_twice_keeps_the_producer(monkeypatch):
    a, b = _buf("A"), _buf("B")
    half = lambda i: ir.FloorDiv.make(i, 2)                          # noqa: E731

    def body():
        twice = _loop("i1", 2 * N, lambda i: ir.BufferStore(b, ir.BufferLoad(a, (half(i),)) + 1, (half(i),)))
        return ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), twice, _drain(b))))

    x = _x()
    _wrong_without(monkeypatch, "_store_injective", lambda: _reused(body()), x, x + 1)


def test_second_store_keeps_the_producer(monkeypatch):
    """``B[i] = A[i] + 1; B[i + 1] = 0`` per iteration: in place, the zero would overwrite the
    ``A[i + 1]`` that the next iteration reads."""
    a, b = _buf("A"), _buf("B")

    def body():
        step = _loop("i1", N, lambda i: ir.seq(
            ir.BufferStore(b, ir.BufferLoad(a, (i,)) + 1, (i,)),
            ir.IfThenElse(i < N - 1, ir.BufferStore(b, ir.const(0), (i + 1,)))))
        return ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), step, _drain(b))))

    x = _x()
    _wrong_without(monkeypatch, "_one_store", lambda: _reused(body()), x, x + 1)


def test_producer_written_by_the_step_keeps_it(monkeypatch):
    a, b = _buf("A"), _buf("B")

    def body():
        step = _loop("i1", N, lambda i: ir.seq(ir.BufferStore(b, ir.BufferLoad(a, (i,)) + 1, (i,)),
                                                ir.BufferStore(a, ir.const(0), (i,))))
        return ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), step, _drain(b))))

    x = _x()
    _wrong_without(monkeypatch, "_no_other_access", lambda: _reused(body()), x, x + 1)


def test_consumer_written_before_keeps_the_producer(monkeypatch):
    a, b = _buf("A"), _buf("B")

    def body():
        early = _loop("i1", N, lambda i: ir.BufferStore(b, ir.const(7), (i,)))
        step = _loop("i2", N, lambda i: ir.BufferStore(b, ir.BufferLoad(a, (i,)) + 1, (i,)))
        return ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), early, step, _drain(b))))

    x = _x()
    _wrong_without(monkeypatch, "_first_use", lambda: _reused(body()), x, x + 1)


def test_consumer_outliving_the_producer_keeps_its_buffer(monkeypatch):
    a, b = _buf("A"), _buf("B")

    def body():
        step = _loop("i1", N, lambda i: ir.BufferStore(b, ir.BufferLoad(a, (i,)) + 1, (i,)))
        return ir.Allocate(b, ir.seq(ir.Allocate(a, ir.seq(_fill(a), step)), _drain(b)))

    x = _x()
    _wrong_without(monkeypatch, "_inside", lambda: _reused(body()), x, x + 1)


def test_larger_consumer_keeps_its_buffer(monkeypatch):
    a, b = _buf("A"), _buf("B", 2 * N)

    def body():
        step = _loop("i1", 2 * N, lambda i: ir.BufferStore(
            b, ir.Call.make("int32", "if_then_else", [i < N, ir.BufferLoad(a, (i,)) + 1, ir.const(0)]), (i,)))
        return ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), step, _drain(b))))

    x = _x()
    _wrong_without(monkeypatch, "_fits", lambda: _reused(body()), x, x + 1)


def test_opaque_use_is_not_aliased():
    """A pointer to the producer (an intrinsic's operand) could be read anywhere: no reuse."""
    a, b = _buf("A"), _buf("B")
    step = ir.seq(ir.Evaluate(ir.Call.make("int32", "ext", [a.access_ptr("r")])),
                  _loop("i1", N, lambda i: ir.BufferStore(b, ir.BufferLoad(a, (i,)) + 1, (i,))))
    step = ir.AttrStmt(None, "pragma_stage", None, step)
    func = _func(ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), step, _drain(b)))))
    assert _allocs(sr.reuse_storage(func, [SC])) == ["A", "B"]
    assert sr.elementwise_store(step, b.data, a.data) is None


def test_loop_partition_copies_are_planned_separately():
    """The same Allocate nodes twice (a main part and a peeled tail share variables): a later
    read in one copy does not stop reuse in the other."""
    a, b = _buf("A"), _buf("B")
    step = _loop("i1", N, lambda i: ir.BufferStore(b, ir.BufferLoad(a, (i,)) + 1, (i,)))
    reread = _loop("i2", N, lambda i: ir.BufferStore(Y, ir.BufferLoad(a, (i,)) + ir.BufferLoad(b, (i,)), (i,)))
    first = ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), step, _drain(b))))
    second = ir.Allocate(a, ir.Allocate(b, ir.seq(_fill(a), step, reread)))
    func = sr.reuse_storage(_func(ir.seq(first, second)), [SC])
    assert _allocs(func) == ["A", "A", "B"]
    x = _x()
    np.testing.assert_array_equal(_run(func, x), 2 * x + 1)


def test_consumer_allocated_around_the_producer_takes_it():
    a, b = _buf("A"), _buf("B")
    step = _loop("i1", N, lambda i: ir.BufferStore(b, ir.BufferLoad(a, (i,)) * 3, (i,)))
    func = _reused(ir.Allocate(b, ir.Allocate(a, ir.seq(_fill(a), step, _drain(b)))))
    assert _allocs(func) == ["A"]
    x = _x()
    np.testing.assert_array_equal(_run(func, x), 3 * x)


def test_scopes_must_be_names():
    a = _buf("A")
    func = _func(ir.Allocate(a, ir.seq(_fill(a), _drain(a))))
    for bad in (SC, [SC, 3], 5):
        with pytest.raises(vtakit.errors.CompileError, match="scopes must be a collection of scope names"):
            sr.reuse_storage(func, bad)
        with pytest.raises(vtakit.errors.CompileError, match="scopes must be a collection of scope names"):
            sr.storage_reuse_pass(bad)


# ---------------------------------------------------------------------------- random programs
SHAPE2 = (4, 8)
READS = {   # how a stage reads another: (te index, numpy equivalent)
    "same": (lambda t, i, j: t[i, j], lambda x: x),
    "reversed": (lambda t, i, j: t[3 - i, 7 - j], lambda x: x[::-1, ::-1]),
    "shifted": (lambda t, i, j: te.if_then_else(j > 0, t[i, j - 1], 0),
                lambda x: np.concatenate([np.zeros((4, 1), x.dtype), x[:, :-1]], axis=1)),
    "broadcast": (lambda t, i, j: t[i, 0], lambda x: np.repeat(x[:, :1], 8, axis=1)),
}
OPS = {
    "add": (lambda a, c: a + c, lambda a, c: a + c),
    "mul": (lambda a, c: a * c, lambda a, c: a * c),
    "shr": (lambda a, c: a >> c, lambda a, c: a >> c),
    "max": (lambda a, c: te.max(a, c), np.maximum),
}


@hst.composite
def programs(draw):
    """Stages S1..Sn in the test scope; each reads one or two earlier stages (S0 = the input
    copy) through random index patterns; the output sums a random set of stages."""
    n = draw(hst.integers(1, 5))
    stages = []
    for k in range(1, n + 1):
        src = draw(hst.integers(max(0, k - 2), k - 1))
        read = draw(hst.sampled_from(["same"] * 3 + list(READS)))     # mostly element-wise
        op = draw(hst.sampled_from(list(OPS)))
        c = draw(hst.integers(1, 3))
        extra = draw(hst.one_of(hst.none(), hst.tuples(hst.integers(0, k - 1), hst.sampled_from(list(READS)))))
        stages.append((src, read, op, c, extra))
    outputs = draw(hst.lists(hst.integers(0, n), min_size=1, max_size=3, unique=True))
    return stages, outputs


def _program(stages, outputs):
    a = te.placeholder(SHAPE2, "int32", name="A")
    ts = [te.compute(SHAPE2, lambda i, j: a[i, j], name="S0")]
    def stage(src, read, op, c, extra):
        def f(i, j):
            v = OPS[op][0](READS[read][0](ts[src], i, j), c)
            return v if extra is None else v + READS[extra[1]][0](ts[extra[0]], i, j)
        return f

    for k, spec in enumerate(stages, 1):
        ts.append(te.compute(SHAPE2, stage(*spec), name=f"S{k}"))
    res = te.compute(SHAPE2, lambda i, j: sum((ts[o][i, j] for o in outputs[1:]), ts[outputs[0]][i, j]),
                     name="out")
    s = te.create_schedule(res.op)
    used = {stage.name for stage in s.stages}
    for t in ts:
        if t.name in used:                                         # stages nobody reads are dropped
            s[t].set_scope(SC)
    return s, [a, res]


def _numpy(stages, outputs, x):
    vals = [x.astype(np.int64)]
    for src, read, op, c, extra in stages:
        v = OPS[op][1](READS[read][1](vals[src]), c)
        vals.append(v if extra is None else v + READS[extra[1]][1](vals[extra[0]]))
    return sum(vals[o] for o in outputs).astype(np.int32)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(programs())
def test_random_programs_keep_their_results(prog):
    """Whatever the reads, the pass never changes a result (numpy and the unshared IR agree)."""
    s, args = _program(*prog)
    x = _x(SHAPE2) // 8                                            # small values: no int32 overflow
    expect = _numpy(*prog, x)
    plain = _lower(s, args, reuse=False)
    shared = _lower(s, args)
    np.testing.assert_array_equal(_run(plain, x, out_shape=SHAPE2), expect)
    np.testing.assert_array_equal(_run(shared, x, out_shape=SHAPE2), expect)
    assert sr.scope_peak_bits(shared, SC) <= sr.scope_peak_bits(plain, SC)


# ---------------------------------------------------------------------------- injectivity
@settings(max_examples=300, deadline=None, derandomize=True)
@given(hst.lists(hst.tuples(hst.integers(-6, 6), hst.integers(1, 4)), min_size=1, max_size=3), hst.integers(-5, 5),
       hst.one_of(hst.none(), hst.tuples(hst.integers(-3, 3), hst.integers(2, 4))))
def test_injectivity_test_is_sound(dims, base, ramp):
    """Whenever the address is judged injective, brute force agrees."""
    loops = [ir.For(ir.Var(f"v{k}"), ir.const(0), ir.const(n), ir.ForKind.SERIAL, ir.Evaluate(ir.const(0)))
             for k, (_, n) in enumerate(dims)]
    address = ir.const(base)
    for (c, _), lp in zip(dims, loops):
        address = address + lp.loop_var * c
    lanes = [0]
    if ramp is not None:
        address, lanes = ir.Ramp(address, ir.const(ramp[0]), ramp[1]), list(range(ramp[1]))
    values = [base + sum(c * v for (c, _), v in zip(dims, it)) + (ramp[0] * lane if ramp else 0)
              for it in itertools.product(*[range(n) for _, n in dims]) for lane in lanes]
    if sr._injective(address, loops, ()):
        assert len(set(values)) == len(values)
    if all(n == 1 for _, n in dims) and ramp is None:
        assert sr._injective(address, loops, ())


def test_injectivity_rejects_unknown_shapes():
    v, w = ir.Var("v"), ir.Var("w")
    loop = ir.For(v, ir.const(0), ir.const(4), ir.ForKind.SERIAL, ir.Evaluate(ir.const(0)))
    assert sr._injective(v * 2 + 1, [loop], ())
    assert not sr._injective(ir.FloorDiv.make(v, 2), [loop], ())          # not affine
    assert not sr._injective(v + w, [loop], {w})                            # w bound inside the step
    assert not sr._injective(ir.Broadcast(v, 4), [loop], ())
    sym = ir.For(v, ir.const(0), ir.Var("n"), ir.ForKind.SERIAL, ir.Evaluate(ir.const(0)))
    assert not sr._injective(v, [sym], ())                                 # symbolic extent
