"""The data effect of each VTA instruction on the machine state: the ISA's executable meaning.

:class:`Machine` holds one core's architectural state, i.e. the DRAM image it works on and its
SRAMs (micro-op cache, INP, WGT, ACC and the separate OUT buffer, DESIGN §2.3) with a
"has been written" mask per SRAM, and applies one instruction at a time with :meth:`Machine.apply`.
It knows nothing about modules, queues or time: the functional simulator (``fsim``) wraps it in a
scheduler, and the cycle-accurate simulator calls the same code when an instruction retires, so
the data semantics exist exactly once.

What ``apply`` checks (each a :mod:`vtakit.errors` exception naming the instruction index, the
module and the offending value): legal opcode/memory pairs, flags and fields
(:func:`validate_instruction`), SRAM and DRAM ranges, and reads of SRAM entries never written
during this run. Races are not the machine's business; it reports every access to state shared
between modules (INP, WGT, OUT entries and DRAM bytes) to an optional :class:`AccessObserver`
*before* it mutates anything, which is how ``fsim``'s happens-before checker sees them.

Use on its own (the cycle simulator does exactly this, applying each instruction when it retires)::

    machine = Machine(config, dram)          # fresh, empty SRAMs over a uint8 DRAM image
    for index, insn in enumerate(insns):     # any order consistent with the program's tokens
        machine.apply(insn, index)           # validates, checks ranges/initialisation, mutates
    machine.counters["gemm_counter"]         # VTA's profiler counters

Representation: ``inp`` int8 ``[inp_depth, batch, block_in]``, ``wgt`` int8
``[wgt_depth, block_out, block_in]``, ``acc`` int32 ``[acc_depth, batch, block_out]``, ``out``
int8 like ``acc``, ``uop`` int64 ``[uop_depth, 3]`` (dst, src, wgt), ``dram`` uint8. DRAM element
byte order matches these shapes (ACC little-endian int32).

Performance: every instruction is one vectorised numpy step. GEMM gathers its operands, multiplies
them as a batched float32 matmul (exact: |products| < 2**24) and accumulates repeated destinations
with a segmented sum (wrap-around addition commutes). ALU instructions run vectorised; only when
their micro-ops depend on each other (a later micro-op reads or rewrites an entry an earlier one
wrote) are they split into dependency levels, each level vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from vtakit.errors import MemoryAccessError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, Instruction, MemId, MemInsn, Opcode, Stage
from vtakit.sim.stats import COUNTER_NAMES, STAGE_MODULES

__all__ = ["Machine", "AccessObserver", "DramRows", "validate_instruction", "describe", "POP_QUEUES",
           "PUSH_QUEUES", "QUEUE_NAMES", "MODULE_NAMES", "SHARED_SRAMS"]

MODULE_NAMES = dict(zip(Stage, STAGE_MODULES))
SHARED_SRAMS = ("inp", "wgt", "out")

# Token queues, by index: which module pushes and which pops (reference/vta.md §3.2).
QUEUE_NAMES = ("load->compute", "compute->load", "compute->store", "store->compute")
L2C, C2L, C2S, S2C = range(4)
# The queue each legal flag pops from / pushes to, per module, in the order they are performed
# (pops: prev then next; pushes: prev then next, as VTA's HLS modules do).
POP_QUEUES = {Stage.LOAD: (("pop_next", C2L),),
              Stage.COMPUTE: (("pop_prev", L2C), ("pop_next", S2C)),
              Stage.STORE: (("pop_prev", C2S),)}
PUSH_QUEUES = {Stage.LOAD: (("push_next", L2C),),
               Stage.COMPUTE: (("push_prev", C2L), ("push_next", C2S)),
               Stage.STORE: (("push_prev", S2C),)}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_LEGAL_FLAGS = {stage: frozenset(flag for flag, _ in POP_QUEUES[stage] + PUSH_QUEUES[stage]) for stage in Stage}

_SMALL_ALU_LANES = 1024   # ALU chunks up to this many lanes (micro-ops x batch x block_out) run in Python
_SMALL_GEMM = 64         # GEMM chunks up to this many micro-ops skip the matmul restructuring
_GEMM_CHUNK = 1 << 16   # micro-ops per vectorised GEMM/ALU step (bounds temporary memory)
_SMALL_SEGSUM = 4096     # below this many micro-ops, accumulate with np.add.at


def describe(index: int | None, insn: Instruction) -> str:
    """``instruction 12 (compute: GEMM ...)``: how every message names an instruction."""
    where = f"instruction {index}" if index is not None else "instruction"
    return f"{where} ({MODULE_NAMES[isa.stage_of(insn)]}: {isa.disasm(insn)})"


def validate_instruction(insn: Instruction, config: VTAConfig, index: int | None = None) -> None:
    """Raise :class:`ProgramError` unless ``insn`` is a legal instruction for its module.

    Checks the opcode/memory pair, the dependency flags the module may use, STORE padding and
    ALU MUL availability. Memory ranges are checked when the instruction runs.
    """
    if not isinstance(insn, (MemInsn, GemmInsn, AluInsn, FinishInsn)):
        raise ProgramError(f"instruction {index}: {insn!r} is not a VTA instruction")
    stage = isa.stage_of(insn)
    legal = _LEGAL_FLAGS[stage]
    for flag in _FLAGS:
        if getattr(insn, flag) and flag not in legal:
            raise ProgramError(f"{describe(index, insn)}: flag {flag} is illegal on the {MODULE_NAMES[stage]} module; "
                               f"it may use only {sorted(legal)}")
    if isinstance(insn, MemInsn):
        if insn.x_size == 0:
            return  # a token-only no-op, whatever its memory type
        if insn.opcode == Opcode.LOAD and insn.memory_type == MemId.OUT:
            raise ProgramError(f"{describe(index, insn)}: LOAD of memory type OUT is illegal; loads take UOP, WGT, INP, ACC "
                               "or ACC_8BIT")
        if insn.opcode == Opcode.STORE:
            if insn.memory_type != MemId.OUT:
                raise ProgramError(f"{describe(index, insn)}: STORE of memory type {insn.memory_type.name} is illegal; "
                                   "stores take OUT only")
            pads = (insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
            if any(pads):
                raise ProgramError(f"{describe(index, insn)}: STORE with padding (y_pad_0, y_pad_1, x_pad_0, x_pad_1)={pads}; "
                                   "stores take no padding, expected all zero")
    elif isinstance(insn, AluInsn) and insn.alu_opcode == AluOp.MUL and not config.alu_mul:
        raise ProgramError(f"{describe(index, insn)}: ALU MUL needs a configuration with ALU_MUL enabled "
                           f"({config.model} has ALU_MUL=false)")


@dataclass(frozen=True)
class DramRows:
    """A 2-D DRAM byte footprint: ``rows`` rows of ``row_bytes`` bytes, ``stride`` bytes apart."""

    start: int
    row_bytes: int
    rows: int
    stride: int

    @property
    def end(self) -> int:
        """One past the last byte touched (``start`` when empty)."""
        if self.rows == 0 or self.row_bytes == 0:
            return self.start
        return self.start + (self.rows - 1) * self.stride + self.row_bytes


class AccessObserver(Protocol):
    """Told of every access to state shared between modules, before the machine performs it.

    ``space`` is one of :data:`SHARED_SRAMS`; ``index`` is a slice or an int array of entries.
    """

    def sram(self, space: str, write: bool, index: slice | np.ndarray) -> None: ...

    def dram(self, write: bool, rows: DramRows) -> None: ...


@dataclass(frozen=True)
class _MemSpec:
    """How a LOAD of one memory type maps DRAM bytes onto SRAM entries."""

    sram: str             # target SRAM
    elem_bytes: int       # DRAM bytes per element
    dtype: str            # DRAM element scalar type
    counter: str          # profiler counter
    counted_bytes: int    # bytes counted per element


class Machine:
    """One core's architectural state and the data effect of each instruction.

    ``dram`` (uint8) is used in place and mutated by STOREs. SRAMs start empty: reading an entry
    no instruction of this run has written is a :class:`MemoryAccessError`. ``counters`` holds
    VTA's profiler counters (names in :data:`vtakit.sim.stats.COUNTER_NAMES`).

    Use :meth:`apply` for any instruction (it validates it), or the per-kind methods
    :meth:`load`, :meth:`store`, :meth:`gemm`, :meth:`alu` for instructions already checked with
    :func:`validate_instruction`. ``index`` only labels error messages. FINISH and token-only
    no-ops have no data effect; so does a GEMM/ALU whose loop is empty (``uop_end <= uop_bgn`` or
    a zero iteration count). The SRAM arrays may be read freely; write them only through
    instructions or :meth:`write_sram`, which keeps the written masks and GEMM operand copies in step.
    """

    def __init__(self, config: VTAConfig, dram: np.ndarray, observer: AccessObserver | None = None) -> None:
        if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
            raise MemoryAccessError(f"DRAM image must be a 1-D uint8 numpy array, got "
                                    f"{getattr(dram, 'dtype', type(dram).__name__)} "
                                    f"with shape {getattr(dram, 'shape', None)}")
        c = config
        self.config = config
        self.dram = dram
        self.observer = observer
        self.uop = np.zeros((c.uop_depth, 3), dtype=np.int64)
        self.inp = np.zeros((c.inp_depth, c.batch, c.block_in), dtype=np.int8)
        self.wgt = np.zeros((c.wgt_depth, c.block_out, c.block_in), dtype=np.int8)
        self.acc = np.zeros((c.acc_depth, c.batch, c.block_out), dtype=np.int32)
        self.out = np.zeros((c.out_depth, c.batch, c.block_out), dtype=np.int8)
        self.written = {name: np.zeros(len(getattr(self, name)), dtype=bool)
                        for name in ("uop", "inp", "wgt", "acc", "out")}
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        # float32 copies of INP/WGT feed the GEMM matmul; products of int8 values are exact in float32
        self._inp_f = np.zeros(self.inp.shape, dtype=np.float32)
        self._wgt_t = np.zeros((c.wgt_depth, c.block_in, c.block_out), dtype=np.float32)  # transposed
        self._mem = {
            MemId.UOP: _MemSpec("uop", c.uop_elem_bytes, "<u4", "uop_load_nbytes", c.uop_elem_bytes),
            MemId.INP: _MemSpec("inp", c.inp_elem_bytes, "i1", "inp_load_nbytes", c.inp_elem_bytes),
            MemId.WGT: _MemSpec("wgt", c.wgt_elem_bytes, "i1", "wgt_load_nbytes", c.wgt_elem_bytes),
            MemId.ACC: _MemSpec("acc", c.acc_elem_bytes, "<i4", "acc_load_nbytes", c.acc_elem_bytes),
            MemId.ACC_8BIT: _MemSpec("acc", c.acc8_elem_bytes, "i1", "acc_load_nbytes", c.acc_elem_bytes),
        }
        self._uop_fields = isa.uop_layout(config)

    def write_sram(self, name: str, start: int, values: np.ndarray) -> None:
        """Set SRAM ``name`` entries ``[start, start + len(values))`` directly (tests, debuggers, preloading)."""
        target = slice(start, start + len(values))
        if name not in self.written or start < 0 or target.stop > len(getattr(self, name)):
            raise MemoryAccessError(f"{name!r} entries [{start}, {target.stop}) are not entries of one of the SRAMs "
                                    f"{sorted(self.written)} (depths {[len(getattr(self, n)) for n in sorted(self.written)]})")
        sram = getattr(self, name)
        sram[target] = values
        self.written[name][target] = True
        if name == "inp":
            self._inp_f[target] = sram[target]
        elif name == "wgt":
            self._wgt_t[target] = sram[target].transpose(0, 2, 1)

    # ------------------------------------------------------------------ dispatch
    def apply(self, insn: Instruction, index: int | None = None, *, validate: bool = True) -> None:
        """Perform ``insn``'s data effect, validating it first unless the caller already has."""
        if validate:
            validate_instruction(insn, self.config, index)
        if isinstance(insn, MemInsn):
            if insn.x_size == 0:
                return
            if insn.opcode == Opcode.LOAD:
                self.load(insn, index)
            else:
                self.store(insn, index)
        elif isinstance(insn, GemmInsn):
            self.gemm(insn, index)
        elif isinstance(insn, AluInsn):
            self.alu(insn, index)

    # ------------------------------------------------------------------ DMA
    def _dram_rows(self, insn: MemInsn, elem_bytes: int, index: int | None) -> DramRows:
        rows = DramRows(insn.dram_base * elem_bytes, insn.x_size * elem_bytes, insn.y_size,
                        insn.x_stride * elem_bytes)
        if insn.y_size and (rows.start < 0 or rows.end > self.dram.size):
            raise MemoryAccessError(
                f"{describe(index, insn)}: DRAM bytes [{rows.start:#x}, {rows.end:#x}) out of range; "
                f"DRAM holds {self.dram.size:#x} bytes (dram_base={insn.dram_base}, x_stride={insn.x_stride}, "
                f"y_size={insn.y_size}, x_size={insn.x_size}, {elem_bytes} B per element)")
        return rows

    def _dram_view(self, rows: DramRows) -> np.ndarray:
        """The footprint as a [rows, row_bytes] view of DRAM (rows may overlap when stride < row)."""
        if rows.rows == 1 or rows.stride == rows.row_bytes:   # contiguous: a plain slice
            return self.dram[rows.start:rows.start + rows.rows * rows.row_bytes].reshape(rows.rows, rows.row_bytes)
        base = self.dram[rows.start:]
        return np.lib.stride_tricks.as_strided(base, shape=(rows.rows, rows.row_bytes),
                                               strides=(rows.stride, 1))

    def _sram_range(self, insn: MemInsn, name: str, count: int, index: int | None) -> slice:
        depth = len(getattr(self, name))
        if insn.sram_base < 0 or insn.sram_base + count > depth:
            raise MemoryAccessError(
                f"{describe(index, insn)}: {name.upper()} entries [{insn.sram_base}, {insn.sram_base + count}) "
                f"out of range; the {name.upper()} buffer has {depth} entries")
        return slice(insn.sram_base, insn.sram_base + count)

    def load(self, insn: MemInsn, index: int | None = None) -> None:
        """LOAD: 2-D strided DRAM -> SRAM copy with zero padding written around it."""
        spec = self._mem[insn.memory_type]
        height = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        width = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        target = self._sram_range(insn, spec.sram, height * width, index)
        rows = self._dram_rows(insn, spec.elem_bytes, index)
        if self.observer is not None:
            self.observer.dram(False, rows)
            if spec.sram in SHARED_SRAMS:
                self.observer.sram(spec.sram, True, target)
        raw = self._dram_view(rows)
        sram = getattr(self, spec.sram)
        if insn.memory_type == MemId.UOP:
            words = raw.copy().view("<u4").astype(np.int64)          # [y, x]
            elems = np.stack([(words >> f.offset) & ((1 << f.width) - 1) for f in self._uop_fields], axis=-1)
        else:
            elems = raw.copy().view(spec.dtype).reshape(insn.y_size, insn.x_size, *sram.shape[1:])
        if height == insn.y_size and width == insn.x_size:   # no padding: the elements are the block
            block = elems.reshape(height * width, *sram.shape[1:]).astype(sram.dtype, copy=False)
        else:
            block = np.zeros((height, width, *sram.shape[1:]), dtype=sram.dtype)
            block[insn.y_pad_0:insn.y_pad_0 + insn.y_size, insn.x_pad_0:insn.x_pad_0 + insn.x_size] = elems
            block = block.reshape(height * width, *sram.shape[1:])
        sram[target] = block
        self.written[spec.sram][target] = True
        if spec.sram == "inp":
            self._inp_f[target] = block
        elif spec.sram == "wgt":
            self._wgt_t[target] = block.transpose(0, 2, 1)
        self.counters[spec.counter] += insn.y_size * insn.x_size * spec.counted_bytes

    def store(self, insn: MemInsn, index: int | None = None) -> None:
        """STORE: 2-D strided OUT -> DRAM copy (OUT only, no padding)."""
        elem_bytes = self.config.out_elem_bytes
        source = self._sram_range(insn, "out", insn.y_size * insn.x_size, index)
        rows = self._dram_rows(insn, elem_bytes, index)
        if self.observer is not None:
            self.observer.sram("out", False, source)
            self.observer.dram(True, rows)
        self._require_written("out", source, insn, index)
        data = self.out[source].view(np.uint8).reshape(insn.y_size, insn.x_size * elem_bytes)
        if rows.stride >= rows.row_bytes or rows.rows <= 1:
            self._dram_view(rows)[...] = data
        else:  # overlapping rows: later rows win, as a row-by-row DMA would leave them
            for y in range(rows.rows):
                start = rows.start + y * rows.stride
                self.dram[start:start + rows.row_bytes] = data[y]
        self.counters["out_store_nbytes"] += insn.y_size * insn.x_size * elem_bytes

    # ------------------------------------------------------------------ micro-coded loops
    def _uops(self, insn: GemmInsn | AluInsn, index: int | None) -> np.ndarray:
        depth = self.config.uop_depth
        if insn.uop_end > depth:
            raise MemoryAccessError(f"{describe(index, insn)}: micro-ops [{insn.uop_bgn}, {insn.uop_end}) out of "
                                    f"range; the micro-op cache has {depth} entries")
        self._require_written("uop", slice(insn.uop_bgn, insn.uop_end), insn, index)
        return self.uop[insn.uop_bgn:insn.uop_end]

    def _check_index_ranges(self, insn: GemmInsn | AluInsn, uops: np.ndarray, factors: list[tuple[int, int]],
                            buffers: tuple[str | None, ...], index: int | None) -> None:
        """The largest index the loop generates for each operand must fit its SRAM (None: not read)."""
        peaks = uops.max(axis=0).tolist()
        for column, (name, (f_out, f_in)) in enumerate(zip(buffers, factors)):
            if name is None:
                continue
            depth = len(getattr(self, name))
            top = peaks[column] + (insn.iter_out - 1) * f_out + (insn.iter_in - 1) * f_in
            if top >= depth:
                field = ("dst", "src", "wgt")[column]
                raise MemoryAccessError(
                    f"{describe(index, insn)}: {field} index reaches {top} (micro-op {field}_idx up to "
                    f"{peaks[column]} + ({insn.iter_out}-1)*{f_out} + ({insn.iter_in}-1)*{f_in}); "
                    f"the {name.upper()} buffer has {depth} entries")

    def _index_chunks(self, insn: GemmInsn | AluInsn, uops: np.ndarray, factors: list[tuple[int, int]]):
        """Yield per-operand index arrays shaped [i, j, k], in micro-op order, about _GEMM_CHUNK at a time."""
        if insn.iter_out == 1 and insn.iter_in == 1:
            yield [uops[None, None, :, c] for c in range(len(factors))]
            return
        per_i = insn.iter_in * len(uops)
        step_i = max(1, _GEMM_CHUNK // per_i)
        step_j = insn.iter_in if per_i <= _GEMM_CHUNK else max(1, _GEMM_CHUNK // len(uops))
        for i0 in range(0, insn.iter_out, step_i):
            i = np.arange(i0, min(i0 + step_i, insn.iter_out), dtype=np.int64)[:, None, None]
            for j0 in range(0, insn.iter_in, step_j):
                j = np.arange(j0, min(j0 + step_j, insn.iter_in), dtype=np.int64)[None, :, None]
                yield [uops[:, c][None, None, :] + i * fo + j * fi for c, (fo, fi) in enumerate(factors)]

    def _require_written(self, name: str, where: slice | np.ndarray, insn: Instruction, index: int | None) -> None:
        mask = self.written[name][where]
        if not mask.all():
            first = int(np.flatnonzero(~mask)[0])
            entry = where.start + first if isinstance(where, slice) else int(where[first])
            raise MemoryAccessError(f"{describe(index, insn)}: reads {name.upper()} entry {entry}, which no "
                                    "earlier instruction of this run has written (uninitialised)")

    def gemm(self, insn: GemmInsn, index: int | None = None) -> None:
        """GEMM: acc[dst] += inp[src] . wgt[wgt]^T over the loop nest, or zero acc/out with reset_reg."""
        if insn.uop_end <= insn.uop_bgn or insn.iter_out == 0 or insn.iter_in == 0:
            return
        uops = self._uops(insn, index)
        factors = [(insn.dst_factor_out, insn.dst_factor_in), (insn.src_factor_out, insn.src_factor_in),
                   (insn.wgt_factor_out, insn.wgt_factor_in)]
        self._check_index_ranges(insn, uops, factors, ("acc", None, None) if insn.reset_reg else ("acc", "inp", "wgt"),
                                 index)
        obs = self.observer
        for dst, src, wgt in self._index_chunks(insn, uops, factors):
            dst = dst.ravel()
            if insn.reset_reg:
                if obs is not None:
                    obs.sram("out", True, dst)
                self.acc[dst] = 0
                self.out[dst] = 0
                self.written["acc"][dst] = True
                self.written["out"][dst] = True
                continue
            if obs is not None:
                obs.sram("inp", False, src.ravel())
                obs.sram("wgt", False, wgt.ravel())
                obs.sram("out", True, dst)
            self._require_written("inp", src.ravel(), insn, index)
            self._require_written("wgt", wgt.ravel(), insn, index)
            self._require_written("acc", dst, insn, index)
            touched, sums = self._accumulated_products(dst, src, wgt)
            total = self.acc[touched].astype(np.int64) + sums
            self.acc[touched] = total.astype(np.int32)                    # wraps mod 2**32
            self.out[touched] = total.astype(np.int8)                     # low 8 bits
            self.written["out"][touched] = True
        if not insn.reset_reg:
            self.counters["gemm_counter"] += insn.iter_out * insn.iter_in * len(uops)

    def _accumulated_products(self, dst: np.ndarray, src: np.ndarray, wgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sum of inp[src] . wgt[wgt]^T per destination, for index arrays shaped [i, j, k]: (dsts, int64 sums).

        Addition commutes, so the micro-ops may be combined in any order. Loop axes along which
        the weight index stays put become the rows of one matmul per weight tile (instead of a
        weight gather per micro-op); axes along which the destination stays put are summed
        directly; whatever destinations still repeat go through a segmented sum.
        """
        c = self.config
        if src.size <= _SMALL_GEMM:   # exact int64 products, no search for steady axes
            products = np.matmul(self.inp[src.ravel()].astype(np.int64),
                                 self.wgt[wgt.ravel()].astype(np.int64).transpose(0, 2, 1))
            return _segment_sum(dst.ravel(), products, len(self.acc))
        dst = dst.reshape(src.shape)
        steady_w = _steady_axes(wgt)
        if steady_w:
            moving = [a for a in range(3) if a not in steady_w]
            order = moving + steady_w                                     # weight-moving axes first
            src, dst = src.transpose(order), dst.transpose(order)
            x = self._inp_f[src].reshape(int(np.prod(src.shape[:len(moving)])), -1, c.block_in)
            w = self._wgt_t[wgt[tuple(slice(None) if a in moving else 0 for a in range(3))].ravel()]
            products = np.matmul(x, w).reshape(*src.shape, c.batch, c.block_out)
        else:
            products = np.matmul(self._inp_f[src.ravel()], self._wgt_t[wgt.ravel()]).reshape(
                *src.shape, c.batch, c.block_out)
        steady_d = _steady_axes(dst)
        if steady_d:   # float64 sums of float32 products are exact below 2**53
            products = products.sum(axis=tuple(steady_d), dtype=np.float64)
            dst = dst[tuple(0 if a in steady_d else slice(None) for a in range(3))]
        return _segment_sum(dst.ravel(), products.reshape(-1, c.batch, c.block_out), len(self.acc))

    def alu(self, insn: AluInsn, index: int | None = None) -> None:
        """ALU: acc[dst] = op(acc[dst], imm if use_imm else acc[src]) in strict micro-op order."""
        if insn.uop_end <= insn.uop_bgn or insn.iter_out == 0 or insn.iter_in == 0:
            return
        uops = self._uops(insn, index)
        factors = [(insn.dst_factor_out, insn.dst_factor_in), (insn.src_factor_out, insn.src_factor_in)]
        self._check_index_ranges(insn, uops, factors, ("acc", None) if insn.use_imm else ("acc", "acc"), index)
        for dst, src in self._index_chunks(insn, uops, factors):
            dst, src = dst.ravel(), src.ravel()
            if self.observer is not None:
                self.observer.sram("out", True, dst)
            self._require_written("acc", dst, insn, index)
            if not insn.use_imm:
                # every dst is initialised, so an uninitialised src is not written earlier in this instruction
                self._require_written("acc", src, insn, index)
            self._alu_chunk(insn, dst, None if insn.use_imm else src)
        self.counters["alu_counter"] += insn.iter_out * insn.iter_in * len(uops)

    def _alu_chunk(self, insn: AluInsn, dst: np.ndarray, src: np.ndarray | None) -> None:
        acc = self.acc
        if len(dst) * acc[0].size <= _SMALL_ALU_LANES:
            self._alu_chunk_scalar(insn, dst, src)
            return
        levels = _alu_levels(dst, src, len(acc))
        groups = [slice(None)] if levels is None else _split_by_level(levels)
        for group in groups:
            d = dst[group]
            a = acc[d].astype(np.int64)
            b = np.int64(insn.imm) if src is None else acc[src[group]].astype(np.int64)
            acc[d] = alu_op(insn.alu_opcode, a, b)
        touched = np.unique(dst) if levels is not None else dst
        self.out[touched] = acc[touched].astype(np.int8)
        self.written["out"][touched] = True

    def _alu_chunk_scalar(self, insn: AluInsn, dst: np.ndarray, src: np.ndarray | None) -> None:
        """``_alu_chunk`` for a few micro-ops: Python ints, one micro-op after the other (numpy's
        per-call overhead dominates at this size). Same int32 results as :func:`alu_op`."""
        acc = self.acc
        dsts = dst.tolist()
        srcs = None if src is None else src.tolist()
        entries = sorted(set(dsts) if srcs is None else set(dsts).union(srcs))
        shape = acc.shape[1:]
        rows = dict(zip(entries, acc[entries].reshape(len(entries), -1).tolist()))
        op = insn.alu_opcode
        for k, d in enumerate(dsts):
            a = rows[d]
            if srcs is None:
                rows[d] = [_alu_scalar(op, x, insn.imm) for x in a]
            else:
                rows[d] = [_alu_scalar(op, x, y) for x, y in zip(a, rows[srcs[k]])]
        touched = sorted(set(dsts))
        values = np.array([rows[e] for e in touched], dtype=np.int64).reshape(len(touched), *shape)
        acc[touched] = values.astype(np.int32)
        self.out[touched] = values.astype(np.int8)
        self.written["out"][touched] = True


def _alu_scalar(op: AluOp, a: int, b: int) -> int:
    """:func:`alu_op` on one pair of Python ints (a holds an int32 value); the result wrapped to int32."""
    if op == AluOp.MIN:
        r = a if a < b else b
    elif op == AluOp.MAX:
        r = a if a > b else b
    elif op == AluOp.ADD:
        r = a + b
    elif op == AluOp.SHR:
        shift = ((b & 63) ^ 32) - 32
        r = a >> shift if shift >= 0 else a << -shift
    elif op == AluOp.MUL:
        r = a * (((b & 0xFFFF) ^ 0x8000) - 0x8000)
    else:  # pragma: no cover - AluOp has no other members
        raise ProgramError(f"ALU opcode {op!r} is not one of {list(AluOp)}")
    return ((r + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def alu_op(op: AluOp, a: np.ndarray, b: np.ndarray | np.int64) -> np.ndarray:
    """One ALU operation on int64 operands holding int32 values; the result wrapped to int32."""
    if op == AluOp.MIN:
        r = np.minimum(a, b)
    elif op == AluOp.MAX:
        r = np.maximum(a, b)
    elif op == AluOp.ADD:
        r = a + b
    elif op == AluOp.SHR:
        shift = ((np.asarray(b) & 63) ^ 32) - 32                      # low 6 bits, signed: -32..31
        r = np.where(shift >= 0, a >> np.maximum(shift, 0), a << np.maximum(-shift, 0))
    elif op == AluOp.MUL:
        r = a * (((np.asarray(b) & 0xFFFF) ^ 0x8000) - 0x8000)        # low 16 bits, signed
    else:  # pragma: no cover - AluOp has no other members
        raise ProgramError(f"ALU opcode {op!r} is not one of {list(AluOp)}")
    return r.astype(np.int32)


def _steady_axes(index: np.ndarray) -> list[int]:
    """The axes (of length > 1) along which an index array never changes."""
    return [a for a in range(index.ndim) if index.shape[a] > 1 and not (np.diff(index, axis=a) != 0).any()]


def _segment_sum(dst: np.ndarray, values: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum ``values`` rows that share a ``dst``: (unique dsts, int64 sums), exactly."""
    n = len(dst)
    if n == 1:
        return dst, values.astype(np.int64)
    if n <= _SMALL_SEGSUM:
        touched, inverse = np.unique(dst, return_inverse=True)
        if len(touched) == n:
            sums = np.empty((n, *values.shape[1:]), dtype=np.int64)
            sums[inverse] = values
            return touched, sums
        sums = np.zeros((len(touched), *values.shape[1:]), dtype=np.int64)
        np.add.at(sums, inverse, values.astype(np.int64))
        return touched, sums
    # large: one bincount over (dst, lane) keys; float64 sums are exact below 2**53
    lanes = int(np.prod(values.shape[1:]))
    keys = (dst[:, None] * lanes + np.arange(lanes)).ravel()
    totals = np.bincount(keys, weights=values.reshape(-1), minlength=depth * lanes).reshape(depth, -1)
    touched = np.flatnonzero(np.bincount(dst, minlength=depth))
    return touched, totals[touched].astype(np.int64).reshape(len(touched), *values.shape[1:])


def _occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same key."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(keys)), 0))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - group_start
    return rank


def _alu_levels(dst: np.ndarray, src: np.ndarray | None, depth: int) -> np.ndarray | None:
    """Dependency levels that reproduce strict micro-op order, or None when one vectorised step does.

    Micro-op n must follow every earlier micro-op that wrote an entry it reads or writes (RAW,
    WAW), and must not precede an earlier micro-op that reads what it writes (WAR). Within a level
    all reads happen before all writes, so WAR allows the same level.
    """
    n = len(dst)
    if n == 1:
        return None
    if src is None or not np.isin(src, dst).any():
        rank = _occurrence_rank(dst)     # only repeated destinations depend on each other
        return rank if rank.any() else None
    if len(np.unique(dst)) == n:
        writer = np.full(depth, n, dtype=np.int64)
        writer[dst] = np.arange(n)      # the one micro-op writing each entry
        if not (writer[src] < np.arange(n)).any():
            return None
    last_write = [-1] * depth
    max_read = [0] * depth
    levels = [0] * n
    for k, (d, s) in enumerate(zip(dst.tolist(), src.tolist())):
        level = max(last_write[d] + 1, last_write[s] + 1, max_read[d])
        levels[k] = level
        last_write[d] = level
        if level > max_read[s]:
            max_read[s] = level
    return np.asarray(levels, dtype=np.int64)


def _split_by_level(levels: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(levels, kind="stable")
    bounds = np.flatnonzero(np.diff(levels[order])) + 1
    return np.split(order, bounds)
