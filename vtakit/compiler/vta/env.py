"""The accelerator as the compiler sees it: scopes, dtypes, queue ids and intrinsic names.

``get_env(config)`` gives the :class:`VTAEnv` of a :class:`~vtakit.hw.config.VTAConfig` or of a
``vta_config.json`` file (VTA's ``Environment``, with its upper-case names too): tile shapes, the
three SRAM scopes with their capacities (registered per compilation through
``PassContext(memory_scopes=...)``), the pragma names schedules use (``dma_copy``, ``alu``) and
the GEMM tensor intrinsic. The names of the intrinsic calls that the
VTA passes put in the loop IR are collected here so every pass and the code generator agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from vtakit.compiler import ir
from vtakit.compiler.scope import MemoryInfo
from vtakit.errors import ConfigError
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import MemId

__all__ = ["VTAEnv", "get_env", "TVM_NAMES", "VTA_AXIS", "QID_LOAD", "QID_COMPUTE", "QID_STORE", "INP_SCOPE",
           "WGT_SCOPE", "ACC_SCOPE", "UOP_SCOPE", "DMA_COPY", "ALU", "LOAD_2D", "STORE_2D", "UOP_PUSH",
           "DEP_PUSH", "DEP_POP", "UOP_LOOP_BEGIN", "UOP_LOOP_END", "PUSH_GEMM", "PUSH_ALU", "coproc_scope_of",
           "SCOPE_MEM"]

# TVM's ``vta.Environment`` attributes that are VTAConfig's keys or derived sizes, upper-cased
TVM_NAMES = frozenset({
    "TARGET", "HW_VER", "LOG_INP_WIDTH", "LOG_WGT_WIDTH", "LOG_ACC_WIDTH", "LOG_BATCH", "LOG_BLOCK_IN",
    "LOG_BLOCK_OUT", "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE", "LOG_ACC_BUFF_SIZE",
    "INP_WIDTH", "WGT_WIDTH", "ACC_WIDTH", "OUT_WIDTH", "BATCH", "BLOCK_IN", "BLOCK_OUT",
    "UOP_BUFF_SIZE", "INP_BUFF_SIZE", "WGT_BUFF_SIZE", "ACC_BUFF_SIZE", "OUT_BUFF_SIZE",
    "INP_ELEM_BITS", "WGT_ELEM_BITS", "ACC_ELEM_BITS", "OUT_ELEM_BITS",
    "INP_ELEM_BYTES", "WGT_ELEM_BYTES", "ACC_ELEM_BYTES", "OUT_ELEM_BYTES"})

# the node of every coproc_scope / coproc_uop_scope attribute (TVM's ``vta`` IterVar)
VTA_AXIS = ir.Var("vta")
QID_LOAD, QID_COMPUTE, QID_STORE = 1, 2, 3

INP_SCOPE = "local.inp_buffer"
WGT_SCOPE = "local.wgt_buffer"
ACC_SCOPE = "local.acc_buffer"
UOP_SCOPE = "local.uop_buffer"
SCOPE_MEM = {INP_SCOPE: MemId.INP, WGT_SCOPE: MemId.WGT, ACC_SCOPE: MemId.ACC}

DMA_COPY = "dma_copy"   # s[t].pragma(axis, DMA_COPY): the loop nest is a DMA
ALU = "alu"             # s[t].pragma(axis, ALU): the element-wise loop nest runs on the vector ALU

# intrinsic calls in the loop IR (printed by vtakit.lower)
LOAD_2D = "vta.load_buffer_2d"      # (mem, sram_ptr, dram_ptr, y_size, x_size, x_stride, y_pad0, y_pad1, x_pad0, x_pad1)
STORE_2D = "vta.store_buffer_2d"    # (sram_ptr, dram_ptr, y_size, x_size, x_stride)
UOP_PUSH = "vta.uop_push"           # (mode 0 gemm / 1 alu, reset, dst_ptr, src_ptr, wgt_ptr, alu_op, use_imm, imm)
UOP_LOOP_BEGIN = "vta.uop_loop_begin"   # (extent, dst_factor, src_factor, wgt_factor), in SRAM elements
UOP_LOOP_END = "vta.uop_loop_end"
DEP_PUSH = "vta.dep_push"           # (from_qid, to_qid)
DEP_POP = "vta.dep_pop"             # (from_qid, to_qid)
PUSH_GEMM = "VTAPushGEMMOp"         # values of coproc_uop_scope
PUSH_ALU = "VTAPushALUOp"


def coproc_scope_of(s: Any) -> int | None:
    """The queue id of a ``coproc_scope`` attribute statement, else None."""
    if isinstance(s, ir.AttrStmt) and s.key == "coproc_scope" and s.node is VTA_AXIS:
        return int(s.value.value)
    return None


@dataclass(frozen=True)
class VTAEnv:
    """VTA's ``Environment`` for one configuration."""

    config: VTAConfig

    inp_scope = INP_SCOPE
    wgt_scope = WGT_SCOPE
    acc_scope = ACC_SCOPE
    dma_copy = DMA_COPY
    alu = ALU
    target = "vta"          # vtakit.build(s, args, target=env.target, config=env)
    target_host = "llvm"    # where host-side stages run

    @property
    def inp_dtype(self) -> str:
        return f"int{self.config.inp_width}"

    @property
    def wgt_dtype(self) -> str:
        return f"int{self.config.wgt_width}"

    @property
    def acc_dtype(self) -> str:
        return f"int{self.config.acc_width}"

    @property
    def out_dtype(self) -> str:
        return f"int{self.config.out_width}"

    # ------------------------------------------------------------ TVM's upper-case names
    def __getattr__(self, name: str) -> Any:
        """TVM's ``vta.Environment`` names (``env.BATCH``, ``env.LOG_BLOCK_IN``, ``env.INP_ELEM_BYTES``
        ...): the configuration's keys and derived sizes in upper case (:data:`TVM_NAMES`)."""
        if name in TVM_NAMES:
            return getattr(self.config, name.lower())
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *TVM_NAMES})

    @property
    def LOG_BLOCK(self) -> int:  # noqa: N802 (TVM's name)
        """TVM's single block size; only defined when BLOCK_IN equals BLOCK_OUT."""
        if self.config.log_block_in != self.config.log_block_out:
            raise ConfigError(f"LOG_BLOCK is undefined for {self.config.model}: LOG_BLOCK_IN="
                              f"{self.config.log_block_in} differs from LOG_BLOCK_OUT={self.config.log_block_out}")
        return self.config.log_block_in

    @property
    def LOG_OUT_WIDTH(self) -> int:  # noqa: N802 (TVM's name)
        return self.config.log_inp_width

    @property
    def LOG_OUT_BUFF_SIZE(self) -> int:  # noqa: N802 (TVM's name)
        return self.config.log_acc_buff_size + self.LOG_OUT_WIDTH - self.config.log_acc_width

    @property
    def MODEL(self) -> str:  # noqa: N802 (TVM's name)
        """TVM's ``TARGET_BITSTREAM`` string, e.g. ``sim_1x16_i8w8a32_15_15_18_17``."""
        return f"{self.config.target}_{self.config.model}"

    @property
    def batch(self) -> int:
        return self.config.batch

    @property
    def block_in(self) -> int:
        return self.config.block_in

    @property
    def block_out(self) -> int:
        return self.config.block_out

    def lanes(self, scope: str) -> int:
        """Scalars per SRAM entry of ``scope`` (the unit of SRAM addresses)."""
        return {INP_SCOPE: self.batch * self.block_in, WGT_SCOPE: self.block_out * self.block_in,
                ACC_SCOPE: self.batch * self.block_out}[scope]

    def depth(self, scope: str) -> int:
        c = self.config
        return {INP_SCOPE: c.inp_depth, WGT_SCOPE: c.wgt_depth, ACC_SCOPE: c.acc_depth}[scope]

    @cached_property
    def memory_scopes(self) -> dict[str, MemoryInfo]:
        """MemoryInfo of the SRAM scopes: unit = one entry, capacity = the buffer's bits."""
        c = self.config
        out = {}
        for scope, bits, size in ((INP_SCOPE, c.inp_elem_bits, c.inp_buff_size),
                                  (WGT_SCOPE, c.wgt_elem_bits, c.wgt_buff_size),
                                  (ACC_SCOPE, c.acc_elem_bits, c.acc_buff_size)):
            out[scope] = MemoryInfo(unit_bits=bits, max_num_bits=size * 8, max_simd_bits=bits)
        out[UOP_SCOPE] = MemoryInfo(unit_bits=c.uop_elem_bits, max_num_bits=c.uop_buff_size * 8,
                                    max_simd_bits=c.uop_elem_bits)
        return out

    @cached_property
    def gemm(self) -> Any:
        """The GEMM tensor intrinsic (see :mod:`vtakit.compiler.vta.intrin`)."""
        from vtakit.compiler.vta.intrin import gemm_intrin  # noqa: PLC0415

        return gemm_intrin(self)


def get_env(config: VTAConfig | str | os.PathLike[str] | None = None) -> VTAEnv:
    """The environment of ``config``: a :class:`VTAConfig`, the path of a ``vta_config.json``
    file, or None for ``VTAConfig()``."""
    if config is None:
        config = VTAConfig()
    elif isinstance(config, (str, os.PathLike)):
        config = VTAConfig.from_json(config)
    elif not isinstance(config, VTAConfig):
        raise ConfigError(f"get_env expects a VTAConfig, the path of a vta_config.json file or None, "
                          f"got {type(config).__name__} {config!r}")
    return _env_of(config)


@lru_cache(maxsize=None)
def _env_of(config: VTAConfig) -> VTAEnv:
    return VTAEnv(config)
