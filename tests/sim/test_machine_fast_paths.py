"""The machine's fast paths for small work against its general paths, bit for bit.

The data machine takes shortcuts for the short programs that dominate simulation time: a quick
legality check per instruction, one-step index generation for loops, an ``np.add.at`` GEMM for
small loops, Python-int ALU rows, sliced (not ``as_strided``) DMA views, lazily made float
copies of INP/WGT, and plans for GEMM/ALU loops that recur (as compiled layers' loops do). Each test below runs the same random work through the shortcut and through the
general path (forced with the module's thresholds) or a naive reference, and compares everything
observable: SRAMs, written masks, counters, DRAM, errors and their messages.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vtakit.errors import MemoryAccessError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Stage
from vtakit.sim import machine as machine_module
from vtakit.sim.machine import Machine, _validate, checked_stage, validate_instruction

SMALL = VTAConfig.small(alu_mul=True, alu_requant=True)
WIDE = VTAConfig(log_batch=1, log_block_in=3, log_block_out=3, log_uop_buff_size=12, log_inp_buff_size=13,
                 log_wgt_buff_size=14, log_acc_buff_size=14, alu_mul=True, alu_requant=True)   # batch 2, 8x8


class Recorder:
    """An AccessObserver that collects the entries reported per (space, write)."""

    def __init__(self) -> None:
        self.seen: dict[tuple, set] = {}

    def sram(self, space, write, index):
        entries = range(*index.indices(1 << 30)) if isinstance(index, slice) else np.asarray(index).tolist()
        self.seen.setdefault((space, write), set()).update(entries)

    def dram(self, write, rows):
        self.seen.setdefault(("dram", write), set()).add(rows)


def _machine(config: VTAConfig, seed: int, observer=None, uop_high: int = 12) -> Machine:
    """Random, fully written SRAMs (micro-op indices below ``uop_high``)."""
    rng = np.random.default_rng(seed)
    m = Machine(config, rng.integers(0, 256, 1 << 12, dtype=np.uint8), observer)
    m.write_sram("inp", 0, rng.integers(-128, 128, m.inp.shape))
    m.write_sram("wgt", 0, rng.integers(-128, 128, m.wgt.shape))
    m.inp[0] = m.wgt[0] = -128                                  # the extreme products
    m.write_sram("inp", 0, m.inp[:1])
    m.write_sram("wgt", 0, m.wgt[:1])
    m.write_sram("acc", 0, rng.integers(-(1 << 31), 1 << 31, m.acc.shape, dtype=np.int64))
    m.write_sram("out", 0, rng.integers(-128, 128, m.out.shape))
    m.write_sram("uop", 0, rng.integers(0, uop_high, m.uop.shape))
    return m


def _state(m: Machine) -> list[np.ndarray]:
    return [m.uop, m.inp, m.wgt, m.acc, m.out, m.dram, *(m.written[name] for name in sorted(m.written))]


def _assert_same(a: Machine, b: Machine, what: str) -> None:
    for x, y in zip(_state(a), _state(b)):
        np.testing.assert_array_equal(x, y, err_msg=what)
    assert a.counters == b.counters, what


def _random_loop(rng: np.random.Generator, cls, **extra):
    bgn = int(rng.integers(0, 8))
    fields = dict(uop_bgn=bgn, uop_end=bgn + int(rng.integers(1, 6)), iter_out=int(rng.integers(1, 5)),
                  iter_in=int(rng.integers(1, 5)), dst_factor_out=int(rng.integers(0, 4)),
                  dst_factor_in=int(rng.integers(0, 3)), src_factor_out=int(rng.integers(0, 4)),
                  src_factor_in=int(rng.integers(0, 3)))
    return cls(**fields, **extra)


def _run_both(config, seed, insn, monkeypatch, fast: dict, slow: dict):
    """Apply ``insn`` on two identical machines, one with the fast thresholds, one with the slow;
    returns (machines, observers, errors)."""
    results = []
    for thresholds in (fast, slow):
        for name, value in thresholds.items():
            monkeypatch.setattr(machine_module, name, value)
        observer = Recorder()
        m = _machine(config, seed, observer)
        observer.seen.clear()
        error = None
        try:
            m.apply(insn, 3)
        except MemoryAccessError as exc:
            error = str(exc)
        results.append((m, observer, error))
    return results


@pytest.mark.parametrize("config", [SMALL, WIDE], ids=["small", "wide"])
def test_small_gemm_path_equals_general_path(config, monkeypatch):
    """np.add.at GEMMs (repeated destinations, reset, aliasing weights) give the chunked path's state,
    reported accesses and errors."""
    rng = np.random.default_rng(11)
    for trial in range(120):
        reset = trial % 5 == 0
        insn = _random_loop(rng, GemmInsn, reset_reg=reset, wgt_factor_out=int(rng.integers(0, 4)),
                            wgt_factor_in=int(rng.integers(0, 3)))
        if trial % 7 == 0:   # out of range, checked before anything happens
            insn = dataclasses.replace(insn, dst_factor_out=config.acc_depth)
        (fast, fast_obs, fast_err), (slow, slow_obs, slow_err) = _run_both(
            config, trial, insn, monkeypatch, fast={"_SMALL_LOOP": 1 << 20, "_PLAN_LOOP": 0},
            slow={"_SMALL_LOOP": 0, "_SMALL_LOOP_MACS": 0, "_GEMM_CHUNK": 7})
        assert fast_err == slow_err, insn
        _assert_same(fast, slow, f"trial {trial}: {insn}")
        assert fast_obs.seen == slow_obs.seen   # the slow path reports them chunk by chunk


def test_small_gemm_reports_uninitialised_operands_like_general_path(monkeypatch):
    """The first unwritten INP, WGT or ACC entry named is the same on both paths."""
    rng = np.random.default_rng(5)
    uninitialised = 0
    for trial in range(60):
        insn = _random_loop(rng, GemmInsn, wgt_factor_out=1, wgt_factor_in=1)
        cleared = rng.integers(0, 16, 3)
        errors = []
        for small in (1 << 20, 0):
            monkeypatch.setattr(machine_module, "_SMALL_LOOP", small)
            monkeypatch.setattr(machine_module, "_SMALL_LOOP_MACS", small)
            monkeypatch.setattr(machine_module, "_PLAN_LOOP", 0)
            m = _machine(SMALL, trial)
            m.written[("inp", "wgt", "acc")[trial % 3]][cleared] = False
            try:
                m.apply(insn, 9)
                errors.append(None)
            except MemoryAccessError as exc:
                errors.append(str(exc))
        assert errors[0] == errors[1]
        uninitialised += errors[0] is not None and "uninitialised" in errors[0]
    assert uninitialised > 20


def test_gemm_with_negative_micro_op_indices_takes_the_general_path(monkeypatch):
    """write_sram may put negative indices in the micro-op cache, which numpy indexing wraps; the
    small path (whose np.add.at would combine -1 and depth-1) stays out of it."""
    machines = []
    for small in (1 << 20, 0):
        monkeypatch.setattr(machine_module, "_SMALL_LOOP", small)
        monkeypatch.setattr(machine_module, "_SMALL_LOOP_MACS", small)
        monkeypatch.setattr(machine_module, "_PLAN_LOOP", 4096 if small else 0)   # nor is it planned
        m = _machine(SMALL, 1)
        m.write_sram("uop", 0, np.array([[-1, 0, 0], [SMALL.acc_depth - 1, 1, 1]]))
        for _ in range(3):
            m.apply(GemmInsn(uop_bgn=0, uop_end=2))
        assert not m._plans
        machines.append(m)
    _assert_same(*machines, "negative micro-op indices")


@pytest.mark.parametrize("config", [SMALL, WIDE], ids=["small", "wide"])
def test_one_step_alu_equals_chunked_alu(config, monkeypatch):
    """ALU loops indexed in one step equal the chunked generator, in strict micro-op order."""
    rng = np.random.default_rng(12)
    for trial in range(120):
        op = AluOp(int(rng.integers(0, len(AluOp))))
        insn = _random_loop(rng, AluInsn, alu_opcode=op, use_imm=bool(trial % 2),
                            imm=int(rng.integers(-(1 << 15), 1 << 15)))
        lanes = 1 << 30 if trial % 3 else 0       # the Python rows, or numpy levels
        (fast, _, fast_err), (slow, _, slow_err) = _run_both(
            config, trial, insn, monkeypatch, fast={"_GEMM_CHUNK": 1 << 16, "_SMALL_ALU_LANES": lanes},
            slow={"_GEMM_CHUNK": 5, "_SMALL_ALU_LANES": lanes})
        assert fast_err == slow_err
        _assert_same(fast, slow, f"trial {trial}: {insn}")


EXTREME_IMMEDIATES = [0, 1, -1, 31, 32, 33, 63, 64, -32, -33, (1 << 15) - 1, -(1 << 15), 1 << 16, (1 << 31) - 1,
                      -(1 << 31), 1 << 31, -(1 << 31) - 1, 1 << 40, -(1 << 40), (1 << 62) + 5]


@pytest.mark.parametrize("op", list(AluOp))
def test_python_alu_rows_match_numpy_for_extreme_immediates(op, monkeypatch):
    """Immediates beyond 16 and 32 bits (MIN/MAX compare the full value, then wrap), every shift."""
    immediates = EXTREME_IMMEDIATES
    config = SMALL
    rng = np.random.default_rng(int(op))
    start = rng.integers(-(1 << 31), 1 << 31, (config.acc_depth, config.batch, config.block_out), dtype=np.int64)
    start[:4] = rng.choice([-(1 << 31), (1 << 31) - 1, -1, 0, 1], start[:4].shape)
    dst = np.array([0, 1, 2, 3, 1, 0])
    for imm in immediates:
        results = []
        for lanes in (1 << 30, 0):
            monkeypatch.setattr(machine_module, "_SMALL_ALU_LANES", lanes)
            m = Machine(config, np.zeros(64, np.uint8))
            m.acc[:] = start.astype(np.int32)
            m._alu_chunk(AluInsn(alu_opcode=op, use_imm=True, imm=imm), dst, None)
            results.append((m.acc.copy(), m.out.copy(), m.written["out"].copy()))
        a = start.astype(np.int32)   # the planned path's int32 arithmetic, where it applies
        for b in (imm, np.roll(a, 1, axis=0)):
            fast = machine_module._alu_op_int32(op, a, b)
            if fast is not None:
                want = machine_module.alu_op(op, a.astype(np.int64), np.int64(b) if type(b) is int else b.astype(np.int64))
                np.testing.assert_array_equal(fast, want, err_msg=f"int32 path, imm {imm}")
        for got, want in zip(*results):
            np.testing.assert_array_equal(got, want, err_msg=f"imm {imm}")


def _naive_load(m: Machine, insn: MemInsn) -> tuple[str, np.ndarray]:
    """LOAD written from the ISA, element by element: (SRAM name, its expected contents)."""
    spec = m._mem[insn.memory_type]
    sram = getattr(m, spec.sram).copy()
    width = insn.x_pad_0 + insn.x_size + insn.x_pad_1
    height = insn.y_pad_0 + insn.y_size + insn.y_pad_1
    for y in range(height):
        for x in range(width):
            entry = insn.sram_base + y * width + x
            yy, xx = y - insn.y_pad_0, x - insn.x_pad_0
            if not (0 <= yy < insn.y_size and 0 <= xx < insn.x_size):
                sram[entry] = 0
                continue
            at = (insn.dram_base + yy * insn.x_stride + xx) * spec.elem_bytes
            raw = m.dram[at:at + spec.elem_bytes]
            if insn.memory_type == MemId.UOP:
                word = int(raw.view("<u4")[0])
                sram[entry] = [(word >> f.offset) & ((1 << f.width) - 1) for f in isa.uop_layout(m.config)]
            else:
                sram[entry] = raw.view(spec.dtype).reshape(sram.shape[1:])
    return spec.sram, sram


@pytest.mark.parametrize("config", [SMALL, WIDE], ids=["small", "wide"])
def test_loads_match_naive_copy(config):
    """Contiguous, gapped (sliced view), overlapping and DRAM-end (as_strided) footprints, with padding."""
    rng = np.random.default_rng(3)
    for trial in range(150):
        memory = [MemId.UOP, MemId.INP, MemId.WGT, MemId.ACC, MemId.ACC_8BIT][trial % 5]
        m = Machine(config, rng.integers(0, 256, 1 << 11, dtype=np.uint8))
        elem = m._mem[memory].elem_bytes
        x_size, y_size = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        stride = int(rng.choice([x_size, x_size + int(rng.integers(1, 4)), max(1, x_size - 1)]))
        last = (y_size - 1) * stride + x_size                       # elements spanned
        top = m.dram.size // elem - last
        base = int(rng.choice([0, int(rng.integers(0, top + 1)), top]))   # top: the footprint ends at DRAM's end
        pads = [int(rng.integers(0, 2)) if trial % 2 else 0 for _ in range(4)]
        insn = MemInsn(opcode=Opcode.LOAD, memory_type=memory, sram_base=int(rng.integers(0, 4)), dram_base=base,
                       y_size=y_size, x_size=x_size, x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1],
                       x_pad_0=pads[2], x_pad_1=pads[3])
        name, expected = _naive_load(m, insn)
        m.apply(insn)
        np.testing.assert_array_equal(getattr(m, name), expected, err_msg=str(insn))
        entries = (y_size + pads[0] + pads[1]) * (x_size + pads[2] + pads[3])
        assert m.written[name].sum() == entries
        assert m.counters[m._mem[memory].counter] == y_size * x_size * m._mem[memory].counted_bytes


def test_float_copies_follow_writes_after_first_large_gemm(monkeypatch):
    """INP/WGT float copies are made by the first large GEMM and kept in step by later loads."""
    rng = np.random.default_rng(4)
    results = []
    for small in (1 << 20, 0):
        monkeypatch.setattr(machine_module, "_SMALL_LOOP", small)
        monkeypatch.setattr(machine_module, "_SMALL_LOOP_MACS", small)
        monkeypatch.setattr(machine_module, "_PLAN_LOOP", 0)
        m = _machine(SMALL, 8)
        assert m._inp_f_copy is None and m._wgt_t_copy is None
        insn = GemmInsn(uop_bgn=0, uop_end=4, iter_out=4, iter_in=5, dst_factor_out=1, src_factor_in=2,
                        wgt_factor_out=1)   # 80 micro-ops: the float matmul path when not small
        m.apply(insn)
        for memory in (MemId.INP, MemId.WGT):
            m.dram[:] = rng.integers(0, 256, m.dram.size)
            m.apply(MemInsn(opcode=Opcode.LOAD, memory_type=memory, sram_base=0, dram_base=0, y_size=2, x_size=3,
                            x_stride=5, x_pad_0=1))
            m.write_sram("inp", 12, rng.integers(-128, 128, (2, *m.inp.shape[1:])))
        m.apply(insn)
        if small == 0:
            np.testing.assert_array_equal(m._inp_f, m.inp.astype(np.float32))
            np.testing.assert_array_equal(m._wgt_t, m.wgt.transpose(0, 2, 1).astype(np.float32))
        results.append(m)
        rng = np.random.default_rng(4)
    _assert_same(*results, "small vs large GEMM path around loads")


def _instructions(rng: np.random.Generator):
    """Random instructions, legal and not: every opcode/memory pair, flags, pads, MUL, odd opcodes."""
    flags = lambda: {f: bool(rng.integers(0, 2)) for f in ("pop_prev", "pop_next", "push_prev", "push_next")}
    for _ in range(600):
        kind = int(rng.integers(0, 5))
        if kind == 0:
            yield MemInsn(opcode=Opcode(int(rng.choice([0, 1, 0, 1, 2, 3, 4]))), memory_type=MemId(int(rng.integers(0, 6))),
                          x_size=int(rng.integers(0, 3)), y_pad_0=int(rng.integers(0, 2)) * int(rng.integers(0, 2)),
                          x_pad_1=int(rng.integers(0, 2)) * int(rng.integers(0, 2)), **flags())
        elif kind == 1:
            yield GemmInsn(opcode=Opcode(int(rng.choice([2, 2, 2, 1]))), **flags())
        elif kind == 2:
            yield AluInsn(opcode=Opcode(int(rng.choice([4, 4, 4, 3]))), alu_opcode=AluOp(int(rng.integers(0, len(AluOp)))),
                          **flags())
        elif kind == 3:
            yield FinishInsn(opcode=Opcode(int(rng.choice([3, 3, 1]))), **flags())
        else:
            yield ("not", "an", "instruction")


@pytest.mark.parametrize("alu_mul", [False, True])
def test_quick_validation_equals_general_validation(alu_mul):
    """validate_instruction / checked_stage accept, reject (same message) and route exactly as the
    field-by-field check and isa.stage_of do."""
    config = VTAConfig.small(alu_mul=alu_mul, alu_requant=alu_mul)   # MUL and REQUANT: illegal, then legal
    accepted = 0
    for index, insn in enumerate(_instructions(np.random.default_rng(int(alu_mul)))):
        outcomes = []
        for check in (lambda: validate_instruction(insn, config, index), lambda: _validate(insn, config, index),
                      lambda: checked_stage(insn, config, index)):
            try:
                outcomes.append(("ok", check()))
            except ProgramError as exc:
                outcomes.append(("error", str(exc)))
        assert outcomes[0] == outcomes[1] == ("ok", None) or outcomes[0] == outcomes[1] == outcomes[2], insn
        if outcomes[0][0] == "ok":
            accepted += 1
            assert outcomes[2] == ("ok", isa.stage_of(insn))
    assert 100 < accepted < 500   # both outcomes well exercised


def test_subclassed_instructions_are_validated_and_applied():
    """Instances of subclasses of the ISA classes take the general paths, with the same effect."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class TaggedAlu(AluInsn):
        tag: str = "x"

    plain = AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=5, uop_end=2, iter_out=2, dst_factor_out=2)
    tagged = TaggedAlu(alu_opcode=AluOp.ADD, use_imm=True, imm=5, uop_end=2, iter_out=2, dst_factor_out=2)
    assert checked_stage(tagged, SMALL) == Stage.COMPUTE
    a, b = _machine(SMALL, 2), _machine(SMALL, 2)
    a.apply(plain)
    b.apply(tagged)
    _assert_same(a, b, "subclass")
    with pytest.raises(ProgramError, match="ALU MUL needs"):
        validate_instruction(dataclasses.replace(tagged, alu_opcode=AluOp.MUL), VTAConfig.small())


def test_index_arrays_reported_to_the_observer_never_change_afterwards():
    """An observer may keep the index arrays it is given (the race detector logs them): later
    micro-op loads must not change them, including one-iteration loops over the micro-op cache."""

    class Keeper:
        def __init__(self):
            self.kept = []

        def sram(self, space, write, index):
            if isinstance(index, np.ndarray):
                self.kept.append((index, index.copy()))

        def dram(self, write, rows):
            pass

    keeper = Keeper()
    m = _machine(SMALL, 6, keeper)
    for insn in (GemmInsn(uop_bgn=0, uop_end=1), GemmInsn(uop_bgn=0, uop_end=3), GemmInsn(uop_bgn=0, uop_end=3, reset_reg=True),
                 AluInsn(uop_bgn=0, uop_end=1, use_imm=True, imm=1), AluInsn(uop_bgn=0, uop_end=3)):
        m.apply(insn)
    assert len(keeper.kept) >= 8
    m.dram[:64] = 0xFF
    m.apply(MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, sram_base=0, dram_base=0, y_size=1, x_size=4, x_stride=4))
    m.write_sram("uop", 0, np.full((4, 3), 7))
    for index, original in keeper.kept:
        np.testing.assert_array_equal(index, original)


# ---------------------------------------------------------------------------- planned loops
DEFAULT = VTAConfig(alu_mul=True, alu_requant=True)   # 16x16 blocks: planned GEMMs multiply in float32
NARROW = VTAConfig(log_batch=1, log_block_in=1, log_block_out=2, log_uop_buff_size=12, log_inp_buff_size=10,
                  log_wgt_buff_size=10, log_acc_buff_size=12, alu_mul=True, alu_requant=True)   # batch 2, 2-in, 4-out


class CallLog:
    """An AccessObserver that keeps every call, in order, with the entries as lists."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def sram(self, space, write, index):
        self.calls.append((space, write, list(range(*index.indices(1 << 30))) if isinstance(index, slice)
                           else np.asarray(index).tolist()))

    def dram(self, write, rows):
        self.calls.append(("dram", write, rows))


def _plan_loop(rng: np.random.Generator, cls, **extra):
    """A random loop, often with steady axes (zero factors) and repeated destinations."""
    bgn = int(rng.integers(0, 8))
    factor = lambda high: int(rng.choice([0, 0, *range(1, high)]))
    fields = dict(uop_bgn=bgn, uop_end=bgn + int(rng.integers(1, 7)), iter_out=int(rng.integers(1, 6)),
                  iter_in=int(rng.integers(1, 6)), dst_factor_out=factor(5), dst_factor_in=factor(3),
                  src_factor_out=factor(5), src_factor_in=factor(3))
    if cls is GemmInsn:
        fields.update(wgt_factor_out=factor(4), wgt_factor_in=factor(3))
    return cls(**fields, **extra)


def _replay(config, seed, insns, monkeypatch, thresholds: dict, spoil=None):
    """Apply ``insns`` in order on a fresh random machine with ``thresholds``; fresh random INP/WGT
    data before each; ``spoil(machine, step)`` may clear written entries. Returns the machine, its
    observer and the outcome of each instruction (None or the error message)."""
    for name, value in thresholds.items():
        monkeypatch.setattr(machine_module, name, value)
    log = CallLog()
    m = _machine(config, seed, log)
    rng = np.random.default_rng(seed + 1)
    log.calls.clear()
    outcomes = []
    for step, insn in enumerate(insns):
        m.write_sram("inp", 0, rng.integers(-128, 128, m.inp.shape))
        m.write_sram("wgt", 0, rng.integers(-128, 128, m.wgt.shape))
        if spoil is not None:
            spoil(m, step)
        try:
            m.apply(insn, step)
            outcomes.append(None)
        except MemoryAccessError as exc:
            outcomes.append(str(exc))
    return m, log, outcomes


_DEFAULTS = {name: getattr(machine_module, name)
             for name in ("_PLAN_LOOP", "_SMALL_LOOP", "_SMALL_LOOP_MACS", "_GEMM_CHUNK", "_SMALL_ALU_LANES")}
PLANNED = _DEFAULTS
UNPLANNED_SMALL = {**_DEFAULTS, "_PLAN_LOOP": 0, "_SMALL_LOOP": 1 << 20}
UNPLANNED_GENERAL = {**_DEFAULTS, "_PLAN_LOOP": 0, "_SMALL_LOOP": 0, "_SMALL_LOOP_MACS": 0, "_GEMM_CHUNK": 7}


def _sets(log: CallLog) -> dict:
    seen: dict = {}
    for space, write, entries in log.calls:
        if space != "dram":
            seen.setdefault((space, write), set()).update(entries)
    return seen


@pytest.mark.parametrize("config", [SMALL, WIDE, NARROW, DEFAULT], ids=["small", "wide", "narrow", "default"])
def test_planned_gemm_equals_unplanned_paths(config, monkeypatch):
    """A GEMM loop run four times (seen, planned, then from its plan) on new data each time, mixed
    with resets and other loops, leaves the np.add.at path's state and observer calls (call by
    call), and the general chunked path's state and accessed entries."""
    rng = np.random.default_rng(21)
    planned_runs = 0
    for trial in range(40):
        loop = _plan_loop(rng, GemmInsn)
        reset = dataclasses.replace(loop, reset_reg=True)
        other = _plan_loop(rng, GemmInsn)
        insns = [loop, other, loop, reset, loop, other, reset, loop, reset, other]
        runs = [_replay(config, trial, insns, monkeypatch, t) for t in (PLANNED, UNPLANNED_SMALL, UNPLANNED_GENERAL)]
        (planned, planned_log, planned_out), (small, small_log, small_out), (general, general_log, general_out) = runs
        assert planned_out == small_out == general_out
        _assert_same(planned, small, f"trial {trial}: {loop}")
        _assert_same(planned, general, f"trial {trial}: {loop}")
        assert planned_log.calls == small_log.calls
        assert _sets(planned_log) == _sets(general_log)
        planned_runs += sum(p is not machine_module._SEEN for p in planned._plans.values())
    assert planned_runs > 40


@pytest.mark.parametrize("config", [SMALL, WIDE], ids=["small", "wide"])
def test_planned_alu_equals_unplanned_paths(config, monkeypatch):
    """ALU loops (independent or not, immediate or tensor operand) from their plans equal the
    one-step path call by call and the chunked path in state, in strict micro-op order."""
    rng = np.random.default_rng(22)
    independent = dependent = 0
    for trial in range(60):
        op = AluOp(int(rng.integers(0, len(AluOp))))
        imm = int(rng.choice(EXTREME_IMMEDIATES)) if trial % 3 == 0 else int(rng.integers(-(1 << 15), 1 << 15))
        loop = _plan_loop(rng, AluInsn, alu_opcode=op, use_imm=trial % 4 != 1, imm=imm)
        if trial % 4 == 0:   # elementwise over contiguous entries, as compiled code does: independent
            loop = dataclasses.replace(loop, uop_end=loop.uop_bgn + 1, dst_factor_out=loop.iter_in, dst_factor_in=1)
        other = dataclasses.replace(loop, alu_opcode=AluOp(int(rng.integers(0, len(AluOp)))), imm=imm // 3 + 1)
        spoil = None
        if trial % 4 == 2:   # elementwise with a tensor operand elsewhere in ACC: independent
            loop = other = dataclasses.replace(loop, use_imm=False, uop_end=loop.uop_bgn + 1,
                                               dst_factor_out=loop.iter_in, dst_factor_in=1,
                                               src_factor_out=loop.iter_in, src_factor_in=1)

            def spoil(m, step, at=loop.uop_bgn, word=[int(rng.integers(0, 8)), 64 + int(rng.integers(0, 8)), 0]):
                if step == 0:
                    m.write_sram("uop", at, np.array([word]))
        insns = [loop, other, loop, loop, other]   # `other` shares the loop (and so its plan)
        lanes = 1 << 30 if trial % 3 else 0
        runs = [_replay(config, trial, insns, monkeypatch, {**t, "_SMALL_ALU_LANES": lanes}, spoil)
                for t in (PLANNED, UNPLANNED_SMALL, {**_DEFAULTS, "_PLAN_LOOP": 0, "_GEMM_CHUNK": 5})]
        (planned, planned_log, planned_out), (small, small_log, small_out), (general, _, general_out) = runs
        assert planned_out == small_out == general_out
        _assert_same(planned, small, f"trial {trial}: {loop}")
        _assert_same(planned, general, f"trial {trial}: {loop}")
        assert planned_log.calls == small_log.calls
        for plan in planned._plans.values():
            if isinstance(plan, machine_module._AluPlan):
                independent += plan.independent
                dependent += not plan.independent
    assert independent > 10 and dependent > 10


@pytest.mark.parametrize("kind", [GemmInsn, AluInsn])
def test_planned_loops_report_unwritten_operands_like_unplanned(kind, monkeypatch):
    """With a plan in hand, an unwritten micro-op or operand sends the loop back to the unplanned
    path, which names the same entry after the same observer calls."""
    rng = np.random.default_rng(23)
    errors = 0
    for trial in range(40):
        loop = _plan_loop(rng, kind)
        cleared = rng.integers(0, 24, 3)
        space = ("uop", "inp", "wgt", "acc")[trial % 4] if kind is GemmInsn else ("uop", "acc")[trial % 2]

        def spoil(m, step, space=space, cleared=cleared):
            if step == 3:
                m.written[space][cleared] = False
            if step == 4:
                m.written[space][:] = True

        insns = [loop] * 6
        runs = [_replay(SMALL, trial, insns, monkeypatch, t, spoil) for t in (PLANNED, UNPLANNED_SMALL)]
        (planned, planned_log, planned_out), (small, small_log, small_out) = runs
        assert planned_out == small_out
        _assert_same(planned, small, f"trial {trial}: {loop}")
        assert planned_log.calls == small_log.calls
        errors += planned_out[3] is not None
    assert errors > 15


def test_plans_follow_micro_op_contents_and_bounds(monkeypatch):
    """A plan belongs to the micro-op words and range it was made from: new words in the same
    entries, the same words elsewhere, and a range running past the cache all behave as unplanned."""
    results = []
    for thresholds in (PLANNED, UNPLANNED_SMALL):
        for name, value in thresholds.items():
            monkeypatch.setattr(machine_module, name, value)
        m = _machine(SMALL, 31)
        depth = SMALL.uop_depth
        m.write_sram("uop", depth - 4, np.array([[1, 2, 3], [4, 5, 6], [1, 1, 1], [0, 7, 2]]))
        loop = GemmInsn(uop_bgn=depth - 4, uop_end=depth, iter_out=2, iter_in=3, dst_factor_out=1, src_factor_in=2)
        outcomes = []
        for step in range(8):
            insn = loop
            if step == 3:   # other words in the same micro-op entries
                m.write_sram("uop", depth - 2, np.array([[9, 9, 9], [3, 0, 1]]))
            if step == 5:   # the same words at other entries
                m.write_sram("uop", 0, m.uop[depth - 4:])
                insn = dataclasses.replace(loop, uop_bgn=0, uop_end=4)
            if step == 7:   # past the micro-op cache
                insn = dataclasses.replace(loop, uop_end=depth + 1)
            try:
                m.apply(insn, step)
                outcomes.append(None)
            except MemoryAccessError as exc:
                outcomes.append(str(exc))
        assert outcomes[7] is not None and "micro-ops" in outcomes[7]
        results.append((m, outcomes))
    (planned, planned_out), (small, small_out) = results
    assert planned_out == small_out
    _assert_same(planned, small, "micro-op contents")


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_planned_gemm_sums_extreme_products_exactly(config, monkeypatch):
    """Destinations that each take many -128 x -128 products: the joined float32 matmul is used
    only while its sums are exact (below 2**24), and results equal the unplanned path's either side."""
    limit = (1 << 24) // (config.block_in << 14)   # micro-ops per destination at which float32 stops being exact
    for group in (limit - 1, limit, limit + 3):
        loop = GemmInsn(uop_bgn=0, uop_end=2, iter_out=group, iter_in=1, dst_factor_out=0, src_factor_out=0,
                        wgt_factor_out=0)
        results = []
        for thresholds in (PLANNED, UNPLANNED_GENERAL):
            for name, value in thresholds.items():
                monkeypatch.setattr(machine_module, name, value)
            m = _machine(config, 3)
            m.write_sram("uop", 0, np.array([[0, 0, 0], [1, 0, 0]]))
            for _ in range(3):
                m.apply(loop)
            results.append(m)
        _assert_same(*results, f"{group} micro-ops per destination")
        plans = [p for p in results[0]._plans.values() if p is not machine_module._SEEN]
        assert [p.group for p in plans] == [group if group < limit else 0]


def test_plans_are_forgotten_beyond_the_limit_without_changing_results(monkeypatch):
    """A machine keeps at most _MAX_PLANS plans; forgetting them (loops then seen afresh) changes nothing."""
    rng = np.random.default_rng(24)
    loops = [_plan_loop(rng, GemmInsn) for _ in range(3)] + [_plan_loop(rng, AluInsn, use_imm=True, imm=3)]
    insns = loops * 4
    results = []
    for thresholds in ({**PLANNED, "_MAX_PLANS": 2}, UNPLANNED_SMALL):
        m, log, outcomes = _replay(SMALL, 5, insns, monkeypatch, thresholds)
        assert len(m._plans) <= 2
        results.append((m, log, outcomes))
    (planned, planned_log, planned_out), (small, small_log, small_out) = results
    assert planned_out == small_out
    _assert_same(planned, small, "plan limit")
    assert planned_log.calls == small_log.calls


@pytest.mark.parametrize("memory", list(MemId))
@pytest.mark.parametrize("x_size", [0, 1])
def test_plain_int_memory_types_route_and_validate_like_enums(memory, x_size):
    """A LOAD whose memory_type is a plain int goes where the enum goes (INP/WGT to load), and a plain
    int OUT is rejected like MemId.OUT, not routed to compute (the quick path compared by identity)."""
    as_enum = MemInsn(opcode=Opcode.LOAD, memory_type=memory, x_size=x_size, y_size=1, x_stride=1)
    as_int = dataclasses.replace(as_enum, memory_type=int(memory))
    outcomes = []
    for insn in (as_enum, as_int):
        try:
            outcomes.append(("ok", checked_stage(insn, SMALL, 0)))
        except ProgramError as exc:
            outcomes.append(("error", str(exc).replace(repr(int(memory)), repr(memory))))
    assert outcomes[0][0] == outcomes[1][0], outcomes
    if outcomes[0][0] == "ok":
        assert outcomes[0][1] == outcomes[1][1] == isa.stage_of(as_enum)
    else:
        assert "LOAD of memory type OUT is illegal" in outcomes[1][1]


@pytest.mark.parametrize("op", [AluOp.ADD, AluOp.MIN, AluOp.MAX, AluOp.SHR, AluOp.MUL])
def test_numpy_scalar_immediates_equal_python_ints(op):
    """An ALU immediate given as a numpy int32 (as decoded arrays hand out) computes what the Python
    int does, on the Python-row path too (int32 + Python int used to overflow there)."""
    results = []
    for imm in (np.int32(-(1 << 15)), -(1 << 15), np.int32(32767), 32767):
        m = _machine(SMALL, 9)
        m.apply(AluInsn(alu_opcode=op, use_imm=True, imm=imm, uop_end=2, iter_out=2, dst_factor_out=1))
        results.append(m.acc.copy())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[2], results[3])
