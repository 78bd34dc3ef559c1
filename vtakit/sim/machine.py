"""The data effect of each VTA instruction on the machine state: the ISA's executable meaning.

:class:`Machine` holds one core's architectural state, i.e. the DRAM image it works on and its
SRAMs (micro-op cache, INP, WGT, ACC and the separate OUT buffer, docs/architecture.md §2) with a
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

Performance: every instruction is a handful of numpy steps, and the fixed cost per instruction is
kept small because typical programs are short (a random or corpus program runs in well under a
millisecond, so numpy's per-call overhead, not arithmetic, is the cost). Everything derived from
the configuration is computed once per configuration (:class:`_Layout`). DMAs copy bytes between
DRAM and flat byte views of the SRAMs (only micro-ops and ACC_8BIT decode elements). Loops
generate all their indices in one broadcast; the written masks are views of one array, so a GEMM
tests all its operands in one gather, and small masks are tested as Python lists. A GEMM of up to
``_SMALL_LOOP`` micro-ops (or ``_SMALL_LOOP_MACS`` multiply-adds) multiplies gathered int32 operands
and adds the products into ACC with ``np.add.at`` (wrap-around addition commutes).

Compiled layers run a handful of distinct loops (same loop fields, same micro-op words) many times
on new data. A GEMM/ALU loop seen a second time gets a plan (:class:`_GemmPlan`, :class:`_AluPlan`):
its range-checked index arrays, the positions of everything it reads in the written mask, its
micro-ops grouped by destination and its destinations as a slice when contiguous. A planned run
tests the written mask in one gather and, all written, does only the arithmetic; otherwise it
takes the unplanned path, which reports errors. A GEMM whose destinations each take the same
number g of micro-ops sums each destination's products as one float32 matmul over the g joined
block_in axes (exact: g * block_in * 2**14 < 2**24), any other as a batched matmul and one
``np.add.reduceat``. Loops of ``_PLAN_AT_ONCE`` micro-ops or more are planned when first seen.
Plans live in the machine (a fresh machine plans afresh). Independent ALU micro-ops compute in
int32 where that gives alu_op's bits (wrapping add/multiply, min/max, right shifts). Larger GEMMs multiply as a batched float32 matmul
(exact: |products| < 2**24) over float copies of INP/WGT allocated on first use, restructured
along loop axes where the weight or destination stays put, and accumulate repeated destinations
with a segmented sum. ALU micro-ops that are independent (distinct destinations, none read by
another) run as one vectorised step; dependent ones on a few lanes run in plain Python, one
micro-op after the other, and on many lanes vectorised per dependency level (a later micro-op
that reads or rewrites an entry an earlier one wrote goes in a later level).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable, NamedTuple, Protocol

import sys

import numpy as np

from vtakit.errors import MemoryAccessError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, Instruction, MemId, MemInsn, Opcode, Stage
from vtakit.sim.stats import COUNTER_NAMES, STAGE_MODULES

__all__ = ["Machine", "AccessObserver", "DramRows", "validate_instruction", "checked_stage", "describe",
           "POP_QUEUES", "PUSH_QUEUES", "QUEUE_NAMES", "MODULE_NAMES", "SHARED_SRAMS"]

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
_SMALL_LOOP = 256         # GEMMs up to this many micro-ops: int32 products added in place with np.add.at,
_SMALL_LOOP_MACS = 1 << 16   # or up to this many multiply-adds (micro-ops x batch x block_in x block_out)
_PLAN_LOOP = 4096         # GEMM/ALU loops up to this many micro-ops get a plan when they recur (see _GemmPlan),
_PLAN_AT_ONCE = 128       # or at once from this many micro-ops (planning costs less than one unplanned run)
_PLAN_FLOAT_MACS = 64     # planned GEMMs whose block_in x block_out exceeds this multiply as float32
_MAX_PLANS = 256          # plans (and first sightings) one machine keeps
_SMALL_GEMM = 64          # GEMM chunks up to this many micro-ops skip the matmul restructuring
_GEMM_CHUNK = 1 << 16     # micro-ops per vectorised GEMM/ALU step (bounds temporary memory)
_SMALL_SEGSUM = 4096      # below this many micro-ops, accumulate with np.add.at
_PY_OFFSETS = 16          # loops of up to this many (i, j) iterations build their offsets in Python
_PY_ROWS = 16             # micro-op ranges up to this long are scanned for their largest index in Python
_PY_MASK = 512            # written masks up to this many entries are tested as Python lists
_PY_UOPS = 64             # micro-op loads up to this many words decode in Python
_OFFSETS: dict[tuple, np.ndarray] = {}   # (iter_out, iter_in, *factors) -> loop offsets [i*j, 1, operand]
# SRAMs whose DRAM elements are exactly their bytes in memory: DMA copies bytes (ACC needs a little-endian host)
_BYTE_SRAMS = ("inp", "wgt", "acc", "out") if sys.byteorder == "little" else ("inp", "wgt", "out")


def describe(index: int | None, insn: Instruction) -> str:
    """``instruction 12 (compute: GEMM ...)``: how every message names an instruction."""
    where = f"instruction {index}" if index is not None else "instruction"
    return f"{where} ({MODULE_NAMES[isa.stage_of(insn)]}: {isa.disasm(insn)})"


def validate_instruction(insn: Instruction, config: VTAConfig, index: int | None = None) -> None:
    """Raise :class:`ProgramError` unless ``insn`` is a legal instruction for its module.

    Checks the opcode/memory pair, the dependency flags the module may use, STORE padding and
    ALU MUL availability. Memory ranges are checked when the instruction runs.
    """
    checked_stage(insn, config, index)


def checked_stage(insn: Instruction, config: VTAConfig, index: int | None = None) -> Stage:
    """:func:`validate_instruction`, then the module ``insn`` goes to (:func:`vtakit.hw.isa.stage_of`).

    Plainly legal instructions of the four ISA classes are recognised here in a few attribute
    tests; anything else (illegal, a subclass, an opcode field that does not match its class) goes
    through the field-by-field :func:`_validate`, which has every error message.
    """
    kind = type(insn)
    if kind is MemInsn:
        opcode = insn.opcode
        if opcode is Opcode.LOAD:
            memory = insn.memory_type
            if memory is MemId.INP or memory is MemId.WGT:
                if not (insn.pop_prev or insn.push_prev):
                    return Stage.LOAD
            elif type(memory) is MemId and (memory is not MemId.OUT or insn.x_size == 0):   # not a plain int
                return Stage.COMPUTE
        elif opcode is Opcode.STORE:
            memory = insn.memory_type
            if not (insn.pop_next or insn.push_next) and type(memory) is MemId and (
                    insn.x_size == 0 or (memory is MemId.OUT and not (
                        insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1))):
                return Stage.STORE
    elif kind is GemmInsn:
        if insn.opcode is Opcode.GEMM and (not insn.epilogue
                                           or isa.gemm_epilogue_missing(insn.reset_reg, True, config) is None):
            return Stage.COMPUTE
    elif kind is AluInsn:
        alu_opcode = insn.alu_opcode
        if insn.opcode is Opcode.ALU and type(alu_opcode) is AluOp and (
                alu_opcode <= AluOp.SHR or isa.alu_op_missing(alu_opcode, config) is None):
            return Stage.COMPUTE
    elif kind is FinishInsn:
        if insn.opcode is Opcode.FINISH:
            return Stage.COMPUTE
    _validate(insn, config, index)
    return isa.stage_of(insn)


def _validate(insn: Instruction, config: VTAConfig, index: int | None) -> None:
    """:func:`validate_instruction`'s general path, field by field (every error message is here)."""
    if not isinstance(insn, (MemInsn, GemmInsn, AluInsn, FinishInsn)):
        raise ProgramError(f"instruction {index}: {insn!r} is not a VTA instruction")
    # the opcode and enum fields must hold values the ISA has (isa.encode/decode reject the rest, and
    # the hardware gives them no meaning: its ALU yields 0 for opcodes 5-7)
    expected = isa.CLASS_OPCODES[next(cls for cls in isa.CLASS_OPCODES if isinstance(insn, cls))]
    if insn.opcode not in expected:
        raise ProgramError(f"instruction {index}: a {type(insn).__name__} with opcode {insn.opcode!r}; expected "
                           f"{' or '.join(f'{op.name}={op.value}' for op in expected)}")
    for name, enum_type in (("memory_type", MemId), ("alu_opcode", AluOp)):
        value = getattr(insn, name, None)
        if hasattr(insn, name) and not _enum_value(value, enum_type):
            raise ProgramError(f"{describe(index, insn)}: {name}={value!r} is not one of "
                               f"{[f'{v.name}={v.value}' for v in enum_type]}")
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
                raise ProgramError(f"{describe(index, insn)}: STORE of memory type {MemId(insn.memory_type).name} is illegal; "
                                   "stores take OUT only")
            pads = (insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
            if any(pads):
                raise ProgramError(f"{describe(index, insn)}: STORE with padding (y_pad_0, y_pad_1, x_pad_0, x_pad_1)={pads}; "
                                   "stores take no padding, expected all zero")
    elif isinstance(insn, AluInsn) and isa.alu_op_missing(insn.alu_opcode, config) is not None:
        raise ProgramError(f"{describe(index, insn)}: {isa.alu_op_missing(insn.alu_opcode, config)}")
    elif isinstance(insn, GemmInsn) and isa.gemm_epilogue_missing(insn.reset_reg, insn.epilogue, config) is not None:
        raise ProgramError(f"{describe(index, insn)}: {isa.gemm_epilogue_missing(insn.reset_reg, insn.epilogue, config)}")


def _enum_value(value: object, enum_type: type) -> bool:
    """Whether ``value`` names a member of ``enum_type`` (any integer isa.encode takes, as it does)."""
    try:
        enum_type(value)
    except (ValueError, TypeError):
        return False
    return True


# the count-like fields each kind of instruction must hold non-negative (the ISA's are unsigned; numpy
# would read a negative size, stride or index as counting from the end)
_LOAD_COUNTS = ("y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")
_STORE_COUNTS = ("y_size", "x_size", "x_stride")
_LOOP_COUNTS = ("uop_bgn", "iter_out", "iter_in")


def _reject_negative(insn: Instruction, index: int | None, names: tuple[str, ...]) -> None:
    negative = {name: getattr(insn, name) for name in names if getattr(insn, name) < 0}
    raise ProgramError(f"{describe(index, insn)}: negative {', '.join(f'{k}={v}' for k, v in negative.items())}; "
                       "the ISA's sizes, strides, paddings, micro-op bounds and loop counts are unsigned")


class DramRows(NamedTuple):
    """A 2-D DRAM byte footprint: ``rows`` rows of ``row_bytes`` bytes, ``stride`` bytes apart.

    (A named tuple rather than a dataclass: one is made per DMA, and tuples are made fastest.)
    """

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
    Index arrays are the machine's own and never change after the call, so an observer may keep
    them (no copy needed).
    """

    def sram(self, space: str, write: bool, index: slice | np.ndarray) -> None: ...

    def dram(self, write: bool, rows: DramRows) -> None: ...


@dataclass(frozen=True)
class _MemSpec:
    """How a LOAD of one memory type maps DRAM bytes onto SRAM entries."""

    sram: str                # target SRAM
    elem_bytes: int          # DRAM bytes per element
    dtype: str               # DRAM element scalar type
    counter: str             # profiler counter
    counted_bytes: int       # bytes counted per element
    entry: tuple[int, ...]   # shape of one SRAM entry
    depth: int               # SRAM entries
    raw: bool                # an element's DRAM bytes are its SRAM entry's bytes (a plain byte copy)


@dataclass(frozen=True)
class _Layout:
    """Everything a :class:`Machine` derives from its configuration, computed once per configuration."""

    shapes: dict[str, tuple[int, ...]]   # SRAM array shapes, by name
    depths: dict[str, int]               # SRAM entries, by name
    mem: dict[MemId, _MemSpec]           # LOAD specs, by memory type
    out_elem_bytes: int
    uop_shifts: np.ndarray               # micro-op field offsets / masks (uint32), (dst, src, wgt) order
    uop_masks: np.ndarray
    uop_fields: tuple[tuple[int, int], ...]   # the same as (shift, mask) pairs of Python ints
    product_dtype: type                  # holds any sum of block_in int8 x int8 products exactly
    written_at: dict[str, int]           # where each SRAM's written mask starts in the machine's one mask array
    written_size: int                    # entries of that array
    gemm_written_at: np.ndarray          # written_at of (ACC, INP, WGT): a GEMM's (dst, src, wgt) columns


# _layout by identity first: hashing a VTAConfig (a frozen dataclass of many fields) costs more than
# the rest of a machine's setup
_LAYOUTS: dict[int, tuple[VTAConfig, _Layout]] = {}


def _config_layout(config: VTAConfig) -> _Layout:
    hit = _LAYOUTS.get(id(config))
    if hit is None or hit[0] is not config:
        if len(_LAYOUTS) >= 64:
            _LAYOUTS.clear()
        hit = _LAYOUTS[id(config)] = (config, _layout(config))   # the entry keeps the config alive
    return hit[1]


@lru_cache(maxsize=16)
def _layout(config: VTAConfig) -> _Layout:
    c = config
    shapes = {"uop": (c.uop_depth, 3), "inp": (c.inp_depth, c.batch, c.block_in),
              "wgt": (c.wgt_depth, c.block_out, c.block_in), "acc": (c.acc_depth, c.batch, c.block_out),
              "out": (c.out_depth, c.batch, c.block_out)}
    depths = {name: shape[0] for name, shape in shapes.items()}

    def spec(sram: str, elem_bytes: int, dtype: str, counter: str, counted: int) -> _MemSpec:
        raw = sram in _BYTE_SRAMS and counted == elem_bytes
        return _MemSpec(sram, elem_bytes, dtype, counter, counted, shapes[sram][1:], depths[sram], raw)

    mem = {MemId.UOP: spec("uop", c.uop_elem_bytes, "<u4", "uop_load_nbytes", c.uop_elem_bytes),
           MemId.INP: spec("inp", c.inp_elem_bytes, "i1", "inp_load_nbytes", c.inp_elem_bytes),
           MemId.WGT: spec("wgt", c.wgt_elem_bytes, "i1", "wgt_load_nbytes", c.wgt_elem_bytes),
           MemId.ACC: spec("acc", c.acc_elem_bytes, "<i4", "acc_load_nbytes", c.acc_elem_bytes),
           MemId.ACC_8BIT: spec("acc", c.acc8_elem_bytes, "i1", "acc_load_nbytes", c.acc_elem_bytes)}
    fields = isa.uop_layout(config)
    shifts = np.array([f.offset for f in fields], dtype=np.uint32)
    masks = np.array([(1 << f.width) - 1 for f in fields], dtype=np.uint32)
    product = np.int32 if c.block_in * 128 * 128 < 1 << 31 else np.int64
    written_at = dict(zip(depths, np.cumsum([0, *depths.values()]).tolist()))
    gemm_written_at = np.array([written_at["acc"], written_at["inp"], written_at["wgt"]], dtype=np.int64)
    return _Layout(shapes, depths, mem, c.out_elem_bytes, shifts, masks, tuple(zip(shifts.tolist(), masks.tolist())),
                   product, written_at, sum(depths.values()), gemm_written_at)


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
        layout = _config_layout(config)
        shapes = layout.shapes
        self.config = config
        self.dram = dram
        self.observer = observer
        self.uop = np.zeros(shapes["uop"], dtype=np.int64)
        self.inp = np.zeros(shapes["inp"], dtype=np.int8)
        self.wgt = np.zeros(shapes["wgt"], dtype=np.int8)
        self.acc = np.zeros(shapes["acc"], dtype=np.int32)
        self.out = np.zeros(shapes["out"], dtype=np.int8)
        # the written masks are views into one array, so a GEMM tests all its operands in one gather
        self._written = np.zeros(layout.written_size, dtype=bool)
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        #: the requant register (GEMM_OUT_REQUANT): the control bits (isa.requant_fields) of the last ALU
        #: REQUANT instruction, which a requantising GEMM write-back applies; 0 until one runs
        self.requant = 0
        self._layout = layout
        self._depths = layout.depths
        self._mem = layout.mem
        # float32 copies of INP/WGT (WGT transposed) feed large GEMMs' matmuls, exact for int8 products;
        # made on first use (see _inp_f/_wgt_t), then kept in step by every write
        self._inp_f_copy: np.ndarray | None = None
        self._wgt_t_copy: np.ndarray | None = None
        self._uop_signed = False   # a negative micro-op index was written (write_sram): no small-GEMM path
        # loop plans by (loop fields, micro-op words); _SEEN marks a loop seen once (planned when it recurs)
        self._plans: dict[tuple, _GemmPlan | _AluPlan | object] = {}
        c = config
        self._gemm_macs = c.batch * c.block_in * c.block_out
        self._plan_float = c.block_in * c.block_out > _PLAN_FLOAT_MACS

    # The views below are made on first use: a machine run by fsim's compiled core never needs them.
    @cached_property
    def written(self) -> dict[str, np.ndarray]:
        """Per SRAM, its "has been written" mask: views into one array, so a GEMM tests all its
        operands in one gather."""
        depths = self._depths
        return {name: self._written[at:at + depths[name]] for name, at in self._layout.written_at.items()}

    @cached_property
    def _bytes(self) -> dict[str, np.ndarray]:
        """Flat byte views of the SRAMs whose DRAM layout is their memory layout, for DMA copies."""
        return {name: getattr(self, name).reshape(-1).view(np.uint8) for name in _BYTE_SRAMS}

    @property
    def _inp_f(self) -> np.ndarray:
        """INP as float32, for the matmul of large GEMMs."""
        if self._inp_f_copy is None:
            self._inp_f_copy = self.inp.astype(np.float32)
        return self._inp_f_copy

    @property
    def _wgt_t(self) -> np.ndarray:
        """WGT as float32, transposed to ``[wgt_depth, block_in, block_out]``, for large GEMMs."""
        if self._wgt_t_copy is None:
            self._wgt_t_copy = self.wgt.transpose(0, 2, 1).astype(np.float32)
        return self._wgt_t_copy

    def _wrote(self, name: str, target: slice | np.ndarray) -> None:
        """Keep the float copies of INP/WGT in step after ``target`` entries of ``name`` changed."""
        if name == "inp":
            if self._inp_f_copy is not None:
                self._inp_f_copy[target] = self.inp[target]
        elif name == "wgt":
            if self._wgt_t_copy is not None:
                self._wgt_t_copy[target] = self.wgt[target].transpose(0, 2, 1)

    def write_sram(self, name: str, start: int, values: np.ndarray) -> None:
        """Set SRAM ``name`` entries ``[start, start + len(values))`` directly (tests, debuggers, preloading)."""
        target = slice(start, start + len(values))
        if name not in self.written or start < 0 or target.stop > len(getattr(self, name)):
            raise MemoryAccessError(f"{name!r} entries [{start}, {target.stop}) are not entries of one of the SRAMs "
                                    f"{sorted(self.written)} (depths {[len(getattr(self, n)) for n in sorted(self.written)]})")
        sram = getattr(self, name)
        sram[target] = values
        self.written[name][target] = True
        self._wrote(name, target)
        if name == "uop" and len(values) and sram[target].min() < 0:
            self._uop_signed = True

    # ------------------------------------------------------------------ dispatch
    def apply(self, insn: Instruction, index: int | None = None, *, validate: bool = True) -> None:
        """Perform ``insn``'s data effect, validating it first unless the caller already has."""
        if validate:
            validate_instruction(insn, self.config, index)
        kind = type(insn)
        if kind is GemmInsn:
            self.gemm(insn, index)
        elif kind is MemInsn:
            if insn.x_size == 0:
                return
            if insn.opcode == Opcode.LOAD:
                self.load(insn, index)
            else:
                self.store(insn, index)
        elif kind is AluInsn:
            self.alu(insn, index)
        elif kind is not FinishInsn:
            self._apply_subclass(insn, index)

    def _apply_subclass(self, insn: Instruction, index: int | None) -> None:
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
        start = insn.dram_base * elem_bytes
        row_bytes = insn.x_size * elem_bytes
        y_size = insn.y_size
        stride = insn.x_stride * elem_bytes
        if y_size:
            end = start if row_bytes == 0 else start + (y_size - 1) * stride + row_bytes
            if start < 0 or end > self.dram.size:
                raise MemoryAccessError(
                    f"{describe(index, insn)}: DRAM bytes [{start:#x}, {end:#x}) out of range; "
                    f"DRAM holds {self.dram.size:#x} bytes (dram_base={insn.dram_base}, x_stride={insn.x_stride}, "
                    f"y_size={y_size}, x_size={insn.x_size}, {elem_bytes} B per element)")
        return DramRows(start, row_bytes, y_size, stride)

    def _dram_view(self, rows: DramRows) -> np.ndarray:
        """The footprint as a [rows, row_bytes] view of DRAM (rows may overlap when stride < row)."""
        count, row, stride, start = rows.rows, rows.row_bytes, rows.stride, rows.start
        if count == 1 or stride == row:   # contiguous: a plain slice
            return self.dram[start:start + count * row].reshape(count, row)
        if stride > row and start + count * stride <= self.dram.size:   # gaps between rows: slice, then crop
            return self.dram[start:start + count * stride].reshape(count, stride)[:, :row]
        return np.lib.stride_tricks.as_strided(self.dram[start:], shape=(count, row), strides=(stride, 1))

    def _sram_range(self, insn: MemInsn, name: str, count: int, index: int | None) -> slice:
        depth = self._depths[name]
        base = insn.sram_base
        if base < 0 or base + count > depth:
            raise MemoryAccessError(
                f"{describe(index, insn)}: {name.upper()} entries [{base}, {base + count}) "
                f"out of range; the {name.upper()} buffer has {depth} entries")
        return slice(base, base + count)

    def load(self, insn: MemInsn, index: int | None = None) -> None:
        """LOAD: 2-D strided DRAM -> SRAM copy with zero padding written around it."""
        spec = self._mem[insn.memory_type]
        name = spec.sram
        y_size, x_size = insn.y_size, insn.x_size
        y_pad_0, x_pad_0 = insn.y_pad_0, insn.x_pad_0
        if (y_size | x_size | y_pad_0 | x_pad_0 | insn.y_pad_1 | insn.x_pad_1 | insn.x_stride) < 0:
            _reject_negative(insn, index, _LOAD_COUNTS)
        height = y_pad_0 + y_size + insn.y_pad_1
        width = x_pad_0 + x_size + insn.x_pad_1
        target = self._sram_range(insn, name, height * width, index)
        rows = self._dram_rows(insn, spec.elem_bytes, index)
        observer = self.observer
        if observer is not None:
            observer.dram(False, rows)
            if name in SHARED_SRAMS:
                observer.sram(name, True, target)
        if spec.raw:   # copy bytes into the SRAM's byte view
            size = spec.elem_bytes
            first = target.start * size
            if height == y_size and width == x_size:   # no padding
                if rows.rows == 1 or rows.stride == rows.row_bytes:
                    self._bytes[name][first:first + rows.rows * rows.row_bytes] = \
                        self.dram[rows.start:rows.start + rows.rows * rows.row_bytes]
                else:
                    self._bytes[name][first:first + rows.rows * rows.row_bytes].reshape(rows.rows, rows.row_bytes)[...] = \
                        self._dram_view(rows)
            else:
                block = self._bytes[name][first:first + height * width * size].reshape(height, width * size)
                block.fill(0)
                block[y_pad_0:y_pad_0 + y_size, x_pad_0 * size:(x_pad_0 + x_size) * size] = self._dram_view(rows)
        else:   # decode elements: micro-op fields, or ACC_8BIT's sign extension
            raw = self._dram_view(rows)
            entry = spec.entry
            if name == "uop":
                words = raw.view("<u4")                            # [y, x]
                layout = self._layout
                if words.size <= _PY_UOPS:   # a few words: Python ints beat broadcast ufuncs
                    fields = layout.uop_fields
                    elems = np.array([(word >> shift) & mask for word in words.ravel().tolist() for shift, mask in fields],
                                     dtype=np.int64).reshape(y_size, x_size, len(fields))
                else:
                    elems = (words[..., None] >> layout.uop_shifts) & layout.uop_masks
            else:
                elems = raw.view(spec.dtype).reshape(y_size, x_size, *entry)
            sram = getattr(self, name)
            if height == y_size and width == x_size:   # no padding: the elements are the block
                sram[target] = elems.reshape(height * width, *entry)
            else:
                block = sram[target].reshape(height, width, *entry)   # a view of the target entries
                block.fill(0)
                block[y_pad_0:y_pad_0 + y_size, x_pad_0:x_pad_0 + x_size] = elems
        self.written[name][target] = True
        if name == "inp" or name == "wgt":
            self._wrote(name, target)
        self.counters[spec.counter] += y_size * x_size * spec.counted_bytes

    def store(self, insn: MemInsn, index: int | None = None) -> None:
        """STORE: 2-D strided OUT -> DRAM copy (OUT only, no padding)."""
        elem_bytes = self._layout.out_elem_bytes
        y_size, x_size = insn.y_size, insn.x_size
        if (y_size | x_size | insn.x_stride) < 0:
            _reject_negative(insn, index, _STORE_COUNTS)
        source = self._sram_range(insn, "out", y_size * x_size, index)
        rows = self._dram_rows(insn, elem_bytes, index)
        if self.observer is not None:
            self.observer.sram("out", False, source)
            self.observer.dram(True, rows)
        self._require_written("out", source, insn, index)
        if rows.rows and not self.dram.flags.writeable:
            raise MemoryAccessError(f"{describe(index, insn)}: the DRAM image is read-only; a program that stores "
                                    "needs a writable one")
        first = source.start * elem_bytes
        data = self._bytes["out"][first:first + y_size * x_size * elem_bytes]
        if rows.rows == 1 or rows.stride == rows.row_bytes:   # contiguous
            self.dram[rows.start:rows.start + data.size] = data
        elif rows.stride >= rows.row_bytes or rows.rows <= 1:
            self._dram_view(rows)[...] = data.reshape(y_size, x_size * elem_bytes)
        else:  # overlapping rows: later rows win, as a row-by-row DMA would leave them
            data = data.reshape(y_size, x_size * elem_bytes)
            for y in range(rows.rows):
                start = rows.start + y * rows.stride
                self.dram[start:start + rows.row_bytes] = data[y]
        self.counters["out_store_nbytes"] += y_size * x_size * elem_bytes

    # ------------------------------------------------------------------ micro-coded loops
    def _uops(self, insn: GemmInsn | AluInsn, index: int | None) -> np.ndarray:
        depth = self._depths["uop"]
        if insn.uop_end > depth:
            raise MemoryAccessError(f"{describe(index, insn)}: micro-ops [{insn.uop_bgn}, {insn.uop_end}) out of "
                                    f"range; the micro-op cache has {depth} entries")
        where = slice(insn.uop_bgn, insn.uop_end)
        if not _all_true(self.written["uop"][where]):
            self._require_written("uop", where, insn, index)
        return self.uop[where]

    def _check_index_ranges(self, insn: GemmInsn | AluInsn, uops: np.ndarray, factors: list[tuple[int, int]],
                            buffers: tuple[str | None, ...], index: int | None) -> None:
        """The largest index the loop generates for each operand must fit its SRAM (None: not read)."""
        if len(uops) <= _PY_ROWS:
            peaks = [max(column) for column in zip(*uops.tolist())]
        else:
            peaks = uops.max(axis=0).tolist()
        outer, inner = insn.iter_out - 1, insn.iter_in - 1
        depths = self._depths
        for column, name in enumerate(buffers):
            if name is None:
                continue
            f_out, f_in = factors[column]
            if f_out < 0 or f_in < 0:   # no ISA factor is negative: indices below 0 would wrap in numpy
                bottom = int(uops[:, column].min()) + min(0, outer * f_out) + min(0, inner * f_in)
                if bottom < 0:
                    field = ("dst", "src", "wgt")[column]
                    raise MemoryAccessError(
                        f"{describe(index, insn)}: {field} index reaches {bottom} (factors ({f_out}, {f_in})); "
                        f"indices must be at least 0")
            top = peaks[column] + outer * f_out + inner * f_in
            if top >= depths[name]:
                field = ("dst", "src", "wgt")[column]
                raise MemoryAccessError(
                    f"{describe(index, insn)}: {field} index reaches {top} (micro-op {field}_idx up to "
                    f"{peaks[column]} + ({insn.iter_out}-1)*{f_out} + ({insn.iter_in}-1)*{f_in}); "
                    f"the {name.upper()} buffer has {depths[name]} entries")

    def _index_chunks(self, insn: GemmInsn | AluInsn, uops: np.ndarray, factors: list[tuple[int, int]]):
        """Yield per-operand index arrays shaped [i, j, k], in micro-op order, about _GEMM_CHUNK at a time."""
        if insn.iter_out == 1 and insn.iter_in == 1:   # copies: the observer may keep index arrays
            yield [uops[:, c].copy()[None, None, :] for c in range(len(factors))]
            return
        per_i = insn.iter_in * len(uops)
        step_i = max(1, _GEMM_CHUNK // per_i)
        step_j = insn.iter_in if per_i <= _GEMM_CHUNK else max(1, _GEMM_CHUNK // len(uops))
        for i0 in range(0, insn.iter_out, step_i):
            i = np.arange(i0, min(i0 + step_i, insn.iter_out), dtype=np.int64)[:, None, None]
            for j0 in range(0, insn.iter_in, step_j):
                j = np.arange(j0, min(j0 + step_j, insn.iter_in), dtype=np.int64)[None, :, None]
                yield [uops[:, c][None, None, :] + i * fo + j * fi for c, (fo, fi) in enumerate(factors)]

    def _loop_indices(self, uops: np.ndarray, iter_out: int, iter_in: int,
                      factors: list[tuple[int, int]]) -> np.ndarray:
        """:func:`_loop_indices`, with each loop shape's offsets computed once (kept in _OFFSETS)."""
        if iter_out == 1 and iter_in == 1:
            return uops[:, :len(factors)].copy()   # not a view of the micro-op cache: the observer may keep it
        key = (iter_out, iter_in, *factors)
        offsets = _OFFSETS.get(key)
        if offsets is None:
            if len(_OFFSETS) >= 1024:
                _OFFSETS.clear()
            offsets = _OFFSETS[key] = _loop_offsets(iter_out, iter_in, factors)[:, None, :]
            offsets.flags.writeable = False
        return (offsets + uops[None, :, :len(factors)]).reshape(-1, len(factors))

    def _require_written(self, name: str, where: slice | np.ndarray, insn: Instruction, index: int | None) -> None:
        mask = self.written[name][where]
        if not _all_true(mask):
            first = int(np.flatnonzero(~mask)[0])
            entry = where.start + first if isinstance(where, slice) else int(where[first])
            raise MemoryAccessError(f"{describe(index, insn)}: reads {name.upper()} entry {entry}, which no "
                                    "earlier instruction of this run has written (uninitialised)")

    def gemm(self, insn: GemmInsn, index: int | None = None) -> None:
        """GEMM: acc[dst] += inp[src] . wgt[wgt]^T over the loop nest, or zero acc/out with reset_reg;
        with the epilogue bit, a bias reset or a requantising OUT write-back (:class:`~vtakit.hw.isa.GemmInsn`)."""
        if not insn.epilogue:
            self._gemm(insn, index)
        elif insn.reset_reg:
            self._gemm_bias(insn, index)
        else:
            self._gemm(insn, index)
            self._requant_out(insn, index)

    def _requant_out(self, insn: GemmInsn, index: int | None) -> None:
        """GEMM_OUT_REQUANT's write-back after :meth:`_gemm`: each micro-op wrote out[dst] from its new
        ACC value and the last write wins, so every destination's OUT is the requantised final value."""
        if insn.uop_end <= insn.uop_bgn or insn.iter_out == 0 or insn.iter_in == 0:
            return
        uops = self.uop[insn.uop_bgn:insn.uop_end]
        dst = np.unique(self._loop_indices(uops, insn.iter_out, insn.iter_in,
                                          [(insn.dst_factor_out, insn.dst_factor_in)])[:, 0])
        self.out[dst] = requant_op(self.acc.take(dst, axis=0), None, self.requant)

    def _gemm_bias(self, insn: GemmInsn, index: int | None) -> None:
        """BIAS_PRELOAD's bias reset: acc[dst] = acc[src'] (src' indexing ACC), out[dst] its low 8 bits,
        in strict micro-op order (a micro-op may read what an earlier one of the same instruction wrote)."""
        iter_out, iter_in = insn.iter_out, insn.iter_in
        if (iter_out | iter_in | insn.uop_bgn) < 0:
            _reject_negative(insn, index, _LOOP_COUNTS)
        if insn.uop_end <= insn.uop_bgn or iter_out == 0 or iter_in == 0:
            return
        uops = self._uops(insn, index)
        factors = [(insn.dst_factor_out, insn.dst_factor_in), (insn.src_factor_out, insn.src_factor_in)]
        self._check_index_ranges(insn, uops, factors, ("acc", "acc"), index)
        acc, out, written = self.acc, self.out, self.written
        for dst, src in self._index_chunks(insn, uops, factors):
            dst, src = dst.ravel(), src.ravel()
            if self.observer is not None:
                self.observer.sram("out", True, dst)
            dsts = dst.tolist()
            if len(set(dsts)) == len(dsts) and not set(dsts).intersection(src.tolist()):   # independent
                self._require_written("acc", src, insn, index)
                values = acc.take(src, axis=0)
                acc[dst] = values
                out[dst] = values                                     # low 8 bits (assignment wraps)
                written["acc"][dst] = True
                written["out"][dst] = True
                continue
            for d, s_ in zip(dsts, src.tolist()):                     # one micro-op after the other
                self._require_written("acc", slice(s_, s_ + 1), insn, index)
                acc[d] = acc[s_]
                out[d] = acc[d]
                written["acc"][d] = True
                written["out"][d] = True

    def _gemm(self, insn: GemmInsn, index: int | None = None) -> None:
        """:meth:`gemm` without the epilogue bit."""
        iter_out, iter_in = insn.iter_out, insn.iter_in
        bgn, end = insn.uop_bgn, insn.uop_end
        if (iter_out | iter_in | bgn) < 0:
            _reject_negative(insn, index, _LOOP_COUNTS)
        if end <= bgn or iter_out == 0 or iter_in == 0:
            return
        key = plan = None
        if bgn >= 0 and (end - bgn) * iter_out * iter_in <= _PLAN_LOOP:   # a loop that may have a plan
            key = (bgn, end, insn.reset_reg, iter_out, iter_in, insn.dst_factor_out, insn.dst_factor_in,
                   insn.src_factor_out, insn.src_factor_in, insn.wgt_factor_out, insn.wgt_factor_in,
                   self.uop[bgn:end].tobytes())
            plan = self._plans.get(key)
            # planned loops passed their range checks; with everything they read written, nothing can fail
            if plan is not None and plan is not _SEEN and self._written.take(plan.operands).all():
                self._gemm_planned(insn, plan)
                return
        uops = self._uops(insn, index)
        count = iter_out * iter_in * len(uops)
        reset = insn.reset_reg
        factors = [(insn.dst_factor_out, insn.dst_factor_in), (insn.src_factor_out, insn.src_factor_in),
                   (insn.wgt_factor_out, insn.wgt_factor_in)]
        self._check_index_ranges(insn, uops, factors, ("acc", None, None) if reset else ("acc", "inp", "wgt"), index)
        simple = (0 < count <= _GEMM_CHUNK and iter_out > 0 and iter_in > 0 and not self._uop_signed
                  and insn.dst_factor_out >= 0 and insn.dst_factor_in >= 0 and insn.src_factor_out >= 0
                  and insn.src_factor_in >= 0 and insn.wgt_factor_out >= 0 and insn.wgt_factor_in >= 0)
        if simple and key is not None:
            fresh = self._plan_on_sighting(key, plan, count, lambda: self._gemm_plan(
                self._loop_indices(uops, iter_out, iter_in, factors), bgn, end, reset))
            if fresh is not None and self._written.take(fresh.operands).all():
                self._gemm_planned(insn, fresh)
                return
        if simple and (count <= _SMALL_LOOP or count * self._gemm_macs <= _SMALL_LOOP_MACS):
            self._gemm_small(insn, self._loop_indices(uops, iter_out, iter_in, factors), index)
            return
        obs = self.observer
        for dst, src, wgt in self._index_chunks(insn, uops, factors):
            dst = dst.ravel()
            if reset:
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
        if not reset:
            self.counters["gemm_counter"] += count

    def _plan_on_sighting(self, key: tuple, plan, count: int, build: Callable[[], object]):
        """A plan just built for the loop ``key`` (``plan``: what was remembered of it), or None: the
        first sighting of a short loop is only remembered; its second, or a long loop's first, builds
        and remembers the plan."""
        if plan is None and count < _PLAN_AT_ONCE:
            self._remember(key, _SEEN)
            return None
        if plan is None or plan is _SEEN:
            return self._remember(key, build())
        return None

    def _remember(self, key: tuple, plan):
        plans = self._plans
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[key] = plan
        return plan

    def _gemm_planned(self, insn: GemmInsn, plan: _GemmPlan) -> None:
        """:meth:`gemm` of a recurring loop whose indices and grouping by destination are in ``plan``
        and whose operands are all written: :meth:`_gemm_small`'s observer calls and result."""
        obs = self.observer
        written = self.written
        touched = plan.touched
        if insn.reset_reg:
            if obs is not None:
                obs.sram("out", True, plan.dst)
            self.acc[touched] = 0
            self.out[touched] = 0
            written["acc"][touched] = True
            written["out"][touched] = True
            return
        if obs is not None:
            obs.sram("inp", False, plan.src)
            obs.sram("wgt", False, plan.wgt)
            obs.sram("out", True, plan.dst)
        # products of the micro-ops in destination order, summed per destination (int32 sums wrap
        # mod 2**32 like the hardware's adders; each product is exact in int32 and in float32)
        group = plan.group
        if group:   # [x_1 .. x_g] . [w_1^T; ..; w_g^T]: each destination's sum as one float32 product
            units, batch = len(plan.starts), self.config.batch
            depth = group * self.config.block_in
            x = self._inp_f.take(plan.src_grouped, axis=0)
            x = x.reshape(units, 1, depth) if batch == 1 else \
                x.reshape(units, group, batch, -1).transpose(0, 2, 1, 3).reshape(units, batch, depth)
            w = self._wgt_t.take(plan.wgt_grouped, axis=0).reshape(units, depth, -1)
            products = np.matmul(x, w).astype(np.int32)
        else:
            if self._plan_float:
                products = np.matmul(self._inp_f.take(plan.src_grouped, axis=0),
                                     self._wgt_t.take(plan.wgt_grouped, axis=0)).astype(np.int32)
            else:
                product = self._layout.product_dtype
                products = np.matmul(self.inp.take(plan.src_grouped, axis=0).astype(product),
                                     self.wgt.take(plan.wgt_grouped, axis=0).astype(product).transpose(0, 2, 1))
                if product is not np.int32:
                    products = products.astype(np.int32)
            if plan.starts is not None:
                products = np.add.reduceat(products, plan.starts, axis=0)
        acc = self.acc
        if type(touched) is slice:
            rows = acc[touched]
            rows += products
        else:
            rows = acc.take(touched, axis=0)
            rows += products
            acc[touched] = rows
        self.out[touched] = rows                                          # low 8 bits (assignment wraps)
        written["out"][touched] = True
        self.counters["gemm_counter"] += len(plan.dst)

    def _gemm_plan(self, indices: np.ndarray, bgn: int, end: int, reset: bool) -> _GemmPlan:
        """The plan of a GEMM loop over micro-ops ``[bgn, end)`` from its in-range, non-negative
        indices ``[micro-op, (dst, src, wgt)]``."""
        dst, src, wgt = (_frozen(indices[:, c].copy()) for c in range(3))
        order = np.argsort(dst, kind="stable")
        grouped = dst[order]
        first = np.empty(len(dst), dtype=bool)
        first[0] = True
        np.not_equal(grouped[1:], grouped[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        # a reset reads only its micro-ops; a GEMM also every INP, WGT and ACC entry it names (once each)
        uops = self._layout.written_at["uop"]
        if reset:
            operands = np.arange(uops + bgn, uops + end)
        else:
            read = np.zeros(self._written.size, dtype=bool)
            read[uops + bgn:uops + end] = True
            read[indices + self._layout.gemm_written_at] = True
            operands = np.flatnonzero(read)
        group, units = 0, len(starts)
        # one float32 matmul per destination when the groups are equal and their sums are exact
        # (|sum| <= group * block_in * 2**14 < 2**24)
        if units < len(dst) and len(dst) % units == 0 and (len(dst) // units * self.config.block_in << 14) < 1 << 24:
            if (starts == np.arange(units) * (len(dst) // units)).all():
                group = len(dst) // units
        return _GemmPlan(dst, src, wgt, _frozen(operands), _frozen(src[order]), _frozen(wgt[order]),
                         None if units == len(dst) else _frozen(starts), _as_range(_frozen(grouped[starts])), group)

    def _alu_plan(self, indices: np.ndarray, bgn: int, end: int, use_imm: bool) -> _AluPlan:
        """The plan of an ALU loop over micro-ops ``[bgn, end)`` from its in-range, non-negative
        indices ``[micro-op, (dst, src)]``."""
        dst = _frozen(indices[:, 0].copy())
        src = None if use_imm else _frozen(indices[:, 1].copy())
        targets = np.zeros(len(self.acc), dtype=bool)
        targets[dst] = True
        independent = int(np.count_nonzero(targets)) == len(dst) and (src is None or not targets[src].any())
        at = self._layout.written_at
        operands = np.concatenate([np.arange(bgn, end) + at["uop"], (dst if use_imm else indices.ravel()) + at["acc"]])
        return _AluPlan(dst, src, _frozen(operands), independent, _as_range(dst))

    def _gemm_small(self, insn: GemmInsn, indices: np.ndarray, index: int | None) -> None:
        """:meth:`gemm` for a loop of at most ``_SMALL_LOOP`` micro-ops, in one step, given its
        non-negative, in-range indices ``[micro-op, (dst, src, wgt)]`` in loop order.

        The int32 (or int64) products of each micro-op are added into ACC in place with
        ``np.add.at``, which accumulates repeated destinations and wraps like the hardware's
        adders (addition mod 2**32 commutes, so the order does not matter).
        """
        dst = indices[:, 0]
        obs = self.observer
        written = self.written
        if insn.reset_reg:
            if obs is not None:
                obs.sram("out", True, dst)
            self.acc[dst] = 0
            self.out[dst] = 0
            written["acc"][dst] = True
            written["out"][dst] = True
            return
        src, wgt = indices[:, 1], indices[:, 2]
        if obs is not None:
            obs.sram("inp", False, src)
            obs.sram("wgt", False, wgt)
            obs.sram("out", True, dst)
        if not _all_true(self._written[indices + self._layout.gemm_written_at]):   # every operand at once
            self._require_written("inp", src, insn, index)
            self._require_written("wgt", wgt, insn, index)
            self._require_written("acc", dst, insn, index)
        product = self._layout.product_dtype
        # (arr.take(i, axis=0) gathers entries like arr[i], several times faster on small multi-axis arrays)
        products = np.matmul(self.inp.take(src, axis=0).astype(product),
                             self.wgt.take(wgt, axis=0).astype(product).transpose(0, 2, 1))
        acc = self.acc
        np.add.at(acc, dst, products if product is np.int32 else products.astype(np.int32))   # wraps mod 2**32
        self.out[dst] = acc.take(dst, axis=0)                             # low 8 bits (assignment wraps)
        written["out"][dst] = True
        self.counters["gemm_counter"] += len(dst)

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
        """ALU: acc[dst] = op(acc[dst], imm if use_imm else acc[src]) in strict micro-op order; REQUANT
        also sets the requant register from its immediate field (with or without micro-ops)."""
        if insn.alu_opcode == AluOp.REQUANT:
            self.requant = int(insn.imm) & isa.REQUANT_IMM_MASK
        iter_out, iter_in = insn.iter_out, insn.iter_in
        bgn, end = insn.uop_bgn, insn.uop_end
        if (iter_out | iter_in | bgn) < 0:
            _reject_negative(insn, index, _LOOP_COUNTS)
        if end <= bgn or iter_out == 0 or iter_in == 0:
            return
        use_imm = insn.use_imm
        key = plan = None
        if bgn >= 0 and (end - bgn) * iter_out * iter_in <= _PLAN_LOOP:   # a loop that may have a plan (see gemm)
            key = (bgn, end, use_imm, iter_out, iter_in, insn.dst_factor_out, insn.dst_factor_in,
                   insn.src_factor_out, insn.src_factor_in, self.uop[bgn:end].tobytes())
            plan = self._plans.get(key)
            if plan is not None and plan is not _SEEN and self._written.take(plan.operands).all():
                self._alu_planned(insn, plan)
                return
        uops = self._uops(insn, index)
        count = iter_out * iter_in * len(uops)
        factors = [(insn.dst_factor_out, insn.dst_factor_in), (insn.src_factor_out, insn.src_factor_in)]
        self._check_index_ranges(insn, uops, factors, ("acc", None) if use_imm else ("acc", "acc"), index)
        if (key is not None and 0 < count <= _GEMM_CHUNK and iter_out > 0 and iter_in > 0 and not self._uop_signed
                and insn.dst_factor_out >= 0 and insn.dst_factor_in >= 0 and insn.src_factor_out >= 0
                and insn.src_factor_in >= 0):
            fresh = self._plan_on_sighting(key, plan, count, lambda: self._alu_plan(
                self._loop_indices(uops, iter_out, iter_in, factors), bgn, end, use_imm))
            if fresh is not None and self._written.take(fresh.operands).all():
                self._alu_planned(insn, fresh)
                return
        if 0 < count <= _GEMM_CHUNK and iter_out > 0:   # one step
            indices = self._loop_indices(uops, iter_out, iter_in, factors)
            dst = indices[:, 0]
            if self.observer is not None:
                self.observer.sram("out", True, dst)
            if not _all_true(self.written["acc"][dst if use_imm else indices]):
                self._require_written("acc", dst, insn, index)
                self._require_written("acc", indices[:, 1], insn, index)
            self._alu_chunk(insn, dst, None if use_imm else indices[:, 1])
            self.counters["alu_counter"] += count
            return
        for dst, src in self._index_chunks(insn, uops, factors):
            dst, src = dst.ravel(), src.ravel()
            if self.observer is not None:
                self.observer.sram("out", True, dst)
            self._require_written("acc", dst, insn, index)
            if not use_imm:
                # every dst is initialised, so an uninitialised src is not written earlier in this instruction
                self._require_written("acc", src, insn, index)
            self._alu_chunk(insn, dst, None if use_imm else src)
        self.counters["alu_counter"] += count

    def _alu_planned(self, insn: AluInsn, plan: _AluPlan) -> None:
        """:meth:`alu` of a recurring loop planned in ``plan`` whose operands are all written: the
        one-step path's observer call and result."""
        dst, src = plan.dst, plan.src
        if self.observer is not None:
            self.observer.sram("out", True, dst)
        if plan.independent:   # one vectorised step, as _alu_chunk takes for independent micro-ops
            self._alu_independent(insn, plan.target, self.acc[plan.target], src)
        else:
            self._alu_chunk(insn, dst, src)
        self.counters["alu_counter"] += len(dst)

    def _alu_independent(self, insn: AluInsn, target: slice | np.ndarray, a: np.ndarray, src: np.ndarray | None) -> None:
        """Independent micro-ops (distinct destinations ``target``, none read by another; ``a`` = their
        ACC rows) in one vectorised step."""
        acc = self.acc
        b = int(insn.imm) if src is None else acc.take(src, axis=0)
        if insn.alu_opcode == AluOp.REQUANT:
            result = requant_op(a, None if src is None else b, int(insn.imm))
        else:
            result = _alu_op_int32(insn.alu_opcode, a, b)
        if result is None:
            result = alu_op(insn.alu_opcode, a.astype(np.int64), np.int64(b) if src is None else b.astype(np.int64))
        acc[target] = result
        self.out[target] = result                                         # low 8 bits (assignment wraps)
        self.written["out"][target] = True

    def _alu_chunk(self, insn: AluInsn, dst: np.ndarray, src: np.ndarray | None) -> None:
        acc = self.acc
        if len(dst) * acc[0].size <= _SMALL_ALU_LANES:
            dsts = dst.tolist()
            targets = set(dsts)
            if len(targets) < len(dsts) or (src is not None and not targets.isdisjoint(src.tolist())):
                self._alu_chunk_scalar(insn, dst, src, dsts)   # micro-ops depend on each other: one at a time
                return
            self._alu_independent(insn, dst, acc.take(dst, axis=0), src)
            return
        levels = _alu_levels(dst, src, len(acc))
        groups = [slice(None)] if levels is None else _split_by_level(levels)
        for group in groups:
            d = dst[group]
            a = acc[d].astype(np.int64)
            if insn.alu_opcode == AluOp.REQUANT:
                acc[d] = requant_op(a, None if src is None else acc[src[group]], int(insn.imm))
                continue
            b = np.int64(insn.imm) if src is None else acc[src[group]].astype(np.int64)
            acc[d] = alu_op(insn.alu_opcode, a, b)
        touched = np.unique(dst) if levels is not None else dst
        self.out[touched] = acc[touched].astype(np.int8)
        self.written["out"][touched] = True

    def _alu_chunk_scalar(self, insn: AluInsn, dst: np.ndarray, src: np.ndarray | None,
                          dsts: list[int] | None = None) -> None:
        """``_alu_chunk`` for a few micro-ops: Python ints, one micro-op after the other (numpy's
        per-call overhead dominates at this size). Same int32 results as :func:`alu_op`.
        ``dsts`` is ``dst.tolist()`` when the caller has it."""
        acc = self.acc
        if dsts is None:
            dsts = dst.tolist()
        touched = sorted(set(dsts))
        if src is None:
            entries = touched
        else:
            srcs = src.tolist()
            entries = sorted(set(dsts).union(srcs))
        where = np.array(entries)
        rows = dict(zip(entries, acc.take(where, axis=0).reshape(len(entries), -1).tolist()))
        if src is None:
            row_op = _imm_row_op(insn.alu_opcode, int(insn.imm))   # numpy scalars would overflow
            for d in dsts:
                rows[d] = row_op(rows[d])
        else:
            pair_op = (_requant_pair_row(int(insn.imm)) if insn.alu_opcode == AluOp.REQUANT
                       else _pair_row_op(insn.alu_opcode))
            for d, s in zip(dsts, srcs):
                rows[d] = pair_op(rows[d], rows[s])
            where = np.array(touched)
        values = np.array([x for e in touched for x in rows[e]], dtype=np.int32).reshape(len(touched), *acc.shape[1:])
        acc[where] = values
        self.out[where] = values                                          # low 8 bits (assignment wraps)
        self.written["out"][where] = True


_SEEN = object()   # a loop seen once: planned if it recurs


class _GemmPlan(NamedTuple):
    """What a recurring GEMM loop (same loop fields, same micro-op words) needs besides the data:
    its index arrays, already range-checked, and its micro-ops grouped by destination.

    A compiled layer runs a few distinct GEMM/ALU loops many times, each on new data; planning a
    loop the second time it is seen leaves numpy a few gathers, one batched matmul and one
    segmented sum per run of it. All arrays are read-only (the observer may keep them).
    """

    dst: np.ndarray                 # loop order: what the observer and error messages see
    src: np.ndarray
    wgt: np.ndarray
    operands: np.ndarray            # positions of every operand entry in the machine's written mask, distinct
    src_grouped: np.ndarray         # micro-ops ordered by destination (stably)
    wgt_grouped: np.ndarray
    starts: np.ndarray | None       # where each destination's micro-ops start; None when none repeats
    touched: slice | np.ndarray     # the distinct destinations, ascending (a slice when contiguous)
    group: int                      # > 0: every destination has this many micro-ops, few enough for their
                                    # products to sum exactly in one float32 matmul over the joined block_in axes


class _AluPlan(NamedTuple):
    """:class:`_GemmPlan` for an ALU loop: indices, and whether its micro-ops are independent."""

    dst: np.ndarray                 # loop order
    src: np.ndarray | None          # None with an immediate operand
    operands: np.ndarray            # positions of the ACC entries read in the machine's written mask
    independent: bool               # distinct destinations, none read by another micro-op: one vectorised step
    target: slice | np.ndarray      # dst, as a slice when it is an ascending contiguous range


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _as_range(entries: np.ndarray) -> slice | np.ndarray:
    """``entries`` as a slice when they are ``first, first + 1, ...``, else themselves."""
    first, last = int(entries[0]), int(entries[-1])
    if last - first + 1 == len(entries) and (len(entries) < 3 or bool((entries[1:] - entries[:-1] == 1).all())):
        return slice(first, last + 1)
    return entries


def _all_true(mask: np.ndarray) -> bool:
    """``mask.all()``; small masks as a Python list, which is quicker than a numpy reduction."""
    return all(mask.ravel().tolist()) if mask.size <= _PY_MASK else bool(mask.all())


def _loop_indices(uops: np.ndarray, iter_out: int, iter_in: int, factors: list[tuple[int, int]]) -> np.ndarray:
    """Every index of a two-level loop (``iter_out, iter_in >= 1``) as ``[micro-op, operand]``, in
    loop order (i, j, micro-op): operand c of micro-op k in iteration (i, j) is
    ``uops[k, c] + i * factors[c][0] + j * factors[c][1]``."""
    columns = len(factors)
    if iter_out == 1 and iter_in == 1:
        return uops[:, :columns].copy()
    offsets = _loop_offsets(iter_out, iter_in, factors)
    return (offsets[:, None, :] + uops[None, :, :columns]).reshape(-1, columns)


def _loop_offsets(iter_out: int, iter_in: int, factors: list[tuple[int, int]]) -> np.ndarray:
    """``[i * iter_in + j, c] = i * factors[c][0] + j * factors[c][1]``: each iteration's index offsets."""
    if iter_out * iter_in <= _PY_OFFSETS:
        return np.array([[i * f_out + j * f_in for f_out, f_in in factors]
                         for i in range(iter_out) for j in range(iter_in)], dtype=np.int64)
    outer = np.array([f_out for f_out, _ in factors], dtype=np.int64)
    inner = np.array([f_in for _, f_in in factors], dtype=np.int64)
    return (np.arange(iter_out, dtype=np.int64)[:, None, None] * outer
            + np.arange(iter_in, dtype=np.int64)[None, :, None] * inner).reshape(-1, len(factors))


# ALU operations on rows of Python ints holding int32 values (the small-chunk path), with the
# results wrapped to int32 exactly as alu_op does: tensor operands pair two rows, immediate
# operands apply one constant. Shifts take the low 6 bits of the operand as a signed amount,
# multiplies its low 16 bits, signed.
_HALF, _MASK = 0x80000000, 0xFFFFFFFF


def _wrap32(r: int) -> int:
    return ((r + _HALF) & _MASK) - _HALF


def _row_min(a: list[int], b: list[int]) -> list[int]:
    return [x if x < y else y for x, y in zip(a, b)]


def _row_max(a: list[int], b: list[int]) -> list[int]:
    return [x if x > y else y for x, y in zip(a, b)]


def _row_add(a: list[int], b: list[int]) -> list[int]:
    return [((x + y + _HALF) & _MASK) - _HALF for x, y in zip(a, b)]


def _row_shr(a: list[int], b: list[int]) -> list[int]:
    return [x >> s if s >= 0 else (((x << -s) + _HALF) & _MASK) - _HALF
            for x, s in zip(a, [((y & 63) ^ 32) - 32 for y in b])]


def _row_mul(a: list[int], b: list[int]) -> list[int]:
    return [((x * (((y & 0xFFFF) ^ 0x8000) - 0x8000) + _HALF) & _MASK) - _HALF for x, y in zip(a, b)]


_PAIR_ROW_OPS = {AluOp.MIN: _row_min, AluOp.MAX: _row_max, AluOp.ADD: _row_add, AluOp.SHR: _row_shr,
                 AluOp.MUL: _row_mul}


def _pair_row_op(op: AluOp) -> Callable[[list[int], list[int]], list[int]]:
    """``op`` on two rows of int32 values, lane by lane."""
    row_op = _PAIR_ROW_OPS.get(op)
    if row_op is None:  # pragma: no cover - AluOp has no other members
        raise ProgramError(f"ALU opcode {op!r} is not one of {list(AluOp)}")
    return row_op


def _requant_bounds(imm: int) -> tuple[int, int, int, int]:
    """(shift, rounding constant, low clip, high clip) of a REQUANT immediate field."""
    shift, relu, rounding = isa.requant_fields(imm)
    return shift, (1 << (shift - 1)) if rounding and shift else 0, 0 if relu else -128, 127


def _requant_pair_row(imm: int) -> Callable[[list[int], list[int]], list[int]]:
    """REQUANT tensor (``b`` the addend) with the control field ``imm`` on rows of int32 values."""
    shift, bias, lo, hi = _requant_bounds(imm)
    return lambda a, b: [min(max((((x + y + bias + _HALF) & _MASK) - _HALF) >> shift, lo), hi) for x, y in zip(a, b)]


def requant_op(a: np.ndarray, addend: np.ndarray | None, imm: int) -> np.ndarray:
    """REQUANT (docs/isa.md) on int32 values ``a`` with the addend ``addend`` (None: the immediate form,
    addend 0) and the control field ``imm``: ``clip(wrap32(a + addend + rounding) >> shift, lo, 127)``
    as int32."""
    shift, bias, lo, hi = _requant_bounds(imm)
    t = a.astype(np.int64) + bias
    if addend is not None:
        t += addend
    t = ((t + _HALF) & _MASK) - _HALF
    return np.clip(t >> shift, lo, hi).astype(np.int32)


def _imm_row_op(op: AluOp, imm: int) -> Callable[[list[int]], list[int]]:
    """``op`` with the immediate ``imm`` on a row of int32 values."""
    if op == AluOp.MIN or op == AluOp.MAX:
        if not -_HALF <= imm < _HALF:   # beyond int32: every lane keeps its value, or becomes imm wrapped
            if (imm > 0) == (op == AluOp.MIN):
                return lambda a: a
            constant = _wrap32(imm)
            return lambda a: [constant] * len(a)
        if op == AluOp.MIN:
            return lambda a: [x if x < imm else imm for x in a]
        return lambda a: [x if x > imm else imm for x in a]
    if op == AluOp.ADD:
        return lambda a: [((x + imm + _HALF) & _MASK) - _HALF for x in a]
    if op == AluOp.SHR:
        shift = ((imm & 63) ^ 32) - 32
        if shift >= 0:
            return lambda a: [x >> shift for x in a]
        return lambda a: [(((x << -shift) + _HALF) & _MASK) - _HALF for x in a]
    if op == AluOp.MUL:
        factor = ((imm & 0xFFFF) ^ 0x8000) - 0x8000
        return lambda a: [((x * factor + _HALF) & _MASK) - _HALF for x in a]
    if op == AluOp.REQUANT:
        pair = _requant_pair_row(imm)
        return lambda a: pair(a, [0] * len(a))
    raise ProgramError(f"ALU opcode {op!r} is not one of {list(AluOp)}")  # pragma: no cover


def _alu_op_int32(op: AluOp, a: np.ndarray, b: np.ndarray | int) -> np.ndarray | None:
    """:func:`alu_op` computed in int32 where that gives the same bits (int32 addition and
    multiplication wrap mod 2**32; minimum, maximum and right shifts cannot overflow), for int32
    ``a`` and an int32 array or an immediate ``b``; None for the cases it leaves to alu_op (shifts
    by a tensor or left shifts, MIN/MAX with an immediate beyond int32; REQUANT: :func:`requant_op`)."""
    if op == AluOp.REQUANT:
        return None
    if type(b) is int:
        if op == AluOp.ADD:
            return a + np.int32(_wrap32(b))
        if op == AluOp.MUL:
            return a * np.int32(((b & 0xFFFF) ^ 0x8000) - 0x8000)
        if op == AluOp.SHR:
            shift = ((b & 63) ^ 32) - 32
            return a >> np.int32(shift) if shift >= 0 else None
        if -_HALF <= b < _HALF:
            return np.minimum(a, np.int32(b)) if op == AluOp.MIN else np.maximum(a, np.int32(b))
        return None
    if op == AluOp.ADD:
        return a + b
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    if op == AluOp.MUL:
        return a * (((b & 0xFFFF) ^ 0x8000) - 0x8000)
    return None


def alu_op(op: AluOp, a: np.ndarray, b: np.ndarray | np.int64) -> np.ndarray:
    """One ALU operation on int64 operands holding int32 values; the result wrapped to int32
    (REQUANT, which also reads the immediate field, is :func:`requant_op`)."""
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
