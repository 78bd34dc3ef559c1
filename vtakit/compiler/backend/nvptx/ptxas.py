"""``ptxas_check``: NVIDIA's PTX assembler as an independent check of the generated code.

ptxas (from the CUDA toolkit) assembles PTX for one architecture and, with ``-v``, reports each
kernel's resources: registers per thread, static shared memory, spill stores and loads, stack.
It is the same assembler the CUDA driver runs when it loads PTX, so PTX that ptxas accepts loads
on a GPU of that architecture. No GPU is needed to run it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field

from vtakit.compiler.backend.nvptx.target import ARCHS
from vtakit.errors import CompileError

__all__ = ["PtxasReport", "KernelResources", "ptxas_check", "ptxas_path", "parse_ptxas_log"]

_CANDIDATES = ("/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas")
TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel (bytes, except ``registers`` per thread)."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    barriers: int = 0


@dataclass(frozen=True)
class PtxasReport:
    """ptxas's resource report for every kernel of one PTX module."""

    arch: str
    kernels: tuple[KernelResources, ...]
    log: str = field(repr=False)

    def kernel(self, name: str) -> KernelResources:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in the ptxas report; kernels: {[k.name for k in self.kernels]}")

    def to_dict(self) -> dict:
        return {"arch": self.arch, "kernels": [asdict(k) for k in self.kernels]}


def ptxas_path() -> str | None:
    """Where ptxas is (``$PTXAS``, then ``PATH``, then the CUDA toolkit's usual places), or None."""
    for candidate in (os.environ.get("PTXAS"), shutil.which("ptxas"), *_CANDIDATES):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def ptxas_check(ptx: str, arch: str = "sm_80") -> PtxasReport:
    """Assemble ``ptx`` for ``arch`` with ``ptxas -v``; its report, or a CompileError with its
    message when it rejects the code (or is not installed)."""
    if arch not in ARCHS:
        raise CompileError(f"unknown CUDA architecture {arch!r}; expected one of {', '.join(ARCHS)}")
    tool = ptxas_path()
    if tool is None:
        raise CompileError("ptxas is not installed (looked at $PTXAS, PATH and " + ", ".join(_CANDIDATES)
                           + "); install the CUDA toolkit to check PTX")
    with tempfile.TemporaryDirectory(prefix="vtakit_ptxas_") as tmp:
        source = os.path.join(tmp, "module.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        try:
            done = subprocess.run([tool, f"-arch={arch}", "-v", source, "-o", os.path.join(tmp, "module.cubin")],
                                  capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise CompileError(f"ptxas did not finish within {TIMEOUT_SECONDS} s for {arch}") from None
    log = (done.stdout + done.stderr).replace(source, "module.ptx")
    if done.returncode != 0:
        raise CompileError(f"ptxas rejected the PTX for {arch} (exit status {done.returncode}):\n{log.strip()}")
    return PtxasReport(arch, parse_ptxas_log(log), log)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> tuple[KernelResources, ...]:
    """The per-kernel figures of a ``ptxas -v`` log."""
    kernels: list[dict] = []
    for line in log.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            kernels.append({"name": entry.group(1)})
            continue
        if not kernels:
            continue
        current = kernels[-1]
        props = _PROPERTIES.search(line)
        if props:
            current.update(stack_bytes=int(props.group(1)), spill_stores=int(props.group(2)),
                           spill_loads=int(props.group(3)))
        used = _USED.search(line)
        if used:
            current["registers"] = int(used.group(1))
            for key, pattern in (("barriers", _BARRIERS), ("shared_bytes", _SMEM)):
                found = pattern.search(line)
                if found:
                    current[key] = int(found.group(1))
    return tuple(KernelResources(**k) for k in kernels)
