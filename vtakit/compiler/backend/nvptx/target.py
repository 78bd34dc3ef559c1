"""The ``cuda`` target string and the limits of the GPU it names.

``vtakit.build(..., target="cuda -arch=sm_80")`` follows TVM's spelling: the target kind (``cuda``,
or its alias ``nvptx``), then options. The only option is ``-arch=sm_XY``, the compute capability
the PTX is generated and checked for (default ``sm_80``). Every architecture shares the limits a
kernel must fit without opting in to more: 1024 threads per block, 48 KiB of static shared memory
per block, and the per-index extents of :data:`vtakit.compiler.lower.thread_extent.THREAD_LIMITS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vtakit.compiler.lower.thread_extent import MAX_THREADS_PER_BLOCK, THREAD_LIMITS
from vtakit.errors import CompileError

__all__ = ["CUDATarget", "parse_target", "ARCHS", "TARGET_KINDS", "MAX_SHARED_BYTES", "TRIPLE"]

TRIPLE = "nvptx64-nvidia-cuda"
TARGET_KINDS = ("cuda", "nvptx")
MAX_SHARED_BYTES = 48 * 1024  # static shared memory per block (more needs a dynamic opt-in)
# architecture -> the PTX ISA version the code is emitted in (the oldest one that knows the
# architecture, and no older than 7.8, which CUDA 11.8 and later accept)
ARCHS: dict[str, str] = {"sm_75": "ptx78", "sm_80": "ptx78", "sm_86": "ptx78", "sm_87": "ptx78",
                         "sm_89": "ptx78", "sm_90": "ptx78", "sm_100": "ptx86", "sm_120": "ptx87"}


@dataclass(frozen=True)
class CUDATarget:
    """A parsed ``cuda`` target: the architecture and the launch limits kernels are checked against."""

    arch: str = "sm_80"
    max_threads_per_block: int = MAX_THREADS_PER_BLOCK
    max_shared_bytes: int = MAX_SHARED_BYTES
    thread_limits: dict[str, int] = field(default_factory=lambda: dict(THREAD_LIMITS), hash=False)

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise CompileError(f"unknown CUDA architecture {self.arch!r}; expected one of {', '.join(ARCHS)}")

    @property
    def ptx_feature(self) -> str:
        """The LLVM target feature that selects the PTX ISA version (``+ptx78``)."""
        return "+" + ARCHS[self.arch]

    def __str__(self) -> str:
        return f"cuda -arch={self.arch}"


def parse_target(target: str | CUDATarget) -> CUDATarget:
    """``"cuda"``, ``"cuda -arch=sm_90"`` or ``"nvptx ..."`` as a :class:`CUDATarget`."""
    if isinstance(target, CUDATarget):
        return target
    if not isinstance(target, str) or not target.split():
        raise CompileError(f"a CUDA target is a string such as 'cuda -arch=sm_80', got {target!r}")
    kind, *options = target.split()
    if kind not in TARGET_KINDS:
        raise CompileError(f"target {target!r} is not a CUDA target; expected it to start with "
                           f"{' or '.join(TARGET_KINDS)}")
    arch = "sm_80"
    for option in options:
        key, sep, value = option.partition("=")
        if key == "-arch" and sep:
            arch = value
        else:
            raise CompileError(f"unknown option {option!r} in target {target!r}; the cuda target takes "
                               f"-arch=sm_XY (one of {', '.join(ARCHS)})")
    return CUDATarget(arch)
