"""Robustness to rescheduling: schedules written here (not the default ones) all stay correct.

Tilings, loop orders, compute_at positions of the loads and of the epilogue, and 1, 2 and 3
virtual threads on output channels and rows. Each run goes through fsim, which rejects token
imbalance, deadlock and races.
"""

import pytest

from vtakit.compiler import te
from vtakit.compiler.topi_vta import Conv2dWorkload, conv2d_packed, dense_packed

from tests.compiler.vta.helpers import build_and_run, conv_case, dense_case

WL = Conv2dWorkload(h=8, w=8, ci=8, co=24, kernel=3, pad=1, stride=1)
WL_S2 = Conv2dWorkload(h=11, w=8, ci=8, co=8, kernel=3, pad=1, stride=2)
WL_1X1 = Conv2dWorkload(h=8, w=8, ci=16, co=8, kernel=1, pad=0, stride=2)


def conv_schedule(env, wl, *, tile_h, tile_w, tile_co, tile_ci=1, oc_threads=1, h_threads=1, order="vta",
                  load_at="ko", ewise_at="tile"):
    tensors, st = conv2d_packed(env, wl)
    data, kernel, addend, out = tensors
    conv = st["conv"]
    s = te.create_schedule(out.op)
    cdata = st.get("data_pad")
    if cdata is not None:
        s[cdata].set_scope(env.inp_scope)
    else:
        cdata = s.cache_read(data, env.inp_scope, [conv])
    ckernel = s.cache_read(kernel, env.wgt_scope, [conv])
    cbias = s.cache_read(addend, env.acc_scope, [st["addend_add"]])
    s[conv].set_scope(env.acc_scope)
    n, co, y, x, nb, cb = s[out].op.axis
    co0, co1 = s[out].split(co, factor=tile_co)
    y0, y1 = s[out].split(y, factor=tile_h)
    x0, x1 = s[out].split(x, factor=tile_w)
    s[out].reorder(n, y0, co0, x0, co1, y1, x1, nb, cb)
    for nthreads, axis in ((oc_threads, co0), (h_threads, y0)):
        if nthreads > 1:
            vt, _ = s[out].split(axis, nparts=nthreads)
            s[out].reorder(vt, n)
            s[out].bind(vt, te.thread_axis("cthread"))
    s[conv].compute_at(s[out], x0)
    ewise = [st["addend_add"], st["shr"], st["clip"]]
    for t in ewise:
        s[t].set_scope(env.acc_scope)
        s[t].pragma(s[t].op.axis[0], env.alu)
        s[t].compute_at(s[out], x0)
    s[cbias].compute_at(s[out], x0)
    s[cbias].pragma(s[cbias].op.axis[0], env.dma_copy)
    if ewise_at == "inner":       # the epilogue per output-channel block of the tile
        for t in ewise:
            s[t].compute_at(s[out], co1)
    c_n, c_co, c_y, c_x, c_nb, c_cb = s[conv].op.axis
    k_o, dy, dx, k_i = s[conv].op.reduce_axis
    if order == "vta":
        s[conv].reorder(c_n, k_o, c_x, dx, dy, c_co, c_y, c_nb, c_cb, k_i)
    else:                         # output loops outside the kernel window
        s[conv].reorder(c_n, k_o, c_co, c_y, c_x, dy, dx, c_nb, c_cb, k_i)
    k_o0, k_o1 = s[conv].split(k_o, factor=tile_ci)
    if load_at == "ko":
        s[cdata].compute_at(s[conv], k_o0)
        s[ckernel].compute_at(s[conv], k_o0)
    else:                         # everything loaded once per output tile, before the reduction
        s[cdata].compute_at(s[conv], c_n)
        s[ckernel].compute_at(s[conv], c_n)
    s[cdata].pragma(s[cdata].op.axis[0], env.dma_copy)
    s[ckernel].pragma(s[ckernel].op.axis[0], env.dma_copy)
    s[conv].tensorize(c_nb, env.gemm)
    s[out].pragma(y1 if ewise_at == "inner" else co1, env.dma_copy)
    return s, tensors


CONV_CASES = {
    "vta-order": dict(wl=WL, tile_h=4, tile_w=8, tile_co=2),
    "output-order": dict(wl=WL, tile_h=2, tile_w=4, tile_co=3, order="output"),
    "two-ci-blocks-per-load": dict(wl=WL, tile_h=4, tile_w=4, tile_co=1, tile_ci=2),
    "loads-per-tile": dict(wl=WL, tile_h=4, tile_w=8, tile_co=2, load_at="tile"),
    "epilogue-per-channel-block": dict(wl=WL, tile_h=4, tile_w=8, tile_co=2, ewise_at="inner"),
    "oc-2-threads": dict(wl=WL, tile_h=4, tile_w=8, tile_co=1, oc_threads=2),
    "oc-3-threads": dict(wl=WL, tile_h=4, tile_w=2, tile_co=2, oc_threads=3),
    "h-2-threads": dict(wl=WL, tile_h=2, tile_w=8, tile_co=3, h_threads=2),
    "h-2-oc-2-threads": dict(wl=WL, tile_h=2, tile_w=4, tile_co=1, h_threads=2, oc_threads=2),
    "stride-2-3-threads": dict(wl=WL_S2, tile_h=1, tile_w=4, tile_co=2, h_threads=3),
    "1x1-stride-2-2-threads": dict(wl=WL_1X1, tile_h=2, tile_w=4, tile_co=1, tile_ci=2, oc_threads=2),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv2d_schedules(small_env, name):
    kw = dict(CONV_CASES[name])
    wl = kw.pop("wl")
    s, tensors = conv_schedule(small_env, wl, **kw)
    host, expect = conv_case(small_env, wl, seed=len(name))
    build_and_run(s, tensors, host, expect, small_env.config)


def dense_schedule(env, m, n, k, *, tile_b, tile_co, tile_ci, threads=1, gemm_at="tile", inner="bc"):
    tensors, st = dense_packed(env, m, n, k)
    data, weight, addend, out = tensors
    gemm = st["gemm"]
    s = te.create_schedule(out.op)
    cdata = s.cache_read(data, env.inp_scope, [gemm])
    cweight = s.cache_read(weight, env.wgt_scope, [gemm])
    cbias = s.cache_read(addend, env.acc_scope, [st["addend_add"]])
    s[gemm].set_scope(env.acc_scope)
    b, c, bi, ci = s[out].op.axis
    b0, b1 = s[out].split(b, factor=tile_b)
    c0, c1 = s[out].split(c, factor=tile_co)
    s[out].reorder(b0, c0, b1, c1, bi, ci)
    if threads > 1:
        vt, c0 = s[out].split(c0, nparts=threads)
        s[out].reorder(vt, b0)
        s[out].bind(vt, te.thread_axis("cthread"))
    at = c0 if gemm_at == "tile" else b1
    for t in (gemm, st["addend_add"], st["shr"], st["clip"], cbias):
        s[t].compute_at(s[out], at)
    for t in (st["addend_add"], st["shr"], st["clip"]):
        s[t].set_scope(env.acc_scope)
        s[t].pragma(s[t].op.axis[0], env.alu)
    s[cbias].pragma(s[cbias].op.axis[0], env.dma_copy)
    g_b, g_c, g_bi, g_ci = s[gemm].op.axis
    k_o, k_i = s[gemm].op.reduce_axis
    k_o0, k_o1 = s[gemm].split(k_o, factor=tile_ci)
    if inner == "bc":
        s[gemm].reorder(k_o0, k_o1, g_b, g_c, g_bi, g_ci, k_i)
    else:
        s[gemm].reorder(k_o0, g_c, g_b, k_o1, g_bi, g_ci, k_i)
    s[cdata].compute_at(s[gemm], k_o0)
    s[cweight].compute_at(s[gemm], k_o0)
    s[cdata].pragma(s[cdata].op.axis[0], env.dma_copy)
    s[cweight].pragma(s[cweight].op.axis[0], env.dma_copy)
    s[gemm].tensorize(g_bi, env.gemm)
    s[out].pragma(c1 if gemm_at == "row" else b1, env.dma_copy)
    return s, tensors


DENSE_CASES = {
    "whole": dict(tile_b=4, tile_co=4, tile_ci=4),
    "tiles": dict(tile_b=2, tile_co=2, tile_ci=1),
    "k-inside": dict(tile_b=2, tile_co=2, tile_ci=2, inner="cb"),
    "row-attach": dict(tile_b=2, tile_co=2, tile_ci=2, gemm_at="row"),
    "2-threads": dict(tile_b=4, tile_co=1, tile_ci=2, threads=2),
    "3-threads": dict(tile_b=2, tile_co=1, tile_ci=4, threads=3),
}


@pytest.mark.parametrize("name", list(DENSE_CASES))
def test_dense_schedules(small_env, name):
    kw = DENSE_CASES[name]
    m, n, k = 16, 4 * 4 * (3 if kw.get("threads") == 3 else 1), 16
    s, tensors = dense_schedule(small_env, m, n, k, **kw)
    host, expect = dense_case(small_env, m, n, k, seed=len(name))
    build_and_run(s, tensors, host, expect, small_env.config)


# ---------------------------------------------------------------------------- random schedules
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as hst  # noqa: E402

from vtakit.compiler.topi_vta.tiling import divisors  # noqa: E402
from vtakit.errors import CompileError  # noqa: E402

RANDOM_WLS = [WL, WL_S2, WL_1X1, Conv2dWorkload(h=6, w=6, ci=8, co=16, kernel=3, pad=1, stride=1),
              Conv2dWorkload(h=5, w=7, ci=4, co=12, kernel=3, pad=2, stride=1)]


@hst.composite
def conv_schedules(draw):
    wl = draw(hst.sampled_from(RANDOM_WLS))
    co_blocks, ci_blocks = wl.co // 4, wl.ci // 4
    oc_threads = draw(hst.sampled_from([d for d in divisors(co_blocks) if d <= 3]))
    h_threads = draw(hst.sampled_from([d for d in divisors(wl.oh) if d <= 3]))
    tile_co = draw(hst.sampled_from(divisors(co_blocks // oc_threads)))
    tile_h = draw(hst.sampled_from(divisors(wl.oh // h_threads)))
    tile_w = draw(hst.sampled_from(divisors(wl.ow)))
    tile_ci = draw(hst.sampled_from(divisors(ci_blocks)))
    kw = dict(tile_h=tile_h, tile_w=tile_w, tile_co=tile_co, tile_ci=tile_ci, oc_threads=oc_threads,
              h_threads=h_threads, order=draw(hst.sampled_from(["vta", "output"])),
              load_at=draw(hst.sampled_from(["ko", "tile"])), ewise_at=draw(hst.sampled_from(["tile", "inner"])))
    return wl, kw


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(conv_schedules())
def test_random_conv2d_schedules(small_env, case):
    """Random tilings, loop orders, attach points and thread splits: correct, or rejected only
    because the buffers do not fit the SRAMs."""
    wl, kw = case
    s, tensors = conv_schedule(small_env, wl, **kw)
    host, expect = conv_case(small_env, wl)
    try:
        build_and_run(s, tensors, host, expect, small_env.config)
    except CompileError as exc:
        assert "capacity" in str(exc) or "exceeds the micro-op SRAM" in str(exc), str(exc)
