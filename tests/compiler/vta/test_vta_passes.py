"""The VTA passes on small hand-written schedules: ALU operations (positive and rejected), DMA
patterns, memory scopes, code generation and module-call errors."""

import numpy as np
import pytest

import vtakit
from vtakit.compiler import te
from vtakit.compiler.topi_vta import Conv2dKnobs, Conv2dWorkload, DenseKnobs, conv2d, dense
from vtakit.compiler.vta import build_config, get_env
from vtakit.errors import ArgumentError, CompileError
from vtakit.hw.config import VTAConfig
from vtakit.runtime import Device

CFG = VTAConfig.small()
ENV = get_env(CFG)
SHAPE = (2, 3, ENV.batch, ENV.block_out)


def _copy(t):
    return lambda *i: t(*i).astype("int32")


def _padded(t, value):
    return lambda i, j, x, y: te.if_then_else(j > 0, t[i, j, x, y], value).astype("int32")


def alu_schedule(fexpr, *, n_inputs=1, alu=True, dma_in=True, cast=True, in_dtype="int32", pad_value=None,
                 scope=ENV.acc_scope, split=None):
    """out = cast(fexpr(a_buf, b_buf, ...)) with the inputs DMA-loaded into the accumulator."""
    ins = [te.placeholder(SHAPE, in_dtype, name=f"in{k}") for k in range(n_inputs)]
    bufs = []
    for k, t in enumerate(ins):
        bufs.append(te.compute(SHAPE, _copy(t) if pad_value is None else _padded(t, pad_value), name=f"buf{k}"))
    res = te.compute(SHAPE, lambda *i: fexpr(*[b(*i) for b in bufs]), name="res")
    out = te.compute(SHAPE, lambda *i: res(*i).astype("int8") if cast else res(*i), name="out")
    s = te.create_schedule(out.op)
    i0, i1, i2, i3 = s[out].op.axis
    at = i0
    if split is not None:
        i1o, i1i = s[out].split(i1, factor=split)
        at = i1o
    for b in bufs:
        s[b].set_scope(scope)
        s[b].compute_at(s[out], at)
        if dma_in:
            s[b].pragma(s[b].op.axis[0], ENV.dma_copy)
    s[res].set_scope(ENV.acc_scope)
    s[res].compute_at(s[out], at)
    if alu:
        s[res].pragma(s[res].op.axis[0], ENV.alu)
    s[out].pragma(i1 if split is None else i1i, ENV.dma_copy)
    return s, ins + [out]


def run(s, args, config=CFG, seed=0):
    mod = vtakit.build(s, args, target="vta", config=config)
    dev = Device(config)
    rng = np.random.default_rng(seed)
    host = [rng.integers(-300, 300, SHAPE).astype(t.dtype) for t in args[:-1]]
    out = dev.empty(SHAPE, np.int8)
    mod(*[dev.array(h) for h in host], out)
    return host, out.numpy()


def wrap8(x):
    return np.asarray(x, dtype=np.int64).astype(np.int32).astype(np.int8)


ALU_CASES = {
    "add-imm": (lambda a: a + 5, lambda a: a + 5),
    "sub-imm": (lambda a: a - 7, lambda a: a - 7),
    "imm-first": (lambda a: 3 + te.max(a, -20), lambda a: 3 + np.maximum(a, -20)),
    "relu-clip": (lambda a: te.min(te.max(a, 0), 127), lambda a: np.clip(a, 0, 127)),
    "shr": (lambda a: a >> 3, lambda a: a >> 3),
    "shl": (lambda a: a << 2, lambda a: a << 2),
    "copy": (lambda a: a, lambda a: a),
    "chain": (lambda a: te.min((a >> 1) + 9, 50), lambda a: np.minimum((a >> 1) + 9, 50)),
}


@pytest.mark.parametrize("name", list(ALU_CASES))
def test_alu_immediate_ops(name):
    f, ref = ALU_CASES[name]
    s, args = alu_schedule(f)
    (a,), got = run(s, args)
    np.testing.assert_array_equal(got, wrap8(ref(a.astype(np.int64))))


@pytest.mark.parametrize("op,ref", [(lambda a, b: a + b, lambda a, b: a + b),
                                    (lambda a, b: te.max(a, b), np.maximum),
                                    (lambda a, b: te.min(b, a) + 1, lambda a, b: np.minimum(a, b) + 1),
    (lambda a, b: te.max(a + 2, b + 2) >> 1, lambda a, b: np.maximum(a + 2, b + 2) >> 1),
    (lambda a, b: te.min(a + b, a), lambda a, b: np.minimum(a + b, a)),  # a is read again after a + b
    # clip, then add a tensor: the simplifier must not push b into both arms of min/max
    (lambda a, b: te.min(te.max(a - 3, -5), 7) + b, lambda a, b: np.minimum(np.maximum(a - 3, -5), 7) + b)])
def test_alu_tensor_ops(op, ref):
    s, args = alu_schedule(op, n_inputs=2)
    (a, b), got = run(s, args)
    np.testing.assert_array_equal(got, wrap8(ref(a.astype(np.int64), b.astype(np.int64))))


def test_alu_multiply_needs_alu_mul():
    s, args = alu_schedule(lambda a, b: a * b, n_inputs=2)
    with pytest.raises(CompileError, match="ALU_MUL"):
        vtakit.build(s, args, target="vta", config=CFG)
    cfg = CFG.replace(alu_mul=True)
    (a, b), got = run(*alu_schedule(lambda a, b: a * b, n_inputs=2), config=cfg)
    np.testing.assert_array_equal(got, wrap8(a.astype(np.int64) * (b.astype(np.int64) & 0xFFFF).astype(np.int16)))
    (a,), got = run(*alu_schedule(lambda a: a * 3), config=cfg)
    np.testing.assert_array_equal(got, wrap8(a.astype(np.int64) * 3))


@pytest.mark.parametrize("fexpr,n,match", [
    (lambda a: a >> 40, 1, "shift by 40"),
    (lambda a: a << 33, 1, r"shift by -33"),
    (lambda a: a + 70000, 1, "16-bit signed"),
    (lambda a: a // 3, 1, "not an ALU operation"),
    (lambda a, b: a - b, 2, "subtracts constants only"),
    (lambda a, b: (a + 1) * (b + 1), 2, "ALU_MUL"),
    (lambda a, b: te.max(a + 1, b + 2), 2, "combines two computed values"),
    (lambda a: a << a, 1, "shift amounts must be constants"),     # a right shift by a tensor is SHR tensor
])
def test_alu_rejects(fexpr, n, match):
    s, args = alu_schedule(fexpr, n_inputs=n)
    with pytest.raises(CompileError, match=match):
        vtakit.build(s, args, target="vta", config=CFG)


def test_dma_and_codegen_rejects():
    with pytest.raises(CompileError, match="padding value 1 is not 0"):
        vtakit.build(*alu_schedule(lambda a: a, pad_value=1), target="vta", config=CFG)
    with pytest.raises(CompileError, match="stores int8"):
        vtakit.build(*alu_schedule(lambda a: a, cast=False), target="vta", config=CFG)
    with pytest.raises(CompileError, match="would run on the host"):
        vtakit.build(*alu_schedule(lambda a: a + 1, alu=False), target="vta", config=CFG)
    with pytest.raises(CompileError, match="would run on the host"):
        vtakit.build(*alu_schedule(lambda a: a, dma_in=False), target="vta", config=CFG)
    with pytest.raises(CompileError, match="holds int8, not int32"):
        vtakit.build(*alu_schedule(lambda a: a, scope=ENV.inp_scope), target="vta", config=CFG)



@pytest.mark.parametrize("split", [2, 4])
def test_split_that_does_not_divide_peels_a_tail(split):
    """3 column blocks in tiles of 2 (a full tile and a tail of 1) or 4 (one partial tile): the DMA,
    ALU and store of the tail tile are smaller instructions, and the result is exact."""
    s, args = alu_schedule(lambda a: a + 5, split=split)
    (a,), got = run(s, args)
    np.testing.assert_array_equal(got, wrap8(a.astype(np.int64) + 5))


def test_split_tail_inside_a_virtual_thread_is_rejected():
    s, args = alu_schedule(lambda a: a + 5, split=2)
    out = args[-1]
    s[out].bind(s[out].leaf_iter_vars[1], te.thread_axis("cthread"))
    with pytest.raises(CompileError, match=r"loop i1 has the non-constant extent min\(2, \(3 - \(cthread \* 2\)\)\); "
                                           r"the tail .* not inside a virtual thread"):
        vtakit.build(s, args, target="vta", config=CFG)


def test_padded_acc8_load():
    """int8 DRAM data into the accumulator (ACC_8BIT) with zero padding on a row."""
    s, args = alu_schedule(lambda a: a + 1, in_dtype="int8", pad_value=te.const(0, "int8"))
    (a,), got = run(s, args)
    ref = a.astype(np.int8).astype(np.int64) + 1
    ref[:, 0] = 1
    np.testing.assert_array_equal(got, wrap8(ref))


def test_scope_overflow_names_buffer_size_capacity():
    s, args = dense(ENV, 64, 8, 64, DenseKnobs(tile_b=64, tile_co=1, tile_ci=4))
    with pytest.raises(CompileError, match=r"data\.local\.inp_buffer needs 8192 bits \(1024 bytes\) in scope "
                                           r"local\.inp_buffer, over its capacity of 4096 bits \(512 bytes\)"):
        vtakit.build(s, args, target="vta", config=CFG)


def test_padding_limits():
    env = get_env(VTAConfig())
    s, args = conv2d(ENV, Conv2dWorkload(4, 4, 4, 4, 3, 3, 1), Conv2dKnobs(1, 8, 1, 1, 1, 1))
    with pytest.raises(CompileError, match="entirely in the padding"):
        vtakit.build(s, args, target="vta", config=CFG)
    s, args = conv2d(env, Conv2dWorkload(4, 4, 16, 16, 3, 16, 1), Conv2dKnobs(34, 34, 1, 1, 1, 1))
    with pytest.raises(CompileError, match="y_pad_0=16 exceeds the DMA's maximum padding of 15"):
        vtakit.build(s, args, target="vta", config=env.config)


def test_lower_shows_vta_intrinsics_and_folded_loops():
    s, args = dense(ENV, 8, 8, 16, DenseKnobs(tile_b=8, tile_co=2, tile_ci=2))
    with build_config(CFG):
        text = str(vtakit.lower(s, args))
    from vtakit.compiler import vta

    assert str(vta.lower(s, args, CFG)) == text
    for name in ("vta.load_buffer_2d", "vta.store_buffer_2d", "vta.uop_push", "vta.uop_loop_begin",
                 "vta.uop_loop_end", "vta.dep_push", "vta.dep_pop", "coproc_scope", "coproc_uop_scope"):
        assert name in text, name
    mod = vtakit.build(s, args, target="vta", config=CFG)
    assert "GEMM" in mod.get_source() and "primfn" in mod.get_source()
    gemms = [i for i in mod.template.insns if type(i).__name__ == "GemmInsn" and not i.reset_reg]
    assert gemms and all(i.iter_out * i.iter_in > 1 for i in gemms)   # loops folded into the instruction


def test_module_call_errors():
    s, args = dense(ENV, 4, 4, 4, DenseKnobs(1, 1, 1))
    mod = vtakit.build(s, args, target="vta", config=CFG)
    dev = Device(CFG)
    arrays = [dev.empty(tuple(int(x) for x in t.shape), t.dtype) for t in args]
    mod(*arrays)
    with pytest.raises(ArgumentError, match="takes 4 arrays"):
        mod(*arrays[:3])
    with pytest.raises(ArgumentError, match="expected a device array"):
        mod(np.zeros(arrays[0].shape, np.int8), *arrays[1:])
    with pytest.raises(ArgumentError, match="expected shape"):
        mod(dev.empty((9,), np.int8), *arrays[1:])
    with pytest.raises(ArgumentError, match="lives on another device"):
        mod(Device(CFG).empty(arrays[0].shape, np.int8), *arrays[1:])
    other = Device(VTAConfig.small(log_inp_buff_size=10))
    with pytest.raises(ArgumentError, match=r"was built for 1x4_i8w8a32_10_9_10_11, the device is 1x4_i8w8a32_10_10_10_11: LOG_INP_BUFF_SIZE=9 vs 10"):
        mod(*[other.empty(a.shape, a.dtype) for a in arrays])
    wider_bus = Device(CFG.replace(bus_width=128))    # the same model string: the message names the key
    with pytest.raises(ValueError, match=r"was built for 1x4_i8w8a32_10_9_10_11 with other system keys than the "
                                         r"device: BUS_WIDTH=64 vs 128$"):
        mod(*[wider_bus.empty(a.shape, a.dtype) for a in arrays])
    with pytest.raises(CompileError, match="config must be a VTAConfig"):
        vtakit.build(s, args, target="vta", config="small")


def test_micro_op_kernel_over_the_uop_buffer():
    """Loops left inside a micro-op scope expand into the kernel, which must fit the uop SRAM."""
    cfg = VTAConfig.small(log_uop_buff_size=5)          # 8 micro-ops
    env = get_env(cfg)
    from tests.compiler.vta.test_vta_reschedule import dense_schedule

    s, args = dense_schedule(env, 4, 8, 64, tile_b=2, tile_co=2, tile_ci=16, inner="cb")
    with pytest.raises(CompileError, match="kernel of 16 micro-ops exceeds the micro-op SRAM"):
        vtakit.build(s, args, target="vta", config=cfg)


def test_gemm_intrinsic_body_when_the_reduction_is_inside():
    """K = BLOCK_IN and the reduction axes inside the tensorized region: the intrinsic's body
    (reset + update) is used; loads attached at the output tile."""
    from vtakit.compiler.topi_vta import dense_packed
    from tests.compiler.vta.helpers import build_and_run, dense_case

    tensors, st = dense_packed(ENV, 8, 8, 4)
    data, weight, addend, out = tensors
    gemm = st["gemm"]
    s = te.create_schedule(out.op)
    loads = [s.cache_read(data, ENV.inp_scope, [gemm]), s.cache_read(weight, ENV.wgt_scope, [gemm]),
             s.cache_read(addend, ENV.acc_scope, [st["addend_add"]])]
    s[gemm].set_scope(ENV.acc_scope)
    b, c, bi, ci = s[out].op.axis
    ewise = (st["addend_add"], st["shr"], st["clip"])
    for t in (gemm, *ewise, *loads):
        s[t].compute_at(s[out], c)
    for t in ewise:
        s[t].set_scope(ENV.acc_scope)
        s[t].pragma(s[t].op.axis[0], ENV.alu)
    for t in loads:
        s[t].pragma(s[t].op.axis[0], ENV.dma_copy)
    g_b, g_c, g_bi, g_ci = s[gemm].op.axis
    ko, ki = s[gemm].op.reduce_axis
    s[gemm].reorder(g_b, g_c, ko, g_bi, g_ci, ki)
    s[gemm].tensorize(ko, ENV.gemm)
    s[out].pragma(bi, ENV.dma_copy)
    host, expect = dense_case(ENV, 8, 8, 4)
    mod, _ = build_and_run(s, tensors, host, expect, CFG)
    assert sum(1 for i in mod.template.insns if type(i).__name__ == "GemmInsn" and i.reset_reg) == 8 * 2


def test_gemm_intrinsic_rejects_other_computations():
    from vtakit.errors import ScheduleError

    a = te.placeholder((1, 2, 1, 4), "int8", name="a")
    w = te.placeholder((1, 2, 4, 4), "int8", name="w")
    ko = te.reduce_axis((0, 2), name="ko")
    ki = te.reduce_axis((0, 4), name="ki")
    c = te.compute((1, 1, 1, 4), lambda i, j, b, o: te.sum(
        a[i, ko, b, ki].astype("int32") + w[j, ko, o, ki].astype("int32"), axis=[ko, ki]), name="c")
    out = te.compute(c.shape, lambda *i: c(*i).astype("int8"), name="out")
    s = te.create_schedule(out.op)
    s[c].set_scope(ENV.acc_scope)
    s[c].compute_at(s[out], out.op.axis[1])
    i, j, b, o = s[c].op.axis
    s[c].reorder(i, j, ko, b, o, ki)
    s[c].tensorize(b, ENV.gemm)
    with pytest.raises(ScheduleError, match="failed to match the compute with the intrinsic"):
        vtakit.build(s, [a, w, out], target="vta", config=CFG)
