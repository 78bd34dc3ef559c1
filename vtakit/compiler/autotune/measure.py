"""Measurement: build and run one config, in a killable child process, on any executor.

A trial is a job (:func:`run_trial`) submitted to a ``concurrent.futures.Executor``: local worker
processes by default, or a dask.distributed cluster (:func:`dask_executor`). The job forks a
child that instantiates the template, builds it (:class:`LocalBuilder`), runs it on the numpy
reference's operands (:class:`LocalRunner`) and compares the output with the reference; the
worker kills the child when a stage outlives its timeout. So a hanging template or a crashing
kernel becomes an error record (:class:`MeasureErrorNo`) and the worker lives on.

The accelerator is measured in cycles on the cycle model: deterministic, so run once. The CPU is
measured in wall time (a warm-up call, then ``repeat`` times ``number`` calls; the costs are the
``repeat`` per-call times, the cost their median). CPU timings on one host never overlap (a
host-wide file lock), since a kernel's thread pool already uses every core; builds stay parallel.
GPU trials likewise take a host-wide GPU lock: kernels of concurrent trials would share the GPU's
SMs and slow each other down, and the timeout would count the wait.
"""

from __future__ import annotations

import ctypes
import enum
import fcntl
import os
import pickle
import select
import signal
import statistics
import struct
import sys
import tempfile
import time
import traceback
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any, Iterator

import numpy as np

from vtakit.compiler.autotune.space import ConfigEntity
from vtakit.compiler.autotune.task import Task
from vtakit.compiler.build import build
from vtakit.compiler.backend.nvptx.driver import cuda_driver
from vtakit.compiler.backend.nvptx.timer import time_kernels
from vtakit.errors import DeviceError, TuningError
from vtakit.runtime.device import Device

__all__ = ["MeasureErrorNo", "MeasureInput", "MeasureResult", "LocalBuilder", "LocalRunner", "MeasureOption",
           "measure_option", "run_trial", "dask_executor", "process_times", "DASK_CONNECT_TIMEOUT", "CPU_LOCK_PATH",
           "GPU_LOCK_PATH", "TIMERS", "exit_with_parent"]

#: Seconds to wait for a dask scheduler (dask's own default is 30).
DASK_CONNECT_TIMEOUT = 10
#: How a CPU trial is timed (:class:`LocalRunner`).
TIMERS = ("wall", "process")
#: The host-wide lock that keeps CPU timings from overlapping.
CPU_LOCK_PATH = os.path.join(tempfile.gettempdir(), "vtakit-cpu-measure.lock")
#: The host-wide lock that keeps GPU trials (one GPU per host) from overlapping.
GPU_LOCK_PATH = os.path.join(tempfile.gettempdir(), "vtakit-gpu-measure.lock")


class MeasureErrorNo(enum.IntEnum):
    """Why a trial has no valid cost (AutoTVM's numbering, plus a lost worker)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1   # the template rejected the config (knob checks, schedule errors)
    COMPILE_HOST = 2          # lowering or LLVM code generation failed
    COMPILE_DEVICE = 3        # the accelerator's code generation failed (SRAM overflow, ...)
    RUNTIME_DEVICE = 4        # the kernel raised or crashed while running
    WRONG_ANSWER = 5          # the output differs from numpy's
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8
    WORKER_LOST = 9           # the executor lost the worker running the trial (dask KilledWorker, ...)


@dataclass(frozen=True)
class MeasureInput:
    task: Task
    config: ConfigEntity


@dataclass(frozen=True)
class MeasureResult:
    """Costs (cycles for ``vta``, seconds for ``llvm``), error kind and message, the trial's wall
    time and when it finished."""

    costs: tuple[float, ...]
    error_no: MeasureErrorNo
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def cost(self) -> float:
        """The median cost; infinite for an error."""
        return statistics.median(self.costs) if self.ok and self.costs else float("inf")


@dataclass(frozen=True)
class LocalBuilder:
    """Builds a config (in the trial's child). ``n_parallel`` trials at once (default: CPUs)."""

    timeout: float = 10.0
    n_parallel: int | None = None

    def build(self, task: Task, cfg: ConfigEntity) -> Any:
        try:
            s, tensors = task.instantiate(cfg)
        except Exception as exc:   # a template may raise anything on a config it cannot honour
            raise _TrialError(MeasureErrorNo.INSTANTIATION_ERROR, exc) from exc
        try:
            return build(s, tensors, target=task.target, config=task.config)
        except Exception as exc:
            kind = MeasureErrorNo.COMPILE_DEVICE if task.target == "vta" else MeasureErrorNo.COMPILE_HOST
            raise _TrialError(kind, exc) from exc


@dataclass(frozen=True)
class LocalRunner:
    """Runs a built config on the reference operands and checks the output.

    ``vta``: one run on the ``backend`` simulator (``cycle``), cost = cycles. ``llvm``: one
    warm-up call, then ``repeat`` x ``number`` calls under the host-wide CPU lock, timed by
    ``timer``: ``"wall"`` (the default: elapsed time, what a user waits) or ``"process"`` (the
    process's CPU time, :func:`time.process_time`: with one kernel thread, ``VTAKIT_NUM_THREADS=1``,
    the work a kernel does, which other processes on a loaded host do not inflate; for comparing
    configs on a shared machine, not a latency)."""

    timeout: float = 10.0
    number: int = 3
    repeat: int = 3
    min_repeat_ms: float = 0.0
    backend: str = "cycle"
    seed: int = 0
    timer: str = "wall"

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise TuningError(f"LocalRunner timer {self.timer!r}: expected one of {TIMERS}")

    def run(self, task: Task, module: Any, started: Any = None) -> tuple[float, ...]:
        inputs, expected = task.reference(self.seed)
        if task.target == "vta":
            return self._run_vta(task, module, inputs, expected, started)
        if task.target == "cuda":
            return self._run_cuda(module, inputs, expected, started)
        return self._run_cpu(task, module, inputs, expected, started)

    def _run_cuda(self, module: Any, inputs: list[np.ndarray], expected: np.ndarray, started: Any) -> tuple[float, ...]:
        """A GPU trial: the output checked, then ``repeat`` x ``number`` runs timed with the operands on
        the GPU. Without a GPU the trial is a RUNTIME_DEVICE record saying so."""
        try:
            cuda_driver()
        except DeviceError as exc:
            raise _TrialError(MeasureErrorNo.RUNTIME_DEVICE, f"cuda trials are measured on a GPU: {exc}") from exc
        args = [*inputs, np.zeros_like(expected)]
        with _host_lock(GPU_LOCK_PATH):
            if started:
                started()
            try:
                timing = time_kernels(module, args, self.number, self.repeat)
            except Exception as exc:
                raise _TrialError(MeasureErrorNo.RUNTIME_DEVICE, exc) from exc
        if not np.allclose(args[-1], expected, rtol=1e-3, atol=1e-3):
            err = float(np.max(np.abs(args[-1] - expected)))
            raise _TrialError(MeasureErrorNo.WRONG_ANSWER, f"output differs from numpy by up to {err:.3g}")
        return tuple(float(t) for t in timing)

    def _run_vta(self, task: Task, module: Any, inputs: list[np.ndarray], expected: np.ndarray,
                 started: Any) -> tuple[float, ...]:
        if started:
            started()
        size = max(32 << 20, 4 * sum(h.nbytes for h in inputs) + 2 * expected.nbytes + (1 << 20))
        dev = Device(task.config, backend=self.backend, dram_size=size)
        arrays = [dev.array(h) for h in inputs] + [dev.empty(expected.shape, expected.dtype)]
        try:
            stats = module(*arrays)
        except Exception as exc:
            raise _TrialError(MeasureErrorNo.RUNTIME_DEVICE, exc) from exc
        got = arrays[-1].numpy()
        if not np.array_equal(got, expected):
            raise _TrialError(MeasureErrorNo.WRONG_ANSWER, f"{int(np.sum(got != expected))} of {got.size} "
                                                           "output elements differ from numpy")
        if stats.cycles is None:
            raise _TrialError(MeasureErrorNo.RUNTIME_DEVICE, f"backend {self.backend!r} reports no cycles")
        return (float(stats.cycles),)

    def _run_cpu(self, task: Task, module: Any, inputs: list[np.ndarray], expected: np.ndarray,
                 started: Any) -> tuple[float, ...]:
        args = [*inputs, np.zeros_like(expected)]
        with _host_lock(CPU_LOCK_PATH):
            if started:
                started()
            try:
                module(*args)
            except Exception as exc:
                raise _TrialError(MeasureErrorNo.RUNTIME_DEVICE, exc) from exc
            if not np.allclose(args[-1], expected, rtol=1e-3, atol=1e-3):
                err = float(np.max(np.abs(args[-1] - expected)))
                raise _TrialError(MeasureErrorNo.WRONG_ANSWER, f"output differs from numpy by up to {err:.3g}")
            if self.timer == "process":
                return process_times(module, args, self.number, self.repeat)
            timing = module.time_evaluator(self.number, self.repeat, self.min_repeat_ms)(*args)
        return tuple(float(t) for t in timing.results)


@dataclass
class MeasureOption:
    """Builder, runner and the executor that runs trials (None: local worker processes)."""

    builder: LocalBuilder
    runner: LocalRunner
    executor: Executor | None = None

    @property
    def n_parallel(self) -> int:
        if self.builder.n_parallel:
            return self.builder.n_parallel
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

    @contextmanager
    def open_executor(self) -> Iterator[Executor]:
        """The executor (a local process pool, created here and shut down after, when none was given)."""
        if self.executor is not None:
            yield self.executor
            return
        pool = ProcessPoolExecutor(max_workers=self.n_parallel, mp_context=get_context("fork"),
                                   initializer=exit_with_parent)
        try:
            yield pool
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def measure_option(builder: LocalBuilder | None = None, runner: LocalRunner | None = None,
                   executor: Executor | None = None) -> MeasureOption:
    """AutoTVM's ``measure_option``: how trials are built, run, and where."""
    return MeasureOption(builder or LocalBuilder(), runner or LocalRunner(), executor)


def process_times(module: Any, args: list[np.ndarray], number: int, repeat: int) -> tuple[float, ...]:
    """``repeat`` per-call CPU times of this process (:func:`time.process_time`) over ``number``
    calls each, after the caller's warm-up."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(number):
            module(*args)
        times.append((time.process_time() - start) / number)
    return tuple(times)


class _TrialError(Exception):
    def __init__(self, kind: MeasureErrorNo, cause: Any) -> None:
        super().__init__(str(cause))
        self.kind = kind
        self.message = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(cause)


@contextmanager
def _host_lock(path: str) -> Iterator[None]:
    """An exclusive lock shared by every process of this host (a file lock on ``path``)."""
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def exit_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux's ``PR_SET_PDEATHSIG``), so a
    killed ``vtakit tune`` leaves no pool worker or trial child behind; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


# ---------------------------------------------------------------------------- the trial job
def run_trial(task: Task, index: int, builder: LocalBuilder, runner: LocalRunner) -> MeasureResult:
    """Measure config ``index`` of ``task`` in a forked child; never raises for a bad config.

    The child reports when the build is done and when the run starts (after the CPU lock), so
    each stage gets its own timeout; a child that dies or outlives a timeout is killed and
    becomes an error record."""
    start = time.time()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns
        exit_with_parent()
        os.close(read_fd)
        _child(task, index, builder, runner, write_fd)
    os.close(write_fd)
    stage, deadline = "build", time.monotonic() + builder.timeout
    buf = b""
    result: MeasureResult | None = None
    try:
        while result is None:
            wait = deadline - time.monotonic()
            ready = select.select([read_fd], [], [], min(wait, 3600.0))[0] if wait > 0 else []
            if not ready:
                kind = MeasureErrorNo.BUILD_TIMEOUT if stage == "build" else MeasureErrorNo.RUN_TIMEOUT
                limit = builder.timeout if stage == "build" else runner.timeout
                result = MeasureResult((), kind, f"{stage} took longer than {limit} s; killed", time.time() - start)
                break
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                status = os.waitpid(pid, 0)[1]
                pid = 0
                kind = MeasureErrorNo.COMPILE_HOST if stage == "build" else MeasureErrorNo.RUNTIME_DEVICE
                result = MeasureResult((), kind, f"the trial process died during {stage} ({_status(status)})",
                                       time.time() - start)
                break
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack("<I", buf[:4])[0]:
                size = struct.unpack("<I", buf[:4])[0]
                message, buf = pickle.loads(buf[4:4 + size]), buf[4 + size:]
                if message[0] == "stage":
                    stage = message[1]
                    deadline = time.monotonic() + (runner.timeout if stage == "run" else builder.timeout)
                elif message[0] == "wait":
                    stage, deadline = "wait", float("inf")   # queued for the CPU lock: no clock yet
                else:
                    costs, kind, msg = message[1:]
                    result = MeasureResult(tuple(costs), MeasureErrorNo(kind), msg, time.time() - start)
    finally:
        os.close(read_fd)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
    return result


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"killed by signal {signal.Signals(sig).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _child(task: Task, index: int, builder: LocalBuilder, runner: LocalRunner, fd: int) -> None:
    def send(*message: Any) -> None:
        data = pickle.dumps(message)
        os.write(fd, struct.pack("<I", len(data)) + data)

    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            cfg = task.config_space.get(index)
            module = builder.build(task, cfg)
            send("wait" if task.target != "vta" else "stage", "run")
            costs = runner.run(task, module, started=lambda: send("stage", "run"))
            send("result", costs, int(MeasureErrorNo.NO_ERROR), "")
        except _TrialError as exc:
            send("result", (), int(exc.kind), exc.message)
        except Exception as exc:   # anything else a template or backend raises is an unknown error
            send("result", (), int(MeasureErrorNo.UNKNOWN_ERROR),
                 f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    except BaseException:   # noqa: BLE001 -- the child must exit, whatever happened
        code = 1
    finally:
        os._exit(code)


# ---------------------------------------------------------------------------- dask
def dask_executor(spec: str, resources: dict[str, float] | None = None) -> tuple[Executor, Any]:
    """``(executor, client)`` for ``spec``: a scheduler address, or ``local:N`` for a LocalCluster of
    N single-threaded worker processes. Connecting gives up after :data:`DASK_CONNECT_TIMEOUT` s.
    ``resources`` (e.g. ``{"VTA_SIM": 1}``) restricts trials to workers that offer them, as TVM's
    tracker keys pick devices. Close the client when done."""
    try:
        from dask.distributed import Client, LocalCluster  # noqa: PLC0415 -- optional extra
    except ImportError as exc:
        raise TuningError("--dask needs dask.distributed: pip install 'vtakit[dask]'") from exc
    if spec.startswith("local:"):
        try:
            n = int(spec.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise TuningError(f"dask spec {spec!r}: expected local:N with N >= 1 workers")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               resources=resources)
        client = Client(cluster)
    else:
        try:
            client = Client(spec, timeout=f"{DASK_CONNECT_TIMEOUT}s")
        except (OSError, TimeoutError) as exc:
            raise TuningError(f"cannot reach the dask scheduler at {spec!r} within {DASK_CONNECT_TIMEOUT} s "
                              f"({type(exc).__name__}: {exc})") from exc
    kwargs = {"resources": resources} if resources else {}
    return client.get_executor(pure=False, **kwargs), client
