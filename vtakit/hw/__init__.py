"""The accelerator's hardware: Amaranth RTL (core, shell), Verilog, synthesis reports and the
analytical resource estimate (docs/fpga.md).

``estimate``/``ResourceEstimate`` come from :mod:`vtakit.hw.estimate` (which imports only the
configuration and the part table), so ``vtakit.hw.estimate`` is the function: import the
module's other names with ``from vtakit.hw.estimate import ...``. ``synthesize``/``SynthReport``
(:mod:`vtakit.hw.synth`) are loaded on first use. ``import vtakit.hw`` stays light (no Amaranth).
"""

from __future__ import annotations

from typing import Any

from vtakit.hw.estimate import ResourceEstimate, estimate

__all__ = ["estimate", "ResourceEstimate", "synthesize", "SynthReport"]

_LAZY = {"synthesize": "vtakit.hw.synth", "SynthReport": "vtakit.hw.synth"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vtakit.hw' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
