"""VTA's instruction set: one field table, and everything derived from it (docs/architecture.md §2).

Each 128-bit instruction is two 64-bit words; each word's fields are packed from bit 0 in table
order, which reproduces VTA's layout (reference/vta.md §1.2) bit for bit on the default
configuration. Field widths follow the configuration's SRAM depths, so a layout is a function of
a :class:`VTAConfig`. Encoding (straight-line Python generated per configuration, with a
checked reference packer for anything unusual), decoding (vectorised over whole programs), the
disassembler, the RTL's ``lib.data`` layouts and the documentation table are all generated from
:func:`layout`.
"""

from __future__ import annotations

import enum
import operator
import sys
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Sequence, Union

import numpy as np

from vtakit.errors import ISAError
from vtakit.hw.config import ITER_BITS, UOP_BITS, VTAConfig

__all__ = [
    "Opcode", "MemId", "AluOp", "Stage",
    "MemInsn", "GemmInsn", "AluInsn", "FinishInsn", "Instruction", "Uop",
    "Field", "layout", "uop_layout",
    "encode", "decode", "encode_uops", "decode_uops",
    "stage_of", "disasm", "isa_table_markdown",
    "alu_op_missing", "gemm_epilogue_missing", "requant_imm", "requant_fields", "GEMM_EPILOGUE_BIT",
    "INSN_BYTES", "UOP_BYTES", "CLASS_OPCODES",
    "REQUANT_SHIFT_MASK", "REQUANT_RELU", "REQUANT_ROUND", "REQUANT_IMM_MASK", "ALU_OP_SEMANTICS",
]

INSN_BYTES = 16
UOP_BYTES = UOP_BITS // 8


class Opcode(enum.IntEnum):
    """The 3-bit instruction opcode."""

    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemId(enum.IntEnum):
    """The memory type of a LOAD or STORE."""

    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(enum.IntEnum):
    """The ALU operation (MUL only when the configuration has ALU_MUL, REQUANT only with ALU_REQUANT;
    :data:`ALU_OP_SEMANTICS` defines each)."""

    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4
    REQUANT = 5


#: REQUANT's control bits in the 16-bit immediate field (read in both forms: the tensor form's
#: operand is the addend, the immediate field still holds the control). Bits 15:7 are ignored (reserved;
#: ProgramBuilder writes zero there).
REQUANT_SHIFT_MASK = 0x1F          # bits 4:0, the right shift s (0..31)
REQUANT_RELU = 1 << 5              # bit 5: clip below at 0 instead of -128
REQUANT_ROUND = 1 << 6             # bit 6: add 2**(s-1) (round to nearest, ties up) before shifting
REQUANT_IMM_MASK = REQUANT_SHIFT_MASK | REQUANT_RELU | REQUANT_ROUND

#: GEMM's epilogue bit (BIAS_PRELOAD, GEMM_OUT_REQUANT): the last bit of word 0, which no configuration's
#: loop fields reach (word 0 uses 37 + 2 * log2(uop depth) <= 63 bits, VTAConfig's encodability rule), so a
#: configuration without both keys keeps VTA's layout and ignores the bit, as VTA's decoder does.
GEMM_EPILOGUE_BIT = 63

#: What each ALU operation computes, lane by lane, on int32 ``a = acc[dst]`` and the operand ``b``
#: (``imm`` sign-extended when use_imm, else ``acc[src]``); the result goes to ``acc[dst]`` and its
#: low 8 bits to ``out[dst]`` (docs/isa.md is generated from this table).
ALU_OP_SEMANTICS = {
    AluOp.MIN: "min(a, b), signed",
    AluOp.MAX: "max(a, b), signed",
    AluOp.ADD: "a + b, wrapped to 32 bits",
    AluOp.SHR: "s = the low 6 bits of b as a signed value (-32..31): a >> s (arithmetic) when s >= 0, else "
               "a << -s wrapped to 32 bits (a left shift by 32 gives 0)",
    AluOp.MUL: "(ALU_MUL) a * (the low 16 bits of b, signed), wrapped to 32 bits",
    AluOp.REQUANT: "(ALU_REQUANT) with s = imm[4:0], relu = imm[5], round = imm[6] (imm[15:7] ignored; write zero) "
                   "and the addend b when tensor, 0 when use_imm: t = a + addend + (2**(s-1) if round and "
                   "s > 0 else 0), wrapped to 32 bits; clip(t >> s (arithmetic), 0 if relu else -128, 127). "
                   "The immediate field holds the control bits in both forms",
}


class Stage(enum.IntEnum):
    """The three modules fetch dispatches to (VTA's stage ids)."""

    LOAD = 1
    COMPUTE = 2
    STORE = 3


# ---------------------------------------------------------------------------- instructions
@dataclass(frozen=True, kw_only=True)
class _Deps:
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False


@dataclass(frozen=True, kw_only=True)
class MemInsn(_Deps):
    """LOAD or STORE: a 2-D strided DMA between DRAM and one SRAM, with zero padding on loads."""

    opcode: Opcode
    memory_type: MemId
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 1
    x_size: int = 1
    x_stride: int = 1
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0


@dataclass(frozen=True, kw_only=True)
class _Loop(_Deps):
    reset_reg: bool = False
    uop_bgn: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0


@dataclass(frozen=True, kw_only=True)
class GemmInsn(_Loop):
    """GEMM over micro-ops [uop_bgn, uop_end) in a two-level loop; reset_reg zeroes instead.

    ``epilogue`` (the bit :data:`GEMM_EPILOGUE_BIT`; only on configurations with BIAS_PRELOAD or
    GEMM_OUT_REQUANT): with reset_reg, a *bias reset* (BIAS_PRELOAD) -- each micro-op copies
    acc[src'] to acc[dst] (its low 8 bits to out[dst]), src' = src_idx + i * src_factor_out +
    j * src_factor_in indexing ACC as an ALU's src does; without reset_reg, a *requantising
    write-back* (GEMM_OUT_REQUANT) -- ACC accumulates as always and out[dst] gets clip((acc + round)
    >> s, relu ? 0 : -128, 127) of the new value, with (s, relu, round) from the requant register
    that every ALU REQUANT instruction sets from its immediate field (docs/isa.md)."""

    opcode: Opcode = Opcode.GEMM
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    epilogue: bool = False


@dataclass(frozen=True, kw_only=True)
class AluInsn(_Loop):
    """Vector ALU over ACC: acc[dst] = op(acc[dst], imm if use_imm else acc[src]) (REQUANT reads its
    control bits from imm in both forms; see :data:`ALU_OP_SEMANTICS`)."""

    opcode: Opcode = Opcode.ALU
    alu_opcode: AluOp = AluOp.ADD
    use_imm: bool = False
    imm: int = 0


@dataclass(frozen=True, kw_only=True)
class FinishInsn(_Deps):
    """End of program; raises done."""

    opcode: Opcode = Opcode.FINISH


Instruction = Union[MemInsn, GemmInsn, AluInsn, FinishInsn]


@dataclass(frozen=True)
class Uop:
    """A micro-op: ACC index, INP (GEMM) or ACC (ALU) index, WGT index."""

    dst_idx: int
    src_idx: int = 0
    wgt_idx: int = 0


# ---------------------------------------------------------------------------- field table
@dataclass(frozen=True)
class Field:
    """One instruction field: absolute bit offset within the 128-bit word and its width."""

    name: str
    offset: int
    width: int
    signed: bool = False

    @property
    def word(self) -> int:
        return self.offset // 64

    def fits(self, value: int) -> bool:
        if self.signed:
            return -(1 << (self.width - 1)) <= value < (1 << (self.width - 1))
        return 0 <= value < (1 << self.width)


_HEAD = (("opcode", lambda c: 3), ("pop_prev", lambda c: 1), ("pop_next", lambda c: 1),
         ("push_prev", lambda c: 1), ("push_next", lambda c: 1))
_LOOP_WORD0 = _HEAD + (("reset_reg", lambda c: 1), ("uop_bgn", lambda c: c.log_uop_depth),
                       ("uop_end", lambda c: c.log_uop_depth + 1), ("iter_out", lambda c: ITER_BITS),
                       ("iter_in", lambda c: ITER_BITS))
_ACC = lambda c: c.log_acc_depth  # noqa: E731
_INP = lambda c: c.log_inp_depth  # noqa: E731
_WGT = lambda c: c.log_wgt_depth  # noqa: E731

# (word 0 fields, word 1 fields) per instruction kind; widths as functions of the config.
_SPEC = {
    Opcode.LOAD: (_HEAD + (("memory_type", lambda c: 3), ("sram_base", lambda c: 16), ("dram_base", lambda c: 32)),
                  (("y_size", lambda c: 16), ("x_size", lambda c: 16), ("x_stride", lambda c: 16),
                   ("y_pad_0", lambda c: 4), ("y_pad_1", lambda c: 4), ("x_pad_0", lambda c: 4),
                   ("x_pad_1", lambda c: 4))),
    Opcode.GEMM: (_LOOP_WORD0,
                  (("dst_factor_out", _ACC), ("dst_factor_in", _ACC), ("src_factor_out", _INP),
                   ("src_factor_in", _INP), ("wgt_factor_out", _WGT), ("wgt_factor_in", _WGT))),
    Opcode.ALU: (_LOOP_WORD0,
                 (("dst_factor_out", _ACC), ("dst_factor_in", _ACC), ("src_factor_out", _ACC),
                  ("src_factor_in", _ACC), ("alu_opcode", lambda c: 3), ("use_imm", lambda c: 1),
                  ("imm", lambda c: 16))),
    Opcode.FINISH: (_HEAD, ()),
}
_SPEC[Opcode.STORE] = _SPEC[Opcode.LOAD]
_CLASS = {Opcode.LOAD: MemInsn, Opcode.STORE: MemInsn, Opcode.GEMM: GemmInsn, Opcode.ALU: AluInsn,
          Opcode.FINISH: FinishInsn}
_ENUMS = {"opcode": Opcode, "memory_type": MemId, "alu_opcode": AluOp}
_BOOLS = {"pop_prev", "pop_next", "push_prev", "push_next", "reset_reg", "use_imm", "epilogue"}


def _has_epilogue(config: VTAConfig) -> bool:
    """Whether GEMM's layout has the epilogue bit (either GEMM epilogue key)."""
    return config.bias_preload or config.gemm_out_requant


@lru_cache(maxsize=None)
def layout(opcode: Opcode, config: VTAConfig) -> tuple[Field, ...]:
    """The fields of one instruction kind, in bit order, for ``config``."""
    result = []
    for word, spec in enumerate(_SPEC[Opcode(opcode)]):
        offset = 64 * word
        for name, width_of in spec:
            width = width_of(config)
            result.append(Field(name, offset, width, signed=(name == "imm")))
            offset += width
        if offset > 64 * (word + 1):  # VTAConfig rejects such configs; this guards the table itself
            raise ISAError(f"{Opcode(opcode).name} word {word} needs {offset - 64 * word} bits, only 64 exist")
        if word == 0 and Opcode(opcode) == Opcode.GEMM and _has_epilogue(config):
            if offset > GEMM_EPILOGUE_BIT:  # pragma: no cover - VTAConfig's word-0 rule keeps the bit free
                raise ISAError(f"GEMM word 0 needs {offset} bits: the epilogue bit {GEMM_EPILOGUE_BIT} is not free")
            result.append(Field("epilogue", GEMM_EPILOGUE_BIT, 1))
    return tuple(result)


@lru_cache(maxsize=None)
def uop_layout(config: VTAConfig) -> tuple[Field, ...]:
    """The micro-op fields, in bit order."""
    widths = (("dst_idx", config.log_acc_depth), ("src_idx", config.uop_src_bits),
              ("wgt_idx", config.log_wgt_depth))
    offsets = np.cumsum([0] + [w for _, w in widths])
    return tuple(Field(name, int(off), w) for (name, w), off in zip(widths, offsets))


# ---------------------------------------------------------------------------- encode / decode
def _pack(items: Sequence[object], table: Sequence[Field], what: str, rows: Sequence[int],
          nwords: int) -> np.ndarray:
    """Pack the fields of ``items`` (row ``rows[k]`` of the input) into ``nwords`` uint64 words each.

    The reference encoder: every value must be an integer (anything ``operator.index`` accepts:
    ``int``, ``bool``, enums, numpy integers; and numpy bools) that fits its field, else an :class:`ISAError`
    naming the row, the field and the value.
    """
    words = np.zeros((len(items), nwords), dtype=np.uint64)
    for field in table:
        lo, hi = (-(1 << (field.width - 1)), 1 << (field.width - 1)) if field.signed else (0, 1 << field.width)
        values = []
        for item, row in zip(items, rows):
            value = getattr(item, field.name)
            try:
                value = int(value) if isinstance(value, np.bool_) else operator.index(value)
            except TypeError:
                raise ISAError(f"{what} {row}: {field.name}={value!r} is not an integer "
                               f"({type(value).__name__})") from None
            if not lo <= value < hi:
                raise ISAError(f"{what} {row}: {field.name}={value} does not fit its {field.width}-bit "
                               f"{'signed ' if field.signed else ''}field (range {lo}..{hi - 1})")
            values.append(value & ((1 << field.width) - 1))
        words[:, field.word] |= np.array(values, dtype=np.uint64) << np.uint64(field.offset % 64)
    return words


def _unpack(words: np.ndarray, field: Field) -> np.ndarray:
    raw = (words[:, field.word] >> np.uint64(field.offset % 64)) & np.uint64((1 << field.width) - 1)
    values = raw.astype(np.int64)
    if field.signed:
        values = np.where(values >= 1 << (field.width - 1), values - (1 << field.width), values)
    return values


# The fast encoder: straight-line Python generated from the field table (as ``dataclasses``
# generates ``__init__``), one branch per instruction class. Each branch reads every field into a
# local (attribute loads the interpreter specialises), range-checks them all in one chained
# condition and ORs the shifted values into the two 64-bit words: about 0.8 us an instruction,
# against 2.3 us for a loop over the field table. Anything it does not vouch for (a value out of
# range or not a plain int, a subclass, a mismatched opcode) makes it return ``None``, and
# ``encode`` falls back to the vectorised reference path, which produces the exact error (or the
# same words, for exotic ints such as numpy scalars).
#: The opcodes each instruction class may carry (the encoder's branches; fsim's legality check).
CLASS_OPCODES = {MemInsn: (Opcode.LOAD, Opcode.STORE), GemmInsn: (Opcode.GEMM,), AluInsn: (Opcode.ALU,),
                 FinishInsn: (Opcode.FINISH,)}


def _fast_encoder_source(config: VTAConfig) -> str:
    """Python source of ``encode_words(insns) -> [word0, word1, ...] | None`` for ``config``."""
    lines = ["def encode_words(insns):",
             "    words = []",
             "    append = words.append",
             "    try:",
             "        for insn in insns:",
             "            cls = type(insn)"]
    for n, (cls, opcodes) in enumerate(CLASS_OPCODES.items()):   # MemInsn first: the most frequent
        table = layout(opcodes[0], config)   # LOAD and STORE share one layout
        assert not {f.name for f in table} & {"insns", "words", "append", "insn", "cls", "w0", "w1"}
        checks, terms = [], ([], [])
        names = {f.name for f in table}
        if cls is GemmInsn and "epilogue" in names:   # the combinations the keys allow; else the reference path's error
            allowed = [*(["reset_reg"] if config.bias_preload else []), *(["not reset_reg"] if config.gemm_out_requant else [])]
            checks.append(f"(not epilogue or {' or '.join(allowed)})")
        for f in table:
            if f.name == "opcode":
                ops = [int(op) for op in opcodes]
                checks.append(f"{min(ops)} <= opcode <= {max(ops)}" if len(ops) > 1 else f"opcode == {ops[0]}")
            elif f.name == "alu_opcode" and not config.alu_requant:   # REQUANT: the reference path's error
                checks.append(f"0 <= alu_opcode < {int(AluOp.REQUANT)}")
            elif f.signed:
                checks.append(f"{-(1 << (f.width - 1))} <= {f.name} < {1 << (f.width - 1)}")
            else:
                checks.append(f"0 <= {f.name} < {1 << f.width}")
            value = f"({f.name} & {(1 << f.width) - 1:#x})" if f.signed else f.name   # two's complement
            shift = f.offset % 64
            terms[f.word].append(f"{value} << {shift}" if shift else value)
        lines += [f"            {'if' if n == 0 else 'elif'} cls is {cls.__name__}:"]
        lines += [f"                {f.name} = insn.{f.name}" for f in table]   # specialised attribute loads
        if cls is GemmInsn and "epilogue" not in names:   # no epilogue bit: only a clear flag encodes
            lines += ["                if insn.epilogue:", "                    return None"]
        lines += [f"                if not ({' and '.join(checks)}):",
                  "                    return None",
                  f"                w0 = {' | '.join(terms[0]) or '0'}",
                  f"                w1 = {' | '.join(terms[1]) or '0'}"]
    lines += ["            else:",
              "                return None",
              "            if type(w0) is not int or type(w1) is not int:   # a numpy scalar slipped through",
              "                return None",
              "            append(w0)",
              "            append(w1)",
              "    except Exception:   # a value of the wrong type: the reference path reports it",
              "        return None",
              "    return words",
              ""]
    return "\n".join(lines)


@lru_cache(maxsize=None)
def _fast_encoder(config: VTAConfig) -> Callable[[list[Instruction]], list[int] | None]:
    """The generated ``encode_words`` for ``config`` (compiled once per configuration)."""
    namespace: dict = {cls.__name__: cls for cls in CLASS_OPCODES}
    exec(_fast_encoder_source(config), namespace)   # noqa: S102 - source built from the field table
    return namespace["encode_words"]


def _little_endian_bytes(words: list[int], typecode: str) -> bytes:
    data = array(typecode, words)
    if sys.byteorder != "little":
        data.byteswap()
    return data.tobytes()


def encode(insns: Iterable[Instruction], config: VTAConfig) -> bytes:
    """Encode instructions as little-endian 128-bit words."""
    insns = list(insns)
    words = _fast_encoder(config)(insns)
    if words is None:
        return _encode_vectorised(insns, config)
    return _little_endian_bytes(words, "Q")


def _encode_vectorised(insns: list[Instruction], config: VTAConfig) -> bytes:
    words = np.zeros((len(insns), 2), dtype=np.uint64)
    by_kind: dict[Opcode, list[int]] = {}
    for index, insn in enumerate(insns):
        legal = next((ops for cls, ops in CLASS_OPCODES.items() if isinstance(insn, cls)), None)
        if legal is None:
            raise ISAError(f"instruction {index}: {insn!r} is not a VTA instruction")
        if insn.opcode not in legal:
            raise ISAError(f"instruction {index}: a {type(insn).__name__} with opcode {insn.opcode!r}; expected "
                           f"{' or '.join(f'{op.name}={op.value}' for op in legal)}")
        if isinstance(insn, AluInsn):
            _check_alu_op(insn.alu_opcode, config, f"instruction {index}")
        if isinstance(insn, GemmInsn):
            missing = gemm_epilogue_missing(insn.reset_reg, insn.epilogue, config)
            if missing is not None:
                raise ISAError(f"instruction {index}: {missing}")
        by_kind.setdefault(Opcode(insn.opcode), []).append(index)
    for opcode, indices in by_kind.items():
        words[indices] = _pack([insns[i] for i in indices], layout(opcode, config), "instruction", indices, 2)
    return words.astype("<u8").tobytes()


def decode(data: bytes, config: VTAConfig) -> list[Instruction]:
    """Decode little-endian 128-bit words into instructions."""
    if len(data) % INSN_BYTES:
        raise ISAError(f"instruction stream of {len(data)} bytes is not a multiple of {INSN_BYTES}")
    words = np.frombuffer(data, dtype="<u8").reshape(-1, 2).astype(np.uint64)
    opcodes = (words[:, 0] & np.uint64(7)).astype(np.int64)
    bad = np.flatnonzero(~np.isin(opcodes, [int(op) for op in Opcode]))
    if bad.size:
        raise ISAError(f"instruction {int(bad[0])}: opcode {int(opcodes[bad[0]])} is not one of "
                       f"{[f'{op.name}={op.value}' for op in Opcode]}")
    result: list[Instruction | None] = [None] * len(words)
    for opcode in Opcode:
        rows = np.flatnonzero(opcodes == opcode)
        if not rows.size:
            continue
        table = layout(opcode, config)
        columns = {f.name: _unpack(words[rows], f) for f in table}
        for name, enum_type in _ENUMS.items():
            if name in columns:
                legal = [int(v) for v in enum_type]
                wrong = np.flatnonzero(~np.isin(columns[name], legal))
                if wrong.size:
                    raise ISAError(f"instruction {int(rows[wrong[0]])}: {name}={int(columns[name][wrong[0]])} "
                                   f"is not one of {[f'{v.name}={v.value}' for v in enum_type]}")
        if opcode == Opcode.GEMM and "epilogue" in columns:
            wrong = np.flatnonzero([gemm_epilogue_missing(r, e, config) is not None
                                    for r, e in zip(columns["reset_reg"].tolist(), columns["epilogue"].tolist())])
            if wrong.size:
                k = int(wrong[0])
                raise ISAError(f"instruction {int(rows[k])}: "
                               f"{gemm_epilogue_missing(int(columns['reset_reg'][k]), 1, config)}")
        if opcode == Opcode.ALU and not config.alu_requant:
            wrong = np.flatnonzero(columns["alu_opcode"] == int(AluOp.REQUANT))
            if wrong.size:
                _check_alu_op(AluOp.REQUANT, config, f"instruction {int(rows[wrong[0]])}")
        cls = _CLASS[opcode]
        for k, row in enumerate(rows):
            kwargs = {}
            for f in table:
                value = int(columns[f.name][k])
                kwargs[f.name] = (_ENUMS[f.name](value) if f.name in _ENUMS
                                  else bool(value) if f.name in _BOOLS else value)
            if cls is not MemInsn:
                kwargs.pop("opcode")
            result[int(row)] = cls(**kwargs)
    return result  # type: ignore[return-value]


@lru_cache(maxsize=None)
def _uop_fields(config: VTAConfig) -> tuple[int, int, int, int, int]:
    """(dst limit, src limit, wgt limit, src shift, wgt shift) of ``config``'s micro-op layout."""
    dst, src, wgt = uop_layout(config)
    return 1 << dst.width, 1 << src.width, 1 << wgt.width, src.offset, wgt.offset


def encode_uops(uops: Iterable[Uop], config: VTAConfig) -> bytes:
    """Encode micro-ops as little-endian 32-bit words."""
    uops = list(uops)
    dst_lim, src_lim, wgt_lim, src_at, wgt_at = _uop_fields(config)
    words = []
    for uop in uops:   # fast path: plain ints in range; anything else takes the checked path below
        if type(uop) is not Uop:
            break
        d, s, w = uop.dst_idx, uop.src_idx, uop.wgt_idx
        if not (type(d) is int and type(s) is int and type(w) is int
                and 0 <= d < dst_lim and 0 <= s < src_lim and 0 <= w < wgt_lim):
            break
        words.append(d | s << src_at | w << wgt_at)
    else:
        return _little_endian_bytes(words, "I")
    for index, uop in enumerate(uops):
        if not isinstance(uop, Uop):
            raise ISAError(f"micro-op {index}: {uop!r} is not a Uop")
    words = _pack(uops, uop_layout(config), "micro-op", range(len(uops)), 1)
    return words[:, 0].astype("<u4").tobytes()


def decode_uops(data: bytes, config: VTAConfig) -> list[Uop]:
    """Decode little-endian 32-bit words into micro-ops."""
    if len(data) % UOP_BYTES:
        raise ISAError(f"micro-op image of {len(data)} bytes is not a multiple of {UOP_BYTES}")
    words = np.frombuffer(data, dtype="<u4").astype(np.uint64).reshape(-1, 1)
    columns = [_unpack(words, f) for f in uop_layout(config)]
    return [Uop(int(d), int(s), int(w)) for d, s, w in zip(*columns)]


# ---------------------------------------------------------------------------- helpers
def alu_op_missing(op: object, config: VTAConfig) -> str | None:
    """Why ``config`` cannot run the ALU operation ``op`` (MUL without ALU_MUL, REQUANT without
    ALU_REQUANT), or None when it can (or ``op`` is no operation: other checks report that)."""
    if op == AluOp.MUL and not config.alu_mul:
        return f"ALU MUL needs a configuration with ALU_MUL enabled ({config.model} has ALU_MUL=false)"
    if op == AluOp.REQUANT and not config.alu_requant:
        return f"ALU REQUANT needs a configuration with ALU_REQUANT enabled ({config.model} has ALU_REQUANT=false)"
    return None


def gemm_epilogue_missing(reset_reg: object, epilogue: object, config: VTAConfig) -> str | None:
    """Why ``config`` cannot run a GEMM with these ``reset_reg`` and ``epilogue`` bits (a bias reset
    without BIAS_PRELOAD, a requantising write-back without GEMM_OUT_REQUANT), or None when it can."""
    if not epilogue:
        return None
    if reset_reg and not config.bias_preload:
        return (f"a GEMM bias reset (reset_reg and epilogue) needs a configuration with BIAS_PRELOAD enabled "
                f"({config.model} has BIAS_PRELOAD=false)")
    if not reset_reg and not config.gemm_out_requant:
        return (f"a GEMM with a requantising write-back (epilogue without reset_reg) needs a configuration with "
                f"GEMM_OUT_REQUANT enabled ({config.model} has GEMM_OUT_REQUANT=false)")
    return None


def _check_alu_op(op: object, config: VTAConfig, where: str) -> None:
    """:class:`ISAError` for REQUANT on a configuration without ALU_REQUANT (the encoding of opcode 5
    is VTA's, undefined, there). MUL is encodable everywhere, as in VTA; the simulators reject it."""
    if op == AluOp.REQUANT and not config.alu_requant:
        raise ISAError(f"{where}: {alu_op_missing(op, config)}")


def requant_imm(shift: int, relu: bool = False, rounding: bool = False) -> int:
    """REQUANT's immediate field: the right shift ``shift`` (0..31), the ReLU bit (clip below at 0)
    and the rounding bit (add 2**(shift-1) first)."""
    if not isinstance(shift, (int, np.integer)) or isinstance(shift, bool) or not 0 <= shift <= REQUANT_SHIFT_MASK:
        raise ISAError(f"REQUANT shift {shift!r} must be an int in [0, {REQUANT_SHIFT_MASK}] (5 bits; "
                       "right shifts only)")
    return int(shift) | (REQUANT_RELU if relu else 0) | (REQUANT_ROUND if rounding else 0)


def requant_fields(imm: int) -> tuple[int, bool, bool]:
    """``(shift, relu, rounding)`` of a REQUANT immediate field (the inverse of :func:`requant_imm`;
    the reserved bits 15:7 are ignored, as the hardware ignores them)."""
    return imm & REQUANT_SHIFT_MASK, bool(imm & REQUANT_RELU), bool(imm & REQUANT_ROUND)


def stage_of(insn: Instruction) -> Stage:
    """The module fetch dispatches ``insn`` to (VTA's routing)."""
    if insn.opcode == Opcode.STORE:
        return Stage.STORE
    if insn.opcode == Opcode.LOAD and insn.memory_type in (MemId.INP, MemId.WGT):
        return Stage.LOAD
    return Stage.COMPUTE


def _flags(insn: Instruction) -> str:
    names = [n for n in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(insn, n)]
    return f" [{' '.join(names)}]" if names else ""


def _name(kind: type[enum.IntEnum], value: object) -> str:
    """``value``'s name in ``kind`` (fields may hold plain ints), else the value itself."""
    try:
        return kind(value).name
    except ValueError:
        return repr(value)


def disasm(insn: Instruction) -> str:
    """One line of human-readable assembly."""
    if isinstance(insn, MemInsn):
        pads = (insn.y_pad_0, insn.y_pad_1, insn.x_pad_0, insn.x_pad_1)
        opcode = _name(Opcode, insn.opcode)
        text = (f"{opcode} {_name(MemId, insn.memory_type)} sram={insn.sram_base:#06x} dram={insn.dram_base:#010x} "
                f"y={insn.y_size} x={insn.x_size} stride={insn.x_stride}")
        if any(pads):
            text += f" pad={pads}"
        if insn.x_size == 0:
            text = f"{opcode} NOP"
    elif isinstance(insn, (GemmInsn, AluInsn)):
        name = "GEMM" if isinstance(insn, GemmInsn) else f"ALU {_name(AluOp, insn.alu_opcode)}"
        text = (f"{name} uop=[{insn.uop_bgn},{insn.uop_end}) iter=({insn.iter_out},{insn.iter_in}) "
                f"dst=({insn.dst_factor_out},{insn.dst_factor_in}) src=({insn.src_factor_out},{insn.src_factor_in})")
        if isinstance(insn, GemmInsn):
            text += f" wgt=({insn.wgt_factor_out},{insn.wgt_factor_in})"
            if insn.reset_reg:
                text += " reset"
            if insn.epilogue:
                text += " bias" if insn.reset_reg else " requant-out"
        elif insn.alu_opcode == AluOp.REQUANT:
            shift, relu, rounding = requant_fields(insn.imm)
            text += f" shift={shift}" + " relu" * relu + " round" * rounding + (" imm" if insn.use_imm else " tensor")
        else:
            text += f" imm={insn.imm}" if insn.use_imm else " tensor"
    else:
        text = "FINISH"
    return text + _flags(insn)


def isa_table_markdown(config: VTAConfig) -> str:
    """The field table as Markdown (docs/isa.md is generated from this)."""
    lines = [f"# VTA ISA for {config.model}", ""]
    kinds = ((Opcode.LOAD, "LOAD / STORE"), (Opcode.GEMM, "GEMM"), (Opcode.ALU, "ALU"), (Opcode.FINISH, "FINISH"))
    for opcode, title in kinds:
        lines += [f"## {title}", "", "| bits | field |", "|---|---|"]
        lines += [f"| {f.offset + f.width - 1}:{f.offset} | {f.name}{' (signed)' if f.signed else ''} |"
                  for f in layout(opcode, config)]
        lines.append("")
    lines += ["## Micro-op (32 bits)", "", "| bits | field |", "|---|---|"]
    lines += [f"| {f.offset + f.width - 1}:{f.offset} | {f.name} |" for f in uop_layout(config)]
    lines += ["", "## ALU operations", "",
              "Lane by lane on int32 `a = acc[dst]` and the operand `b` (`imm` sign-extended when `use_imm`, "
              "else `acc[src]`); the result goes to `acc[dst]` and its low 8 bits to `out[dst]`.", "",
              "| alu_opcode | operation | result |", "|---|---|---|"]
    lines += [f"| {int(op)} | {op.name} | {text} |" for op, text in ALU_OP_SEMANTICS.items()]
    lines += ["", "Opcodes 6 and 7 are undefined. With ALU_REQUANT off, opcode 5 is undefined too and the encoding "
              "is VTA's; REQUANT's micro-op takes one cycle like every other ALU micro-op."]
    lines += ["", "## GEMM epilogue bit", "",
              f"With BIAS_PRELOAD or GEMM_OUT_REQUANT, GEMM's word 0 has the field `epilogue` at bit "
              f"{GEMM_EPILOGUE_BIT} (no configuration's loop fields reach it); with neither key the bit is not "
              "decoded and the layout is VTA's.", "",
              "| reset_reg | epilogue | key | effect per micro-op |", "|---|---|---|---|",
              "| 1 | 0 | | `acc[dst] = 0`, `out[dst] = 0` (VTA's reset) |",
              "| 0 | 0 | | `acc[dst] += inp[src] . wgt[wgt]^T`, `out[dst]` = its low 8 bits |",
              "| 1 | 1 | BIAS_PRELOAD | bias reset: `acc[dst] = acc[src']`, `out[dst]` = its low 8 bits; `src'` "
              "indexes ACC (micro-op src_idx + i * src_factor_out + j * src_factor_in, as an ALU's src) |",
              "| 0 | 1 | GEMM_OUT_REQUANT | requantising write-back: `acc[dst] += inp[src] . wgt[wgt]^T` and "
              "`out[dst] = clip((acc[dst] + round) >> s, relu ? 0 : -128, 127)` of the new value per lane |", "",
              "The requant register (s, relu, round; zero at reset) is compute-module state: every ALU REQUANT "
              "instruction, even one with no micro-ops, sets it from its immediate field (bits 6:0, as REQUANT "
              "reads them) when it starts. A bias reset reads one ACC entry and a requantising write-back none "
              "more than a GEMM, so both keep one micro-op per cycle."]
    return "\n".join(lines) + "\n"


