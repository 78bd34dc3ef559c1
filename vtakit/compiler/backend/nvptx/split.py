"""SplitHostDevice: cut a lowered function into the GPU kernels the host launches in order.

A kernel is each outermost ``blockIdx.*``/``threadIdx.*`` loop nest of the function body, as
TVM's SplitHostDevice cuts it (and :mod:`vtakit.compiler.lower.thread_extent` checks it). Inside
a kernel the thread loops disappear: every loop bound to one tag becomes the same index variable
(named after the tag), and the kernel is launched with, per tag, the widest extent bound to it.
A loop bound with a narrower extent (a cooperative fetch split over fewer threads) runs under
``if index < extent``; a binding nested in a narrower one of the same tag cannot reach the threads
the outer guard excludes, so it is an error. ``shared`` allocations move to the top of the kernel
(one copy per block); ``local`` ones stay put (one copy per thread); a ``global`` allocation at the
top of the function is a workspace the host allocates between launches, one inside a kernel is an
error. What the host would have to run itself (a stage computed outside every thread loop) has no
place to run: like TVM's "Did you forget to bind?", it is an error naming the stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx.program import THREAD_TAGS, DeviceKernel, DeviceProgram
from vtakit.compiler.lower.verify_memory import allocation_bits
from vtakit.errors import CompileError

__all__ = ["split_host_device", "is_gpu_loop", "allocation_bytes", "SHARED_ALIGN"]

SHARED_ALIGN = 16  # every shared buffer starts on a 16-byte boundary (vector accesses)


def is_gpu_loop(stmt: ir.Stmt) -> bool:
    """A loop bound to a GPU block or thread index."""
    return isinstance(stmt, ir.For) and stmt.kind is ir.ForKind.THREAD_BINDING and stmt.thread_tag in THREAD_TAGS


def allocation_bytes(buf: ir.Buffer) -> int:
    """The constant size of ``buf`` in bytes, a bool taking one (a CompileError for a symbolic size)."""
    bits = allocation_bits(buf)
    return bits if ir.element_of(buf.dtype) == "bool" else bits // 8


def split_host_device(func: ir.PrimFunc) -> DeviceProgram:
    """The kernels of ``func`` (thread loops removed, shared memory hoisted) and its workspaces."""
    host = _Host(func)
    host.visit(func.body)
    return DeviceProgram(func.name, tuple(func.params), host.kernels, host.workspaces)


@dataclass
class _Host:
    func: ir.PrimFunc
    kernels: list[DeviceKernel] = field(default_factory=list)
    workspaces: list[ir.Buffer] = field(default_factory=list)

    def visit(self, stmt: ir.Stmt) -> None:
        if isinstance(stmt, ir.SeqStmt):
            for child in stmt.stmts:
                self.visit(child)
        elif isinstance(stmt, ir.Allocate) and stmt.buffer.scope == "global":
            allocation_bytes(stmt.buffer)
            self.workspaces.append(stmt.buffer)
            self.visit(stmt.body)
        elif isinstance(stmt, ir.Allocate):
            raise CompileError(f"buffer {stmt.buffer.name!r} in scope {stmt.buffer.scope!r} is allocated outside every "
                               f"kernel; a {stmt.buffer.scope} buffer lives in one block or thread: compute_at its stage "
                               "inside the kernel that uses it (or leave it in global scope)")
        elif isinstance(stmt, ir.AttrStmt):
            self.visit(stmt.body)
        elif isinstance(stmt, ir.Evaluate) and isinstance(stmt.value, (ir.IntImm, ir.FloatImm)):
            return  # a no-op
        elif is_gpu_loop(stmt):
            name = f"{self.func.name}_kernel{len(self.kernels)}"
            self.kernels.append(_outline(stmt, name, (*self.func.params, *self.workspaces)))
        else:
            raise _unbound(stmt)


def _unbound(stmt: ir.Stmt) -> CompileError:
    stored: list[str] = []
    ir.walk(stmt, lambda n: isinstance(n, ir.BufferStore) and n.buffer.name not in stored
            and stored.append(n.buffer.name))
    kernels = ir.contains(stmt, ir.For) and any(is_gpu_loop(n) for n in _nodes(stmt, ir.For))
    if kernels:
        return CompileError(f"a {type(stmt).__name__} outside every blockIdx/threadIdx loop encloses kernels "
                            f"(stages {', '.join(stored)}); the host cannot loop or branch around kernel "
                            "launches: bind the loop to a thread index or fuse it into the bound axes")
    what = f"stage {', '.join(stored)} is" if len(stored) == 1 else \
        f"stages {', '.join(stored)} are" if stored else f"the statement {type(stmt).__name__} is"
    return CompileError(f"{what} not bound to blockIdx/threadIdx; bind it or compute it inline "
                        "(the cuda target runs all computation in kernels: did you forget to bind?)")


def _nodes(stmt: ir.Stmt, kind: type) -> list:
    out: list = []
    ir.walk(stmt, lambda n: isinstance(n, kind) and out.append(n))
    return out


def _outline(root: ir.For, name: str, buffers: tuple[ir.Buffer, ...]) -> DeviceKernel:
    extents: dict[str, int] = {}
    for loop in _nodes(root, ir.For):
        if loop.kind is ir.ForKind.THREAD_BINDING:
            if loop.thread_tag not in THREAD_TAGS:
                raise CompileError(f"kernel {name}: loop {loop.loop_var.name!r} is bound to {loop.thread_tag!r}, "
                                   f"which the GPU has no index for; expected one of {', '.join(THREAD_TAGS)}")
            if not isinstance(loop.extent, ir.IntImm) or not isinstance(loop.min, ir.IntImm):
                raise CompileError(f"kernel {name}: loop {loop.loop_var.name!r} is bound to {loop.thread_tag} with the "
                                   f"symbolic extent {loop.extent}; the cuda target supports constant extents only")
            extents[loop.thread_tag] = max(extents.get(loop.thread_tag, 0), loop.extent.value)
    thread_vars = {tag: ir.Var(tag, "int32") for tag in THREAD_TAGS if tag in extents}
    body = _Unbind(name, thread_vars, extents).visit(root)
    shared: list[ir.Buffer] = []
    body = _HoistShared(name, shared).visit(body)
    for buf in reversed(shared):
        body = ir.Allocate(buf, body)
    used: set[ir.Var] = set()
    ir.walk(body, lambda n: isinstance(n, ir.Var) and used.add(n))
    params = tuple(b for b in buffers if b.data in used)
    dims = [extents.get(tag, 1) for tag in THREAD_TAGS]
    return DeviceKernel(name, params, body, thread_vars, tuple(dims[:3]), tuple(dims[3:]),
                        shared_memory_bytes(shared))


def shared_memory_bytes(buffers: list[ir.Buffer]) -> int:
    """Static shared memory of a block holding ``buffers`` (each aligned to :data:`SHARED_ALIGN`)."""
    return sum(math.ceil(allocation_bytes(b) / SHARED_ALIGN) * SHARED_ALIGN for b in buffers)


class _Unbind(ir.IRMutator):
    """Thread loops -> their tag's index variable, guarded where the loop is narrower than the launch."""

    def __init__(self, kernel: str, thread_vars: dict[str, ir.Var], extents: dict[str, int]) -> None:
        self.kernel = kernel
        self.thread_vars = thread_vars
        self.extents = extents
        self.enclosing: dict[str, tuple[ir.For, int]] = {}

    def visit_For(self, node: ir.For) -> ir.Stmt:
        if node.kind is not ir.ForKind.THREAD_BINDING:
            return self.generic_visit(node)
        tag, extent = node.thread_tag, node.extent.value
        outer = self.enclosing.get(tag)
        if outer is not None and extent > outer[1]:
            raise CompileError(
                f"kernel {self.kernel}: loop {node.loop_var.name!r} binds {tag} with extent {extent} inside loop "
                f"{outer[0].loop_var.name!r}, which binds it with extent {outer[1]}; the inner loop can only use the "
                f"threads of the outer one: split it into at most {outer[1]} parts")
        self.enclosing[tag] = (node, extent)
        try:
            body = self.visit(node.body)
        finally:
            if outer is None:
                del self.enclosing[tag]
            else:
                self.enclosing[tag] = outer
        var = self.thread_vars[tag]
        index: ir.PrimExpr = var if node.loop_var.dtype == var.dtype else ir.Cast(node.loop_var.dtype, var)
        index = index if node.min.value == 0 else index + node.min.value
        body = ir.substitute(body, {node.loop_var: index})
        limit = outer[1] if outer is not None else self.extents[tag]
        return body if extent == limit else ir.IfThenElse(var < extent, body)


class _HoistShared(ir.IRMutator):
    """Removes ``shared`` allocations (collected for the kernel's top); rejects ``global`` ones."""

    def __init__(self, kernel: str, shared: list[ir.Buffer]) -> None:
        self.kernel = kernel
        self.shared = shared

    def visit_Allocate(self, node: ir.Allocate) -> ir.Stmt:
        body = self.visit(node.body)
        scope = node.buffer.scope
        if scope == "shared":
            allocation_bytes(node.buffer)
            self.shared.append(node.buffer)
            return body
        if scope != "local":
            raise CompileError(f"kernel {self.kernel}: buffer {node.buffer.name!r} is allocated in scope {scope!r} "
                               "inside a kernel; set its scope to 'shared' (one per block) or 'local' (one per "
                               "thread), or compute it at the top level as its own kernel")
        return node if body is node.body else ir.Allocate(node.buffer, body)
