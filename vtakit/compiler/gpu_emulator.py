"""GPU emulator: runs the kernels of a :class:`DeviceProgram` on the CPU with a GPU's thread model.

Most machines that build and test vtakit have no GPU, so the kernels the NVPTX backend generates
are checked by running the same lowered loop IR on the CPU, with the semantics a GPU gives it and
none that it does not. It is the
reference interpreter (:mod:`vtakit.compiler.interpreter`, whose expression and statement closures
it reuses unchanged, so numerics are the same: dtype wrap-around, float32 stays float32) plus the
thread model:

- every block of the grid runs (one after another) and every thread of a block, each with its own
  variables and ``local`` allocations; a ``shared`` allocation is one array per block; global
  buffers are the caller's arrays, and a program's workspaces are poisoned arrays that live from
  the first launch to the last;
- a kernel with barriers (``tvm_storage_sync``) runs the threads of a block as Python generators
  stepped in lockstep: each thread runs until it arrives at a barrier, and the block goes on once
  every thread has arrived at the same one. A thread that finishes, or arrives at another barrier,
  while others wait raises :class:`~vtakit.errors.DivergentBarrierError`. A kernel without
  barriers runs its threads one after another;
- an ``AllReduce`` left in a kernel is a block-wide barrier that combines the contributions of the
  threads differing only in its thread index (in index order), as the interpreter does;
- between two barriers, two threads of a block that touch the same shared element, one of them
  writing, raise :class:`~vtakit.errors.SharedMemoryRaceError`; two threads of one launch that
  write different values to the same global element with no barrier between them (always, across
  blocks) raise :class:`~vtakit.errors.GlobalMemoryRaceError`. Threads storing the same value (every
  thread of a reduction writing its result) give the same memory in any order, so they pass;
- a shared element read before any thread of the block wrote it raises
  :class:`~vtakit.errors.MemoryAccessError` at the next barrier (unless a write by another thread
  in the same interval makes it a race first);
- an access outside any buffer (global, shared or local) raises
  :class:`~vtakit.errors.MemoryAccessError` naming the buffer, index, size, kernel, block and thread.

Races between global reads and writes, and anything about timing, are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.backend.nvptx.program import THREAD_TAGS, DeviceKernel, DeviceProgram, is_barrier
from vtakit.compiler.interpreter import Env, Interpreter, bind_arrays, poison
from vtakit.errors import (CompileError, DivergentBarrierError, GlobalMemoryRaceError, MemoryAccessError,
                           SharedMemoryRaceError)
from vtakit.progress import progress

__all__ = ["Emulator", "KernelEmulator", "emulate"]

_NONE = -1  # no thread (a second reader not seen yet)
_BLOCK_SYNC_SCOPES = ("shared", "shared.dyn")  # __syncthreads(); a "global" sync would span the grid


@dataclass(frozen=True)
class _Geometry:
    """A launch's grid and block, and the naming of linear thread and block ids."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @staticmethod
    def coords(linear: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
        x, rest = linear % dims[0], linear // dims[0]
        return x, rest % dims[1], rest // dims[1]

    def thread(self, tid: int) -> str:
        return "threadIdx=({}, {}, {})".format(*self.coords(tid, self.block))

    def block_name(self, bid: int) -> str:
        return "blockIdx=({}, {}, {})".format(*self.coords(bid, self.grid))


@dataclass
class _BarrierArrival:
    """A thread waiting at a barrier."""

    node: ir.Evaluate


class _SharedTracker:
    """Who touched each element of one shared array since the last barrier, to find races.

    Per element: the epoch (barrier interval) of its last access, the first thread that accessed it
    in that epoch, a second thread once two have read it (no write yet), and whether it was written.
    """

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.epoch = [-1] * size
        self.first = [_NONE] * size
        self.second = [_NONE] * size
        self.written = [False] * size
        self.stored = [False] * size  # written at all in this block
        self.unset_reads: dict[int, int] = {}  # element -> thread: read in this epoch before any write

    def access(self, e: int, tid: int, write: bool, epoch: int) -> tuple[int, bool] | None:
        """Record an access of element ``e``; on a race return the other thread and whether it wrote."""
        if self.epoch[e] != epoch:
            self.epoch[e], self.first[e], self.second[e], self.written[e] = epoch, tid, _NONE, write
            return None
        first, second = self.first[e], self.second[e]
        if second == _NONE:  # one thread so far
            if first == tid:
                self.written[e] = self.written[e] or write
                return None
            if write or self.written[e]:
                return first, self.written[e]
            self.second[e] = tid
            return None
        if write:  # two or more readers, no writer
            return (first if first != tid else second), False
        return None


class KernelEmulator(Interpreter):
    """One kernel compiled once to the interpreter's closures; :meth:`launch` runs every block.

    It overrides the interpreter's hooks: ``shared`` allocations come from the running block,
    accesses to shared (and writes to global) memory are recorded for race detection, and barriers
    (and all-reduces) are the points where a thread's generator stops to wait for its block.
    """

    def __init__(self, kernel: DeviceKernel, *, check_races: bool = True) -> None:
        # the base constructor compiles the body as one thread; here it depends on the barriers
        self.func = kernel.as_primfunc()
        self.intrinsics: dict[str, Callable[..., Any]] = {}
        self.kernel = kernel
        self.check_races = check_races
        self.geometry = _geometry(kernel)
        self._thread_axes = _axes(kernel, "threadIdx")
        self._block_axes = _axes(kernel, "blockIdx")
        allocated = [n for n in _nodes(kernel.body) if isinstance(n, ir.Allocate)]
        self._shared = {a.buffer.data for a in allocated if a.buffer.scope.startswith("shared")}
        self._private = {a.buffer.data for a in allocated} - self._shared
        self._barriers = [n for n in _nodes(kernel.body) if is_barrier(n)]
        for node in self._barriers:
            scope = node.value.args[0] if node.value.args else None
            if scope not in _BLOCK_SYNC_SCOPES:
                raise CompileError(f"kernel {kernel.name}: tvm_storage_sync({scope!r}) is not a block barrier; the "
                                   f"emulator runs barriers of scope {' or '.join(map(repr, _BLOCK_SYNC_SCOPES))}")
        self._syncing: set[ir.Stmt] = set()
        _mark_syncing(kernel.body, self._syncing)
        # the state of the running launch
        self._tid = self._bid = self._epoch = 0
        self._block_shared: dict[ir.Var, np.ndarray] = {}
        self._trackers: dict[ir.Var, _SharedTracker] = {}
        self._global_writes: dict[ir.Var, dict[int, tuple[int, int, int, Any]]] = {}
        self.lockstep = kernel.body in self._syncing
        if self.lockstep:
            self._thread_gen = self.gstmt(kernel.body)
        else:
            self._thread_fn = self.stmt(kernel.body)

    # ------------------------------------------------------------------ interpreter hooks
    def suspends(self, s: ir.Stmt) -> bool:
        return s in self._syncing

    def allocation(self, buf: ir.Buffer, size: int) -> np.ndarray:
        if buf.data not in self._shared:
            return super().allocation(buf, size)
        arr = self._block_shared.get(buf.data)
        if arr is None:
            arr = self._block_shared[buf.data] = poison(buf.dtype, size)
            self._trackers[buf.data] = _SharedTracker(buf.name, size)
        return arr

    def access_hook(self, buf: ir.Buffer, write: bool) -> Callable[[Any, Any], None] | None:
        if not self.check_races:
            return None
        data, name = buf.data, buf.name
        if data in self._shared:
            def shared(i: Any, _value: Any) -> None:
                tracker, tid, epoch = self._trackers[data], self._tid, self._epoch
                for e in (i.tolist() if isinstance(i, np.ndarray) else (i,)):
                    if write:
                        tracker.stored[e] = True
                    elif not tracker.stored[e]:
                        # an error at the next barrier, unless another thread's write makes it a race first
                        tracker.unset_reads.setdefault(e, tid)
                    hit = tracker.access(e, tid, write, epoch)
                    if hit is not None:
                        raise self._shared_race(name, e, write, *hit)

            return shared
        if data in self._private or not write:
            return None

        def global_write(i: Any, value: Any) -> None:
            writes = self._global_writes.setdefault(data, {})
            bid, tid, epoch = self._bid, self._tid, self._epoch
            if isinstance(i, np.ndarray):
                pairs = zip(i.tolist(), np.broadcast_to(value, i.shape).tolist())
            else:
                pairs = ((i, value),)
            for e, v in pairs:
                prev = writes.get(e)
                if (prev is not None and (prev[0], prev[1]) != (bid, tid) and (prev[0] != bid or prev[2] == epoch)
                        and not _same(prev[3], v)):
                    raise self._global_race(name, e, prev, v)
                writes[e] = (bid, tid, epoch, v)

        return global_write

    def _g_Evaluate(self, s: ir.Evaluate) -> Callable[[Env], Iterator[Any]]:
        def sync(env: Env) -> Iterator[Any]:
            yield _BarrierArrival(s)

        return sync

    # ------------------------------------------------------------------ running
    def launch(self, env: Env, advance: Callable[[], None] = lambda: None) -> None:
        """Run every block on the global memory bound in ``env`` (data variables to flat arrays)."""
        self._global_writes = {}
        nblocks = int(np.prod(self.geometry.grid))
        for bid in range(nblocks):
            self._bid, self._tid, self._epoch = bid, 0, 0
            self._block_shared, self._trackers = {}, {}
            base = dict(env)
            coords = _Geometry.coords(bid, self.geometry.grid)
            for var, axis in self._block_axes:
                base[var] = coords[axis]
            try:
                if self.lockstep:
                    self._run_lockstep(base)
                else:
                    self._run_threads(base)
                self._check_unset_reads()
            except (MemoryAccessError, CompileError) as err:
                raise type(err)(f"{err} in kernel {self.kernel.name}, {self.geometry.block_name(bid)}, "
                                f"{self.geometry.thread(self._tid)}") from err
            advance()

    def _thread_env(self, base: Env, tid: int) -> Env:
        env = dict(base)
        coords = _Geometry.coords(tid, self.geometry.block)
        for var, axis in self._thread_axes:
            env[var] = coords[axis]
        return env

    def _run_threads(self, base: Env) -> None:
        run = self._thread_fn
        for tid in range(self.kernel.threads_per_block):
            self._tid = tid
            run(self._thread_env(base, tid))

    def _run_lockstep(self, base: Env) -> None:
        threads = [self._thread_gen(self._thread_env(base, tid)) for tid in range(self.kernel.threads_per_block)]
        arrivals = [self._resume(tid, g, None) for tid, g in enumerate(threads)]
        while True:
            waiting = next((t for t, a in enumerate(arrivals) if a is not None), None)
            if waiting is None:
                return
            first = arrivals[waiting]
            for tid, a in enumerate(arrivals):
                if a is None or a.node is not first.node:
                    raise self._divergent(waiting, first, tid, a)
            self._check_unset_reads()
            self._epoch += 1
            values = [None] * len(threads) if isinstance(first, _BarrierArrival) else self._all_reduce(first.node,
                                                                                                      arrivals)
            arrivals = [self._resume(tid, g, v) for tid, (g, v) in enumerate(zip(threads, values))]

    def _check_unset_reads(self) -> None:
        """At a barrier or the end of a block: a shared element read before any thread wrote it."""
        for tracker in self._trackers.values():
            if tracker.unset_reads:
                e, self._tid = min(tracker.unset_reads.items())
                raise MemoryAccessError(f"read of uninitialised shared memory {tracker.name}[{e}] (no thread of the "
                                        "block wrote it before)")

    def _resume(self, tid: int, thread: Iterator[Any], value: Any) -> Any:
        self._tid = tid
        try:
            return thread.send(value)  # type: ignore[attr-defined]
        except StopIteration:
            return None

    def _all_reduce(self, node: ir.AllReduce, arrivals: list[Any]) -> list[Any]:
        """Each thread's result: the combination over the threads differing only in node's index."""
        axis = next((a for v, a in self._thread_axes if v is node.thread), None)
        if axis is None:
            raise CompileError(f"kernel {self.kernel.name}: the all-reduce into {node.buffer.name} reduces over "
                               f"{node.thread}, which is not one of its threadIdx variables "
                               f"({', '.join(f'{t}={v.name}' for t, v in self.kernel.thread_vars.items())})")
        groups: dict[tuple[int, ...], list[int]] = {}
        for tid in range(len(arrivals)):
            c = _Geometry.coords(tid, self.geometry.block)
            groups.setdefault(c[:axis] + c[axis + 1:], []).append(tid)
        values: list[Any] = [None] * len(arrivals)
        for tids in groups.values():
            total = arrivals[tids[0]].combine([arrivals[t].value for t in tids])
            for t in tids:
                values[t] = total
        return values

    # ------------------------------------------------------------------ errors
    def _sync_name(self, node: ir.Stmt) -> str:
        if isinstance(node, ir.AllReduce):
            return f"the all-reduce into {node.buffer.name}"
        return f"barrier {self._barriers.index(node) + 1} of {len(self._barriers)} (in body order)"

    def _divergent(self, waiting: int, first: Any, tid: int, other: Any) -> DivergentBarrierError:
        g = self.geometry
        what = "finished" if other is None else f"waits at {self._sync_name(other.node)}"
        return DivergentBarrierError(
            f"divergent barrier in kernel {self.kernel.name}, {g.block_name(self._bid)}: {g.thread(waiting)} waits "
            f"at {self._sync_name(first.node)} while {g.thread(tid)} {what}; every thread of a block must "
            "reach the same barrier (is it under a condition on threadIdx?)")

    def _shared_race(self, name: str, e: int, write: bool, other: int, other_wrote: bool) -> SharedMemoryRaceError:
        g = self.geometry
        return SharedMemoryRaceError(
            f"shared-memory race in kernel {self.kernel.name}, {g.block_name(self._bid)}: {g.thread(self._tid)} "
            f"{'writes' if write else 'reads'} {name}[{e}], which {g.thread(other)} "
            f"{'wrote' if other_wrote else 'read'} with no barrier between (a missing __syncthreads?)")

    def _global_race(self, name: str, e: int, prev: tuple[int, int, int, Any], value: Any) -> GlobalMemoryRaceError:
        g = self.geometry
        return GlobalMemoryRaceError(
            f"global-memory race in kernel {self.kernel.name}: {g.block_name(self._bid)} {g.thread(self._tid)} "
            f"writes {value} to {name}[{e}], which {g.block_name(prev[0])} {g.thread(prev[1])} set to {prev[3]} "
            "in the same launch with nothing ordering the two writes")


class Emulator:
    """A :class:`DeviceProgram` compiled for emulation; calling it runs the kernels in order on
    numpy arrays (one per program parameter), writing outputs in place."""

    def __init__(self, program: DeviceProgram, *, check_races: bool = True) -> None:
        if not isinstance(program, DeviceProgram):
            raise CompileError(f"emulate expects a DeviceProgram, got {type(program).__name__}")
        self.program = program
        self.kernels = [KernelEmulator(k, check_races=check_races) for k in program.kernels]

    def __call__(self, *arrays: np.ndarray) -> None:
        program = self.program
        env = bind_arrays(program.name, program.params, arrays)
        for ws in program.workspaces:
            env[ws.data] = poison(ws.dtype, _size(ws, env))
        by_name = _globals_by_name(program)
        total = sum(int(np.prod(k.geometry.grid)) for k in self.kernels)
        with np.errstate(all="ignore"), progress(f"emulate {program.name}", total=total, unit="block") as bar:
            for k in self.kernels:
                bar.step(k.kernel.name)
                k.launch(_kernel_env(k.kernel, env, by_name), bar.advance)


def emulate(program: DeviceProgram, arrays: Sequence[np.ndarray], *, check_races: bool = True) -> None:
    """Run ``program``'s kernels on ``arrays`` (one per parameter) with GPU semantics; outputs are
    written in place. ``check_races=False`` skips the race and uninitialised-read checks (faster,
    and for kernels whose races are intended); bounds and barriers are always checked."""
    Emulator(program, check_races=check_races)(*arrays)


# ---------------------------------------------------------------------------- helpers
def _nodes(body: ir.Stmt) -> list[Any]:
    out: list[Any] = []
    ir.walk(body, out.append)
    return out


def _mark_syncing(s: ir.Stmt, out: set[ir.Stmt]) -> bool:
    """Add to ``out`` every statement at or below ``s`` that holds a barrier or an all-reduce."""
    found = is_barrier(s) or isinstance(s, ir.AllReduce)
    for c in ir.children(s):
        if isinstance(c, ir.Stmt) and _mark_syncing(c, out):
            found = True
    if found:
        out.add(s)
    return found


def _same(a: Any, b: Any) -> bool:
    """Whether two stored values are the same (NaN equals NaN: the bits a thread stores)."""
    return bool(a == b) or (a != a and b != b)


def _geometry(kernel: DeviceKernel) -> _Geometry:
    for what, dims in (("grid", kernel.grid), ("block", kernel.block)):
        if (not isinstance(dims, tuple) or len(dims) != 3
                or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dims)):
            raise CompileError(f"kernel {kernel.name}: {what} must be three positive ints (x, y, z), got {dims!r}")
    unknown = sorted(set(kernel.thread_vars) - set(THREAD_TAGS))
    if unknown:
        raise CompileError(f"kernel {kernel.name}: unknown thread tags {unknown}; expected tags of {THREAD_TAGS}")
    return _Geometry(tuple(int(d) for d in kernel.grid), tuple(int(d) for d in kernel.block))  # type: ignore[arg-type]


def _axes(kernel: DeviceKernel, prefix: str) -> list[tuple[ir.Var, int]]:
    return [(var, "xyz".index(tag[-1])) for tag, var in kernel.thread_vars.items() if tag.startswith(prefix)]


_EXTENTS = Interpreter(ir.PrimFunc("extent", (), ir.Evaluate(ir.IntImm("int32", 0))))


def _size(buf: ir.Buffer, env: Env) -> int:
    size = 1
    for extent in buf.shape:
        size *= int(_EXTENTS.expr(extent)(env))
    return size


def _globals_by_name(program: DeviceProgram) -> dict[str, ir.Buffer | None]:
    """Program parameters and workspaces by name (None where two share a name)."""
    out: dict[str, ir.Buffer | None] = {}
    for buf in (*program.params, *program.workspaces):
        out[buf.name] = None if buf.name in out else buf
    return out


def _kernel_env(kernel: DeviceKernel, env: Env, by_name: dict[str, ir.Buffer | None]) -> Env:
    """``env`` with each kernel parameter bound: by its data variable, else by its name."""
    out = env
    for p in kernel.params:
        if p.data in env:
            continue
        q = by_name.get(p.name)
        if q is None:
            raise CompileError(f"kernel {kernel.name}: parameter {p.name} is neither a parameter nor a workspace "
                               f"of {sorted(n for n, b in by_name.items() if b is not None)} (or its name is "
                               "ambiguous)")
        out = dict(out) if out is env else out
        out[p.data] = env[q.data]
        for pe, qe in zip(p.shape, q.shape):
            if isinstance(pe, ir.Var) and pe not in out:
                out[pe] = _EXTENTS.expr(qe)(env)
    return out
