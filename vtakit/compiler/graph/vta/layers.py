"""Accelerator layers: which ``qnn`` nodes the accelerator can run, and their compiled kernels.

:func:`analyze` looks at one ``qnn.conv2d`` / ``qnn.dense`` / ``qnn.add`` node and returns a
:class:`LayerSpec` (what the accelerator op computes: the workload and the requantisation
immediates) or a string saying why the layer stays on the CPU. :func:`compile_layer` schedules
and builds a spec with :mod:`vtakit.compiler.topi_vta` (knobs from the tuning log when it holds
the workload, else the default tiler, 2 virtual threads) into a
:class:`~vtakit.runtime.template.ProgramTemplate`; identical layers (same workload, knobs and
immediates) share one compiled kernel. Compiling happens while partitioning, so a layer that the
tiler, the scheduler or the code generator rejects falls back to the CPU with that error as its
reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.ops.qnn import RESIDUAL_INPUT
from vtakit.compiler.graph.vta.context import VTABuildContext
from vtakit.errors import VtakitError

__all__ = ["LayerSpec", "LayerKernel", "analyze", "compile_layer", "expand_groups", "ACCEL_OPS", "VTHREADS",
           "MAX_EXPANDED_GROUPS"]

#: the qnn operators the accelerator may run
ACCEL_OPS = ("qnn.conv2d", "qnn.dense", "qnn.add")
#: virtual threads of the default tilings
VTHREADS = 2
#: a conv with at most this many groups runs as one conv whose weight is block-diagonal (the zeros
#: add nothing, so the result is exact; the accelerator does ``group`` times the MACs); more groups
#: (depthwise convolutions) stay on the CPU
MAX_EXPANDED_GROUPS = 4


@dataclass(frozen=True)
class LayerSpec:
    """What an accelerator layer computes (everything its kernel depends on).

    ``args`` are the tuner's task arguments: a conv2d's ``Conv2dWorkload.key``, a dense's
    ``(m, n, k)``, an add's NCHW shape. ``multiplier`` is None, ``"tensor"`` (per channel, MUL),
    ``"shift_add:K"`` (per channel, shift-and-add of K terms without ALU_MUL, K the channels' most
    set bits) or an int immediate (:func:`~vtakit.compiler.topi_vta.epilogue.multiplier_form`);
    ``add`` holds a ``qnn.add``'s ``(lshift_a, lshift_b, addend)``; ``residual`` a conv's fused
    residual ``(residual_lshift, residual_shift)`` (None: no residual input)."""

    kind: str
    args: tuple[int, ...]
    shift: int
    clip: tuple[int, int]
    pre_shift: int = 0
    multiplier: None | str | int = None
    with_addend: bool = True
    add: tuple[int, int, int] = (0, 0, 0)
    residual: tuple[int, int] | None = None

    @property
    def template(self) -> str:
        """The tuning template of the layer (``vta.conv2d``, ``vta.dense``, ``vta.add``)."""
        return f"vta.{self.kind}"

    @property
    def macs(self) -> int:
        if self.kind == "conv2d":
            from vtakit.compiler.topi_vta.workloads import Conv2dWorkload  # noqa: PLC0415

            return Conv2dWorkload.from_key(self.args).macs
        if self.kind == "dense":
            m, n, k = self.args
            return m * n * k
        return 0


@dataclass(frozen=True)
class LayerKernel:
    """A compiled accelerator layer: its knobs (None for ops without any) and program template."""

    spec: LayerSpec
    knobs: Any
    template: Any
    tuned: bool = False


def _constant_input(g: Graph, node: Node, k: int) -> np.ndarray | None | str:
    """Input ``k`` of ``node`` as a constant array, None when absent, or a reason when it is not constant."""
    if len(node.inputs) <= k or not node.inputs[k]:
        return None
    name = node.inputs[k]
    if name not in g.constants:
        return f"input {k} ({name!r}) is not a constant"
    return g.constants[name]


def _requant(g: Graph, node: Node, ctx: VTABuildContext) -> tuple[dict[str, Any], str | None]:
    """The requantisation fields of a conv2d/dense spec, or a reason to stay on the CPU (a
    shift-and-add of more than ``MANY_TERMS`` terms also notes its cost on the layer)."""
    addend, mult = _constant_input(g, node, 2), _constant_input(g, node, 3)
    for what, v in (("addend", addend), ("multiplier", mult)):
        if isinstance(v, str):
            return {}, f"the {what}: {v}"
    fields: dict[str, Any] = {"shift": int(node.attrs["shift"]), "pre_shift": int(node.attrs["pre_shift"]),
                              "clip": tuple(int(c) for c in node.attrs["clip"]), "with_addend": addend is not None}
    if mult is not None:     # MUL (ALU_MUL) or shift-and-add (one term per set bit), immediate or per channel
        from vtakit.compiler.topi_vta.epilogue import MANY_TERMS, multiplier_form, multiplier_terms  # noqa: PLC0415

        fields["multiplier"], reason = multiplier_form(mult, ctx.config.alu_mul)
        if reason:
            return {}, reason
        terms = multiplier_terms(fields["multiplier"], ctx.config.alu_mul)
        if terms > MANY_TERMS:
            _add_layer_note(ctx, node, f"shift-and-add: {terms} terms per output; ALU_MUL or "
                                       f"multiplier_bits={MANY_TERMS} is faster")
    return fields, None


def _add_layer_note(ctx: VTABuildContext, node: Node, note: str) -> None:
    """Add ``note`` to the remarks on how ``node``'s layer runs (once)."""
    key = node.outputs[0]
    notes = [n for n in ctx.layer_notes.get(key, "").split("; ") if n]
    if note not in notes:
        ctx.layer_notes[key] = "; ".join([*notes, note])


def analyze(g: Graph, node: Node, ctx: VTABuildContext) -> LayerSpec | str:
    """The accelerator layer of ``node``, or why it runs on the CPU."""
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload  # noqa: PLC0415

    if node.op not in ACCEL_OPS:
        return f"{node.op} has no accelerator op"
    try:
        if node.op == "qnn.conv2d":
            if tuple(node.attrs["dilations"]) != (1, 1):
                return f"dilation != 1 (dilations={tuple(node.attrs['dilations'])})"
            group = int(node.attrs["group"])
            if group > MAX_EXPANDED_GROUPS:
                return (f"grouped conv (group={group}; at most {MAX_EXPANDED_GROUPS} groups run, as one conv with "
                        "a block-diagonal weight)")
            w = _constant_input(g, node, 1)
            if not isinstance(w, np.ndarray):
                return "the weight is not a constant"
            n, c, h, wd = g.type_of(node.inputs[0]).shape
            co, _, kh, kw = w.shape
            if group > 1:
                ctx.layer_notes[node.outputs[0]] = (f"grouped conv (group={group}) as one conv with a "
                                                    f"block-diagonal weight ({group}x the MACs)")
            wl = Conv2dWorkload(h, wd, c, co, (kh, kw), tuple(int(p) for p in node.attrs["pads"]),
                                tuple(int(s) for s in node.attrs["strides"]), n)
            fields, reason = _requant(g, node, ctx)
            if len(node.inputs) > RESIDUAL_INPUT and node.inputs[RESIDUAL_INPUT]:
                if node.inputs[RESIDUAL_INPUT] in g.constants:
                    return "a fused residual that is a constant"
                fields["residual"] = (int(node.attrs["residual_lshift"]), int(node.attrs["residual_shift"]))
            return reason if reason else LayerSpec("conv2d", wl.key, **fields)
        if node.op == "qnn.dense":
            w = _constant_input(g, node, 1)
            if not isinstance(w, np.ndarray):
                return "the weight is not a constant"
            m, k = g.type_of(node.inputs[0]).shape
            fields, reason = _requant(g, node, ctx)
            return reason if reason else LayerSpec("dense", (m, w.shape[0], k), **fields)
        return _analyze_add(g, node, ctx)
    except VtakitError as exc:
        return str(exc)


def expand_groups(w: np.ndarray, group: int) -> np.ndarray:
    """A grouped conv's ``(O, I/group, KH, KW)`` weight as the ``(O, I, KH, KW)`` weight of one conv:
    block-diagonal, zero where an output channel does not read an input channel."""
    if group == 1:
        return w
    o, cpg = w.shape[:2]
    opg = o // group
    full = np.zeros((o, cpg * group, *w.shape[2:]), w.dtype)
    for k in range(group):
        full[k * opg:(k + 1) * opg, k * cpg:(k + 1) * cpg] = w[k * opg:(k + 1) * opg]
    return full


def _analyze_add(g: Graph, node: Node, ctx: VTABuildContext) -> LayerSpec | str:
    shape = g.type_of(node.inputs[0]).shape
    if len(shape) != 4:
        return f"an add of a {len(shape)}-D tensor (the accelerator adds packed NCHW tensors)"
    if any(i in g.constants for i in node.inputs[:2]):
        return "an add of a constant"
    a = node.attrs
    return LayerSpec("add", tuple(shape), int(a["shift"]), tuple(int(c) for c in a["clip"]),
                     add=(int(a["lshift_a"]), int(a["lshift_b"]), int(a["addend"])))


def _knobs(spec: LayerSpec, ctx: VTABuildContext, use_log: bool = True) -> tuple[Any, bool]:
    """The layer's knobs: the tuning log's best when it holds the workload (and ``use_log``), else
    the default tiler's; and whether they came from the log."""
    from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles, choose_dense_tiles  # noqa: PLC0415
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload  # noqa: PLC0415

    if use_log and ctx.history is not None and len(ctx.history):
        from vtakit.compiler.autotune.dispatch import lookup  # noqa: PLC0415
        from vtakit.compiler.autotune.templates.vta import conv2d_knobs, dense_knobs  # noqa: PLC0415

        with ctx.history:
            cfg = lookup(spec.template, spec.args, target="vta", config=ctx.config)
        if not getattr(cfg, "is_fallback", False):
            return (conv2d_knobs(cfg) if spec.kind == "conv2d" else dense_knobs(cfg)), True
    from vtakit.compiler.topi_vta.epilogue import epilogue_resources  # noqa: PLC0415

    epilogue = epilogue_resources(spec.multiplier, ctx.config.alu_mul, spec.shift,   # shift-and-add: a second tile
                                  ctx.config.alu_requant)
    if spec.kind == "conv2d":
        return choose_conv2d_tiles(ctx.env, Conv2dWorkload.from_key(spec.args), VTHREADS,
                                   spec.residual is not None, epilogue), False
    return choose_dense_tiles(ctx.env, *spec.args, VTHREADS, epilogue), False


def compile_layer(spec: LayerSpec, ctx: VTABuildContext) -> LayerKernel:
    """Schedule and build ``spec`` for the accelerator (once per build for identical layers);
    a :class:`~vtakit.errors.VtakitError` (no tiling fits, a rejected schedule) when it cannot.
    Knobs from the tuning log that fail for this layer's epilogue give way to the default tiler's."""
    if spec in ctx.kernels:
        got = ctx.kernels[spec]
        if isinstance(got, Exception):
            raise got
        return got
    try:
        try:
            kernel = _compile(spec, ctx, use_log=True)
        except VtakitError:
            if ctx.history is None or spec.kind == "add":
                raise
            kernel = _compile(spec, ctx, use_log=False)
    except VtakitError as exc:
        ctx.kernels[spec] = exc
        raise
    ctx.kernels[spec] = kernel
    return kernel


def _compile(spec: LayerSpec, ctx: VTABuildContext, use_log: bool) -> LayerKernel:
    from vtakit.compiler.build import build as build_schedule  # noqa: PLC0415
    from vtakit.compiler.topi_vta.conv2d import conv2d  # noqa: PLC0415
    from vtakit.compiler.topi_vta.dense import dense  # noqa: PLC0415
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload  # noqa: PLC0415

    env = ctx.env
    requant = {"shift": spec.shift, "clip": spec.clip, "with_addend": spec.with_addend,
               "multiplier": spec.multiplier, "pre_shift": spec.pre_shift}
    if spec.kind == "add":
        from vtakit.compiler.topi_vta.add import (add_alu_stages, add_packed, choose_add_tiles,  # noqa: PLC0415
                                                  schedule_add_packed)

        la, lb, addend = spec.add
        tensors, stages = add_packed(env, spec.args, la, lb, addend, spec.shift, spec.clip)
        knobs, tuned = choose_add_tiles(env, spec.args, VTHREADS, len(add_alu_stages(stages))), False
        knobs.check(env, spec.args)
        s = schedule_add_packed(env, tensors, stages, knobs)
    else:
        knobs, tuned = _knobs(spec, ctx, use_log)
        if spec.kind == "conv2d":
            s, tensors = conv2d(env, Conv2dWorkload.from_key(spec.args), knobs, residual=spec.residual, **requant)
        else:
            s, tensors = dense(env, *spec.args, knobs, **requant)
    module = build_schedule(s, tensors, target="vta", config=ctx.config, name=f"vta_{spec.kind}")
    return LayerKernel(spec, knobs, module.template, tuned)
