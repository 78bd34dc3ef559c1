"""``vtakit.build(s, args, target="vta", config=cfg)``: the VTA pass pipeline and the built module.

:func:`build_config` is the :class:`~vtakit.compiler.transform.PassContext` of VTA's
``vta.build_config``: the SRAM scopes of the configuration and the passes per phase

* phase 1 (after storage flattening): LoopPartition (:func:`partition_tails`), InjectDMAIntrin,
  StorageReuse over the SRAM scopes (element-wise stages write in place, VTA's EarlyRewrite),
  InjectALUIntrin (ALU micro-op loops), LiftAttrScope of the coprocessor scopes, FuseGemmEpilogue
  (:mod:`~vtakit.compiler.vta.gemm_epilogue`: BIAS_PRELOAD / GEMM_OUT_REQUANT), CoProcSync;
* phase 2 (after virtual-thread injection and the scope capacity check): FoldUopLoop.

``with build_config(cfg): vtakit.lower(s, args)`` shows the DMA, micro-op and token intrinsics.
The built :class:`VTAModule` holds a :class:`ProgramTemplate`; calling it with device arrays
relocates the template onto them, places the micro-op image and runs it on the arrays' device.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.targets import register_lowering, register_target
from vtakit.compiler.lower.loop_partition import partition_loops
from vtakit.compiler.lower.simplify import simplify_func
from vtakit.compiler.lower.storage_reuse import storage_reuse_pass
from vtakit.compiler.transform import PassContext
from vtakit.compiler.vta.alu import in_place_accepts, inject_alu_intrin
from vtakit.compiler.vta.codegen import generate
from vtakit.compiler.vta.coproc_sync import inject_coproc_sync
from vtakit.compiler.vta.dma import inject_dma_intrin
from vtakit.compiler.vta.env import VTAEnv, get_env
from vtakit.compiler.vta.gemm_epilogue import fuse_gemm_epilogue
from vtakit.compiler.vta.lift import lift_coproc_scopes
from vtakit.compiler.vta.uop_fold import fold_uop_loops
from vtakit.errors import ArgumentError, CompileError
from vtakit.hw.config import VTAConfig
from vtakit.progress import QUICK_WORK_DELAY_SECONDS, progress
from vtakit.runtime.device import DeviceArray
from vtakit.runtime.template import ProgramTemplate, instantiate
from vtakit.sim.program import Program, Segment
from vtakit.sim.stats import RunStats

__all__ = ["build_config", "lower", "build", "VTAModule"]


def partition_tails(func: ir.PrimFunc) -> ir.PrimFunc:
    """Peel the tail iterations of splits that do not divide off their loops (LoopPartition), then
    simplify: the main part and each tail are loop nests of constant extents without guards, as
    the DMA, ALU and micro-op passes need (a tail tile is a smaller tile). Dividing splits are
    left as they are."""
    return simplify_func(partition_loops(func))


def build_config(config: VTAConfig | VTAEnv | None = None) -> PassContext:
    """The PassContext that lowers schedules for the accelerator of ``config``."""
    env = config if isinstance(config, VTAEnv) else get_env(config)
    reuse = storage_reuse_pass(env.memory_scopes, in_place_accepts(env.config.alu_mul, env.config.alu_requant))
    passes = [(1, partition_tails), (1, inject_dma_intrin(env)), (1, reuse), (1, inject_alu_intrin(env)),
              (1, lift_coproc_scopes), (1, fuse_gemm_epilogue(env)), (1, inject_coproc_sync), (2, fold_uop_loops)]
    return PassContext(config={"tir.add_lower_pass": passes}, memory_scopes=dict(env.memory_scopes))


def lower(s: Any, args: Sequence[Any], config: VTAConfig | VTAEnv | None = None, name: str = "main") -> ir.PrimFunc:
    """``vtakit.lower`` with the VTA passes (VTA's ``vta.lower``): the IR with DMA, micro-op and
    dependence-token intrinsics."""
    from vtakit.compiler.lower import lower as lower_schedule  # noqa: PLC0415

    with build_config(config):
        return lower_schedule(s, args, name=name)


class VTAModule:
    """A compiled function for the accelerator: ``mod(*device_arrays) -> RunStats``."""

    def __init__(self, func: ir.PrimFunc, template: ProgramTemplate, env: VTAEnv) -> None:
        self.func = func
        self.template = template
        self.env = env

    @property
    def config(self) -> VTAConfig:
        return self.env.config

    def get_source(self) -> str:
        """The lowered loop IR and the instruction template."""
        return f"{self.func}\n\n; program template\n{self.template.disasm()}"

    def _check(self, arrays: Sequence[Any]) -> Any:
        """The device of ``arrays`` when they fit this module's parameters; ArgumentError otherwise."""
        params = self.func.params
        if len(arrays) != len(params):
            raise ArgumentError(f"{self.func.name} takes {len(params)} arrays ({', '.join(p.name for p in params)}), "
                                f"got {len(arrays)}")
        device = None
        for k, (buf, arr) in enumerate(zip(params, arrays)):
            if not isinstance(arr, DeviceArray):
                raise ArgumentError(f"argument {k} ({buf.name}): expected a device array (Device.array), got "
                                    f"{type(arr).__name__}")
            device = device or arr.device
            if arr.device is not device:
                raise ArgumentError(f"argument {k} ({buf.name}) lives on another device than argument 0")
            shape = tuple(int(s.value) for s in buf.shape)
            if tuple(arr.shape) != shape or arr.dtype != np.dtype(buf.dtype):
                raise ArgumentError(f"argument {k} ({buf.name}): expected shape {shape} and dtype {buf.dtype}, got "
                                    f"{tuple(arr.shape)} {arr.dtype}")
            arr._check_live()
        if device.config != self.config:
            raise ArgumentError(self.config.mismatch(device.config, self.func.name, "the device"))
        return device

    def program_for(self, *arrays: DeviceArray) -> Program:
        """The program for these arrays, registered on their device (its micro-op image placed there)."""
        device = self._check(arrays)
        segments = [Segment(a.phys_addr, a.numpy().tobytes(), p.name) for a, p in zip(arrays, self.func.params)]
        return instantiate(self.template, device, [a.phys_addr for a in arrays], self.func.name,
                           [p.name for p in self.func.params], segments)

    def __call__(self, *arrays: DeviceArray) -> RunStats:
        program = self.program_for(*arrays)
        return arrays[0].device.run(program)


def build(s: Any, args: Sequence[Any], name: str = "main", config: Any = None, target: str = "vta") -> VTAModule:
    """The ``vta`` target builder (see :mod:`vtakit.compiler.build`)."""
    if config is not None and not isinstance(config, (VTAConfig, VTAEnv)):
        raise CompileError(f"target vta: config must be a VTAConfig, got {type(config).__name__}")
    env = config if isinstance(config, VTAEnv) else get_env(config)
    from vtakit.compiler.lower import lower  # noqa: PLC0415

    with build_config(env):
        func = s if isinstance(s, ir.PrimFunc) else lower(s, args, name=name)
    with progress(f"generating {name}", delay=QUICK_WORK_DELAY_SECONDS) as bar:
        bar.step("running the host code, emitting instructions")
        template = generate(func, env)
    return VTAModule(func, template, env)


register_target("vta", build)
register_lowering("vta", build_config)
