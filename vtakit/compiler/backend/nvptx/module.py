"""The ``cuda`` target (alias ``nvptx``): a schedule in, a :class:`CUDAModule` out.

``vtakit.build(s, args, target="cuda -arch=sm_80")`` lowers the schedule, splits it into kernels
and runs the GPU passes (:mod:`.pipeline`), generates NVPTX LLVM IR (:mod:`.codegen`) and
optimises and assembles it to PTX with LLVM's NVPTX back end. The module is called TVM-style
with every argument, outputs included, as numpy arrays: where a GPU and its driver exist, the
arrays are copied to the device, the kernels run in order and the arrays the kernels write are
copied back (:class:`~vtakit.compiler.backend.nvptx.array.CUDAArray` operands stay on the device
and are used in place); elsewhere the call raises :class:`~vtakit.errors.DeviceError` pointing to
``mod.emulate(*arrays)``, which runs the same kernels on the CPU with GPU semantics.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import llvmlite.binding as llvm
import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.backend import llvm_runtime as rt
from vtakit.compiler.backend.llvm import TimingResult, fingerprint
from vtakit.compiler.backend.nvptx.array import CUDAArray
from vtakit.compiler.backend.nvptx.codegen import generate_nvptx, kernel_symbol
from vtakit.compiler.backend.nvptx.pipeline import device_program
from vtakit.compiler.backend.nvptx.program import DeviceProgram
from vtakit.compiler.backend.nvptx.ptxas import PtxasReport, ptxas_check
from vtakit.compiler.backend.nvptx.split import allocation_bytes
from vtakit.compiler.backend.nvptx.target import MAX_SHARED_BYTES, TARGET_KINDS, TRIPLE, CUDATarget, parse_target
from vtakit.compiler.targets import register_lowering, register_target
from vtakit.compiler.scope import MemoryInfo
from vtakit.compiler.transform import PassContext
from vtakit.errors import ArgumentError, CompileError
from vtakit.progress import QUICK_WORK_DELAY_SECONDS, progress

__all__ = ["CUDAModule", "KernelInfo", "build_cuda", "cuda_target_builder", "cuda_lowering", "GPU_SCOPES"]

# the memory scopes a GPU schedule may store stages in (capacities per block / per thread)
GPU_SCOPES = {"shared": MemoryInfo(8, MAX_SHARED_BYTES * 8), "local": MemoryInfo(8, 512 * 1024 * 8)}


@dataclass(frozen=True)
class KernelInfo:
    """A kernel of a built module as the driver launches it."""

    name: str  # the PTX entry
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


class CUDAModule:
    """PTX for the kernels of one function; call it with one numpy array per parameter."""

    def __init__(self, func: ir.PrimFunc, program: DeviceProgram, target: CUDATarget, llvm_ir: str, ptx: str,
                 compile_seconds: float) -> None:
        self.func = func
        self.program = program
        self.target = target
        self.llvm_ir = llvm_ir
        self.ptx = ptx
        self.compile_seconds = compile_seconds
        self.kernels = [KernelInfo(kernel_symbol(k.name), k.grid, k.block, k.shared_bytes) for k in program.kernels]
        self._written = _written(program)
        self._loaded: Any = None  # (driver, functions) once loaded on a GPU
        self._load_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.program.name

    def __repr__(self) -> str:
        return (f"<CUDAModule {self.name}({', '.join(b.name for b in self.program.params)}): "
                f"{len(self.kernels)} kernel(s) for {self.target}>")

    def get_source(self, fmt: str = "ptx") -> str:
        """The PTX (``"ptx"``) or the optimised NVPTX LLVM IR (``"llvm"``, also ``"ll"``)."""
        if fmt == "ptx":
            return self.ptx
        if fmt in ("llvm", "ll"):
            return self.llvm_ir
        raise CompileError(f"unknown source format {fmt!r}; expected 'ptx' or 'llvm'")

    def ptxas(self, arch: str | None = None) -> PtxasReport:
        """ptxas's resource report for this module's PTX (for the target's architecture by default)."""
        return ptxas_check(self.ptx, arch or self.target.arch)

    # ------------------------------------------------------------ running
    def __call__(self, *arrays: np.ndarray | CUDAArray) -> None:
        """Run the kernels on the GPU. A numpy array is copied in (and back when the kernels write
        it); a :class:`CUDAArray` is used where it is, with no copy."""
        self._check(arrays, device_arrays=True)
        driver, functions = self._load()
        driver.make_current()
        pointers: dict[ir.Var, int] = {}
        owned: list[int] = []  # what this call allocates (and frees)

        def allocate(buf: ir.Buffer, nbytes: int) -> int:
            pointers[buf.data] = driver.alloc(nbytes)
            owned.append(pointers[buf.data])
            return pointers[buf.data]

        try:
            for buf, array in zip(self.program.params, arrays):
                if isinstance(array, CUDAArray):
                    pointers[buf.data] = array._live()
                else:
                    driver.to_device(allocate(buf, array.nbytes), array)
            for buf in self.program.workspaces:
                allocate(buf, allocation_bytes(buf))
            for kernel, function in zip(self.program.kernels, functions):
                driver.launch(function, kernel.grid, kernel.block, [pointers[b.data] for b in kernel.params])
            driver.synchronize()
            for buf, array in zip(self.program.params, arrays):
                if buf.data in self._written and not isinstance(array, CUDAArray):
                    driver.to_host(array, pointers[buf.data])
        finally:
            for pointer in owned:
                driver.free(pointer)

    def time_evaluator(self, number: int = 10, repeat: int = 3) -> Callable[..., TimingResult]:
        """A function that times the kernels on the GPU, as TVM's ``time_evaluator``: the operands are
        copied in once, then ``repeat`` times ``number`` back-to-back runs (a DeviceError without a GPU)."""
        from vtakit.compiler.backend.nvptx.timer import time_kernels  # noqa: PLC0415 (only where a GPU runs it)

        def evaluate(*arrays: np.ndarray) -> TimingResult:
            self._check(arrays)
            return TimingResult(tuple(time_kernels(self, arrays, number, repeat)))

        return evaluate

    def emulate(self, *arrays: np.ndarray) -> None:
        """Run the kernels on the CPU with GPU semantics (every block and thread, shared memory per
        block, barriers), writing the outputs into ``arrays`` in place."""
        self._check(arrays)
        from vtakit.compiler.gpu_emulator import emulate  # noqa: PLC0415 (the emulator is only needed here)

        emulate(self.program, arrays)

    def _load(self) -> Any:
        from vtakit.compiler.backend.nvptx.driver import cuda_driver  # noqa: PLC0415 (only where a GPU runs it)

        with self._load_lock:
            if self._loaded is None:
                driver = cuda_driver()
                driver.make_current()
                module = driver.load_module(self.ptx)
                self._loaded = (driver, [driver.function(module, k.name) for k in self.kernels])
            return self._loaded

    def _check(self, arrays: Sequence[Any], device_arrays: bool = False) -> None:
        params = self.program.params
        if len(arrays) != len(params):
            raise ArgumentError(f"{self.name} takes {len(params)} arguments "
                                f"({', '.join(b.name for b in params)}), got {len(arrays)}")
        for k, (buf, array) in enumerate(zip(params, arrays)):
            where = f"{self.name}: argument {k} ({buf.name!r})"
            if device_arrays and isinstance(array, CUDAArray):
                array._live()
            elif not isinstance(array, np.ndarray):
                kinds = "a numpy array or a CUDAArray" if device_arrays else "a numpy array"
                raise ArgumentError(f"{where} must be {kinds}, got {type(array).__name__}")
            want = np.dtype(bool if buf.dtype == "bool" else buf.dtype)
            shape = tuple(int(e.value) for e in buf.shape)
            if array.dtype != want:
                raise ArgumentError(f"{where} has dtype {array.dtype}, expected {want}")
            if array.shape != shape:
                raise ArgumentError(f"{where} has shape {array.shape}, expected {shape}")
            if isinstance(array, CUDAArray):
                continue
            if not array.flags.c_contiguous:
                raise ArgumentError(f"{where} must be C-contiguous (use np.ascontiguousarray)")
            if buf.data in self._written and not array.flags.writeable:
                raise ArgumentError(f"{where} is written by the kernels but the array is read-only")


def _written(program: DeviceProgram) -> set[ir.Var]:
    written: set[ir.Var] = set()
    for kernel in program.kernels:
        ir.walk(kernel.body, lambda n: isinstance(n, ir.BufferStore) and written.add(n.buffer.data))
    return written


# ---------------------------------------------------------------------------- building
_cache: dict[str, CUDAModule] = {}
_cache_lock = threading.Lock()
_targets_ready = False


def _target_machine(target: CUDATarget) -> llvm.TargetMachine:
    global _targets_ready
    with rt.LLVM_LOCK:
        if not _targets_ready:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _targets_ready = True
        return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=target.arch, features=target.ptx_feature,
                                                                      opt=3)


def build_cuda(func: ir.PrimFunc, target: str | CUDATarget = "cuda") -> CUDAModule:
    """Compile the lowered function ``func`` for ``target`` (PTX; cached by content)."""
    if not isinstance(func, ir.PrimFunc):
        raise CompileError(f"build_cuda expects an ir.PrimFunc, got {type(func).__name__}")
    target = parse_target(target)
    for buf in func.params:
        if not all(isinstance(e, ir.IntImm) for e in buf.shape) or buf.strides:
            raise CompileError(f"parameter {buf.name!r} has shape {tuple(str(e) for e in buf.shape)}"
                               f"{' and strides' if buf.strides else ''}; the cuda target supports constant "
                               "shapes of compact arrays only")
    key = hashlib.sha256(f"{fingerprint(func)}|{target}".encode()).hexdigest()
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    start = time.perf_counter()
    with progress(f"building {func.name} for {target}", delay=QUICK_WORK_DELAY_SECONDS) as bar:
        bar.step("host/device split and GPU passes")
        program = device_program(func, target)
        bar.step("NVPTX code generation")
        machine = _target_machine(target)
        with rt.LLVM_LOCK:
            generated = generate_nvptx(program, str(machine.target_data))
            try:
                module = llvm.parse_assembly(generated)
                module.verify()
            except RuntimeError as exc:  # a code generator bug, reported with the IR that caused it
                raise CompileError(f"LLVM rejected the NVPTX code generated for {func.name!r}: {exc}\n{func}") from None
            bar.step("LLVM optimisation")
            options = llvm.create_pipeline_tuning_options(speed_level=3)
            options.loop_unrolling = True
            passes = llvm.create_pass_builder(machine, options)
            passes.getModulePassManager().run(module, passes)
            bar.step("PTX emission")
            ptx = machine.emit_assembly(module)
            optimised = str(module)
    result = CUDAModule(func, program, target, optimised, ptx, time.perf_counter() - start)
    with _cache_lock:
        return _cache.setdefault(key, result)


def cuda_lowering(config: Any = None) -> PassContext:
    """The PassContext that lowers for the cuda target: the current one plus the GPU memory scopes."""
    current = PassContext.current()
    return PassContext(config=dict(current.config), memory_scopes={**current.memory_scopes, **GPU_SCOPES},
                       disabled_pass=current.disabled_pass, opt_level=current.opt_level)


def cuda_target_builder(s: Any, args: Sequence[Any], name: str, config: Any = None,
                        target: str = "cuda") -> CUDAModule:
    """``vtakit.build(s, args, target="cuda ...")``: lower the schedule (unless already lowered) and compile."""
    if config is not None:
        raise CompileError(f"target {target!r} takes no config, got a {type(config).__name__}; the GPU architecture "
                           "goes in the target string ('cuda -arch=sm_90')")
    cuda = parse_target(target)
    if isinstance(s, ir.PrimFunc):
        func = s
    else:
        from vtakit.compiler.lower import lower  # noqa: PLC0415 (lowering imports te, which is heavier)

        with cuda_lowering():
            func = lower(s, args, name=name)
    return build_cuda(func, cuda)


for _kind in TARGET_KINDS:
    register_target(_kind, cuda_target_builder)
    register_lowering(_kind, cuda_lowering)
