"""The saved network module file (``.vtapkg``) that ``NetModule.save`` writes and ``vtakit.graph.load`` reads.

File format, version 2: a zip archive holding

- ``meta.json``: ``{"format": "vtakit-netmodule", "version": 2, "target": "llvm", "cpu": ...,
  "plan": ..., "kernels": [...], "constants": [...]}``. ``cpu`` is the CPU the kernels were
  compiled for (triple, CPU name, features); ``plan`` is the executor's plan
  (:meth:`vtakit.runtime.graph_executor.Plan.to_json`: every value's shape, dtype, space (host
  arena or accelerator DRAM) and offset, the steps with their kernel index, arguments, target and
  note, inputs, outputs, arena size, DRAM bytes and the accelerator configuration); ``kernels``
  gives each kernel: ``{"kind": "object", "symbol": ..., "params": ..., "target": ...}`` for a CPU
  kernel (its code in ``kernels/<i>.o``), or ``{"kind": "vta", "template": ...}`` for an
  accelerator program template (:meth:`vtakit.runtime.template.ProgramTemplate.to_json` for the
  plan's configuration), or ``{"kind": "layout", "layout_kernel": ..., "params": ...}`` for a named
  CPU layout kernel (:class:`vtakit.runtime.layout_kernels.LayoutKernel`, the pack and unpack
  steps at accelerator borders), or ``{"kind": "cuda", "arch": ..., "kernels": [{"name", "grid",
  "block", "shared_bytes"}, ...]}`` for a GPU kernel program (:class:`vtakit.runtime.gpu_code.GPUKernelCode`,
  its PTX in ``kernels/<i>.ptx``; a loaded one can be read and checked but not run);
  ``constants`` lists the constant names in order;
- ``kernels/<i>.o``: CPU kernel *i*'s relocatable object code; ``kernels/<i>.ptx``: GPU program *i*'s PTX;
- ``constants.npz``: constant *j* stored as ``c<j>`` (numpy, no pickles).

Version 1 (CPU kernels only, no ``kind``) is read too.

Loading links the object code into the process: nothing is compiled, and no ONNX file is needed.
A module saved on another CPU (other features) is refused with both CPUs named. A file that is not
such an archive, is truncated, or whose parts disagree is a :class:`GraphError` saying what is
wrong. ``save`` writes a temporary file beside the destination and renames it into place, so an
error never leaves a partial file.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.atomic import atomic_write
from vtakit.compiler.backend.llvm_object import KernelObject, target_id
from vtakit.errors import ArgumentError, ConfigError, GraphError, ISAError, ProgramError
from vtakit.hw.config import VTAConfig
from vtakit.runtime.gpu_code import GPUKernelCode
from vtakit.runtime.graph_executor import Plan
from vtakit.runtime.layout_kernels import LayoutKernel
from vtakit.runtime.template import ProgramTemplate

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Package", "write_package", "read_package"]

FORMAT_NAME = "vtakit-netmodule"
FORMAT_VERSION = 2
#: The versions this vtakit reads.
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class Package:
    """The contents of a saved module."""

    target: str
    plan: Plan
    kernels: list[KernelObject | ProgramTemplate | LayoutKernel | GPUKernelCode]
    constants: dict[str, np.ndarray]


def _plan_config(plan: Plan, what: str) -> VTAConfig:
    if plan.config is None:
        raise GraphError(f"{what}: the plan has accelerator kernels but names no accelerator configuration")
    try:
        return VTAConfig.from_dict(dict(plan.config))
    except (ConfigError, TypeError, ValueError) as exc:
        raise GraphError(f"{what}: the plan's accelerator configuration is invalid: {exc}") from None


def write_package(path: str | os.PathLike, package: Package) -> None:
    """Write ``package`` to ``path`` (atomically)."""
    path = Path(path)
    kernels = package.kernels
    if not all(isinstance(k, (KernelObject, ProgramTemplate, LayoutKernel, GPUKernelCode)) for k in kernels):
        raise GraphError("this module's kernels have no object code to save (was it built for a CPU target?)")
    objects = [k for k in kernels if isinstance(k, KernelObject)]
    config = _plan_config(package.plan, "cannot save the module") \
        if any(isinstance(k, ProgramTemplate) for k in kernels) else None
    entries = [{"kind": "object", **k.to_json()} if isinstance(k, KernelObject)
               else {"kind": "layout", **k.to_json()} if isinstance(k, LayoutKernel)
               else {"kind": "cuda", **k.to_json()} if isinstance(k, GPUKernelCode)
               else {"kind": "vta", "template": k.to_json(config)} for k in kernels]
    names = sorted(package.constants)
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "target": package.target,
            "cpu": objects[0].target if objects else target_id(), "plan": package.plan.to_json(),
            "kernels": entries, "constants": names}
    buffer = io.BytesIO()
    np.savez(buffer, **{f"c{j}": package.constants[n] for j, n in enumerate(names)})
    with atomic_write(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("meta.json", json.dumps(meta))
        for i, k in enumerate(kernels):
            if isinstance(k, KernelObject):
                z.writestr(f"kernels/{i}.o", k.code)
            elif isinstance(k, GPUKernelCode):
                z.writestr(f"kernels/{i}.ptx", k.ptx)
        z.writestr("constants.npz", buffer.getvalue())


_KINDS = ("object", "vta", "layout", "cuda")


def _kind(entry: Any) -> str:
    kind = entry.get("kind", "object") if isinstance(entry, dict) else None
    if kind not in _KINDS:
        raise GraphError(f"kernel entry kind {kind!r} is not one of {', '.join(map(repr, _KINDS))}")
    return kind


def _read(path: Path) -> tuple[dict[str, Any], list[bytes], dict[str, np.ndarray]]:
    what = f"{str(path)!r} is not a vtakit network module (a {FORMAT_NAME} archive, as NetModule.save writes)"
    if not path.is_file():
        raise GraphError(f"network module file {str(path)!r} does not exist")
    try:
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("meta.json"))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
                raise GraphError(f"{what}: its format is {meta.get('format') if isinstance(meta, dict) else None!r}")
            if meta.get("version") not in READABLE_VERSIONS:
                raise GraphError(f"{str(path)!r}: {FORMAT_NAME} version {meta.get('version')!r} is not supported; "
                                 f"this vtakit reads versions {', '.join(map(str, READABLE_VERSIONS))}")
            if not isinstance(meta.get("kernels"), list):
                raise GraphError(f"{str(path)!r} is damaged: its kernel list is {meta.get('kernels')!r}")
            try:
                kinds = [_kind(k) for k in meta["kernels"]]
            except GraphError as exc:
                raise GraphError(f"{str(path)!r} is damaged: {exc}") from None
            codes = [z.read(f"kernels/{i}.o") if kind == "object" else z.read(f"kernels/{i}.ptx") if kind == "cuda"
                     else b"" for i, kind in enumerate(kinds)]
            with np.load(io.BytesIO(z.read("constants.npz")), allow_pickle=False) as npz:
                constants = {name: npz[f"c{j}"] for j, name in enumerate(meta["constants"])}
    except GraphError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, TypeError, zlib.error) as exc:
        raise GraphError(f"{what}, or it is damaged: {type(exc).__name__}: {exc}") from None
    return meta, codes, constants


def read_package(path: str | os.PathLike) -> Package:
    """The package saved at ``path``, checked to be for this CPU (when it has CPU kernels)."""
    path = Path(path)
    meta, codes, constants = _read(path)
    host = target_id()
    has_objects = any(_kind(k) == "object" for k in meta["kernels"])
    if has_objects and meta.get("cpu") != host:
        raise GraphError(f"{str(path)!r} was compiled for the CPU {meta.get('cpu')!r}; this machine is {host!r}. "
                         "Compile the model again on this machine")
    try:
        plan = Plan.from_json(meta["plan"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise GraphError(f"{str(path)!r} is damaged: its plan: {type(exc).__name__}: {exc}") from None
    config = None
    kernels: list[KernelObject | ProgramTemplate | LayoutKernel | GPUKernelCode] = []
    for i, (entry, code) in enumerate(zip(meta["kernels"], codes)):
        try:
            kind = _kind(entry)
            if kind == "object":
                kernels.append(KernelObject.from_json(entry, code))
                continue
            if kind == "layout":
                kernels.append(LayoutKernel.from_json(entry))
                continue
            if kind == "cuda":
                kernels.append(GPUKernelCode.from_json(entry, code.decode()))
                continue
            if config is None:
                config = _plan_config(plan, f"{str(path)!r} is damaged")
            kernels.append(ProgramTemplate.from_json(entry["template"], config))
        except GraphError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ProgramError, ISAError,
                ArgumentError) as exc:
            raise GraphError(f"{str(path)!r} is damaged: kernel {i}: {type(exc).__name__}: {exc}") from None
    bad = [s.name for s in plan.steps if not isinstance(s.kernel, int) or not 0 <= s.kernel < len(kernels)]
    if bad:
        raise GraphError(f"{str(path)!r} is damaged: step {bad[0]!r} calls a kernel the package does not hold "
                         f"({len(kernels)} kernels)")
    wrong = [s.name for s in plan.steps if s.on_accelerator != isinstance(kernels[s.kernel], ProgramTemplate)]
    if wrong:
        raise GraphError(f"{str(path)!r} is damaged: step {wrong[0]!r} and its kernel disagree on where it runs "
                         "(accelerator steps call program templates, CPU steps object code)")
    missing = [n for n, v in plan.values.items() if (v.offset is None and v.space == "host") and n not in constants]
    if missing:
        raise GraphError(f"{str(path)!r} is damaged: constant {missing[0]!r} is missing from constants.npz")
    return Package(str(meta.get("target", "llvm")), plan, kernels, constants)
