"""The accelerator backend: VTA's compiler passes, code generation and the built module.

``vtakit.build(s, args, target="vta", config=cfg)`` compiles a TE schedule whose stages use the
SRAM scopes of :func:`get_env` (``env.inp_scope`` ...), the ``env.dma_copy`` / ``env.alu``
pragmas and the ``env.gemm`` tensor intrinsic into a :class:`VTAModule`. See
:mod:`vtakit.compiler.vta.module` for the pass pipeline.
"""

from vtakit.runtime.template import ProgramTemplate, Relocation
from vtakit.compiler.vta.env import VTAEnv, get_env
from vtakit.compiler.vta.module import VTAModule, build, build_config, lower

__all__ = ["VTAEnv", "get_env", "VTAModule", "build", "build_config", "lower", "ProgramTemplate", "Relocation"]
