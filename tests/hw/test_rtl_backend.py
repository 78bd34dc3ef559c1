"""The rtl backend's contract: deadlocks raise, bad launches raise, traces are written, stats filled."""

import re

import numpy as np
import pytest

from tests.programs import CASES, run_program
from tests.programs.runner import insn_address
from vtakit.errors import DeadlockError, MemoryAccessError, ProgramError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode
from vtakit.sim.backend import Launch, get_backend
from vtakit.sim.program import Program, Segment
from vtakit.sim.rtl import run_unchecked

SMALL = VTAConfig.small()


def _nop(opcode, **flags):
    return MemInsn(opcode=opcode, memory_type=MemId.OUT if opcode == Opcode.STORE else MemId.INP, x_size=0, **flags)


def _launch(insns, config=SMALL, dram_size=4096, insn_addr=0):
    dram = np.zeros(dram_size, dtype=np.uint8)
    encoded = isa.encode(insns, config)
    if insn_addr + len(encoded) <= dram_size:
        dram[insn_addr:insn_addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    return Launch(config, list(insns), dram, insn_addr)


def _deadlock_cycle(message):
    return int(re.search(r"deadlock at cycle (\d+)", message).group(1))


def _both_deadlock(insns, config=SMALL, **program_args):
    """fsim, rtl and the cycle model all deadlock; rtl and cycle name the same cycle (docs/timing.md §6)."""
    program = Program(config, insns, **program_args)
    with pytest.raises(DeadlockError):
        run_program(program, "fsim")
    with pytest.raises(DeadlockError) as cycle_info:
        run_program(program, "cycle")
    with pytest.raises(DeadlockError) as info:
        run_program(program, "rtl")
    assert _deadlock_cycle(str(info.value)) == _deadlock_cycle(str(cycle_info.value))
    return str(info.value)


def test_circular_token_wait_is_a_deadlock():
    """compute waits for store, store waits for compute: both backends report it, naming both."""
    message = _both_deadlock([_nop(Opcode.STORE, pop_prev=True, push_prev=True),
                              GemmInsn(uop_bgn=0, uop_end=0, pop_next=True, push_next=True),
                              FinishInsn()])
    assert "store: instruction 0" in message and "compute_to_store" in message
    assert "compute: instruction 1" in message and "store_to_compute" in message
    assert "load: idle" in message


def test_full_command_queue_deadlock():
    """Store holds one waiting STORE plus a full queue; fetch stalls before the compute push."""
    depth = SMALL.cmd_queue_depth
    stores = [_nop(Opcode.STORE, pop_prev=True, push_prev=True) for _ in range(depth + 2)]
    pushes = [GemmInsn(uop_bgn=0, uop_end=0, push_next=True) for _ in range(depth + 2)]
    pops = [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True) for _ in range(depth + 1)]
    message = _both_deadlock(stores + pushes + pops + [FinishInsn(pop_next=True)])
    assert "fetch: stalled on a full command queue" in message
    assert "compute: idle" in message


def test_full_token_queue_deadlock():
    """Load pushes more tokens than the queue holds while compute first waits on store."""
    depth = SMALL.token_queue_depth
    loads = [_nop(Opcode.LOAD, push_next=True) for _ in range(depth + 1)]
    compute = [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True)] + \
              [GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True) for _ in range(depth + 1)]
    store = [_nop(Opcode.STORE, pop_prev=True, push_prev=True)]
    message = _both_deadlock(loads + compute + store + [GemmInsn(uop_bgn=0, uop_end=0, push_next=True),
                                                          FinishInsn()])
    assert "cannot push, full queue(s) load_to_compute" in message


def test_deadlock_names_only_the_full_queue():
    """Compute has pushed compute->load and blocks on a full compute->store: only that queue is named."""
    depth = SMALL.token_queue_depth
    insns = ([_nop(Opcode.STORE, push_prev=True)] * (depth + 1)
             + [GemmInsn(uop_bgn=0, uop_end=0, push_next=True)] * depth
             + [GemmInsn(uop_bgn=0, uop_end=0, push_prev=True, push_next=True), _nop(Opcode.LOAD, pop_next=True)]
             + [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True)] * (depth + 1)
             + [_nop(Opcode.STORE, pop_prev=True)] * (depth + 1) + [FinishInsn()])
    message = _both_deadlock(insns)
    assert f"compute: instruction {2 * depth + 1}" in message
    assert "cannot push, full queue(s) compute_to_store;" in message
    assert "store: instruction 8" in message and "full queue(s) store_to_compute;" in message


def test_deadlock_behind_running_dma():
    """Padded loads stream while the load->compute queue fills (default configuration, shallow queues)."""
    config = VTAConfig().replace(token_queue_depth=2, cmd_queue_depth=2)
    load = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=0x1000 // config.inp_elem_bytes, y_size=2,
                   x_size=3, x_stride=3, y_pad_0=1, x_pad_1=2, push_next=True)
    insns = ([load] * 3 + [GemmInsn(uop_bgn=0, uop_end=0, pop_next=True, push_next=True),
                           _nop(Opcode.STORE, pop_prev=True, push_prev=True)]
             + [GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True)] * 3 + [FinishInsn()])
    message = _both_deadlock(insns, config, segments=[Segment(0x1000, bytes(range(256)) * 4, "data")],
                             dram_size=0x2000)
    assert "load: instruction 2" in message and "cannot push, full queue(s) load_to_compute" in message


def test_misaligned_instruction_address():
    launch = _launch([FinishInsn()], insn_addr=8)
    with pytest.raises(ProgramError, match="0x8 is not 16-byte aligned"):
        get_backend("rtl")(launch)


def test_instruction_stream_past_dram():
    launch = _launch([FinishInsn()] * 4, dram_size=48)
    with pytest.raises(MemoryAccessError, match="4 instructions at 0x0 runs past the end of DRAM"):
        get_backend("rtl")(launch)


def test_dma_past_dram():
    load = MemInsn(opcode=Opcode.LOAD, memory_type=MemId.INP, dram_base=1 << 20, y_size=1, x_size=1, x_stride=1,
                   push_next=True)
    with pytest.raises(MemoryAccessError, match=r"DRAM bytes \[0x400000, 0x400004\) out of range"):
        get_backend("rtl")(_launch([load, FinishInsn(pop_prev=True)]))    # fsim's check, before the RTL runs
    with pytest.raises(MemoryAccessError, match="DRAM read of 4 bytes at 0x400000 runs past the end"):
        run_unchecked(_launch([load, FinishInsn(pop_prev=True)]))         # the harness DRAM model's own check


def test_trace_writes_vcd_and_gtkw(tmp_path):
    program = CASES["relu_clip"](SMALL).program
    addr = insn_address(program)
    encoded = program.encoded_insns()
    dram = program.initial_dram(addr + len(encoded))
    dram[addr:addr + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    trace = tmp_path / "run.vcd"
    stats = get_backend("rtl")(Launch(SMALL, list(program.insns), dram, addr, trace=trace))
    text = trace.read_text()
    assert "$enddefinitions" in text and "retire" in text and "arvalid" in text
    gtkw = (tmp_path / "run.gtkw").read_text()
    assert "[dumpfile]" in gtkw and "run.vcd" in gtkw and "arvalid" in gtkw
    assert stats.cycles > 0


@pytest.mark.parametrize("insns,message", [
    ([], "has no FINISH"),
    ([FinishInsn(), GemmInsn(uop_bgn=0, uop_end=0)], "FINISH must be the last instruction"),
    ([GemmInsn(uop_bgn=0, uop_end=0, pop_prev=True), FinishInsn()], "unbalanced dependency tokens"),
    ([MemInsn(opcode=Opcode.STORE, memory_type=MemId.INP, y_size=1, x_size=1, x_stride=1), FinishInsn()],
     "STORE of memory type INP is illegal"),
], ids=["empty", "finish-not-last", "unbalanced", "illegal-pair"])
def test_malformed_programs_are_program_errors(insns, message):
    """fsim's static checks run first: a clear ProgramError, not a deadlock report or silent garbage."""
    with pytest.raises(ProgramError, match=message):
        get_backend("rtl")(_launch(insns))


@pytest.mark.parametrize("memory,depth", [(MemId.INP, SMALL.inp_depth), (MemId.ACC, SMALL.acc_depth)])
def test_dma_write_past_the_sram_is_a_memory_error(memory, depth):
    """A load whose footprint runs past the SRAM: fsim's check names the instruction; on the hardware
    alone it trips the RTL's Assert, a MemoryAccessError naming the entry."""
    load = MemInsn(opcode=Opcode.LOAD, memory_type=memory, sram_base=depth - 1, y_size=1, x_size=2, x_stride=2,
                   push_next=memory == MemId.INP)
    insns = [load, FinishInsn(pop_prev=memory == MemId.INP)]
    with pytest.raises(MemoryAccessError, match=rf"instruction 0 .*entries \[{depth - 1}, {depth + 1}\) out of range"):
        get_backend("rtl")(_launch(insns))
    with pytest.raises(MemoryAccessError, match=f"SRAM write to entry {depth} is out of range"):
        run_unchecked(_launch(insns))


def test_trace_needs_a_vcd_path(tmp_path):
    """A timeline path (.json) is the cycle backend's: the rtl backend refuses it instead of writing VCD there."""
    launch = _launch([FinishInsn()])
    launch.trace = tmp_path / "run.json"
    with pytest.raises(SimError, match=r"must end in \.vcd"):
        get_backend("rtl")(launch)
    assert not launch.trace.exists()


def test_stats_are_filled():
    program = CASES["gemm_epilogue"](SMALL).program
    _, fsim_stats = run_program(program, "fsim")
    _, stats = run_program(program, "rtl")
    assert stats.backend == "rtl" and stats.sim_seconds > 0
    assert stats.counters == fsim_stats.counters
    assert set(stats.busy_cycles) == {"fetch", "load", "compute", "store"}
    assert all(0 < busy <= stats.cycles for busy in stats.busy_cycles.values())
    assert stats.dram_read_bytes > 0 and stats.dram_write_bytes == stats.counters["out_store_nbytes"]
    assert len(stats.retire_cycles) == len(program.insns) and min(stats.retire_cycles) > 0
    assert stats.retire_cycles[-1] == stats.cycles == max(stats.retire_cycles)
