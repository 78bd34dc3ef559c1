"""The depths of compute's micro-op pipeline, shared by the RTL and the cycle model.

The RTL (:mod:`vtakit.hw.compute`, :mod:`vtakit.hw.datapath`, :mod:`vtakit.hw.dma`) builds its pipelines
from these numbers and the cycle model (:mod:`vtakit.sim.cycle`, its C engine) times GEMM and ALU
and LOAD instructions with them, so both change together (docs/timing.md §4). Cycles after a micro-op's
issue cycle ``a`` (uop SRAM read):

``a + 1`` registers the micro-op (stage U) and ``b = a + 2`` indexes the SRAMs (stage B); then

* **GEMM**: ``b + 1`` operand registers, ``b + 2`` products (a packed pair's raw product, unpacked at
  the start of the tree), ``b + 3 .. b + 2 + T`` the adder tree
  (``T`` = :func:`gemm_tree_stages`, registered after every :data:`TREE_LEVELS_PER_STAGE` levels),
  ``X = b + 3 + T`` accumulate (ACC dst read in ``X - 2``), ``X + 1`` ACC and OUT written from the
  registered result.
* **ALU**: ``R = b`` (``b + 1`` for a two-cycle micro-op) reads ACC dst, ``R + 1``
  registers the operands, ``X = R + 2`` forwards them into registers (X1), ``X + 1`` executes (X2),
  ``X + 2`` writes ACC and OUT.

This module imports no Amaranth: the cycle model uses it.
"""

from __future__ import annotations

from vtakit.hw.config import VTAConfig

__all__ = ["LOAD_PREP_CYCLES", "TREE_LEVELS_PER_STAGE", "gemm_tree_stages", "gemm_product_latency", "finish_delay"]

#: Cycles a LOAD with ``x_size`` != 0 spends computing its footprint before its first pad write or read
#: request (vtakit/hw/dma.py): its rules in docs/timing.md §4 count from ``s + LOAD_PREP_CYCLES``.
LOAD_PREP_CYCLES = 2

#: Adder-tree levels between two pipeline registers of the GEMM core.
TREE_LEVELS_PER_STAGE = 2


def gemm_tree_stages(config: VTAConfig) -> int:
    """Registered stages of the GEMM adder tree: ``ceil(LOG_BLOCK_IN / 2)``, at least 1."""
    return max(1, -(-config.log_block_in // TREE_LEVELS_PER_STAGE))


def gemm_product_latency(config: VTAConfig) -> int:
    """Cycles from the INP/WGT read data to the registered lane sums: the operand and product
    registers and the tree stages."""
    return 2 + gemm_tree_stages(config)


def finish_delay(config: VTAConfig, alu: bool) -> int:
    """``e - s - M`` of a GEMM (``alu`` false) or ALU instruction with at least one micro-op
    (docs/timing.md §4): the cycles from the last micro-op's index stage to its OUT write."""
    return 5 if alu else 3 + gemm_product_latency(config)
