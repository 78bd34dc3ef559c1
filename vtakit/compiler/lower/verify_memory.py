"""VerifyMemoryScopes: allocations in tagged scopes must fit the scope's registered capacity.

Buffers of one scope that are live at the same time (nested allocations) are summed; each is
rounded up to the scope's ``max_simd_bits`` alignment, as StorageRewrite merges them.
"""

from __future__ import annotations

from vtakit.compiler import ir
from vtakit.compiler.scope import MemoryInfo, is_tagged
from vtakit.compiler.transform import get_memory_info
from vtakit.errors import CompileError

__all__ = ["verify_memory_scopes", "allocation_bits"]


def allocation_bits(buf: ir.Buffer) -> int:
    """The constant size of an allocation in bits (its shape and dtype)."""
    size = 1
    for extent in buf.shape:
        if not isinstance(extent, ir.IntImm):
            raise CompileError(f"allocation {buf.name} in scope {buf.scope} has non-constant size {buf.shape}")
        size *= extent.value
    base = ir.element_of(buf.dtype)
    bits = 1 if base == "bool" else int(base.lstrip("uintfloat"))
    return size * bits * ir.lanes_of(buf.dtype)


def _aligned(bits: int, info: MemoryInfo) -> int:
    a = info.max_simd_bits or 1
    return -(-bits // a) * a


def verify_memory_scopes(func: ir.PrimFunc) -> ir.PrimFunc:
    """The pass: raises CompileError on overflow, returns ``func`` unchanged otherwise."""
    live: list[ir.Buffer] = []

    def visit(s: ir.Stmt) -> None:
        if isinstance(s, ir.Allocate):
            buf = s.buffer
            if is_tagged(buf.scope):
                info = get_memory_info(buf.scope)
                if info is None:
                    raise CompileError(f"buffer {buf.name} is in scope {buf.scope!r}, which has no registered "
                                       "memory info (register_memory_scope or PassContext(memory_scopes=...))")
                bits = allocation_bits(buf)
                if bits > info.max_num_bits:
                    raise CompileError(f"buffer {buf.name} needs {bits} bits ({bits // 8} bytes) in scope "
                                       f"{buf.scope}, over its capacity of {info.max_num_bits} bits "
                                       f"({info.max_num_bits // 8} bytes)")
                same = [b for b in live if b.scope == buf.scope] + [buf]
                total = sum(_aligned(allocation_bits(b), info) for b in same)
                if total > info.max_num_bits:
                    names = ", ".join(b.name for b in same)
                    raise CompileError(f"buffers {names} live together need {total} bits ({total // 8} bytes) in "
                                       f"scope {buf.scope}, over its capacity of {info.max_num_bits} bits "
                                       f"({info.max_num_bits // 8} bytes)")
            live.append(buf)
            visit(s.body)
            live.pop()
            return
        for child in ir.children(s):
            if isinstance(child, ir.Stmt):
                visit(child)

    visit(func.body)
    return func
