"""fsim's compiled core (csrc/fsim_core.c) at its edges: extreme and malformed inputs, same contract.

The contract (vtakit/sim/native.py): the core completes only programs the Python engine accepts,
leaving identical DRAM, SRAMs, written masks, counters and stall statistics; everything Python
rejects it declines with DRAM restored byte for byte, and Python then raises its usual error.

The inputs here are built to reach corners the author's tests do not: random programs with
fields pushed to their extremes (widths' maxima, SRAM depths, DRAM's end, overlapping strides,
padding on every side), bit-flipped encoded streams, garbage instruction words fed to the core
directly, DRAM images that are tiny or not a multiple of any element, and instruction objects of
unusual types, plus the core's own inputs (params, layout table) made inconsistent.

The slow campaigns double as the sanitizer workload: build csrc/fsim_core.c out of tree with
``gcc -shared -fPIC -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined`` against
``python3-config --includes``, put the built module in ``sys.modules["vtakit.sim._fsim_core"]``
from a pytest plugin (importlib's ``spec_from_file_location``), and run this file with
``LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 pytest -m "" -p plugin``.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tests.sim.test_fsim_corpus import CONFIGS
from tests.sim.test_fsim_native import _both
from vtakit.errors import DeadlockError, ISAError, MemoryAccessError, ProgramError, RaceError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.runtime.random_program import random_program
from vtakit.sim import fsim, native
from vtakit.sim.machine import Machine

pytestmark = pytest.mark.skipif(native.core("_fsim_core") is None, reason="the compiled fsim core is not built")

SMALL = VTAConfig.small()
SRAMS = ("uop", "inp", "wgt", "acc", "out", "_written")
# corner configurations besides test_fsim_corpus's: wide blocks, ALU MUL, tiny SRAMs and queues
AUDIT_CONFIGS = {
    **CONFIGS,
    "block_in32": VTAConfig.small(log_block_in=5, log_block_out=3, log_inp_buff_size=12, log_wgt_buff_size=14,
                                  log_acc_buff_size=13, log_uop_buff_size=12),
    "batch2_block_in64": VTAConfig.small(log_block_in=6, log_block_out=2, log_batch=1, log_inp_buff_size=12,
                                         log_wgt_buff_size=14, log_acc_buff_size=13, log_uop_buff_size=12),
    "alu_mul_tiny": VTAConfig.small(alu_mul=True, log_uop_buff_size=7, log_inp_buff_size=6, log_wgt_buff_size=7,
                                    log_acc_buff_size=8, token_queue_depth=2, cmd_queue_depth=2),
}
# the decline reason's start for each error class of the Python engine
REASONS = {RaceError: ("data race",), DeadlockError: ("deadlock",),
           MemoryAccessError: ("uninitialised read", "out of range"),
           ProgramError: ("illegal instruction", "FINISH", "unbalanced tokens")}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_LOOP_LIMIT = 1 << 18   # micro-op executions a fuzzed program may ask for (keeps both engines fast)


@dataclasses.dataclass
class Outcome:
    """One program on both engines: what each did, compared."""

    python: str        # "ok" or the Python error's class name
    native: str        # "ok" or "declined"
    reason: str = ""   # the core's decline reason


def compare(config: VTAConfig, insns: list, dram: np.ndarray, encoded: bytes | None = None) -> Outcome:
    """Run ``insns`` on both engines (each on its own copy of ``dram``) and assert the contract:
    accepted by Python -> completed natively with the very same state; rejected with a SimError ->
    declined natively, DRAM untouched. Any other exception from Python is a bug of its own."""
    py, nat, py_dram, native_dram = _both(config, insns, dram, encoded)
    run, reason = (None, nat) if isinstance(nat, str) else (nat, "")
    if isinstance(py, SimError):
        assert run is None, f"the core completed a program the Python engine rejects: {py!r}"
        assert np.array_equal(native_dram, dram), f"a declined run changed DRAM ({reason})"
        return Outcome(type(py).__name__, "declined", reason)
    assert run is not None, f"the core declined a program the Python engine accepts: {reason}"
    assert np.array_equal(py_dram, native_dram), f"DRAM differs at {np.flatnonzero(py_dram != native_dram)[:8]}"
    for name in SRAMS:
        assert np.array_equal(getattr(py.machine, name), getattr(run.machine, name)), name
    assert run.machine.counters == py.machine.counters
    assert (run.fetch_stalls, run.push_stalls) == (py.fetch_stalls, py.push_stalls)
    return Outcome("ok", "ok")


# ---------------------------------------------------------------------------- extreme-field mutants
def _field_width(config: VTAConfig, insn, name: str) -> tuple[int, bool] | None:
    opcode = Opcode(insn.opcode)
    for field in isa.layout(opcode, config):
        if field.name == name:
            return field.width, field.signed
    return None


def _extreme(config: VTAConfig, insn, name: str, rng: random.Random, dram_size: int) -> int:
    """A value at an edge of field ``name``: 0, 1, the width's maximum, an SRAM depth, DRAM's end..."""
    width, signed = _field_width(config, insn, name)
    top = (1 << (width - 1)) - 1 if signed else (1 << width) - 1
    low = -(1 << (width - 1)) if signed else 0
    depths = [config.uop_depth, config.inp_depth, config.wgt_depth, config.acc_depth]
    candidates = [low, 0, 1, 2, top, top - 1, rng.randint(low, top), rng.randint(0, min(top, 8))]
    candidates += [min(top, d + k) for d in depths for k in (-1, 0, 1)]
    if name == "dram_base" and isinstance(insn, MemInsn):
        elem = {MemId.UOP: config.uop_elem_bytes, MemId.INP: config.inp_elem_bytes, MemId.WGT: config.wgt_elem_bytes,
                MemId.ACC: config.acc_elem_bytes, MemId.ACC_8BIT: config.acc8_elem_bytes,
                MemId.OUT: config.out_elem_bytes}.get(insn.memory_type, 1)
        end = dram_size // elem
        candidates += [max(0, end - k) for k in (0, 1, 2, insn.x_size, insn.x_size + 1)]
    if name == "x_stride" and isinstance(insn, MemInsn):
        candidates += [max(0, insn.x_size - 1), 0, insn.x_size + 1]
    return max(low, min(top, rng.choice(candidates)))


def extreme_mutant(config: VTAConfig, seed: int) -> tuple[list, np.ndarray]:
    """A random program with one to three fields of one to three instructions at an extreme, its
    micro-op loops bounded by _LOOP_LIMIT, on its DRAM image, sometimes cut short or grown to an odd size."""
    rng = random.Random(seed)
    program = random_program(config, seed)
    insns = list(program.insns)
    dram = program.initial_dram()
    if rng.random() < 0.3:   # a DRAM size that is no multiple of any element
        size = max(0, len(dram) + rng.choice([-1, 1, 3, -17, 7 - len(dram), 1 - len(dram), -len(dram)]))
        cut = np.zeros(size, dtype=np.uint8)
        cut[:min(size, len(dram))] = dram[:size]
        dram = cut
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(insns))
        insn = insns[k]
        names = [f.name for f in isa.layout(Opcode(insn.opcode), config) if f.name != "opcode"]
        changes = {}
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(names)
            if name in _FLAGS or name in ("reset_reg", "use_imm"):
                changes[name] = not getattr(insn, name)
            elif name == "memory_type":
                changes[name] = MemId(rng.randrange(len(MemId)))
            elif name == "alu_opcode":
                changes[name] = AluOp(rng.randrange(len(AluOp)))
            else:
                changes[name] = _extreme(config, insn, name, rng, len(dram))
        insns[k] = dataclasses.replace(insn, **changes)
    for insn in insns:   # keep both engines quick: a loop of 2**40 micro-ops may be valid, and take hours
        if isinstance(insn, (GemmInsn, AluInsn)) and insn.iter_out * insn.iter_in * max(
                0, insn.uop_end - insn.uop_bgn) > _LOOP_LIMIT:
            reach = (insn.iter_out - 1) * insn.dst_factor_out + (insn.iter_in - 1) * insn.dst_factor_in
            if reach < config.acc_depth:   # not out of range for sure (which both engines see at once)
                return extreme_mutant(config, seed + 1_000_003)
    return insns, dram


_ELEM = {MemId.UOP: "uop_elem_bytes", MemId.INP: "inp_elem_bytes", MemId.WGT: "wgt_elem_bytes",
         MemId.ACC: "acc_elem_bytes", MemId.ACC_8BIT: "acc8_elem_bytes", MemId.OUT: "out_elem_bytes"}


def overlap_mutant(config: VTAConfig, seed: int) -> tuple[list, np.ndarray]:
    """A random program where one DMA is moved onto another's footprint: a LOAD reading what a
    STORE writes (a DRAM race unless tokens order them), a STORE over another STORE or over
    micro-ops/data a later LOAD reads, a LOAD over SRAM entries another module or loop uses
    (micro-ops overwritten after use, INP/WGT rewritten under a GEMM)."""
    rng = random.Random(seed)
    program = random_program(config, seed)
    insns = list(program.insns)
    mems = [i for i, x in enumerate(insns) if isinstance(x, MemInsn) and x.x_size]
    for _ in range(rng.randint(1, 2)):
        if len(mems) < 2:
            break
        a, b = rng.sample(mems, 2)
        moved, target = insns[a], insns[b]
        if rng.random() < 0.5:   # DRAM: a's first byte onto b's (when a's elements divide it)
            size = getattr(config, _ELEM[moved.memory_type])
            byte = target.dram_base * getattr(config, _ELEM[target.memory_type]) + size * rng.randint(0, 2)
            if byte % size == 0:
                insns[a] = dataclasses.replace(moved, dram_base=byte // size)
        elif moved.opcode == Opcode.LOAD and target.opcode == Opcode.LOAD and moved.memory_type == target.memory_type:
            insns[a] = dataclasses.replace(moved, sram_base=target.sram_base + rng.randint(0, 1))
        else:
            insns[a] = dataclasses.replace(moved, sram_base=target.sram_base)
    return insns, program.initial_dram()


# ---------------------------------------------------------------------------- bit-flipped streams
def _lenient_decode(stream: bytes, config: VTAConfig) -> list | None:
    """isa.decode, or None when the words hold values the ISA has no name for (opcode 5-7, memory
    type 6-7, ALU opcode 5-7)."""
    try:
        return isa.decode(stream, config)
    except ISAError:    # not a program of the ISA
        return None


def flipped_stream(config: VTAConfig, seed: int) -> tuple[bytes, list | None, np.ndarray]:
    """A random program's encoded stream with 1-4 random bits flipped (opcode bits included)."""
    rng = random.Random(seed)
    program = random_program(config, seed)
    stream = bytearray(isa.encode(program.insns, config))
    for _ in range(rng.randint(1, 4)):
        bit = rng.randrange(len(stream) * 8) if rng.random() < 0.8 else 128 * rng.randrange(len(stream) // 16) + \
            rng.randrange(3)
        stream[bit // 8] ^= 1 << (bit % 8)
    return bytes(stream), _lenient_decode(bytes(stream), config), program.initial_dram()


def _machine_arrays(config: VTAConfig, dram: np.ndarray) -> tuple:
    m = Machine(config, dram)
    return m, (m.uop, m.inp, m.wgt, m.acc, m.out, m._written)


def run_raw(config: VTAConfig, stream: bytes, dram: np.ndarray):
    """The core on a raw stream (no encoder in between): its result and the machine it wrote."""
    machine, arrays = _machine_arrays(config, dram)
    _, layout, params = fsim._native_config(config)
    return native.core("_fsim_core").run(layout, stream, params, dram, *arrays, True), machine


def check_flipped(config: VTAConfig, seed: int) -> str:
    """A bit-flipped stream on the core directly: when it decodes, the core agrees with Python on its
    instructions; when it does not (no ISA meaning), the core declines and DRAM is untouched."""
    stream, insns, dram = flipped_stream(config, seed)
    if insns is not None:
        outcome = compare(config, insns, dram, stream)
        return f"{outcome.python}/{outcome.native}"
    before = dram.copy()
    result, _ = run_raw(config, stream, dram)
    assert type(result) is str, "the core completed a stream the ISA cannot decode"
    assert np.array_equal(dram, before)
    return "undecodable/declined"


def garbage_stream(config: VTAConfig, seed: int) -> tuple[bytes, np.ndarray]:
    """Random instruction words (biased towards few pops/pushes and a FINISH last) on a tiny DRAM."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 12))
    words = rng.integers(0, 1 << 64, size=(count, 2), dtype=np.uint64, endpoint=False)
    words[:, 0] &= ~np.uint64(0b1111000)          # no flags: tokens balance trivially
    if rng.random() < 0.8:
        words[-1, 0] = (words[-1, 0] & ~np.uint64(0b1111111)) | np.uint64(int(Opcode.FINISH))
    dram = rng.integers(0, 256, int(rng.choice([0, 1, 3, 16, 17, 255, 4096])), dtype=np.uint8)
    return words.astype("<u8").tobytes(), dram


def check_garbage(config: VTAConfig, seed: int) -> str:
    stream, dram = garbage_stream(config, seed)
    insns = _lenient_decode(stream, config)
    if insns is not None:
        outcome = compare(config, insns, dram, stream)
        return f"{outcome.python}/{outcome.native}"
    before = dram.copy()
    result, _ = run_raw(config, stream, dram)
    assert type(result) is str and np.array_equal(dram, before)
    return "undecodable/declined"


def _tally(outcomes: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts


# ---------------------------------------------------------------------------- quick campaigns
@pytest.mark.parametrize("config_name", ["small", "in4_out8", "block_in32", "alu_mul_tiny"])
def test_extreme_field_mutants(config_name):
    config = AUDIT_CONFIGS[config_name]
    tally = _tally([f"{o.python}/{o.native}" for o in (compare(config, *extreme_mutant(config, seed))
                                                        for seed in range(60))])
    assert tally.get("ok/ok", 0) >= 3 and sum(v for k, v in tally.items() if k != "ok/ok") >= 20, tally


@pytest.mark.parametrize("config_name", ["small", "batch2_block8"])
def test_bit_flipped_streams(config_name):
    tally = _tally([check_flipped(AUDIT_CONFIGS[config_name], seed) for seed in range(80)])
    assert tally.get("undecodable/declined", 0) >= 1 and tally.get("ok/ok", 0) >= 3, tally


def test_garbage_words_on_tiny_dram():
    tally = _tally([check_garbage(SMALL, seed) for seed in range(300)])
    assert tally.get("undecodable/declined", 0) >= 100, tally


@pytest.mark.parametrize("config_name", ["small", "shallow_queues", "batch2_block8"])
def test_overlap_mutants(config_name):
    """DMAs moved onto each other: races on DRAM through STORE then LOAD, SRAM rewritten under use."""
    config = AUDIT_CONFIGS[config_name]
    tally = _tally([compare(config, *overlap_mutant(config, seed)).python for seed in range(80)])
    assert tally.get("RaceError", 0) >= 1 and tally.get("ok", 0) >= 10, tally


def test_races_unchecked_alike():
    """check_races=False: racy overlap mutants complete on both engines with the same state."""
    completed = 0
    for seed in range(40):
        insns, dram = overlap_mutant(SMALL, seed)
        py_dram, native_dram = dram.copy(), dram.copy()
        try:
            py = fsim.simulate(SMALL, insns, py_dram, engine="python", check_races=False)
        except SimError:
            assert fsim._native_run(SMALL, insns, native_dram, None, False)[0] is None
            assert np.array_equal(native_dram, dram)
            continue
        run, reason = fsim._native_run(SMALL, insns, native_dram, None, False)
        assert run is not None, reason
        assert np.array_equal(py_dram, native_dram) and run.machine.counters == py.machine.counters
        for name in SRAMS:
            assert np.array_equal(getattr(py.machine, name), getattr(run.machine, name)), name
        completed += 1
    assert completed >= 10


@pytest.mark.parametrize("config_name", ["block_in32", "batch2_block_in64", "alu_mul_tiny"])
def test_corpus_and_random_programs_on_more_corners(config_name):
    """The corpus and random programs on the configurations test_fsim_native does not use."""
    from tests.programs import CASES, Unsupported
    config = AUDIT_CONFIGS[config_name]
    ran = 0
    for name in CASES:
        try:
            program = CASES[name](config).program
        except Unsupported:
            continue
        ran += compare(config, list(program.insns), program.initial_dram()).python == "ok"   # (ALU MUL cases
        # on a configuration without it are rejected by both alike)
    for seed in range(40):
        program = random_program(config, seed)
        assert compare(config, list(program.insns), program.initial_dram()) == Outcome("ok", "ok"), seed
    assert ran >= 10


# ---------------------------------------------------------------------------- illegal enum values
def _ld(mem, sram=0, dram=0, y=1, x=1, **kw):
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=x, **kw)


@pytest.mark.parametrize("op", [6, 7])
@pytest.mark.parametrize("loop", ["imm", "tensor", "empty"])
def test_alu_opcodes_past_mul_are_illegal_on_every_path(op, loop):
    """ALU opcodes 6-7 name no operation (the RTL's ALU yields 0 for them; 5 is REQUANT, see
    tests/sim/test_alu_requant.py): a ProgramError at the
    static check, whatever path the loop would take; before, the vectorised path computed MAX with
    an immediate and the core completed empty loops of them."""
    alu = AluInsn(alu_opcode=op, use_imm=loop != "tensor", imm=5, uop_end=0 if loop == "empty" else 1)
    insns = [_ld(MemId.UOP), _ld(MemId.ACC), alu, FinishInsn()]
    outcome = compare(SMALL, insns, np.zeros(256, dtype=np.uint8))
    assert outcome == Outcome("ProgramError", "declined", f"instruction 2: illegal instruction: ALU opcode {op}")
    with pytest.raises(ProgramError, match=rf"instruction 2 \(compute: ALU {op} .*\): alu_opcode={op} is not one of "
                                           r"\['MIN=0', 'MAX=1', 'ADD=2', 'SHR=3', 'MUL=4', 'REQUANT=5'\]"):
        fsim.simulate(SMALL, insns, np.zeros(256, dtype=np.uint8))
    with pytest.raises(ProgramError, match=f"alu_opcode={op} is not one of"):
        fsim.check_program(insns, SMALL)


@pytest.mark.parametrize("opcode", [Opcode.LOAD, Opcode.STORE])
@pytest.mark.parametrize("memory_type", [6, 7])
@pytest.mark.parametrize("x_size", [0, 1])
def test_memory_types_past_acc8_are_illegal(opcode, memory_type, x_size):
    """Before: LOAD raised KeyError, STORE AttributeError, a token-only STORE passed."""
    insns = [MemInsn(opcode=opcode, memory_type=memory_type, x_size=x_size), FinishInsn()]
    outcome = compare(SMALL, insns, np.zeros(64, dtype=np.uint8))
    assert outcome.python == "ProgramError" and outcome.native == "declined"
    with pytest.raises(ProgramError, match=rf"memory_type={memory_type} is not one of \['UOP=0', "):
        fsim.simulate(SMALL, insns, np.zeros(64, dtype=np.uint8))


@pytest.mark.parametrize("insn, expected", [
    (MemInsn(opcode=Opcode.GEMM, memory_type=MemId.UOP), "a MemInsn with opcode <Opcode.GEMM: 2>; expected LOAD=0 "
                                                         "or STORE=1"),
    (MemInsn(opcode=2, memory_type=MemId.UOP), "a MemInsn with opcode 2; expected LOAD=0 or STORE=1"),
    (GemmInsn(opcode=Opcode.ALU, uop_end=0), "a GemmInsn with opcode <Opcode.ALU: 4>; expected GEMM=2"),
    (AluInsn(opcode=Opcode.GEMM, uop_end=0), "a AluInsn with opcode <Opcode.GEMM: 2>; expected ALU=4"),
    (FinishInsn(opcode=Opcode.GEMM), "a FinishInsn with opcode <Opcode.GEMM: 2>; expected FINISH=3"),
], ids=["mem_gemm", "mem_int2", "gemm_alu", "alu_gemm", "finish_gemm"])
def test_opcode_must_match_the_instruction_class(insn, expected):
    """Before: a MemInsn with opcode GEMM ran as a STORE, a FinishInsn with opcode GEMM as FINISH
    (the encoder, hence the core and the RTL, reject both)."""
    insns = [insn, FinishInsn()] if not isinstance(insn, FinishInsn) else [insn]
    outcome = compare(SMALL, insns, np.zeros(64, dtype=np.uint8))
    assert outcome.python == "ProgramError" and outcome.native == "declined"
    with pytest.raises(ProgramError, match=r"instruction 0: " + expected.replace("(", r"\(").replace(")", r"\)")):
        fsim.check_program(insns, SMALL)


def test_store_of_a_plain_int_memory_type_names_it():
    """Before: AttributeError ('int' object has no attribute 'name') building the message."""
    insns = [MemInsn(opcode=Opcode.STORE, memory_type=2), FinishInsn()]
    assert compare(SMALL, insns, np.zeros(64, dtype=np.uint8)).python == "ProgramError"
    with pytest.raises(ProgramError, match="STORE of memory type INP is illegal; stores take OUT only"):
        fsim.simulate(SMALL, insns, np.zeros(64, dtype=np.uint8))


def test_legal_enum_values_as_plain_ints_still_run():
    """The stricter check accepts plain ints and numpy ints naming members (they go the slow path)."""
    insns = [_ld(0), _ld(np.int64(3)), AluInsn(alu_opcode=2, use_imm=True, imm=1), AluInsn(alu_opcode=np.uint8(0),
                                                                                        use_imm=True, imm=-3),
             FinishInsn()]
    assert compare(SMALL, insns, np.arange(256, dtype=np.uint8)) == Outcome("ok", "ok")
    # a bool is an integer to the encoder too (True is MAX): both engines take it alike
    insns = [_ld(MemId.UOP), _ld(MemId.ACC), AluInsn(alu_opcode=True, use_imm=True, imm=7), FinishInsn()]
    assert compare(SMALL, insns, np.arange(256, dtype=np.uint8)) == Outcome("ok", "ok")
    with pytest.raises(ProgramError, match=r"alu_opcode='MAX' is not one of"):
        fsim.check_program([AluInsn(alu_opcode="MAX"), FinishInsn()], SMALL)


def _acc_alu_store(**store):
    return [_ld(MemId.UOP), _ld(MemId.ACC, dram=1, x=2), AluInsn(use_imm=True, imm=1, iter_out=2, dst_factor_out=1,
                                                                  push_next=True),
            MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, pop_prev=True, push_prev=True, **store),
            FinishInsn(pop_next=True)]


NEGATIVE_FIELDS = {   # instruction objects with negative unsigned fields (no encoding holds them)
    "load_stride": ([dataclasses.replace(_ld(MemId.ACC, y=2), x_stride=-1), FinishInsn()], ProgramError,
                    r"negative x_stride=-1; the ISA's sizes"),
    "load_y_size": ([dataclasses.replace(_ld(MemId.UOP), y_size=-1), FinishInsn()], ProgramError, "negative y_size=-1"),
    "load_x_size": ([dataclasses.replace(_ld(MemId.UOP), x_size=-2), FinishInsn()], ProgramError, "negative x_size=-2"),
    "load_pads": ([dataclasses.replace(_ld(MemId.ACC), x_pad_0=-1, y_pad_1=-3), FinishInsn()], ProgramError,
                  "negative y_pad_1=-3, x_pad_0=-1"),
    "store_stride": (_acc_alu_store(dram_base=8, y_size=2, x_stride=-1), ProgramError, "negative x_stride=-1"),
    "gemm_factor": ([_ld(MemId.UOP), GemmInsn(reset_reg=True, iter_out=2, dst_factor_out=-1), FinishInsn()],
                    MemoryAccessError, r"dst index reaches -1 \(factors \(-1, 0\)\); indices must be at least 0"),
    "alu_src_factor": ([_ld(MemId.UOP), _ld(MemId.ACC, x=4), AluInsn(iter_in=2, src_factor_in=-3), FinishInsn()],
                       MemoryAccessError, r"src index reaches -3"),
    "gemm_iters": ([_ld(MemId.UOP), GemmInsn(reset_reg=True, iter_out=-1, iter_in=-1), FinishInsn()], ProgramError,
                   "negative iter_out=-1, iter_in=-1"),
    "alu_uop_bgn": ([_ld(MemId.UOP), _ld(MemId.ACC), AluInsn(uop_bgn=-1, uop_end=1), FinishInsn()], ProgramError,
                    "negative uop_bgn=-1"),
}


@pytest.mark.parametrize("name", NEGATIVE_FIELDS)
def test_negative_fields_are_errors_not_wrapped_indices(name):
    """Before: a LOAD with x_stride=-1 read DRAM bytes before the image (numpy's as_strided), a GEMM
    with a negative factor or iteration count wrote ACC entries counted from the end, negative sizes
    raised numpy's ValueError. The core never sees such programs (they have no encoding)."""
    insns, error, message = NEGATIVE_FIELDS[name]
    dram = np.zeros(512, dtype=np.uint8)
    assert compare(SMALL, insns, dram).python == error.__name__
    with pytest.raises(error, match=message):
        fsim.simulate(SMALL, insns, dram)


# ---------------------------------------------------------------------------- DRAM images and streams
def _store_program():
    return [_ld(MemId.UOP), _ld(MemId.ACC, dram=1), AluInsn(use_imm=True, imm=1, push_next=True),
            MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=40, pop_prev=True, push_prev=True),
            FinishInsn(pop_next=True)]


def test_read_only_dram_is_a_clear_error():
    """Before: numpy's bare ValueError ("assignment destination is read-only") from the STORE."""
    dram = np.arange(256, dtype=np.uint8)
    dram.flags.writeable = False
    assert fsim._native_run(SMALL, _store_program(), dram, None, True) == (
        None, "DRAM is not a writable contiguous 1-D uint8 array")
    with pytest.raises(MemoryAccessError, match=r"instruction 3 \(store: STORE OUT .*\): the DRAM image is read-only; "
                                                "a program that stores needs a writable one"):
        fsim.simulate(SMALL, _store_program(), dram)
    # a program without a STORE may run on read-only DRAM (on the Python engine)
    assert fsim.simulate(SMALL, _store_program()[:2] + [FinishInsn()], dram).machine.counters["acc_load_nbytes"] > 0


def test_dram_sizes_that_fit_no_element():
    """Images of 0..20 bytes around a 16-byte ACC element: DMAs at DRAM's very end, in range or not."""
    outcomes = set()
    for size in range(0, 21):
        for dram_base in (0, 1):
            insns = [_ld(MemId.UOP), _ld(MemId.ACC, dram=dram_base), AluInsn(use_imm=True, imm=1, push_next=True),
                     MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=4 * dram_base, pop_prev=True,
                             push_prev=True), FinishInsn(pop_next=True)]
            outcomes.add(compare(SMALL, insns, np.zeros(size, dtype=np.uint8)).python)
    assert outcomes == {"ok", "MemoryAccessError"}


def test_encoded_stream_is_trusted_as_the_program():
    """Documents the glue's contract: ``encoded`` (Launch.encoded) must be ``isa.encode(insns)``.
    When a caller passes another stream of the same length, the core runs that stream (as the RTL,
    which fetches from DRAM, would) while the Python engine runs ``insns``: only its length is checked."""
    insns = _store_program()
    other = list(insns)
    other[3] = dataclasses.replace(insns[3], dram_base=48)
    stream = isa.encode(other, SMALL)
    dram = np.arange(256, dtype=np.uint8)
    by_stream, by_insns = dram.copy(), dram.copy()
    fsim.simulate(SMALL, insns, by_stream, encoded=stream)
    fsim.simulate(SMALL, insns, by_insns, engine="python")
    assert not np.array_equal(by_stream, by_insns)
    fsim.simulate(SMALL, other, by_insns, engine="python")   # by_insns now has both stores' bytes
    assert np.array_equal(by_stream[48 * 4:52 * 4], by_insns[48 * 4:52 * 4])
    # a stream of another length is not trusted
    assert fsim._native_run(SMALL, insns, dram.copy(), stream[:-16], True)[0] is not None


# ---------------------------------------------------------------------------- the core's inputs
@pytest.mark.parametrize("depth", [2**61 + 1, 2**64], ids=["wraps_size_t", "past_int64"])
def test_huge_command_queue_depths(depth):
    """VTAConfig bounds no CMD_QUEUE_DEPTH. Before: 2**61+1 sized the command ring as 8 bytes (a heap
    overflow, glibc abort), 2**64 raised OverflowError out of simulate."""
    config = VTAConfig.small(cmd_queue_depth=depth)
    for seed in range(5):
        program = random_program(config, seed)
        assert compare(config, list(program.insns), program.initial_dram()) == Outcome("ok", "ok")


def _core_args(config: VTAConfig, dram: np.ndarray, params: tuple | None = None, layout: bytes | None = None):
    _, default_layout, default_params = fsim._native_config(config)
    _, arrays = _machine_arrays(config, dram)
    stream = isa.encode([FinishInsn()], config)
    return (default_layout if layout is None else layout, stream, default_params if params is None else params,
            dram, *arrays, True)


@pytest.mark.parametrize("k, value", [(3, 10**6), (9, 5), (13, 1), (14, 3), (20, 40), (23, -1), (28, 3)],
                         ids=["depth", "written_at", "uop_bytes", "inp_bytes", "uop_shift", "uop_mask", "granule"])
def test_core_rejects_inconsistent_params(k, value):
    """run()'s params index memory (mask offsets, element sizes, micro-op shifts): anything but what
    fsim._native_params derives is a ValueError, not an out-of-bounds access."""
    params = list(fsim._native_config(SMALL)[2])
    params[k] = value
    core = native.core("_fsim_core")
    with pytest.raises(ValueError, match="params out of range or inconsistent|buffer"):
        core.run(*_core_args(SMALL, np.zeros(64, dtype=np.uint8), tuple(params)))
    assert core.run(*_core_args(SMALL, np.zeros(64, dtype=np.uint8))) == ((0,) * 7, (0,) * 3, (0,) * 4, 0)


def test_core_rejects_a_layout_reaching_past_the_word():
    table = np.frombuffer(fsim._native_config(SMALL)[1], dtype=np.int32).reshape(8, -1, 3).copy()
    table[int(Opcode.ALU), native.FIELDS.index("imm"), 0] = 1 << 20   # bit offset far past the 16 bytes
    with pytest.raises(ValueError, match="layout table has a field outside its 64-bit word"):
        native.core("_fsim_core").run(*_core_args(SMALL, np.zeros(64, dtype=np.uint8), layout=table.tobytes()))


# ---------------------------------------------------------------------------- long campaigns
@pytest.mark.slow
@pytest.mark.parametrize("config_name", AUDIT_CONFIGS)
def test_extreme_field_mutant_campaign(config_name):
    config = AUDIT_CONFIGS[config_name]
    for seed in range(60, 1060):
        compare(config, *extreme_mutant(config, seed))


@pytest.mark.slow
@pytest.mark.parametrize("config_name", AUDIT_CONFIGS)
def test_overlap_mutant_campaign(config_name):
    config = AUDIT_CONFIGS[config_name]
    for seed in range(80, 1080):
        compare(config, *overlap_mutant(config, seed))


@pytest.mark.slow
@pytest.mark.parametrize("config_name", AUDIT_CONFIGS)
def test_bit_flip_and_garbage_campaign(config_name):
    config = AUDIT_CONFIGS[config_name]
    for seed in range(80, 1080):
        check_flipped(config, seed)
    for seed in range(300, 2300):
        check_garbage(config, seed)
