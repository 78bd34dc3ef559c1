"""Tuning templates and tasks (AutoTVM's ``task/task.py``).

A *template* is a schedule function written against a config (``cfg``): registered by name with
:func:`template` (``"vta.conv2d"``: the prefix is the target), it is called as
``func(cfg, *args, config=vta_config)`` and returns ``(schedule, tensors)``. Every template
carries a numpy *reference* giving operands and the expected output, so each measurement checks
correctness. A *task* is a template applied to one workload (a tuple of ints that serialises to
JSON) on one target and, for the accelerator, one :class:`~vtakit.hw.config.VTAConfig`.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vtakit.compiler.autotune.space import ConfigEntity, ConfigSpace
from vtakit.compiler.topi_vta.workloads import RESNET18
from vtakit.errors import TuningError
from vtakit.hw.config import VTAConfig

__all__ = ["Template", "template", "get_template", "registered_templates", "Task", "create_task",
           "parse_workload", "extract_tasks", "split_trials", "MIN_TRIALS_PER_TASK", "TARGETS"]

#: Targets a template may be written for (the prefix of its name) and how each is measured.
TARGETS = {"vta": "cycles on the cycle model", "llvm": "wall time on the host CPU",
           "cuda": "wall time on a CUDA GPU (trials need one)"}

Reference = Callable[..., tuple[list[np.ndarray], np.ndarray]]


@dataclass(frozen=True)
class Template:
    """A registered template: schedule function, numpy reference, and how outputs are compared."""

    name: str
    func: Callable[..., tuple[Any, list[Any]]]
    reference: Reference
    exact: bool = True    # integer results compare bit for bit; float ones with a tolerance

    @property
    def target(self) -> str:
        return self.name.split(".", 1)[0]


_TEMPLATES: dict[str, Template] = {}


def template(name: str, *, reference: Reference, exact: bool = True,
             override: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func(cfg, *args, config=None) -> (schedule, tensors)`` as template ``name``.

    ``reference(*args, config=None, seed=0)`` returns ``(operands, expected_output)`` as numpy
    arrays in the order of ``tensors`` (the output last)."""
    target = name.split(".", 1)[0] if "." in name else ""
    if target not in TARGETS:
        raise TuningError(f"template name {name!r} must start with a target prefix, one of "
                          f"{[t + '.' for t in TARGETS]}")

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if name in _TEMPLATES and not override and _TEMPLATES[name].func is not func:
            raise TuningError(f"template {name!r} is already registered (pass override=True to replace it)")
        _TEMPLATES[name] = Template(name, func, reference, exact)
        return func

    return register


def get_template(name: str) -> Template:
    if name not in _TEMPLATES:
        raise TuningError(f"unknown template {name!r}; registered: {registered_templates()}")
    return _TEMPLATES[name]


def registered_templates() -> list[str]:
    return sorted(_TEMPLATES)


@dataclass
class Task:
    """A template on one workload, target and (for ``vta``) configuration.

    ``count`` is how many layers of a network use the task (:func:`extract_tasks`; 1 otherwise);
    it is not part of the task's identity (:meth:`key`)."""

    name: str
    args: tuple[int, ...]
    target: str
    config: VTAConfig | None = None
    _space: ConfigSpace | None = field(default=None, repr=False, compare=False)
    count: int = field(default=1, compare=False)

    @property
    def template(self) -> Template:
        return get_template(self.name)

    @property
    def config_space(self) -> ConfigSpace:
        """The template's space for this workload (built once, by running the template on it)."""
        if self._space is None:
            space = ConfigSpace()
            self.template.func(space, *self.args, config=self.config)
            empty = [name for name, knob in space.knobs.items() if not len(knob)]
            if empty or not space.knobs:
                raise TuningError(f"template {self.name!r} on workload {list(self.args)} has an empty config space"
                                  + (f": knob(s) {empty} have no choices" if empty else ": it defines no knobs"))
            self._space = space
        return self._space

    @property
    def flop(self) -> int:
        return self.config_space.flop

    @property
    def macs(self) -> int:
        """Multiply-accumulates of one run of the task (half its ``flop``)."""
        return self.flop // 2

    @property
    def weight(self) -> int:
        """The task's share of a network: ``count`` x :attr:`macs` (how :func:`split_trials` splits a budget)."""
        return self.count * self.macs

    def instantiate(self, cfg: ConfigEntity) -> tuple[Any, list[Any]]:
        """``(schedule, tensors)`` of config ``cfg``."""
        return self.template.func(cfg, *self.args, config=self.config)

    def reference(self, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
        return self.template.reference(*self.args, config=self.config, seed=seed)

    @property
    def workload(self) -> list[Any]:
        return [self.name, list(self.args)]

    @property
    def config_dict(self) -> dict[str, Any] | None:
        return None if self.config is None else self.config.to_dict()

    def key(self) -> str:
        """What identifies the task in logs: template, workload, target and configuration."""
        return json.dumps([self.name, list(self.args), self.target, self.config_dict], sort_keys=True)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_space"] = None   # rebuilt where it is needed: spaces hold filter closures
        return state

    def __str__(self) -> str:
        return f"{self.name}{tuple(self.args)} on {self.target}"


def create_task(template_name: str, workload: Any, target: str | None = None,
                config: VTAConfig | None = None) -> Task:
    """The task of ``template_name`` on ``workload`` (a tuple of ints, or a spec string such as
    ``"resnet18.C5"``, ``"conv2d:56,56,64,64,3,1,1"``, ``"dense:64,256,256"``)."""
    tmpl = get_template(template_name)
    target = target or tmpl.target
    if target != tmpl.target:
        raise TuningError(f"template {template_name!r} is for target {tmpl.target!r}, not {target!r}")
    if isinstance(workload, str):
        kind, args = parse_workload(workload)
        if template_name.split(".", 1)[1] != kind:
            raise TuningError(f"workload {workload!r} is a {kind}; template {template_name!r} needs a "
                              f"{template_name.split('.', 1)[1]}")
    else:
        args = tuple(workload)
    if not args or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
        raise TuningError(f"a workload is a tuple of ints, got {workload!r}")
    if target == "vta":
        config = config or VTAConfig()
    elif config is not None:
        raise TuningError(f"target {target!r} takes no VTAConfig (got {config.model})")
    task = Task(template_name, tuple(int(a) for a in args), target, config)
    task.config_space  # noqa: B018 -- build it now, so a bad workload fails here
    return task


_WORKLOAD_ARITY = {"conv2d": ("H", "W", "CI", "CO", "K", "PAD", "STRIDE"), "dense": ("M", "N", "K")}


def parse_workload(spec: str) -> tuple[str, tuple[int, ...]]:
    """``"resnet18.C5"`` | ``"conv2d:H,W,CI,CO,K,PAD,STRIDE"`` | ``"dense:M,N,K"`` -> (op kind, args)."""
    if spec.startswith("resnet18."):
        layer = spec.split(".", 1)[1]
        if layer not in RESNET18:
            raise TuningError(f"unknown workload {spec!r}; expected one of {['resnet18.' + k for k in RESNET18]}")
        wl = RESNET18[layer]
        return "conv2d", (wl.h, wl.w, wl.ci, wl.co, wl.kh, wl.pad_top, wl.stride_h)   # square, symmetric
    kind, _, rest = spec.partition(":")
    if kind not in _WORKLOAD_ARITY:
        raise TuningError(f"unknown workload {spec!r}; expected resnet18.C2..C11, "
                          + " or ".join(f"{k}:{','.join(v)}" for k, v in _WORKLOAD_ARITY.items()))
    names = _WORKLOAD_ARITY[kind]
    try:
        args = tuple(int(v) for v in rest.split(","))
    except ValueError:
        args = ()
    if len(args) != len(names) or any(a < 0 for a in args):
        raise TuningError(f"workload {spec!r}: expected {kind}:{','.join(names)} ({len(names)} non-negative ints)")
    return kind, args


# ---------------------------------------------------------------------------- networks
#: The fewest trials :func:`split_trials` gives a task (all of its space when that is smaller).
MIN_TRIALS_PER_TASK = 16


def _is_quantized(graph: Any) -> bool:
    return any(node.op.startswith("qnn.") for node in graph.nodes)


def extract_tasks(graph_or_path: Any, target: str = "vta", config: VTAConfig | None = None, calibration: Any = None,
                  *, input_shapes: dict[str, Sequence[int]] | None = None, opt_level: int = 3,
                  disabled_passes: Sequence[str] = ()) -> list[Task]:
    """The unique tuning tasks of a network, each with ``count`` (its layers) and ``weight``.

    ``graph_or_path`` is a :class:`vtakit.graph.Graph`, an ONNX ``ModelProto`` or the path of an
    ``.onnx`` file (imported with ``input_shapes``). A float model is quantised first with
    ``calibration`` (what :func:`vtakit.graph.quantize` takes: an ``.npz`` path, arrays keyed by input
    name, ...); an int8 one (QDQ, or already quantised) needs none. The tasks are the accelerator
    layers that ``vtakit.graph.build(graph, target, config=config)`` compiles with a tunable template
    (``vta.conv2d``, ``vta.dense``), in network order, with the configuration ``config``
    (``VTAConfig()`` when None): tuning them into a log and building with ``tuning_log=`` applies
    the log's best config to every layer of the task. Only ``target="vta"`` has tunable network
    layers: the CPU graph target's kernels take no tuning log."""
    from vtakit.compiler import graph as vg  # noqa: PLC0415 -- the graph compiler (onnx) loads only when used

    if target not in TARGETS:
        raise TuningError(f"unknown target {target!r}; expected one of {sorted(TARGETS)}")
    g = graph_or_path
    where = "the graph"
    if isinstance(g, (str, os.PathLike)):
        where = repr(os.fspath(g))
        if not Path(g).is_file():
            raise TuningError(f"model {where} is not a file")
        g = vg.from_onnx(g, input_shapes=input_shapes)
    elif type(g).__name__ == "ModelProto":
        g = vg.from_onnx(g, input_shapes=input_shapes)
    elif not isinstance(g, vg.Graph):
        raise TuningError(f"extract_tasks takes a vtakit.graph.Graph, an onnx ModelProto or an .onnx path, "
                          f"got {type(g).__name__}")
    if target != "vta":
        raise TuningError(f"the {target} graph target has no tunable schedule templates (vtakit.graph.build(..., "
                          f"target={target!r}) takes no tuning log), so a network has nothing to tune for it; tune "
                          "it for target 'vta', or tune single llvm workloads (vtakit tune --workload)")
    if calibration is not None:
        g = vg.quantize(g, calibration)
    elif not _is_quantized(g):
        raise TuningError(f"{where} is a float model: the accelerator runs int8 networks, so give calibration "
                          "samples (--calibration CALIB.npz, keyed by input name) to quantise it, or a model that "
                          "is already quantised (QDQ)")
    config = config or VTAConfig()
    tasks: dict[str, Task] = {}
    for layer in vg.extract_tasks(g, target, config, opt_level=opt_level, disabled_passes=disabled_passes):
        if layer.template not in _TEMPLATES:
            continue   # accelerator ops without knobs (vta.add): nothing to tune
        try:
            task = create_task(layer.template, layer.workload, target, config)
        except TuningError as exc:
            warnings.warn(f"layer {layer.template}{tuple(layer.workload)} is not tunable: {exc}", stacklevel=2)
            continue
        if task.key() in tasks:
            tasks[task.key()].count += layer.count
        else:
            task.count = layer.count
            tasks[task.key()] = task
    return list(tasks.values())


def split_trials(tasks: Sequence[Task], total: int, minimum: int = MIN_TRIALS_PER_TASK) -> list[int]:
    """Split a budget of ``total`` trials over ``tasks`` in proportion to their ``weight``
    (``count`` x MACs): every task gets at least ``minimum`` trials and at most its whole config
    space (all of it when the space is smaller than ``minimum``); what a capped task cannot use
    goes to the others, rounding gives the largest remainders one more. The sum is ``total`` unless
    the minimums need more, or the spaces hold fewer configs. Deterministic: a rerun with the same
    tasks and budget gives every task the same share, so a log resumes per task."""
    if total < 1 or minimum < 1:
        raise TuningError(f"split_trials: total and minimum must be >= 1, got {total} and {minimum}")
    sizes = [len(t.config_space) for t in tasks]
    weights = [max(t.weight, 1) for t in tasks]
    low = [min(minimum, n) for n in sizes]
    if sum(low) >= total or sum(sizes) <= total:
        return low if sum(low) >= total else sizes

    def clamp(scale: float) -> list[float]:
        return [min(max(scale * w, lo), n) for w, lo, n in zip(weights, low, sizes)]

    lo_scale, hi_scale = 0.0, max(sizes) / min(weights)   # sum(clamp(lo_scale)) < total <= sum(clamp(hi_scale))
    for _ in range(200):   # the scale at which the clamped proportional shares add up to the budget
        mid = (lo_scale + hi_scale) / 2
        lo_scale, hi_scale = (mid, hi_scale) if sum(clamp(mid)) < total else (lo_scale, mid)
    exact = clamp(hi_scale)
    share = [int(x) for x in exact]
    left = total - sum(share)
    for i in sorted(range(len(tasks)), key=lambda i: (share[i] - exact[i], i)):
        if left <= 0:
            break
        if share[i] < sizes[i]:
            share[i] += 1
            left -= 1
    return share
