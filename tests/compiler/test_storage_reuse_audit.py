"""Second-reader audit of StorageReuse: inputs its author did not try, each against a golden model.

Generic IR runs on the reference interpreter against numpy, with the pass on and off (the pass may
never change a result nor raise a scope's peak). The schedules exercise what the first tests do not:
a stage read twice at one index or through equal but different index expressions, two consumers of
one producer, a later reader of an already-shared buffer, reordered/split/fused/vectorised consumers
with loop orders unlike the producer's, guards, reductions, casts, virtual threads of both kinds and
double buffering. The VTA part runs random ALU chains (the in-place veto) and ResNet-18 layers on
fsim against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler import te
from vtakit.compiler.interpreter import Interpreter
from vtakit.compiler.lower import storage_reuse as sr
from vtakit.compiler.transform import PassContext
from vtakit.compiler.scope import MemoryInfo
import vtakit

SC = "local.audit_buf"


def _lower(s, args, reuse: bool = True):
    passes = [(1, sr.storage_reuse_pass([SC]))] if reuse else []
    with PassContext(config={"tir.add_lower_pass": passes}, memory_scopes={SC: MemoryInfo(32, 1 << 20, 32)}):
        return vtakit.lower(s, args)


def _run(func, inputs, out_shape):
    out = np.zeros(out_shape, np.int32)
    Interpreter(func)(*inputs, out)
    return out


def _check(s, args, inputs, expect):
    """Equal to numpy with and without the pass; the scope's peak never grows. Returns both functions."""
    plain, shared = _lower(s, args, reuse=False), _lower(s, args)
    np.testing.assert_array_equal(_run(plain, inputs, expect.shape), expect)
    np.testing.assert_array_equal(_run(shared, inputs, expect.shape), expect)
    assert sr.scope_peak_bits(shared, SC) <= sr.scope_peak_bits(plain, SC)
    return plain, shared


# ---------------------------------------------------------------------------- virtual threads
@pytest.mark.parametrize("tag", ["vthread", "cthread"])
def test_sharing_vthread_never_grows_the_peak(tag):
    """Under a sharing ``vthread`` a buffer nobody's thread index reaches stays one shared copy
    (computed once); a per-thread consumer ``D = S + v`` written into it would make it (and its
    producer's work) per thread: ``S`` (16) + ``D`` (2 x 4) becomes 2 x 16. Under ``cthread`` every
    buffer is per thread anyway, so the consumer shares."""
    a = te.placeholder((16,), "int32", name="A")
    src = te.compute((16,), lambda i: a[i], name="S")
    k = te.reduce_axis((0, 16), name="k")
    total = te.compute((1,), lambda z: te.sum(src[k], axis=k), name="T")
    dst = te.compute((2, 4), lambda v, i: src[i] + total[0] + v, name="D")
    out = te.compute((2, 4), lambda v, i: dst[v, i], name="out")
    s = te.create_schedule(out.op)
    s[out].bind(s[out].op.axis[0], te.thread_axis(tag))
    for t in (src, total, dst):
        s[t].set_scope(SC)
        s[t].compute_at(s[out], s[out].op.axis[0])
    x = np.arange(16, dtype=np.int32) - 5
    plain, shared = _check(s, [a, out], [x], x[:4][None, :] + x.sum() + np.arange(2, dtype=np.int32)[:, None])
    expect_shared = 1 if tag == "cthread" else 0
    assert (sr.scope_peak_bits(shared, SC) < sr.scope_peak_bits(plain, SC)) == bool(expect_shared)
