"""The CPU backend's native runtime: a JIT, the host target machine and a parallel-for thread pool.

Compiled kernels run their ``parallel`` loops on a small pool of POSIX threads written in LLVM IR
and JIT-compiled once per process, so no C compiler is needed at run time. Kernels are called
through ctypes, which releases the GIL, so the pool's workers run truly in parallel with each
other and with other Python threads.

Contract of the parallel launch (mirrors TVM's ``TVMBackendParallelLaunch``)::

    int32 vtakit_parallel_launch(int32 (*task)(int32 task_id, int32 num_tasks, void *closure),
                                 void *closure, int32 max_chunks)

runs ``task(k, n, closure)`` for every ``k < n`` (``n`` = a few chunks per pool thread, at most
``max_chunks``: the loop's extent, so a short loop does not pay for claiming empty chunks; one
chunk runs on the caller's thread without the pool) and returns when all have finished; the
caller's thread takes chunks too. Chunk ``k`` is a fixed
contiguous range of the loop and iterations are independent, so results never depend on which
thread ran what; threads claim chunks dynamically, so one descheduled thread (on a shared
machine) does not hold up the loop. A launch made while the pool runs another (from another
thread, or nested: an extern callback inside a parallel task calling a parallel kernel) runs
as one task on its caller's thread; nested parallel loops in one kernel are rejected by the
code generator. The pool is re-created
after ``os.fork`` (the child inherits no threads), so forked workers (autotuning measurement) can
run kernels too.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from functools import cache

import llvmlite.binding as llvm

from vtakit.errors import CompileError

__all__ = ["LLVM_LOCK", "CPUTarget", "VECTOR_WIDTHS", "enabled_features", "host_target", "native_vector_width", "parse_target", "target_machine", "optimize", "jit",
           "runtime", "num_threads", "PARALLEL_LAUNCH", "MAX_THREADS"]

PARALLEL_LAUNCH = "vtakit_parallel_launch"
MAX_THREADS = 1024  # the job ticket counts chunks in 16 bits

_llvm_ready = False
# LLVM objects shared between builds (target machines, the pass pipeline) are not thread-safe:
# every parse/optimise/JIT step holds this lock.
LLVM_LOCK = threading.RLock()


def _init_llvm() -> None:
    global _llvm_ready
    with LLVM_LOCK:
        if not _llvm_ready:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _llvm_ready = True


# CPUs whose names imply AVX-512 (so ``-mcpu=NAME`` alone gives 512-bit vectors); prefixes.
_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake", "tigerlake", "rocketlake",
                "sapphirerapids", "emeraldrapids", "graniterapids", "diamondrapids", "knl", "knm", "znver4", "znver5",
                "x86-64-v4")
_AVX_CPUS = ("sandybridge", "ivybridge", "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
             "arrowlake", "lunarlake", "gracemont", "znver", "bdver", "btver2", "x86-64-v3")
VECTOR_WIDTHS = (128, 256, 512)


@dataclass(frozen=True)
class CPUTarget:
    """An LLVM CPU target: triple, CPU name, feature string (``+avx2,-avx512f,...``) and the vector
    width in bits that schedules block for and LLVM's vectorisers prefer (``-vector-width=``)."""

    triple: str
    cpu: str
    features: str
    vector_width: int = 0  # 0: the widest the CPU has (see :func:`native_vector_width`)

    def __post_init__(self) -> None:
        if self.vector_width == 0:
            object.__setattr__(self, "vector_width", native_vector_width(self.cpu, self.features))

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers (AVX-512 doubles x86's 16)."""
        return 32 if native_vector_width(self.cpu, self.features) == 512 else 16

    @property
    def llvm_features(self) -> str:
        """The feature string for LLVM, with the preferred vector width as a tuning feature."""
        prefer = {128: "+prefer-128-bit", 256: "+prefer-256-bit", 512: "-prefer-256-bit,-prefer-128-bit"}
        extra = prefer[self.vector_width] if self.triple.startswith(("x86_64", "i686", "i386")) else ""
        return ",".join(f for f in (self.features, extra) if f)

    def __str__(self) -> str:
        return f"llvm -mtriple={self.triple} -mcpu={self.cpu} -vector-width={self.vector_width}"


def enabled_features(features: str) -> dict[str, bool]:
    """``"+a,-b,+b"`` -> ``{"a": True, "b": True}``: the last mention of a feature wins, as in LLVM."""
    return {f[1:]: f[0] == "+" for f in features.split(",") if f[:1] in ("+", "-")}


def native_vector_width(cpu: str, features: str) -> int:
    """The widest vector ``cpu`` with ``features`` executes: explicit features win over the name."""
    flags = enabled_features(features)
    if flags.get("avx512f", cpu.startswith(_AVX512_CPUS)):
        return 512
    if flags.get("avx", flags.get("avx2", cpu.startswith(_AVX512_CPUS + _AVX_CPUS))):
        return 256
    return 128


@cache
def host_target() -> CPUTarget:
    """The machine we run on, with all the features the host CPU has and its full vector width."""
    _init_llvm()
    return CPUTarget(llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


def parse_target(target: str | CPUTarget) -> CPUTarget:
    """``"llvm"`` is the host; ``-mcpu=NAME``, ``-mattr=+f1,-f2`` and ``-vector-width=128|256|512``
    adjust it (as in TVM target strings); ``-mtriple=`` names another machine."""
    if isinstance(target, CPUTarget):
        return target
    if not isinstance(target, str):
        raise CompileError(f"a CPU target is a string such as 'llvm -mcpu=znver4' or a CPUTarget, "
                           f"got {type(target).__name__}")
    words = target.split()
    if not words or words[0] != "llvm":
        raise CompileError(f"CPU target string must start with 'llvm', got {target!r}")
    host = host_target()
    triple, cpu, features, width = host.triple, host.cpu, host.features, 0
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq:
            raise CompileError(f"malformed target option {word!r} in {target!r}; expected -key=value")
        if key == "-mcpu":
            cpu, features = value, ("" if value != host.cpu else features)
        elif key == "-mattr":
            features = ",".join(f for f in (features, value) if f)
        elif key == "-mtriple":
            triple = value
        elif key == "-vector-width":
            if not value.isdigit() or int(value) not in VECTOR_WIDTHS:
                raise CompileError(f"-vector-width={value} in {target!r}: expected one of {VECTOR_WIDTHS} (bits)")
            width = int(value)
        else:
            raise CompileError(f"unknown target option {key!r} in {target!r}; "
                               "expected -mcpu, -mattr, -mtriple or -vector-width")
    native = native_vector_width(cpu, features)
    if width > native:
        raise CompileError(f"-vector-width={width} in {target!r}: CPU {cpu!r} with these features has "
                           f"{native}-bit vectors at most")
    return CPUTarget(triple, cpu, features, width or native)


@cache
def target_machine(target: CPUTarget) -> llvm.TargetMachine:
    """A shared machine for optimisation and assembly output (never handed to an engine)."""
    return _new_target_machine(target)


def _new_target_machine(target: CPUTarget) -> llvm.TargetMachine:
    _init_llvm()
    try:
        llvm_target = llvm.Target.from_triple(target.triple)
    except RuntimeError as exc:
        raise CompileError(f"LLVM cannot target {target.triple!r}: {exc}") from None
    return llvm_target.create_target_machine(cpu=target.cpu, features=target.llvm_features, opt=3,
                                             reloc="default", codemodel="jitdefault")


def optimize(module: llvm.ModuleRef, target: CPUTarget) -> None:
    """The O3 pipeline (loop and SLP vectorisers, unrolling, inlining) for ``target``."""
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(target_machine(target), options)
    builder.getModulePassManager().run(module, builder)


def jit(module: llvm.ModuleRef, target: CPUTarget) -> llvm.ExecutionEngine:
    """Machine code for ``module`` in an execution engine of its own (freed with the engine)."""
    if target.triple != host_target().triple:
        raise CompileError(f"cannot run code for {target.triple!r} on this {host_target().triple!r} host")
    runtime()  # the parallel launcher must exist before the kernel's symbols are resolved
    with LLVM_LOCK:  # an engine owns (and frees) its target machine, so each gets a new one
        engine = llvm.create_mcjit_compiler(module, _new_target_machine(target))
        engine.finalize_object()
    return engine


def num_threads() -> int:
    """Threads of the pool: ``VTAKIT_NUM_THREADS``, else the CPUs this process may run on (read once,
    when the pool is created by the first build)."""
    env = os.environ.get("VTAKIT_NUM_THREADS")
    if env is not None:
        if not env.isdigit() or not 1 <= int(env) <= MAX_THREADS:
            raise CompileError(f"VTAKIT_NUM_THREADS must be an integer in [1, {MAX_THREADS}], got {env!r}")
        return int(env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus, MAX_THREADS)


# The pool. A job is one atomic 64-bit ticket, generation << 32 | chunks << 16 | next chunk: threads
# claim chunks with a compare-and-swap that also checks the generation, so a worker that wakes
# late can never take a chunk of a finished or newer job, and fn/closure (written before the
# ticket is published with a release store) are valid whenever a claim succeeds. The launcher
# claims chunks too and returns once @job_done counts every chunk. Threads spin (bounded, with a
# CPU pause hint) before sleeping on condition variables, so back-to-back launches are cheap and
# idle threads cost nothing. pthread objects live in over-sized opaque storage (glibc x86-64
# needs 40/48 bytes, macOS 64).
_RUNTIME_IR = r"""
@launch_mutex = internal global [128 x i8] zeroinitializer, align 64
@pool_mutex = internal global [128 x i8] zeroinitializer, align 64
@cond_start = internal global [128 x i8] zeroinitializer, align 64
@cond_done = internal global [128 x i8] zeroinitializer, align 64
@pool_size = internal global i32 1
@workers_started = internal global i32 0
@ticket = internal global i64 0, align 64
@start_generation = internal global i64 0
@job_fn = internal global ptr null
@job_closure = internal global ptr null
@job_done = internal global i32 0, align 64

declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_trylock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)

define internal void @cpu_relax() {
  PAUSE
  ret void
}

define void @vtakit_runtime_reset(i32 %size) {
  call i32 @pthread_mutex_init(ptr @launch_mutex, ptr null)
  call i32 @pthread_mutex_init(ptr @pool_mutex, ptr null)
  call i32 @pthread_cond_init(ptr @cond_start, ptr null)
  call i32 @pthread_cond_init(ptr @cond_done, ptr null)
  store i32 %size, ptr @pool_size
  store i32 0, ptr @workers_started
  store i64 0, ptr @ticket
  store i32 0, ptr @job_done
  ret void
}

define void @vtakit_runtime_before_fork() {
  call i32 @pthread_mutex_lock(ptr @launch_mutex)
  call i32 @pthread_mutex_lock(ptr @pool_mutex)
  ret void
}

define void @vtakit_runtime_after_fork_in_parent() {
  call i32 @pthread_mutex_unlock(ptr @pool_mutex)
  call i32 @pthread_mutex_unlock(ptr @launch_mutex)
  ret void
}

; Wait until the ticket's generation differs from %seen; return the new generation.
define internal i64 @await_job(i64 %seen) {
entry:
  br label %spin
spin:
  %k = phi i32 [ 0, %entry ], [ %k1, %spin_again ]
  %t = load atomic i64, ptr @ticket acquire, align 8
  %g = lshr i64 %t, 32
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %done, label %spin_again
spin_again:
  call void @cpu_relax()
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, SPIN
  br i1 %more, label %spin, label %lock
lock:
  call i32 @pthread_mutex_lock(ptr @pool_mutex)
  br label %check
check:
  %t2 = load atomic i64, ptr @ticket acquire, align 8
  %g2 = lshr i64 %t2, 32
  %new2 = icmp ne i64 %g2, %seen
  br i1 %new2, label %unlock, label %sleep
sleep:
  call i32 @pthread_cond_wait(ptr @cond_start, ptr @pool_mutex)
  br label %check
unlock:
  call i32 @pthread_mutex_unlock(ptr @pool_mutex)
  br label %done
done:
  %result = phi i64 [ %g, %spin ], [ %g2, %unlock ]
  ret i64 %result
}

; Claim and run chunks of job %gen until none is left (or the job is no longer current).
define internal void @run_chunks(i64 %gen) {
entry:
  br label %claim
claim:
  %t = load atomic i64, ptr @ticket acquire, align 8
  %g = lshr i64 %t, 32
  %current = icmp eq i64 %g, %gen
  %n64 = lshr i64 %t, 16
  %n = and i64 %n64, 65535
  %c = and i64 %t, 65535
  %left = icmp ult i64 %c, %n
  %go = and i1 %current, %left
  br i1 %go, label %take, label %exit
take:
  %t1 = add i64 %t, 1
  %pair = cmpxchg ptr @ticket, i64 %t, i64 %t1 acq_rel acquire
  %won = extractvalue { i64, i1 } %pair, 1
  br i1 %won, label %run, label %claim
run:
  %fn = load ptr, ptr @job_fn
  %closure = load ptr, ptr @job_closure
  %chunk = trunc i64 %c to i32
  %chunks = trunc i64 %n to i32
  call i32 %fn(i32 %chunk, i32 %chunks, ptr %closure)
  %before = atomicrmw add ptr @job_done, i32 1 acq_rel
  %after = add i32 %before, 1
  %last = icmp eq i32 %after, %chunks
  br i1 %last, label %signal, label %claim
signal:
  call i32 @pthread_mutex_lock(ptr @pool_mutex)
  call i32 @pthread_cond_broadcast(ptr @cond_done)
  call i32 @pthread_mutex_unlock(ptr @pool_mutex)
  br label %claim
exit:
  ret void
}

define internal ptr @worker_main(ptr %arg) {
entry:
  %gen0 = load i64, ptr @start_generation  ; not the ticket: a job may be posted before we get here
  br label %wait
wait:
  %seen = phi i64 [ %gen0, %entry ], [ %gen, %wait ]
  %gen = call i64 @await_job(i64 %seen)
  call void @run_chunks(i64 %gen)
  br label %wait
}

define internal void @start_workers(i32 %size) {
entry:
  %handle = alloca i64
  %t = load i64, ptr @ticket
  %current = lshr i64 %t, 32
  store i64 %current, ptr @start_generation
  br label %loop
loop:
  %i = phi i32 [ 1, %entry ], [ %next, %loop ]
  call i32 @pthread_create(ptr %handle, ptr null, ptr @worker_main, ptr null)
  %h = load i64, ptr %handle
  call i32 @pthread_detach(i64 %h)
  %next = add i32 %i, 1
  %more = icmp slt i32 %next, %size
  br i1 %more, label %loop, label %done
done:
  store i32 1, ptr @workers_started
  ret void
}

define i32 @vtakit_parallel_launch(ptr %fn, ptr %closure, i32 %max_chunks) {
entry:
  %size = load i32, ptr @pool_size
  %one_thread = icmp sle i32 %size, 1
  %one_chunk = icmp sle i32 %max_chunks, 1
  %serial = or i1 %one_thread, %one_chunk
  br i1 %serial, label %inline, label %pool
inline:
  call i32 %fn(i32 0, i32 1, ptr %closure)
  ret i32 0
pool:
  ; A launch while another is running (from a task's extern callback that calls a parallel
  ; kernel, or from another Python thread) runs inline: waiting for the launch mutex would
  ; deadlock the nested case, whose outer launch cannot finish before this task does.
  %taken = call i32 @pthread_mutex_trylock(ptr @launch_mutex)
  %busy_pool = icmp ne i32 %taken, 0
  br i1 %busy_pool, label %inline, label %owned
owned:
  %started = load i32, ptr @workers_started
  %cold = icmp eq i32 %started, 0
  br i1 %cold, label %start, label %post
start:
  call void @start_workers(i32 %size)
  br label %post
post:
  %per_threads = mul i32 %size, CHUNKS_PER_THREAD
  %few = icmp ult i32 %max_chunks, %per_threads
  %chunks32 = select i1 %few, i32 %max_chunks, i32 %per_threads
  %chunks = zext i32 %chunks32 to i64
  store ptr %fn, ptr @job_fn
  store ptr %closure, ptr @job_closure
  store atomic i32 0, ptr @job_done release, align 4
  call i32 @pthread_mutex_lock(ptr @pool_mutex)
  %t = load i64, ptr @ticket
  %g = lshr i64 %t, 32
  %g1 = add i64 %g, 1
  %hi = shl i64 %g1, 32
  %mid = shl i64 %chunks, 16
  %t1 = or i64 %hi, %mid
  store atomic i64 %t1, ptr @ticket release, align 8
  call i32 @pthread_cond_broadcast(ptr @cond_start)
  call i32 @pthread_mutex_unlock(ptr @pool_mutex)
  call void @run_chunks(i64 %g1)
  br label %spin
spin:
  %k = phi i32 [ 0, %post ], [ %k1, %spin_again ]
  %done = load atomic i32, ptr @job_done acquire, align 4
  %finished = icmp eq i32 %done, %chunks32
  br i1 %finished, label %exit, label %spin_again
spin_again:
  call void @cpu_relax()
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, SPIN
  br i1 %more, label %spin, label %lock
lock:
  call i32 @pthread_mutex_lock(ptr @pool_mutex)
  br label %check
check:
  %done2 = load atomic i32, ptr @job_done acquire, align 4
  %busy = icmp ult i32 %done2, %chunks32
  br i1 %busy, label %block, label %unlock
block:
  call i32 @pthread_cond_wait(ptr @cond_done, ptr @pool_mutex)
  br label %check
unlock:
  call i32 @pthread_mutex_unlock(ptr @pool_mutex)
  br label %exit
exit:
  call i32 @pthread_mutex_unlock(ptr @launch_mutex)
  ret i32 0
}
"""
# Iterations of the spin before sleeping (some microseconds with the x86 pause hint): enough for
# back-to-back launches, short enough not to hold a core another thread needs on a busy machine.
_SPIN = 2000
# Chunks per thread: a late or descheduled thread's share is picked up by the others.
_CHUNKS_PER_THREAD = 8


def _runtime_ir(triple: str) -> str:
    pause = "call void @llvm.x86.sse2.pause()" if triple.startswith(("x86_64", "i686", "i386")) else ""
    text = _RUNTIME_IR.replace("PAUSE", pause).replace("SPIN", str(_SPIN))
    text = text.replace("CHUNKS_PER_THREAD", str(_CHUNKS_PER_THREAD))
    return text + ("declare void @llvm.x86.sse2.pause()\n" if pause else "")


class _Runtime:
    """The JIT-compiled pool, its symbols registered for kernels, and its fork handlers."""

    def __init__(self) -> None:
        module = llvm.parse_assembly(_runtime_ir(host_target().triple))
        module.triple = host_target().triple
        module.verify()
        self.engine = llvm.create_mcjit_compiler(module, _new_target_machine(host_target()))
        self.engine.finalize_object()
        address = self.engine.get_function_address
        self.size = num_threads()
        self._reset = ctypes.CFUNCTYPE(None, ctypes.c_int32)(address("vtakit_runtime_reset"))
        self._before_fork = ctypes.CFUNCTYPE(None)(address("vtakit_runtime_before_fork"))
        self._after_fork_in_parent = ctypes.CFUNCTYPE(None)(address("vtakit_runtime_after_fork_in_parent"))
        self._reset(self.size)
        llvm.add_symbol(PARALLEL_LAUNCH, address(PARALLEL_LAUNCH))
        os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork_in_parent,
                            after_in_child=lambda: self._reset(self.size))


_runtime: _Runtime | None = None


def runtime() -> _Runtime:
    """The process's runtime, created on first use."""
    global _runtime
    with LLVM_LOCK:
        if _runtime is None:
            _init_llvm()
            _runtime = _Runtime()
        return _runtime
