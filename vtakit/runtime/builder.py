"""``ProgramBuilder``: VTA's runtime command queue, building a :class:`Program` (docs/architecture.md §4).

It mirrors ``tvm:vta/runtime/runtime.cc`` so that hand-written schedules (benchmarks, tests,
random programs) and the compiler emit instruction streams the way VTA's runtime did:

* ``load_2d`` / ``store_2d`` are ``LoadBuffer2D`` / ``StoreBuffer2D``: DRAM operands are device
  arrays (or builder-owned arrays) plus an element offset, ``dram_base = phys_addr / elem_bytes +
  offset``.
* ``gemm`` / ``alu`` are ``PushGEMMOp`` / ``PushALUOp``: a micro-op kernel (a list of micro-ops)
  plus the two-level loop. Kernels are cached in the micro-op SRAM as in ``UopQueue``: a resident
  kernel is reused, a new one is appended (wrapping to 0 and evicting overlapped kernels when the
  SRAM is full) and one LOAD UOP is emitted for it. The DRAM micro-op image stores each distinct
  kernel once; LOAD UOP addresses are relocated when ``finish`` places the image.
* ``dep_pop`` / ``dep_push`` are ``DepPop`` / ``DepPush`` with VTA's exact rules: a pop is pending
  until the next instruction of the receiving stage is created (a second pop of the same kind first
  commits the pending one on a no-op); a push first commits the pushing stage's pending pops, then
  sets the flag on the last instruction of the stream if that instruction belongs to the pushing
  stage and does not carry the flag yet, and otherwise appends a token-only no-op.
* ``finish`` is ``Synchronize``: push store->compute and load->compute, pop both on compute,
  commit them on a no-op (FINISH carries no pops) and append FINISH.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence

import numpy as np

from vtakit.errors import AllocationError, ISAError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Stage, Uop
from vtakit.runtime.device import default_alignment, dram_dtype
from vtakit.sim.program import Program, Segment

__all__ = ["ProgramBuilder", "HostArray", "DramArray", "Stage", "elem_bytes"]

# Token queues exist only between neighbouring stages.
_QUEUES = {(Stage.LOAD, Stage.COMPUTE), (Stage.COMPUTE, Stage.LOAD),
           (Stage.COMPUTE, Stage.STORE), (Stage.STORE, Stage.COMPUTE)}
_LOADABLE = (MemId.INP, MemId.WGT, MemId.ACC, MemId.ACC_8BIT)
_STAGE_OF = {s.value: s for s in Stage}      # Stage(x) by lookup: the enum call is slow at 10^5 tokens
_MEMORY_OF = {m.value: m for m in MemId}


def elem_bytes(config: VTAConfig, mem: MemId) -> int:
    """Bytes of one DRAM-side element of memory ``mem`` (the unit of dram_base and x_stride)."""
    return {MemId.UOP: config.uop_elem_bytes, MemId.WGT: config.wgt_elem_bytes, MemId.INP: config.inp_elem_bytes,
            MemId.ACC: config.acc_elem_bytes, MemId.OUT: config.out_elem_bytes,
            MemId.ACC_8BIT: config.acc8_elem_bytes}[MemId(mem)]


class DramArray(Protocol):
    """What a DRAM operand needs: a device array or a :class:`HostArray`."""

    phys_addr: int

    @property
    def nbytes(self) -> int: ...


@dataclass
class HostArray:
    """An array in the DRAM layout of a program built without a device; it becomes a segment."""

    phys_addr: int
    data: np.ndarray
    name: str = ""

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    def numpy(self) -> np.ndarray:
        return self.data.copy()


class _UopCache:
    """VTA's ``UopQueue`` placement: an append region over the micro-op SRAM with wrap-around."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.cursor = 0
        self.resident: dict[tuple[Uop, ...], int] = {}

    def place(self, kernel: tuple[Uop, ...]) -> tuple[int, bool]:
        """SRAM start of ``kernel`` and whether it had to be loaded."""
        if kernel in self.resident:
            return self.resident[kernel], False
        if len(kernel) > self.depth:
            raise ProgramError(f"micro-op kernel of {len(kernel)} micro-ops exceeds the micro-op SRAM "
                               f"({self.depth} entries)")
        if self.cursor + len(kernel) > self.depth:
            self.cursor = 0
        bgn, end = self.cursor, self.cursor + len(kernel)
        self.resident = {k: s for k, s in self.resident.items() if s + len(k) <= bgn or s >= end}
        self.resident[kernel] = bgn
        self.cursor = end
        return bgn, True


def _as_uops(uops: Iterable[Uop | Sequence[int]]) -> tuple[Uop, ...]:
    kernel = tuple(u if isinstance(u, Uop) else Uop(*u) for u in uops)
    if not kernel:
        raise ProgramError("a micro-op kernel needs at least one micro-op")
    return kernel


class ProgramBuilder:
    """Builds a :class:`Program` the way VTA's runtime builds its instruction queue.

    With a ``device``, DRAM operands are that device's arrays (``device.array``/``builder.array``)
    and ``finish`` allocates the micro-op image on the device; the program then runs on the
    arrays' current contents. Without one, ``array``/``empty`` lay data out in the program's own
    DRAM image (they become its segments) and the micro-op image follows the data.
    """

    def __init__(self, config: VTAConfig | None = None, device: Any = None, name: str = "") -> None:
        if config is None:
            config = VTAConfig() if device is None else device.config
        if device is not None and device.config != config:
            raise ProgramError(config.mismatch(device.config, "this builder", "its device"))
        self.config = config
        self.device = device
        self.name = name
        self._insns: list[isa.Instruction] = []
        self._pending_prev = {s: False for s in Stage}
        self._pending_next = {s: False for s in Stage}
        self._cache = _UopCache(config.uop_depth)
        self._image: list[Uop] = []
        self._image_offset: dict[tuple[Uop, ...], int] = {}
        self._relocations: list[tuple[int, int]] = []    # (LOAD UOP insn index, image offset)
        self._host_arrays: list[HostArray] = []
        self._sources: dict[int, Any] = {}               # id -> device arrays read by loads
        self._host_end = 0
        self._dram_end = 0
        self._finished = False
        self._alignment = default_alignment(config) if device is None else device.alignment
        self._elem_bytes = {mem: elem_bytes(config, mem) for mem in MemId}

    # ------------------------------------------------------------------ inspection
    @property
    def insns(self) -> tuple[isa.Instruction, ...]:
        """The instructions so far (LOAD UOP dram_base values are relocated by ``finish``)."""
        return tuple(self._insns)

    @property
    def uop_image(self) -> tuple[Uop, ...]:
        return tuple(self._image)

    # ------------------------------------------------------------------ data
    def array(self, data: Any, dtype: Any = None, name: str = "") -> Any:
        """A DRAM array holding ``data``: on the device if there is one, else in the program image."""
        self._check_open()
        host = np.array(data, dtype=dtype)
        if self.device is not None:
            return self.device.array(host, name=name)
        dram_dtype(host.dtype)
        addr = -(-self._host_end // self._alignment) * self._alignment
        self._host_end = addr + host.nbytes
        arr = HostArray(addr, host, name)
        self._host_arrays.append(arr)
        self._dram_end = max(self._dram_end, self._host_end)
        return arr

    def empty(self, shape: int | Sequence[int], dtype: Any = np.int8, name: str = "") -> Any:
        """A zero-filled (program image) or uninitialised (device) DRAM array."""
        if self.device is not None:
            self._check_open()
            return self.device.empty(shape, dtype, name=name)
        try:
            zeros = np.zeros(shape, dtype=dram_dtype(dtype))
        except (TypeError, ValueError, MemoryError) as exc:
            raise AllocationError(f"cannot make a program-image array of shape {shape!r}: {exc}") from exc
        return self.array(zeros, name=name)

    def _dram_base(self, mem: MemId, operand: DramArray | int, offset: int) -> int:
        size = self._elem_bytes[mem]
        if isinstance(operand, (int, np.integer)):
            return int(operand) + offset
        if operand.phys_addr % size:
            raise ProgramError(f"DRAM array {getattr(operand, 'name', '') or ''} at {operand.phys_addr:#x} is not "
                               f"aligned to the {size}-byte {MemId(mem).name} element")
        return operand.phys_addr // size + offset

    def _note_access(self, mem: MemId, dram_base: int, y_size: int, x_size: int, x_stride: int) -> None:
        if x_size and y_size:
            last = dram_base + (y_size - 1) * x_stride + x_size
            self._dram_end = max(self._dram_end, last * self._elem_bytes[mem])

    # ------------------------------------------------------------------ DMA
    def load_2d(self, mem: MemId, sram_base: int, src: DramArray | int, y_size: int, x_size: int, x_stride: int | None = None,
                *, offset: int = 0, y_pad_0: int = 0, y_pad_1: int = 0, x_pad_0: int = 0, x_pad_1: int = 0) -> int:
        """``LoadBuffer2D``: y_size rows of x_size elements (stride x_stride) into SRAM, zero padded.

        ``src`` is a DRAM array (offset counted in ``mem`` elements) or an absolute element index.
        INP/WGT loads run on the load stage, ACC/ACC_8BIT loads on compute. Returns the index of
        the LOAD instruction.
        """
        mem = _MEMORY_OF[mem] if mem in _MEMORY_OF else MemId(mem)
        if mem not in _LOADABLE:
            raise ProgramError(f"load_2d of memory {mem.name}; expected one of {[m.name for m in _LOADABLE]} "
                               "(micro-ops are loaded by gemm/alu kernels)")
        stride = x_size if x_stride is None else x_stride
        base = self._dram_base(mem, src, offset)
        self._note_access(mem, base, y_size, x_size, stride)
        if not isinstance(src, (int, np.integer)) and self.device is not None:
            self._sources[id(src)] = src
        stage = Stage.LOAD if mem in (MemId.INP, MemId.WGT) else Stage.COMPUTE
        return self._new(stage, MemInsn, opcode=Opcode.LOAD, memory_type=mem, sram_base=sram_base, dram_base=base,
                         y_size=y_size, x_size=x_size, x_stride=stride, y_pad_0=y_pad_0, y_pad_1=y_pad_1,
                         x_pad_0=x_pad_0, x_pad_1=x_pad_1)

    def store_2d(self, sram_base: int, dst: DramArray | int, y_size: int, x_size: int, x_stride: int | None = None,
                 *, offset: int = 0) -> int:
        """``StoreBuffer2D``: y_size rows of x_size OUT entries from SRAM to DRAM (stride x_stride).
        Returns the index of the STORE instruction."""
        stride = x_size if x_stride is None else x_stride
        base = self._dram_base(MemId.OUT, dst, offset)
        self._note_access(MemId.OUT, base, y_size, x_size, stride)
        return self._new(Stage.STORE, MemInsn, opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram_base,
                         dram_base=base, y_size=y_size, x_size=x_size, x_stride=stride)

    # ------------------------------------------------------------------ compute
    def _load_kernel(self, kernel: tuple[Uop, ...]) -> int:
        bgn, new = self._cache.place(kernel)
        if new:
            if kernel not in self._image_offset:
                self._image_offset[kernel] = len(self._image)
                self._image.extend(kernel)
            self._relocations.append((len(self._insns), self._image_offset[kernel]))
            self._new(Stage.COMPUTE, MemInsn, opcode=Opcode.LOAD, memory_type=MemId.UOP, sram_base=bgn, dram_base=0,
                      y_size=1, x_size=len(kernel), x_stride=len(kernel))
        return bgn

    def gemm(self, uops: Iterable[Uop | Sequence[int]], *, iter_out: int = 1, iter_in: int = 1,
             dst_factor: tuple[int, int] = (0, 0), src_factor: tuple[int, int] = (0, 0),
             wgt_factor: tuple[int, int] = (0, 0), reset: bool = False, epilogue: bool = False) -> None:
        """``PushGEMMOp``: for i < iter_out, j < iter_in, each micro-op, acc[dst] += inp[src] . wgt[wgt]^T
        with every index advanced by i * factor[0] + j * factor[1]; ``reset`` zeroes acc[dst] instead.
        ``epilogue`` sets GEMM's epilogue bit: with ``reset`` a bias reset (BIAS_PRELOAD: acc[dst] =
        acc[src], src indexing ACC), else a requantising OUT write-back (GEMM_OUT_REQUANT)."""
        missing = isa.gemm_epilogue_missing(reset, epilogue, self.config)
        if missing is not None:
            raise ProgramError(missing)
        kernel = _as_uops(uops)
        bgn = self._load_kernel(kernel)
        self._new(Stage.COMPUTE, GemmInsn, reset_reg=reset, uop_bgn=bgn, uop_end=bgn + len(kernel), iter_out=iter_out,
                  iter_in=iter_in, dst_factor_out=dst_factor[0], dst_factor_in=dst_factor[1],
                  src_factor_out=src_factor[0], src_factor_in=src_factor[1],
                  wgt_factor_out=wgt_factor[0], wgt_factor_in=wgt_factor[1], epilogue=epilogue)

    def set_requant(self, imm: int) -> None:
        """An ALU REQUANT with no micro-ops: it only sets the requant register (the control field
        ``imm``, :func:`vtakit.hw.isa.requant_imm`) that GEMM_OUT_REQUANT's write-back applies."""
        missing = isa.alu_op_missing(AluOp.REQUANT, self.config)
        if missing is not None:
            raise ProgramError(missing)
        if not isinstance(imm, int) or isinstance(imm, bool) or imm & ~isa.REQUANT_IMM_MASK:
            raise ProgramError(f"set_requant needs a REQUANT control field (isa.requant_imm), got {imm!r}")
        self._new(Stage.COMPUTE, AluInsn, alu_opcode=AluOp.REQUANT, use_imm=True, imm=imm, uop_bgn=0, uop_end=0)

    def alu(self, op: AluOp, uops: Iterable[Uop | Sequence[int]], *, iter_out: int = 1, iter_in: int = 1,
            dst_factor: tuple[int, int] = (0, 0), src_factor: tuple[int, int] = (0, 0),
            imm: int | None = None, use_imm: bool | None = None) -> None:
        """``PushALUOp``: acc[dst] = op(acc[dst], imm if given else acc[src]) over the same loop.

        ``use_imm=False`` with an ``imm`` is REQUANT's tensor form: ``acc[src]`` is the addend and
        ``imm`` the control field (:func:`vtakit.hw.isa.requant_imm`)."""
        op = AluOp(op)
        missing = isa.alu_op_missing(op, self.config)
        if missing is not None:
            raise ProgramError(missing)
        use_imm = imm is not None if use_imm is None else bool(use_imm)
        if use_imm and imm is None:
            raise ProgramError(f"ALU {op.name} with use_imm needs an imm")
        if op == AluOp.REQUANT:
            if imm is None or not isinstance(imm, int) or imm & ~isa.REQUANT_IMM_MASK:
                raise ProgramError(f"ALU REQUANT needs its control field as imm (isa.requant_imm: shift 0..31, relu, "
                                   f"rounding; bits 15:7 zero), got {imm!r}")
        elif not use_imm and imm is not None:
            raise ProgramError(f"ALU {op.name} tensor (use_imm=False) takes no imm; only REQUANT reads its imm field "
                               f"in the tensor form, got imm={imm!r}")
        kernel = _as_uops(uops)
        bgn = self._load_kernel(kernel)
        self._new(Stage.COMPUTE, AluInsn, alu_opcode=op, use_imm=use_imm, imm=0 if imm is None else imm,
                  uop_bgn=bgn, uop_end=bgn + len(kernel), iter_out=iter_out, iter_in=iter_in,
                  dst_factor_out=dst_factor[0], dst_factor_in=dst_factor[1],
                  src_factor_out=src_factor[0], src_factor_in=src_factor[1])

    # ------------------------------------------------------------------ instructions and tokens
    def append(self, insn: isa.Instruction) -> int:
        """Append an instruction (its stage's pending pops are attached); return its index."""
        self._check_open()
        if isinstance(insn, FinishInsn):
            raise ProgramError("FINISH is appended by finish(), not append()")
        pops = self._take_pending_pops(isa.stage_of(insn))
        if pops:
            insn = dataclasses.replace(insn, pop_prev=insn.pop_prev or pops["pop_prev"],
                                       pop_next=insn.pop_next or pops["pop_next"])
        self._insns.append(insn)
        return len(self._insns) - 1

    def _new(self, stage: Stage, kind: type, **fields: Any) -> int:
        """Append a new instruction of ``kind`` (which runs on ``stage``), built with that stage's
        pending pops (as :meth:`append`, without copying the instruction); return its index."""
        self._check_open()
        self._insns.append(kind(**fields, **self._take_pending_pops(stage)))
        return len(self._insns) - 1

    def _take_pending_pops(self, stage: Stage) -> dict[str, bool]:
        """``stage``'s pending pops as instruction flags (none: empty), now no longer pending."""
        if not (self._pending_prev[stage] or self._pending_next[stage]):
            return {}
        pops = {"pop_prev": self._pending_prev[stage], "pop_next": self._pending_next[stage]}
        self._pending_prev[stage] = self._pending_next[stage] = False
        return pops

    @staticmethod
    def _check_queue(src: Stage, dst: Stage) -> tuple[Stage, Stage]:
        try:
            src, dst = _STAGE_OF[src], _STAGE_OF[dst]
        except (KeyError, TypeError) as exc:
            raise ProgramError(f"token queue ({src!r}, {dst!r}): stages must be Stage.LOAD/COMPUTE/STORE "
                               f"({', '.join(f'{s.name}={s.value}' for s in Stage)})") from exc
        if (src, dst) not in _QUEUES:
            raise ProgramError(f"there is no token queue from {src.name} to {dst.name}; queues connect "
                               "LOAD<->COMPUTE and COMPUTE<->STORE")
        return src, dst

    def _noop(self, stage: Stage, **flags: bool) -> None:
        opcode = Opcode.STORE if stage == Stage.STORE else Opcode.LOAD
        memory = MemId.INP if stage == Stage.LOAD else MemId.UOP
        self._insns.append(MemInsn(opcode=opcode, memory_type=memory, y_size=0, x_size=0, x_stride=0, **flags))

    def commit_pending_pops(self, stage: Stage) -> None:
        """``CommitPendingPop``: put ``stage``'s pending pops on a token-only no-op now."""
        self._check_open()
        self._commit_pending_pop(Stage(stage))

    def _commit_pending_pop(self, stage: Stage) -> None:
        pops = self._take_pending_pops(stage)
        if pops:
            self._noop(stage, **pops)

    def dep_pop(self, src: Stage, dst: Stage) -> None:
        """Stage ``dst`` waits for a token from ``src`` before its next instruction."""
        self._check_open()
        src, dst = self._check_queue(src, dst)
        pending = self._pending_prev if src < dst else self._pending_next
        if pending[dst]:
            self._commit_pending_pop(dst)
        pending[dst] = True

    def dep_push(self, src: Stage, dst: Stage) -> None:
        """Stage ``src`` posts a token to ``dst`` after its last instruction so far."""
        self._check_open()
        src, dst = self._check_queue(src, dst)
        self._commit_pending_pop(src)
        flag = "push_next" if src < dst else "push_prev"
        if self._insns and isa.stage_of(self._insns[-1]) == src and not getattr(self._insns[-1], flag):
            self._insns[-1] = dataclasses.replace(self._insns[-1], **{flag: True})
        else:
            self._noop(src, **{flag: True})

    # ------------------------------------------------------------------ finish
    def _check_open(self) -> None:
        if self._finished:
            raise ProgramError("this ProgramBuilder has finished; start a new one")

    def finish(self) -> Program:
        """Synchronise every stage, append FINISH, place the micro-op image and return the program."""
        self._check_open()
        self.dep_push(Stage.STORE, Stage.COMPUTE)
        self.dep_push(Stage.LOAD, Stage.COMPUTE)
        self.dep_pop(Stage.STORE, Stage.COMPUTE)
        self.dep_pop(Stage.LOAD, Stage.COMPUTE)
        self._commit_pending_pop(Stage.COMPUTE)
        self._insns.append(FinishInsn())
        self._finished = True

        uop_bytes = isa.encode_uops(self._image, self.config)
        region = None                      # the device block holding the micro-op image
        if self.device is not None:
            if self._image:
                region = self.device.allocator.alloc(len(uop_bytes))
            uop_addr = region or 0
            segments = [Segment(a.phys_addr, a.numpy().tobytes(), a.name) for a in self._sources.values()]
        else:
            uop_addr = -(-self._host_end // self._alignment) * self._alignment
            segments = [Segment(a.phys_addr, a.data.tobytes(), a.name) for a in self._host_arrays]
        base = uop_addr // isa.UOP_BYTES
        for index, offset in self._relocations:
            self._insns[index] = dataclasses.replace(self._insns[index], dram_base=base + offset)
        try:
            isa.encode(self._insns, self.config)
        except ISAError as exc:
            if region is not None:
                self.device.allocator.free(region)
            raise ISAError(f"program {self.name!r}: {exc}") from exc
        program = Program(self.config, list(self._insns), list(self._image), uop_addr, segments,
                          dram_size=max(self._dram_end, uop_addr + len(uop_bytes)), name=self.name)
        if self.device is not None:
            if region is not None:
                self.device.write(region, uop_bytes)
            self.device.register_program(program, region)
        return program
