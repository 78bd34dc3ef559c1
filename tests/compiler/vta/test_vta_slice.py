"""A packed GEMM with a shift epilogue, scheduled in TE, compiled to a Program and run on fsim."""

import numpy as np

import vtakit
from vtakit.compiler import te
from vtakit.compiler.vta import build_config, get_env
from vtakit.hw.config import VTAConfig
from vtakit.runtime import Device


def _gemm_shift(env, m, n, k):
    B, BI, BO = env.batch, env.block_in, env.block_out
    A = te.placeholder((m, k, B, BI), "int8", name="A")
    W = te.placeholder((n, k, BO, BI), "int8", name="W")
    ko = te.reduce_axis((0, k), name="ko")
    ki = te.reduce_axis((0, BI), name="ki")
    C = te.compute((m, n, B, BO), lambda i, j, b, c: te.sum(
        A[i, ko, b, ki].astype("int32") * W[j, ko, c, ki].astype("int32"), axis=[ko, ki]), name="C")
    S = te.compute(C.shape, lambda *i: C(*i) >> 2, name="S")
    R = te.compute(C.shape, lambda *i: S(*i).astype("int8"), name="R")
    s = te.create_schedule(R.op)
    Ab = s.cache_read(A, env.inp_scope, [C])
    Wb = s.cache_read(W, env.wgt_scope, [C])
    s[C].set_scope(env.acc_scope)
    s[S].set_scope(env.acc_scope)
    i, j, b, c = s[R].op.axis
    s[C].compute_at(s[R], j)
    s[S].compute_at(s[R], j)
    ci, cj, cb, cc = s[C].op.axis
    cko, cki = s[C].op.reduce_axis
    s[C].reorder(cko, ci, cj, cb, cc, cki)
    s[Ab].compute_at(s[C], cko)
    s[Wb].compute_at(s[C], cko)
    s[Ab].pragma(s[Ab].op.axis[0], env.dma_copy)
    s[Wb].pragma(s[Wb].op.axis[0], env.dma_copy)
    s[S].pragma(s[S].op.axis[0], env.alu)
    s[R].pragma(b, env.dma_copy)
    s[C].tensorize(cb, env.gemm)
    return s, [A, W, R]


def test_small_gemm_slice_runs_on_fsim():
    env = get_env(VTAConfig.small())
    s, (A, W, R) = _gemm_shift(env, 2, 3, 4)
    with build_config(env.config):
        text = str(vtakit.lower(s, [A, W, R]))
    for intrin in ("vta.load_buffer_2d", "vta.store_buffer_2d", "vta.uop_push", "vta.dep_push", "vta.dep_pop"):
        assert intrin in text
    mod = vtakit.build(s, [A, W, R], target="vta", config=env.config)
    dev = Device(env.config)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, A.shape).astype(np.int8)
    w = rng.integers(-128, 128, W.shape).astype(np.int8)
    ref = (np.einsum("ikbx,jkcx->ijbc", a.astype(np.int32), w.astype(np.int32)) >> 2).astype(np.int8)
    out = dev.empty(ref.shape, np.int8)
    stats = mod(dev.array(a), dev.array(w), out)
    np.testing.assert_array_equal(out.numpy(), ref)
    assert stats.counters["gemm_counter"] == 2 * 3 * 4   # GEMM micro-ops (resets are not counted)
    # the same module runs again on other arrays
    a2 = rng.integers(-128, 128, a.shape).astype(np.int8)
    out2 = dev.empty(ref.shape, np.int8)
    mod(dev.array(a2), dev.array(w), out2)
    ref2 = (np.einsum("ikbx,jkcx->ijbc", a2.astype(np.int32), w.astype(np.int32)) >> 2).astype(np.int8)
    np.testing.assert_array_equal(out2.numpy(), ref2)


def test_program_for_saves_a_replayable_program(tmp_path):
    """The relocated program is a normal Program: saved, reloaded and replayed on a fresh device
    (fsim and cycle agree), it writes the same output."""
    from vtakit.runtime.replay import compare_backends, run_fresh
    from vtakit.sim.program import Program

    env = get_env(VTAConfig.small())
    s, (A, W, R) = _gemm_shift(env, 2, 2, 3)
    mod = vtakit.build(s, [A, W, R], target="vta", config=env.config)
    dev = Device(env.config)
    rng = np.random.default_rng(3)
    a = dev.array(rng.integers(-128, 128, A.shape).astype(np.int8))
    w = dev.array(rng.integers(-128, 128, W.shape).astype(np.int8))
    out = dev.empty(R.shape, np.int8)
    program = mod.program_for(a, w, out)
    program.save(tmp_path / "gemm.vtaprog")
    mod(a, w, out)
    _, dram = run_fresh(Program.load(tmp_path / "gemm.vtaprog"))
    np.testing.assert_array_equal(dram[out.phys_addr:out.phys_addr + out.nbytes].view(np.int8).reshape(R.shape),
                                  out.numpy())
    compare_backends(program, ("fsim", "cycle"))
