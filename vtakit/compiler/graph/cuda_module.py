"""``CudaNetModule``: a network built for the ``cuda`` target, run on a GPU or emulated on the CPU.

Each kernel of the plan is a GPU kernel program (what :func:`vtakit.build` returns for ``cuda``:
its kernels' PTX, their launch geometry, a launch through the CUDA driver and an emulation of the
same lowered kernels). ``run`` launches them where a GPU is present; elsewhere it raises a
:class:`~vtakit.errors.DeviceError` that points to :meth:`CudaNetModule.emulate`, which runs the
whole network with GPU semantics on the CPU (every block and thread; slow, for checking).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from vtakit.compiler.backend.nvptx.driver import cuda_driver
from vtakit.compiler.backend.nvptx.ptxas import PtxasReport, ptxas_check
from vtakit.compiler.graph.module import NetModule
from vtakit.errors import DeviceError
from vtakit.runtime.graph_executor import GraphExecutor

__all__ = ["CudaNetModule"]


class CudaNetModule(NetModule):
    """A :class:`~vtakit.compiler.graph.module.NetModule` whose kernels are GPU kernel programs."""

    @property
    def gpu_kernels(self) -> list[Any]:
        """Each unique kernel program, in plan order (``get_source("ptx")``, ``kernels``, ``emulate``)."""
        return list(self._kernels)

    def ptx(self) -> list[str]:
        """The PTX of each unique kernel program, in plan order."""
        return [k.get_source("ptx") for k in self._kernels]

    def ptxas(self, arch: str = "sm_80") -> list[PtxasReport]:
        """ptxas's report for each kernel program's PTX assembled for ``arch`` (a CompileError with its
        message if it rejects one, or where ptxas is not installed)."""
        return [ptxas_check(ptx, arch) for ptx in self.ptx()]

    def emulate(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """The outputs for ``inputs`` (as for :meth:`run`), every kernel emulated with GPU semantics."""
        executor = GraphExecutor(self.plan, [k.emulate for k in self._kernels], self.constants)
        return executor.run(inputs)

    def _no_gpu(self, what: str) -> None:
        try:
            cuda_driver()
        except DeviceError as exc:
            raise DeviceError(f"{what}: {exc}; for a network module: module.emulate(inputs) runs its kernels with "
                              "GPU semantics on the CPU") from None

    def run(self, inputs: Mapping[str, Any] | Sequence[Any], **kw: Any) -> list[np.ndarray]:
        """The outputs for ``inputs``, the kernels launched on the GPU."""
        self._no_gpu("run")
        return super().run(inputs, **kw)

    def debug_run(self, inputs: Mapping[str, Any] | Sequence[Any], **kw: Any) -> dict[str, np.ndarray]:
        self._no_gpu("debug_run")
        return super().debug_run(inputs, **kw)

    def profile(self, inputs: Mapping[str, Any] | Sequence[Any], **kw: Any) -> Any:
        self._no_gpu("profile")
        return super().profile(inputs, **kw)
