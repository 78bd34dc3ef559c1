"""The VerifyMemoryScopes pass on hand-built allocations: a tagged scope needs registered memory
info (the PassContext's first, then the global registry); one allocation over the capacity, or
nested (live together) allocations of one scope whose aligned sizes sum over it, are rejected with
an error naming the buffers, the bits needed and the capacity; sequential allocations, other
scopes and untagged scopes do not add up; a symbolic size in a tagged scope is an error."""

from __future__ import annotations

import pytest

from vtakit.compiler import ir
from vtakit.compiler.lower.verify_memory import allocation_bits, verify_memory_scopes
from vtakit.compiler.scope import MemoryInfo
from vtakit.compiler.transform import PassContext
from vtakit.errors import CompileError

SCOPE = "local.test_sram"
OTHER = "local.test_other"
# 1024 bits, allocations aligned to 64 bits
SCOPES = {SCOPE: MemoryInfo(unit_bits=8, max_num_bits=1024, max_simd_bits=64),
          OTHER: MemoryInfo(unit_bits=8, max_num_bits=1024)}


def _buf(name: str, n, dtype: str = "int8", scope: str = SCOPE) -> ir.Buffer:
    return ir.Buffer(name, (n,), dtype, scope)


def _use(buf: ir.Buffer) -> ir.Stmt:
    return ir.BufferStore(buf, ir.const(0, buf.dtype), (ir.const(0),))


def _func(body: ir.Stmt) -> ir.PrimFunc:
    return ir.PrimFunc("f", (), body, {})


def _verify(body: ir.Stmt) -> ir.PrimFunc:
    """Run the pass under SCOPES; a function that passes comes back unchanged (the pass only checks)."""
    func = _func(body)
    with PassContext(memory_scopes=SCOPES):
        out = verify_memory_scopes(func)
    assert out is func
    return out


def test_allocation_bits_counts_elements_width_and_lanes():
    assert allocation_bits(ir.Buffer("a", (3, 5), "int8", SCOPE)) == 120
    assert allocation_bits(ir.Buffer("b", (4,), "int32x4", SCOPE)) == 512
    assert allocation_bits(ir.Buffer("c", (10,), "bool", SCOPE)) == 10


def test_an_allocation_that_fits_passes_unchanged():
    a = _buf("a", 128)                              # exactly the capacity
    func = _func(ir.Allocate(a, _use(a)))
    with PassContext(memory_scopes=SCOPES):
        assert verify_memory_scopes(func) is func


def test_one_allocation_over_the_capacity_names_buffer_bits_and_capacity():
    a = _buf("big", 129)
    with pytest.raises(CompileError, match=r"buffer big needs 1032 bits \(129 bytes\) in scope local.test_sram, "
                                           r"over its capacity of 1024 bits \(128 bytes\)"):
        _verify(ir.Allocate(a, _use(a)))


def test_nested_allocations_of_one_scope_sum_their_aligned_sizes():
    a, b = _buf("a", 100), _buf("b", 24)             # 800 + 192 bits, aligned: 832 + 192 = 1024: fits
    _verify(ir.Allocate(a, ir.Allocate(b, ir.seq(_use(a), _use(b)))))
    c = _buf("c", 25)                               # 200 bits -> 256 aligned: 1088 > 1024
    with pytest.raises(CompileError, match=r"buffers a, c live together need 1088 bits \(136 bytes\) in scope "
                                           r"local.test_sram, over its capacity of 1024 bits"):
        _verify(ir.Allocate(a, ir.Allocate(c, ir.seq(_use(a), _use(c)))))


def test_sequential_allocations_and_other_scopes_do_not_add_up():
    a, b = _buf("a", 100), _buf("b", 100)
    _verify(ir.seq(ir.Allocate(a, _use(a)), ir.Allocate(b, _use(b))))
    c = _buf("c", 100, scope=OTHER)
    _verify(ir.Allocate(a, ir.Allocate(c, ir.seq(_use(a), _use(c)))))
    big = ir.Buffer("shared_big", (1 << 20,), "float32", "shared")        # untagged: no capacity
    _verify(ir.Allocate(big, ir.Allocate(a, _use(a))))


def test_allocations_inside_loops_and_branches_are_checked():
    a = _buf("deep", 200)
    i = ir.Var("i")
    body = ir.For(i, ir.const(0), ir.const(4), ir.ForKind.SERIAL,
                  ir.IfThenElse(ir.LT(i, ir.const(2)), ir.Allocate(a, _use(a))))
    with pytest.raises(CompileError, match="buffer deep needs 1600 bits"):
        _verify(body)


def test_an_unregistered_tagged_scope_is_rejected_by_name():
    a = _buf("x", 4, scope="local.nowhere")
    with pytest.raises(CompileError, match=r"buffer x is in scope 'local.nowhere', which has no registered memory info"):
        _verify(ir.Allocate(a, _use(a)))


def test_the_pass_context_s_scopes_decide():
    a = _buf("a", 100)
    small = {SCOPE: MemoryInfo(unit_bits=8, max_num_bits=512)}
    func = _func(ir.Allocate(a, _use(a)))
    with PassContext(memory_scopes=small), pytest.raises(CompileError, match="over its capacity of 512 bits"):
        verify_memory_scopes(func)
    with PassContext(memory_scopes=SCOPES):
        assert verify_memory_scopes(func) is func


def test_a_symbolic_size_in_a_tagged_scope_is_an_error():
    n = ir.Var("n")
    a = _buf("dyn", n)
    with pytest.raises(CompileError, match=r"allocation dyn in scope local.test_sram has non-constant size \(n,\)"):
        _verify(ir.Allocate(a, _use(a)))
