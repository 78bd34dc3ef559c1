"""``vtakit demo``: the whole flow on a built-in network, with nothing to download.

The default demo takes the digits CNN shipped with the package (a float ONNX model trained on
scikit-learn's digits), quantises it to int8 with vtakit's own post-training flow on a calibration
subset of the training split, compiles it for the accelerator, runs every image of the test split
on a simulator and compares its accuracy with the float model's on the CPU. One image is also
profiled on the cycle model: the accelerator's timing does not depend on the data, so its cycles
are those of every image. ``--model resnet18`` does the same for ResNet-18 with seeded weights
(one image, no labels): the per-layer table and the totals.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vtakit.errors import ArgumentError
from vtakit.hw.config import VTAConfig
from vtakit.progress import progress

__all__ = ["DemoResult", "run_demo", "DEMO_MODELS", "DEMO_BACKENDS"]

DEMO_MODELS = ("digits", "resnet18")
DEMO_BACKENDS = ("fsim", "cycle")


@dataclass
class DemoResult:
    """What a demo measured (``vtakit demo --json`` prints :meth:`to_dict`)."""

    model: str
    backend: str
    config: str                           # the accelerator model string
    images: int
    float_accuracy: float | None          # top-1 on the test split (digits only)
    int8_accuracy: float | None
    top1_agreement: float                 # int8 and float pick the same class
    output_snr_db: float                  # float logits vs int8 logits: 10 log10(signal / error power)
    cycles_per_image: int                 # accelerator cycles of one image (cycle model)
    ideal_cycles_per_image: int
    utilization: float
    accel_seconds_per_image: float        # cycles at the configuration's clock
    cpu_seconds_per_image: float          # host work of one image (CPU layers, packing)
    compile_seconds: float
    run_seconds: float                    # simulating every image on ``backend``
    accelerator_macs_share: float         # share of the network's MACs that ran on the accelerator (each
                                          # layer's "macs": its convs' and matrix products' MACs)
    layers: list[dict[str, Any]] = field(default_factory=list)
    table: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("table")
        return out

    def __str__(self) -> str:
        lines = [f"vtakit demo: {self.model} on the {self.config} accelerator ({self.backend} backend)", ""]
        if self.float_accuracy is not None:
            lines.append(f"  test images           {self.images}")
            lines.append(f"  float accuracy (CPU)  {100 * self.float_accuracy:.2f}%")
            lines.append(f"  int8 accuracy (VTA)   {100 * self.int8_accuracy:.2f}%")
        lines.append(f"  top-1 agreement       {100 * self.top1_agreement:.2f}% (int8 and float pick the same class)")
        lines.append(f"  output SNR            {self.output_snr_db:.1f} dB (int8 logits against float)")
        lines.append(f"  cycles per image      {self.cycles_per_image:,} (ideal {self.ideal_cycles_per_image:,}, "
                     f"utilization {100 * self.utilization:.1f}%)")
        lines.append(f"  accelerator time      {1e3 * self.accel_seconds_per_image:.3f} ms per image at the "
                     "configured clock")
        lines.append(f"  MACs on accelerator   {100 * self.accelerator_macs_share:.1f}%")
        lines.append(f"  compile               {self.compile_seconds:.2f} s; simulate {self.run_seconds:.2f} s")
        return "\n".join(lines + ["", "per-layer profile of one image (cycle model):", self.table])


def run_demo(model: str = "digits", backend: str = "fsim", config: VTAConfig | None = None,
             limit: int | None = None) -> DemoResult:
    """Quantise, compile and run ``model`` (``digits`` or ``resnet18``) on ``backend``; ``limit`` caps
    the number of test images (all 450 by default)."""
    from vtakit import graph  # noqa: PLC0415 (the graph compiler loads onnx: only the demo needs it here)

    if model not in DEMO_MODELS:
        raise ArgumentError(f"unknown demo model {model!r}; expected one of {list(DEMO_MODELS)}")
    if backend not in DEMO_BACKENDS:
        raise ArgumentError(f"demo backend {backend!r} is not one of {list(DEMO_BACKENDS)}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ArgumentError(f"limit must be a positive number of images, got {limit!r}")
    config = config or VTAConfig()
    images, labels, float_graph, calibration = _load(model, limit)
    name = float_graph.inputs[0]

    start = time.perf_counter()
    with progress(f"demo: quantising and compiling {model}", delay=0.5) as bar:
        bar.step("calibrating and quantising to int8")
        qgraph = graph.quantize(float_graph, calibration)
        bar.step("compiling the float model for this CPU")
        float_module = graph.build(float_graph, "llvm")
        bar.step(f"compiling the int8 model for the {config.model} accelerator")
        accel_module = graph.build(qgraph, "vta", config=config)
    compile_seconds = time.perf_counter() - start

    float_top, int8_top, signal, noise = [], [], 0.0, 0.0
    start = time.perf_counter()
    with progress(f"demo: running {len(images)} image(s) on {backend}", total=len(images), unit="image",
                  delay=0.5) as bar:
        for k in range(len(images)):
            x = images[k:k + 1]
            want = float_module.run({name: x})[0].astype(np.float64)
            got = accel_module.run({name: x}, backend=backend)[0].astype(np.float64)
            float_top.append(int(np.argmax(want)))
            int8_top.append(int(np.argmax(got)))
            signal += float(np.sum(want ** 2))
            noise += float(np.sum((got - want) ** 2))
            bar.advance()
    run_seconds = time.perf_counter() - start

    profile = accel_module.profile({name: images[:1]}, backend="cycle")
    layers = profile.to_json()["layers"]
    float_top_a, int8_top_a = np.array(float_top), np.array(int8_top)
    return DemoResult(
        model=model, backend=backend, config=config.model, images=len(images),
        float_accuracy=None if labels is None else float(np.mean(float_top_a == labels)),
        int8_accuracy=None if labels is None else float(np.mean(int8_top_a == labels)),
        top1_agreement=float(np.mean(float_top_a == int8_top_a)),
        output_snr_db=float(10 * np.log10(signal / noise)) if noise else float("inf"),
        cycles_per_image=int(profile.total_cycles), ideal_cycles_per_image=int(profile.ideal_cycles),
        utilization=float(profile.utilization or 0.0), accel_seconds_per_image=float(profile.accel_seconds),
        cpu_seconds_per_image=float(profile.cpu_seconds), compile_seconds=compile_seconds,
        run_seconds=run_seconds, accelerator_macs_share=float(profile.accel_mac_share), layers=layers,
        table=str(profile))


def _load(model: str, limit: int | None) -> tuple[np.ndarray, np.ndarray | None, Any, Any]:
    """The test images, their labels (None without), the float graph and the calibration data."""
    from vtakit import graph  # noqa: PLC0415

    if model == "digits":
        from vtakit.datasets import digits_model_path, load_digits_calibration, load_digits_test  # noqa: PLC0415

        images, labels = load_digits_test()
        if limit is not None:
            images, labels = images[:limit], labels[:limit]
        return images, labels, graph.from_onnx(str(digits_model_path())), load_digits_calibration()
    rng = np.random.default_rng(0)
    float_graph = graph.from_onnx(graph.zoo.resnet18(seed=0))
    shape = float_graph.type_of(float_graph.inputs[0]).shape
    calibration = rng.standard_normal((4, *shape[1:])).astype(np.float32)
    images = rng.standard_normal((limit or 1, *shape[1:])).astype(np.float32)
    return images, None, float_graph, calibration
