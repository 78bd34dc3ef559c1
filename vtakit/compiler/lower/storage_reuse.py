"""StorageReuse: an element-wise stage writes in place into the buffer it consumes (TVM's
StorageRewrite in-place rule, for on-chip scopes).

Why: a schedule gives every stage its own buffer. On an accelerator the stages after a GEMM
(``>> shift``, ``+ bias``, ``clip``) are attached at the same loop, so the accumulator would hold
the GEMM result and one copy per stage at once, although each stage only transforms its input
element by element and nobody reads the input afterwards. TVM's StorageRewrite (run by VTA as
``EarlyRewrite`` before ALU injection) lets such a consumer reuse its producer's storage, which is
also what VTA's ALU does: ``acc[dst] = op(acc[dst], ...)`` updates in place. Without it, ACC
capacity (and thus the tiles a schedule may use) shrinks by the number of epilogue stages.

The pass works region by region. A region is the function body or the body of a loop, branch,
attribute or let: its statements are linearised through ``SeqStmt`` and ``Allocate`` nodes into
*steps* (every other statement is one opaque step, e.g. a stage's whole loop nest), and each
allocation occurrence gets the steps that touch it (an ``Allocate`` duplicated by loop
partitioning is a separate occurrence with its own liveness). Allocations are candidates when
their scope is one of ``scopes`` and their size is constant. A *consumer* ``D`` takes the storage
of a *producer* ``S`` at step ``k`` when all of these hold:

1. ``k`` is ``D``'s first step and the last step of ``S``'s storage (every buffer already
   sharing it included): no later statement reads the producer, nothing wrote ``D`` before;
2. same scope and dtype, and ``D`` is not larger than ``S``'s storage;
3. every step touching ``D`` lies inside ``S``'s ``Allocate`` (the storage exists there);
4. step ``k`` is a pure element-wise update (:func:`elementwise_store`): exactly one store to
   ``D``, no read of ``D``, no write of ``S``, no opaque use of either (``tvm_access_ptr``),
   every read of ``S`` inside that store's value at exactly the store's flat address (same
   lanes), and the store's address injective over the loops around it (each element written
   once, so an element of ``S`` is read only by the iteration that overwrites it, and first);
5. the target accepts it (``accept(store, producer)``; VTA's ALU, e.g., needs the producer as
   the base of its in-place instruction chain);
6. inside a sharing ``vthread`` loop, ``D`` and ``S`` depend on the thread alike (InjectVirtualThread's
   touched analysis): a shared ``S`` written per thread would become one copy per thread, its
   producer's work repeated per thread, and the scope's peak could grow (``cthread`` splits every
   buffer anyway).

Then ``D``'s ``Allocate`` is removed and its accesses are renamed to ``S``'s buffer; later
consumers may chain onto the same storage (conv -> shr -> bias_add -> clip share one buffer). At
most one consumer is placed per step. Everything else keeps its own storage: a producer with a
later reader, a shifted, reversed or broadcast read, a reduction into ``D`` or a step that writes
an element twice never aliases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from vtakit.compiler import ir
from vtakit.compiler.arith import linear_coefficients, simplify
from vtakit.compiler.lower.verify_memory import allocation_bits
from vtakit.compiler.lower.vthread import _touched as vthread_touched
from vtakit.errors import CompileError

__all__ = ["reuse_storage", "storage_reuse_pass", "elementwise_store", "scope_peak_bits"]

Accept = Callable[[ir.BufferStore, ir.Buffer], bool]


# ---------------------------------------------------------------------------- the in-place rule
@dataclass
class _Access:
    """What one statement does with a consumer ``dst`` and a producer ``src``."""

    dst: ir.Var
    src: ir.Var
    dst_stores: list[tuple[ir.BufferStore, tuple[ir.For, ...], frozenset]] = field(default_factory=list)
    src_reads: list[tuple[ir.BufferLoad, ir.BufferStore | None]] = field(default_factory=list)
    unsafe: bool = False          # a read of dst, a write of src, an opaque use, a nested Allocate


class _Scan:
    """Walks a statement, recording every access to ``dst`` and ``src`` with its context."""

    def __init__(self, acc: _Access) -> None:
        self.acc = acc
        self.loops: list[ir.For] = []
        self.bound: set[ir.Var] = set()           # let-bound variables defined inside the statement

    def stmt(self, s: ir.Stmt) -> None:
        acc = self.acc
        if isinstance(s, ir.BufferStore):
            data = s.buffer.data
            if data is acc.src:
                acc.unsafe = True
            for i in s.indices:
                self.expr(i, None)
            self.expr(s.value, s if data is acc.dst else None)
            if data is acc.dst:
                acc.dst_stores.append((s, tuple(self.loops), frozenset(self.bound)))
        elif isinstance(s, ir.For):
            self.expr(s.min, None)
            self.expr(s.extent, None)
            self.loops.append(s)
            self.stmt(s.body)
            self.loops.pop()
        elif isinstance(s, ir.Allocate):
            if s.buffer.data in (acc.dst, acc.src):
                acc.unsafe = True
            self.stmt(s.body)
        elif isinstance(s, ir.LetStmt):
            self.expr(s.value, None)
            self.bound.add(s.var)
            self.stmt(s.body)
        else:
            for c in ir.children(s):
                if isinstance(c, ir.Stmt):
                    self.stmt(c)
                elif isinstance(c, ir.PrimExpr):
                    self.expr(c, None)

    def expr(self, e: ir.PrimExpr, store: ir.BufferStore | None) -> None:
        acc = self.acc
        stack = [e]
        while stack:
            n = stack.pop()
            if isinstance(n, ir.BufferLoad):
                if n.buffer.data is acc.dst:
                    acc.unsafe = True
                elif n.buffer.data is acc.src:
                    acc.src_reads.append((n, store))
                stack.extend(n.indices)
                continue
            if isinstance(n, ir.Var):
                if n is acc.dst or n is acc.src:
                    acc.unsafe = True     # an opaque pointer use (tvm_access_ptr, a call argument)
                continue
            if isinstance(n, ir.Let):
                self.bound.add(n.var)
            for c in ir.children(n):
                if not isinstance(c, ir.Buffer):
                    stack.append(c)
                elif c.data is acc.dst or c.data is acc.src:
                    acc.unsafe = True     # a buffer passed to a call


def _address(buf: ir.Buffer, indices: Sequence[ir.PrimExpr]) -> ir.PrimExpr | None:
    """The flat element address of a one-index access (None for multi-index accesses)."""
    if len(indices) != 1:
        return None
    offset = buf.elem_offset
    return indices[0] if isinstance(offset, ir.IntImm) and offset.value == 0 else offset + indices[0]


def _same_address(a: ir.PrimExpr | None, b: ir.PrimExpr | None) -> bool:
    if a is None or b is None or ir.lanes_of(a.dtype) != ir.lanes_of(b.dtype):
        return False
    if ir.structural_equal(a, b):
        return True
    if ir.lanes_of(a.dtype) != 1:
        return False
    d = simplify(a - b)
    return isinstance(d, ir.IntImm) and d.value == 0


def _injective(address: ir.PrimExpr, loops: Sequence[ir.For], bound: Iterable[ir.Var]) -> bool:
    """Whether ``address`` takes a different value in every iteration of ``loops`` (a sufficient
    test: affine with constant coefficients that form a mixed radix over the constant extents)."""
    dims: list[tuple[int, int]] = []          # (|coefficient|, extent) of every dimension of extent > 1
    if isinstance(address, ir.Ramp):
        stride = simplify(address.stride)
        if not isinstance(stride, ir.IntImm):
            return False
        if address.lanes > 1:
            dims.append((abs(stride.value), address.lanes))
        address = address.base
    if ir.lanes_of(address.dtype) != 1:
        return False                          # a broadcast or nested vector address
    mins, extents = [], []
    for lp in loops:
        lo, ext = simplify(lp.min), simplify(lp.extent)
        if not isinstance(lo, ir.IntImm) or not isinstance(ext, ir.IntImm):
            return False
        if ext.value <= 0:
            return True                       # the store never runs
        mins.append(lo.value)
        extents.append(ext.value)
    bound = set(bound)
    if bound and ir.uses_var(address, bound):
        return False                          # depends on a value bound inside the statement
    res = linear_coefficients(address, [lp.loop_var for lp in loops],
                              {lp.loop_var: (lo, lo + n - 1) for lp, lo, n in zip(loops, mins, extents)})
    if res is None:
        return False
    coefs, _ = res
    dims += [(abs(c), n) for c, n in zip(coefs, extents) if n > 1]
    span = 0                                  # the largest address distance of the smaller dimensions
    for c, n in sorted(dims):
        if c <= span:                         # c == 0: an iteration that does not move the address
            return False
        span += c * (n - 1)
    return True


def elementwise_store(stmt: ir.Stmt, dst: ir.Var, src: ir.Var) -> ir.BufferStore | None:
    """The store of ``stmt`` that may write ``dst`` into ``src``'s storage (condition 4 of the
    module docstring), or None when aliasing ``dst`` with ``src`` could change what it computes."""
    acc = _Access(dst, src)
    _Scan(acc).stmt(stmt)
    if not _no_other_access(acc) or not _one_store(acc):
        return None
    store, loops, bound = acc.dst_stores[0]
    address = _address(store.buffer, store.indices)
    if address is None or not _reads_at_store_address(acc, store, address) \
            or not _store_injective(address, loops, bound):
        return None
    return store


def _no_other_access(acc: _Access) -> bool:
    """No read of the consumer, write of the producer, opaque use or re-allocation of either."""
    return not acc.unsafe


def _one_store(acc: _Access) -> bool:
    """The statement stores to the consumer exactly once (a second store would see the first's
    result in place of the producer's value)."""
    return len(acc.dst_stores) == 1


def _reads_at_store_address(acc: _Access, store: ir.BufferStore, address: ir.PrimExpr) -> bool:
    """Every read of the producer is in the store's value, at the store's own address."""
    return all(ctx is store and _same_address(_address(load.buffer, load.indices), address)
               for load, ctx in acc.src_reads)


def _store_injective(address: ir.PrimExpr, loops: Sequence[ir.For], bound: Iterable[ir.Var]) -> bool:
    """Each element is stored once (condition 4)."""
    return _injective(address, loops, bound)


# ---------------------------------------------------------------------------- regions
@dataclass
class _Step:
    stmt: ir.Stmt
    chain: tuple[int, ...]                    # allocation occurrences around the step, outer first


@dataclass
class _Occurrence:
    node: ir.Allocate
    uses: list[int] = field(default_factory=list)   # steps touching it, in order
    candidate: bool = False
    bits: int = 0


def _linearize(s: ir.Stmt, chain: tuple[int, ...], steps: list[_Step], occs: list[_Occurrence]) -> None:
    if isinstance(s, ir.SeqStmt):
        for c in s.stmts:
            _linearize(c, chain, steps, occs)
    elif isinstance(s, ir.Allocate):
        occs.append(_Occurrence(s))
        _linearize(s.body, chain + (len(occs) - 1,), steps, occs)
    else:
        steps.append(_Step(s, chain))


def _touched(s: ir.Stmt) -> tuple[set[ir.Var], set[ir.Var]]:
    """Storage variables a statement touches (through accesses or bare uses), and those it allocates."""
    used: set[ir.Var] = set()
    allocated: set[ir.Var] = set()

    def visit(n) -> None:
        if isinstance(n, (ir.BufferLoad, ir.BufferStore)):
            used.add(n.buffer.data)
        elif isinstance(n, ir.Var):
            used.add(n)
        elif isinstance(n, ir.Allocate):
            allocated.add(n.buffer.data)

    ir.walk(s, visit)
    return used, allocated


class _Region:
    """The steps and allocation occurrences of one region, and the storage plan over them."""

    def __init__(self, body: ir.Stmt, scopes: frozenset[str], accept: Accept | None,
                 shared_threads: Sequence[set[ir.Var]] = ()) -> None:
        self.steps: list[_Step] = []
        self.occs: list[_Occurrence] = []
        _linearize(body, (), self.steps, self.occs)
        self.scopes, self.accept, self.shared_threads = scopes, accept, shared_threads
        self.root: dict[int, int] = {}        # merged occurrence -> the occurrence whose storage it uses
        for k, step in enumerate(self.steps):
            used, allocated = _touched(step.stmt)
            for var in used:
                occ = self._innermost(step.chain, var)
                if occ is not None:
                    self.occs[occ].uses.append(k)
            for var in allocated:             # re-allocated inside a step: leave that storage alone
                occ = self._innermost(step.chain, var)
                if occ is not None:
                    self.occs[occ].uses.append(-1)
        for o in self.occs:
            buf = o.node.buffer
            o.candidate = buf.scope in scopes and -1 not in o.uses and bool(o.uses) and _const_size(buf)
            o.bits = allocation_bits(buf) if o.candidate else 0

    def _innermost(self, chain: tuple[int, ...], var: ir.Var) -> int | None:
        for occ in reversed(chain):
            if self.occs[occ].node.buffer.data is var:
                return occ
        return None

    def storage(self, occ: int) -> int:
        while occ in self.root:
            occ = self.root[occ]
        return occ

    def _members(self, storage: int) -> list[int]:
        return [o for o in range(len(self.occs)) if self.storage(o) == storage]

    def _last_use(self, storage: int) -> int:
        return max(self.occs[o].uses[-1] for o in self._members(storage))

    def plan(self) -> None:
        for k, step in enumerate(self.steps):
            for d in step.chain:
                o = self.occs[d]
                if o.candidate and d not in self.root and k in o.uses and _first_use(o.uses, k):
                    src = self._producer(k, step, d)
                    if src is not None:
                        self.root[d] = self.storage(src)
                        break                 # one consumer per step

    def _producer(self, k: int, step: _Step, d: int) -> int | None:
        """The occurrence whose storage consumer ``d`` can take at step ``k``, if any."""
        dbuf = self.occs[d].node.buffer
        for s in step.chain:
            o = self.occs[s]
            if s == d or not o.candidate or k not in o.uses or self.storage(s) == d:
                continue                      # s must be another buffer of the region touched here
            storage = self.storage(s)
            sbuf, root = o.node.buffer, self.occs[storage]
            if not (_is_last_use(self._last_use(storage), k)
                    and _compatible(root.node.buffer, dbuf)
                    and _fits(self.occs[d].bits, root.bits)
                    and _inside(storage, [self.steps[u].chain for u in self.occs[d].uses])
                    and _same_thread_dependence(self.shared_threads, dbuf.data, sbuf.data)):
                continue
            store = elementwise_store(step.stmt, dbuf.data, sbuf.data)
            if store is not None and (self.accept is None or self.accept(store, sbuf)):
                return s
        return None

    def rebuild(self, body: ir.Stmt) -> ir.Stmt:
        if not self.root:
            return body
        counter = iter(range(len(self.occs)))
        steps = iter(self.steps)

        def build(s: ir.Stmt) -> ir.Stmt:
            if isinstance(s, ir.SeqStmt):
                return ir.seq(*[build(c) for c in s.stmts])
            if isinstance(s, ir.Allocate):
                occ = next(counter)
                inner = build(s.body)
                if occ in self.root:
                    return inner
                return s if inner is s.body else ir.Allocate(s.buffer, inner)
            step = next(steps)
            return self._rename(step)

        return build(body)

    def _rename(self, step: _Step) -> ir.Stmt:
        vmap: dict[ir.Var, ir.Var] = {}
        target: dict[ir.Var, ir.Buffer] = {}
        for occ in step.chain:
            if occ in self.root:
                old, new = self.occs[occ].node.buffer, self.occs[self.storage(occ)].node.buffer
                vmap[old.data] = new.data
                target[old.data] = new
        return _Renamer(vmap, target).visit(step.stmt) if vmap else step.stmt


def _first_use(uses: list[int], k: int) -> bool:
    """Nothing touches the consumer before step ``k`` (condition 1)."""
    return uses[0] == k


def _is_last_use(last: int, k: int) -> bool:
    """The producer's storage is not touched after step ``k`` (condition 1)."""
    return last == k


def _compatible(producer: ir.Buffer, consumer: ir.Buffer) -> bool:
    """Same scope and dtype (condition 2)."""
    return producer.scope == consumer.scope and producer.dtype == consumer.dtype


def _fits(consumer_bits: int, producer_bits: int) -> bool:
    """The consumer is not larger than the producer's storage (condition 2)."""
    return consumer_bits <= producer_bits


def _inside(storage: int, chains: list[tuple[int, ...]]) -> bool:
    """Every step touching the consumer lies inside the producer's ``Allocate`` (condition 3)."""
    return all(storage in chain for chain in chains)


def _same_thread_dependence(shared_threads: Sequence[set[ir.Var]], dst: ir.Var, src: ir.Var) -> bool:
    """Under every enclosing sharing ``vthread``, both or neither buffer is split per thread
    (condition 6; every buffer of a storage has the same dependence, so ``src`` speaks for it)."""
    return all((dst in touched) == (src in touched) for touched in shared_threads)


def _const_size(buf: ir.Buffer) -> bool:
    return all(isinstance(x, ir.IntImm) for x in buf.shape)


class _Renamer(ir.IRMutator):
    """Accesses of merged buffers go to the storage they now share (bare variables too)."""

    def __init__(self, vmap: dict[ir.Var, ir.Var], target: dict[ir.Var, ir.Buffer]) -> None:
        self.vmap, self.target = vmap, target

    def visit_Var(self, node: ir.Var) -> ir.Var:
        return self.vmap.get(node, node)

    def visit_Buffer(self, node: ir.Buffer) -> ir.Buffer:
        new = self.target.get(node.data)
        if new is None:
            return node
        if ir.structural_equal(node.elem_offset, ir.IntImm("int32", 0)) and not node.strides \
                and len(node.shape) == len(new.shape):
            return new                        # the merged buffer itself: print the shared name
        return ir.Buffer(node.name, node.shape, node.dtype, node.scope, new.data, node.strides,
                         node.elem_offset, node.offset_factor)


# ---------------------------------------------------------------------------- the pass
class _Rewriter(ir.IRMutator):
    def __init__(self, scopes: frozenset[str], accept: Accept | None) -> None:
        self.scopes, self.accept = scopes, accept
        self.merged = 0
        self.shared_threads: list[set[ir.Var]] = []   # touched sets of the enclosing sharing vthreads

    def region(self, body: ir.Stmt) -> ir.Stmt:
        if ir.contains(body, ir.Allocate):
            plan = _Region(body, self.scopes, self.accept, tuple(self.shared_threads))
            plan.plan()
            self.merged += len(plan.root)
            body = plan.rebuild(body)
        return self._inner(body)

    def _inner(self, s: ir.Stmt) -> ir.Stmt:
        """Plan the regions nested inside the steps of ``s``."""
        if isinstance(s, ir.SeqStmt):
            return ir.seq(*[self._inner(c) for c in s.stmts])
        if isinstance(s, ir.Allocate):
            body = self._inner(s.body)
            return s if body is s.body else ir.Allocate(s.buffer, body)
        if not ir.contains(s, ir.Allocate):
            return s
        if isinstance(s, ir.For):
            sharing = s.kind is ir.ForKind.THREAD_BINDING and s.thread_tag.startswith("vthread")
            if sharing:
                self.shared_threads.append(vthread_touched(s.body, s.loop_var))
            body = self.region(s.body)
            if sharing:
                self.shared_threads.pop()
            return s if body is s.body else ir.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag,
                                                   dict(s.annotations))
        if isinstance(s, ir.AttrStmt):
            body = self.region(s.body)
            return s if body is s.body else ir.AttrStmt(s.node, s.key, s.value, body)
        if isinstance(s, ir.LetStmt):
            body = self.region(s.body)
            return s if body is s.body else ir.LetStmt(s.var, s.value, body)
        if isinstance(s, ir.IfThenElse):
            then = self.region(s.then_case)
            other = self.region(s.else_case) if s.else_case is not None else None
            if then is s.then_case and other is s.else_case:
                return s
            return ir.IfThenElse(s.cond, then, other)
        return s


def _scope_set(scopes: Iterable[str]) -> frozenset[str]:
    """``scopes`` as a set of names; a lone string or anything but names is a CompileError."""
    try:
        names = None if isinstance(scopes, str) else tuple(scopes)
    except TypeError:
        names = None
    if names is None or not all(isinstance(x, str) for x in names):
        raise CompileError(f"StorageReuse: scopes must be a collection of scope names such as "
                           f"['local.acc_buffer'], got {scopes!r}")
    return frozenset(names)


def reuse_storage(func: ir.PrimFunc, scopes: Iterable[str], accept: Accept | None = None) -> ir.PrimFunc:
    """``func`` with element-wise consumers in ``scopes`` writing in place into their producers
    (the conditions are in the module docstring). Runs after storage flattening."""
    rewriter = _Rewriter(_scope_set(scopes), accept)
    body = rewriter.region(func.body)
    if body is func.body:
        return func
    return ir.PrimFunc(func.name, func.params, body, dict(func.attrs))


def storage_reuse_pass(scopes: Iterable[str], accept: Accept | None = None) -> Callable[[ir.PrimFunc], ir.PrimFunc]:
    """The pass for a pass list (``tir.add_lower_pass``), over the buffers of ``scopes``."""
    scopes = _scope_set(scopes)

    def StorageReuse(func: ir.PrimFunc) -> ir.PrimFunc:
        return reuse_storage(func, scopes, accept)

    return StorageReuse


# ---------------------------------------------------------------------------- measuring
def scope_peak_bits(func: ir.PrimFunc, scope: str) -> int:
    """The most bits of ``scope`` that nested (simultaneously live) allocations of ``func`` hold,
    as VerifyMemoryScopes sums them (without its alignment)."""
    def peak(s: ir.Stmt) -> int:
        if isinstance(s, ir.Allocate):
            own = allocation_bits(s.buffer) if s.buffer.scope == scope else 0
            return own + peak(s.body)
        return max([peak(c) for c in ir.children(s) if isinstance(c, ir.Stmt)], default=0)

    return peak(func.body)
