"""The saved network module file (``.vtapkg``) that ``NetModule.save`` writes and ``vtakit.graph.load`` reads.

File format, version 1: a zip archive holding

- ``meta.json``: ``{"format": "vtakit-netmodule", "version": 1, "target": "llvm", "cpu": ...,
  "plan": ..., "kernels": [...], "constants": [...]}``. ``cpu`` is the CPU the kernels were
  compiled for (triple, CPU name, features); ``plan`` is the executor's plan
  (:meth:`vtakit.runtime.graph_executor.Plan.to_json`: every value's shape, dtype and arena offset,
  the steps with their kernel index and arguments, inputs, outputs, arena size); ``kernels`` gives
  each kernel's entry symbol and parameters; ``constants`` lists the constant names in order;
- ``kernels/<i>.o``: kernel *i*'s relocatable object code;
- ``constants.npz``: constant *j* stored as ``c<j>`` (numpy, no pickles).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.atomic import atomic_write
from vtakit.compiler.backend.llvm_object import KernelObject, target_id
from vtakit.errors import GraphError
from vtakit.runtime.graph_executor import Plan

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Package", "write_package", "read_package"]

FORMAT_NAME = "vtakit-netmodule"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Package:
    """The contents of a saved module."""

    target: str
    plan: Plan
    kernels: list[KernelObject]
    constants: dict[str, np.ndarray]


def write_package(path: str | os.PathLike, package: Package) -> None:
    """Write ``package`` to ``path`` (atomically)."""
    path = Path(path)
    kernels = package.kernels
    if not all(isinstance(k, KernelObject) for k in kernels):
        raise GraphError("this module's kernels have no object code to save (was it built for a CPU target?)")
    names = sorted(package.constants)
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "target": package.target,
            "cpu": kernels[0].target if kernels else target_id(), "plan": package.plan.to_json(),
            "kernels": [k.to_json() for k in kernels], "constants": names}
    buffer = io.BytesIO()
    np.savez(buffer, **{f"c{j}": package.constants[n] for j, n in enumerate(names)})
    with atomic_write(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("meta.json", json.dumps(meta))
        for i, k in enumerate(kernels):
            z.writestr(f"kernels/{i}.o", k.code)
        z.writestr("constants.npz", buffer.getvalue())


def _read(path: Path) -> tuple[dict[str, Any], list[bytes], dict[str, np.ndarray]]:
    what = f"{str(path)!r} is not a vtakit network module (a {FORMAT_NAME} archive, as NetModule.save writes)"
    if not path.is_file():
        raise GraphError(f"network module file {str(path)!r} does not exist")
    try:
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("meta.json"))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
                raise GraphError(f"{what}: its format is {meta.get('format') if isinstance(meta, dict) else None!r}")
            if meta.get("version") != FORMAT_VERSION:
                raise GraphError(f"{str(path)!r}: {FORMAT_NAME} version {meta.get('version')!r} is not supported; "
                                 f"this vtakit reads version {FORMAT_VERSION}")
            codes = [z.read(f"kernels/{i}.o") for i in range(len(meta["kernels"]))]
            with np.load(io.BytesIO(z.read("constants.npz")), allow_pickle=False) as npz:
                constants = {name: npz[f"c{j}"] for j, name in enumerate(meta["constants"])}
    except GraphError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, TypeError) as exc:
        raise GraphError(f"{what}, or it is damaged: {type(exc).__name__}: {exc}") from None
    return meta, codes, constants


def read_package(path: str | os.PathLike) -> Package:
    """The package saved at ``path``, checked to be for this CPU."""
    path = Path(path)
    meta, codes, constants = _read(path)
    host = target_id()
    if meta.get("cpu") != host:
        raise GraphError(f"{str(path)!r} was compiled for the CPU {meta.get('cpu')!r}; this machine is {host!r}. "
                         "Compile the model again on this machine")
    try:
        plan = Plan.from_json(meta["plan"])
        kernels = [KernelObject.from_json(k, code) for k, code in zip(meta["kernels"], codes)]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise GraphError(f"{str(path)!r} is damaged: {type(exc).__name__}: {exc}") from None
    return Package(str(meta.get("target", "llvm")), plan, kernels, constants)
