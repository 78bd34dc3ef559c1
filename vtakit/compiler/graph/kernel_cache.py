"""The persistent kernel cache: compiled graph kernels stored on disk by the content of their workload.

A network build compiles each *unique workload* once (ResNet-18's 20 convolutions are 12 or so
distinct ones), and a second build of the same network, in this process or any later one,
compiles nothing: it loads object code. The key of a kernel is a digest of

- its workload (:func:`workload_of`): the operators of the kernel's group with their attributes,
  the shapes and dtypes of its inputs and outputs and the values of its compile-time constants,
  with value names replaced by positions, so two layers of the same shape share a kernel;
- its schedule template and schedule configuration (``"default"`` today; a tuning log picks
  another, so tuned and default kernels never collide);
- the CPU target (triple, CPU, features) and a digest of the compiler's own source, so an
  upgraded compiler never loads a stale kernel.

Entries are written to a temporary file in the cache directory and renamed into place, so
concurrent builds (threads or processes) never see a partial entry; an entry that does not check
(truncated, or its digest differs) is ignored and rebuilt. The directory is ``cache_dir``, else
``$VTAKIT_CACHE_DIR``, else ``~/.cache/vtakit``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process locking, at worst a kernel is built twice
    fcntl = None  # type: ignore[assignment]

import numpy as np

import vtakit
from vtakit.atomic import atomic_write
from vtakit.compiler.backend.llvm_object import KernelObject, ObjectKernel, load_object
from vtakit.compiler.graph.fused import FUSED
from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.op import get_op

__all__ = ["Workload", "workload_of", "KernelCache", "cache_directory", "compiler_digest"]

_FORMAT = "vtakit-kernel/1"


@dataclass(frozen=True)
class Workload:
    """What a kernel computes, independent of value names: its template and a canonical description."""

    template: str
    description: str  # canonical JSON

    @property
    def args(self) -> tuple[Any, ...]:
        """The description as nested tuples (AutoTVM's workload tuples)."""
        return _tuples(json.loads(self.description))

    def key(self, target: str, schedule: str = "default") -> str:
        text = f"{_FORMAT}|{self.template}|{self.description}|{schedule}|{target}|{compiler_digest()}"
        return hashlib.sha256(text.encode()).hexdigest()


def _tuples(value: Any) -> Any:
    """JSON as hashable nested tuples (an object becomes its sorted (key, value) pairs)."""
    if isinstance(value, dict):
        return tuple((k, _tuples(v)) for k, v in sorted(value.items()))
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _canonical_attr(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ["ndarray", value.dtype.name, list(value.shape), hashlib.sha256(value.tobytes()).hexdigest()[:16]]
    if isinstance(value, (list, tuple)):
        return [_canonical_attr(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def _inner_nodes(node: Node) -> list[Node]:
    return node.attrs["body"].nodes if node.op == FUSED else [node]


def workload_of(graph: Graph, node: Node, inputs: list[str], outputs: list[str], target: str) -> Workload:
    """The workload of the kernel computing ``outputs`` of ``node`` from ``inputs`` (its placeholders)."""
    names: dict[str, str] = {}
    for k, name in enumerate(inputs):
        names[name] = f"i{k}"
    consts = node.attrs["body"].consts if node.op == FUSED else graph.constants
    nodes = []
    for inner in _inner_nodes(node):
        opdef = get_op(inner.op)
        args = []
        for k, name in enumerate(inner.inputs):
            if not name:
                args.append(None)
            elif k in opdef.const_inputs:
                args.append(_canonical_attr(np.asarray(consts[name])))
            else:
                args.append(names.setdefault(name, f"t{len(names)}"))
        outs = [names.setdefault(o, f"t{len(names)}") for o in inner.outputs]
        attrs = {key: _canonical_attr(v) for key, v in sorted(inner.attrs.items())}
        nodes.append([inner.op, args, outs, attrs])
    description = {
        "nodes": nodes,
        "inputs": [[list(graph.type_of(n).shape), graph.type_of(n).dtype] for n in inputs],
        "outputs": [[names[o], list(graph.type_of(o).shape), graph.type_of(o).dtype] for o in outputs],
    }
    anchor = max(_inner_nodes(node), key=lambda n: get_op(n.op).pattern)
    return Workload(f"{target}.{anchor.op}", json.dumps(description, sort_keys=True, separators=(",", ":")))


# the parts of vtakit.compiler whose source decides a CPU kernel's code (relative to vtakit/compiler)
_KERNEL_SOURCES = ("ir.py", "scope.py", "transform.py", "build.py", "arith", "te", "lower", "backend", "ops",
                   "graph/ops", "graph/fused.py", "graph/lowering.py", "graph/passes/alter_layout.py")


@cache
def compiler_digest() -> str:
    """A digest of vtakit's version and of the compiler source that generates kernels: kernels built
    by other code never load."""
    h = hashlib.sha256(str(getattr(vtakit, "__version__", "")).encode())
    root = Path(__file__).resolve().parents[1]
    for part in _KERNEL_SOURCES:
        path = root / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(str(file.relative_to(root)).encode())
            h.update(file.read_bytes())
    return h.hexdigest()[:20]


def cache_directory(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("VTAKIT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "vtakit"


class KernelCache:
    """Kernels by key: in memory (loaded, shared by every build in the process) and on disk (object code)."""

    _loaded: dict[str, ObjectKernel] = {}
    _lock = threading.Lock()

    def __init__(self, cache_dir: str | os.PathLike | None = None) -> None:
        self.root = cache_directory(cache_dir) / "kernels"
        self.hits = self.disk_hits = self.misses = 0

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.o", folder / f"{key}.json"

    def read(self, key: str) -> KernelObject | None:
        """The stored object of ``key``, or None (absent, unreadable or failing its digest)."""
        code_path, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            code = code_path.read_bytes()
        except (OSError, ValueError):
            return None
        if meta.get("format") != _FORMAT or meta.get("sha256") != hashlib.sha256(code).hexdigest():
            return None
        try:
            return KernelObject.from_json(meta["kernel"], code)
        except (KeyError, TypeError, ValueError):
            return None

    def write(self, key: str, kernel: KernelObject, workload: Workload) -> None:
        """Store ``kernel`` (atomically: a temporary file renamed into place; best effort when read-only)."""
        code_path, meta_path = self._paths(key)
        meta = {"format": _FORMAT, "sha256": hashlib.sha256(kernel.code).hexdigest(), "kernel": kernel.to_json(),
                "template": workload.template, "workload": json.loads(workload.description)}
        try:
            code_path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(code_path, kernel.code)
            _atomic_write(meta_path, json.dumps(meta).encode())
        except OSError:
            pass  # a cache that cannot be written only costs a rebuild next time

    def get(self, key: str, build: Callable[[], KernelObject], workload: Workload, wait: bool = True
            ) -> tuple[KernelObject, ObjectKernel] | None:
        """The loaded kernel of ``key``: from memory, else from disk, else ``build()`` (and stored).

        While one process builds a key, others wanting it wait for its entry instead of building it
        again (a lock file per key); with ``wait=False`` they return None at once, so a build can do
        other kernels first and come back."""
        with self._lock:
            loaded = self._loaded.get(key)
        if loaded is not None:
            self.hits += 1
            return loaded.kernel, loaded
        kernel = self.read(key)
        if kernel is None:
            with _KeyLock(self._paths(key)[0].with_suffix(".lock"), wait) as locked:
                if not locked:
                    return None
                kernel = self.read(key)  # built by whoever held the lock before us
                if kernel is None:
                    self.misses += 1
                    kernel = build()
                    self.write(key, kernel, workload)
                else:
                    self.disk_hits += 1
        else:
            self.disk_hits += 1
        loaded = load_object(kernel)
        with self._lock:
            loaded = self._loaded.setdefault(key, loaded)
        return kernel, loaded


    def prebuild(self, key: str, build: Callable[[], KernelObject], workload: Workload) -> None:
        """Build and store ``key`` unless it is stored or another process is building it (helpers of a
        parallel build call this: they store kernels and load none)."""
        if self.read(key) is not None:
            return
        with _KeyLock(self._paths(key)[0].with_suffix(".lock"), False) as locked:
            if locked and self.read(key) is None:
                self.write(key, build(), workload)

    def stored(self, key: str) -> bool:
        return self._paths(key)[1].is_file()


class _KeyLock:
    """An exclusive lock on a file (POSIX ``flock``), held while a key is built; without a usable lock
    file (no fcntl, a read-only cache) it is always granted: the worst case is a duplicate build."""

    def __init__(self, path: Path, wait: bool) -> None:
        self.path, self.wait, self.fd = path, wait, None

    def __enter__(self) -> bool:
        if fcntl is None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return True
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def _atomic_write(path: Path, data: bytes) -> None:
    with atomic_write(path) as f:
        f.write(data)
