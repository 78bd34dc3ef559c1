"""The FPGA host driver (vtakit.runtime.fpga) end to end against the RTL simulation of the full shell
(vtakit.sim.shell_sim): register accesses are AXI4-Lite transactions, DRAM is the rtl harness's model
at the DMA buffer's physical address. Results are compared byte for byte with fsim."""

import sys
import types

import numpy as np
import pytest

import vtakit
from vtakit.errors import ConfigError, DeadlockError, DeviceError, VtakitError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.shell import REGISTERS, SHELL_ID, config_words
from vtakit.runtime import Device
from vtakit.runtime.blocked_gemm import gemm_program
from vtakit.runtime.fpga import (REG, FPGADevice, FPGAStats, PynqBuffer, PynqMMIO, open_pynq, program_extent,
                                 relocate)
from vtakit.runtime.replay import run_fresh
from vtakit.sim.program import Program
from vtakit.sim.shell_sim import SimBuffer, SimulatedShell

SMALL = VTAConfig.small()
PHYS = 0x1800_0000


class Recording:
    """The simulated shell's MMIO, logging every access into the buffer's call log."""

    def __init__(self, shell: SimulatedShell):
        self.shell, self.log = shell, shell.buffer.calls

    def read32(self, offset):
        value = self.shell.read32(offset)
        self.log.append(("read", offset, value))
        return value

    def write32(self, offset, value):
        self.log.append(("write", offset, value))
        self.shell.write32(offset, value)


def _board(size=1 << 16, config=SMALL):
    shell = SimulatedShell(config, size=size, phys_addr=PHYS)
    mmio = Recording(shell)
    # the shell is an RTL simulation: a board's 10 s default is far too short on a loaded test machine
    return shell, mmio, FPGADevice(mmio, shell.buffer, config, timeout=600)


def _check_run(program, stats, dev, log):
    """DRAM identical to fsim's; the launch sequence and cache maintenance in the right order."""
    extent = program_extent(program)
    _, ref = run_fresh(program)
    assert extent == program.dram_size
    np.testing.assert_array_equal(dev.read(0, extent), ref[:extent])
    start = log.index(("write", REG["CONTROL"], 1))
    flush, invalidate = log.index("flush"), log.index("invalidate")
    assert log.count("flush") == log.count("invalidate") == 1
    assert flush < log.index(("write", REG["INSN_COUNT"], len(program.insns))) < start
    assert log.index(("write", REG["INSN_ADDR"], stats.insn_addr)) < start
    done = [i for i, e in enumerate(log) if e[:2] == ("read", REG["CONTROL"]) and e[2] & 2 and i > start]
    assert done and start < done[0] < invalidate
    assert invalidate < max(i for i, e in enumerate(log) if e[:2] == ("read", REG["CYCLES"]))
    assert PHYS <= stats.insn_addr < PHYS + dev.size and stats.insn_addr % 16 == 0
    assert stats.insn_count == len(program.insns) and stats.polls >= 1


@pytest.mark.parametrize("vthreads", [1, 2])
def test_blocked_gemm_runs_through_the_driver_like_fsim_and_the_rtl_backend(vthreads):
    program = gemm_program(SMALL, 8, 16, 32, vthreads=vthreads)
    shell, mmio, dev = _board()
    stats = dev.run(program)
    _check_run(program, stats, dev, mmio.log)
    rtl = Device(SMALL, backend="rtl").run(program)     # the same RTL, launched by the harness
    assert stats.cycles == rtl.cycles > 0
    assert stats.busy_cycles == rtl.busy_cycles
    assert stats.gemm_uops == rtl.counters["gemm_counter"] > 0
    assert stats.alu_uops == rtl.counters["alu_counter"]
    assert set(stats.to_dict()) >= {"cycles", "busy_fetch", "gemm_uops", "alu_uops", "busy_cycles"}


def _conv2d_program(wl, vthreads):
    from vtakit.compiler.topi_vta import conv2d
    from vtakit.compiler.topi_vta.bench import CLIP, conv2d_data, range_shift
    from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
    from vtakit.compiler.vta.env import get_env

    env = get_env(SMALL)
    data = conv2d_data(env, wl)
    shift = range_shift(data.acc, data.addend, CLIP)
    s, tensors = conv2d(env, wl, choose_conv2d_tiles(env, wl, vthreads), shift=shift, clip=CLIP)
    module = vtakit.build(s, tensors, target="vta", config=SMALL)
    expect = data.expect(shift, CLIP)
    device = Device(SMALL, backend="fsim")
    arrays = [device.array(h) for h in data.host] + [device.empty(expect.shape, np.int8)]
    return module.program_for(*arrays), arrays[-1], expect


@pytest.mark.parametrize("wl_args, vthreads", [((8, 8, 4, 4, 3, 1, 1), 1), ((8, 8, 8, 8, 3, 1, 1), 2)])
def test_compiled_conv2d_runs_through_the_driver_like_fsim(wl_args, vthreads):
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload

    program, out, expect = _conv2d_program(Conv2dWorkload(*wl_args), vthreads)
    shell, mmio, dev = _board()
    stats = dev.run(program)
    _check_run(program, stats, dev, mmio.log)
    got = dev.read(out.phys_addr, out.nbytes).view(np.int8).reshape(expect.shape)
    np.testing.assert_array_equal(got, expect)
    assert stats.cycles > 0 and stats.gemm_uops > 0 and stats.alu_uops > 0


def test_a_second_run_reuses_the_buffer():
    shell, mmio, dev = _board()
    first = dev.run(gemm_program(SMALL, 8, 16, 32, seed=1))
    program = gemm_program(SMALL, 8, 16, 32, seed=2)
    second = dev.run(program)
    _, ref = run_fresh(program)
    np.testing.assert_array_equal(dev.read(0, program.dram_size), ref)
    assert first.cycles == second.cycles > 0


def test_relocation_moves_every_dma_by_the_buffer_address():
    program = gemm_program(SMALL, 8, 16, 32)
    moved = relocate(program.insns, SMALL, PHYS)
    for old, new in zip(program.insns, moved):
        if isinstance(old, isa.MemInsn) and old.opcode in (isa.Opcode.LOAD, isa.Opcode.STORE):
            assert new.dram_base > old.dram_base
        else:
            assert new == old
    with pytest.raises(DeviceError, match="not a multiple"):
        relocate(program.insns, SMALL, 2)


# ---------------------------------------------------------------------- misuse
def test_a_program_for_another_configuration_is_refused():
    shell, mmio, dev = _board()
    other = Program(VTAConfig(), [isa.FinishInsn()])
    with pytest.raises(ConfigError, match=r"built for 1x16_i8w8a32_15_15_18_17, this FPGA device is "
                                          r"1x4_i8w8a32_10_9_10_11: LOG_BLOCK_IN=4 vs 2"):
        dev.run(other)
    assert "flush" not in shell.buffer.calls


def test_a_bitstream_of_another_configuration_is_refused():
    shell = SimulatedShell(SMALL, size=4096, phys_addr=PHYS)
    with pytest.raises(ConfigError, match="CONFIG0"):
        FPGADevice(shell, shell.buffer, VTAConfig())


class Zeros:
    """A register window that reads 0 everywhere (no bitstream)."""

    def read32(self, offset):
        return 0

    def write32(self, offset, value):
        pass


def test_a_window_that_is_not_the_shell_is_refused():
    with pytest.raises(DeviceError, match="not a vtakit shell"):
        FPGADevice(Zeros(), SimBuffer(4096), SMALL)


def test_bad_buffers_are_refused():
    shell = Zeros()
    bad = types.SimpleNamespace(phys_addr=PHYS + 8, array=np.zeros(64, np.uint8), flush=lambda: None,
                                invalidate=lambda: None)
    with pytest.raises(DeviceError, match="aligned"):
        FPGADevice(shell, bad, SMALL)
    bad.phys_addr, bad.array = PHYS, np.zeros(64, np.int32)
    with pytest.raises(DeviceError, match="uint8"):
        FPGADevice(shell, bad, SMALL)


def test_bad_instruction_addresses_are_refused():
    shell, mmio, dev = _board(size=4096)
    for addr, count in ((PHYS + 8, 1), (PHYS - 16, 1), (PHYS + 4096 - 16, 2), (0, 1)):
        with pytest.raises(DeviceError, match="aligned|outside"):
            dev.start(addr, count)
    with pytest.raises(DeviceError, match="count"):
        dev.start(PHYS, 0)
    assert not any(e[0] == "write" for e in mmio.log if isinstance(e, tuple))


def test_a_program_larger_than_the_buffer_is_refused():
    shell, mmio, dev = _board(size=512)
    with pytest.raises(DeviceError, match="needs .* bytes"):
        dev.run(gemm_program(SMALL, 8, 16, 32))


def test_timeout_then_start_while_busy_then_the_run_completes():
    program = gemm_program(SMALL, 8, 16, 32)
    shell, mmio, dev = _board()
    addr, count = dev.load(program)
    dev.start(addr, count)
    with pytest.raises(DeviceError, match="did not finish within 0 s"):
        dev.wait(timeout=0)
    assert dev.status()["running"]
    with pytest.raises(DeviceError, match="still running"):
        dev.start(addr, count)
    with pytest.raises(DeviceError, match="still running"):
        dev.run(program)
    dev.wait()
    dev.buffer.invalidate()
    _, ref = run_fresh(program)
    np.testing.assert_array_equal(dev.read(0, program.dram_size), ref)
    assert dev.counters().cycles > 0


def test_a_deadlocked_program_raises_deadlock_error():
    program = Program(SMALL, [isa.GemmInsn(pop_prev=True), isa.FinishInsn()])
    shell, mmio, dev = _board()
    with pytest.raises(DeadlockError, match=r"reports a deadlock \(CONTROL\.deadlock\)"):
        dev.run(program, timeout=30)


def test_read_outside_the_buffer_is_refused():
    shell, mmio, dev = _board(size=4096)
    with pytest.raises(DeviceError, match=r"range \[0xfa0, 0x1068\) is outside the 4096-byte DMA buffer"):
        dev.read(4000, 200)


# ---------------------------------------------------------------------- PYNQ adapters
def test_without_pynq_the_adapter_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynq", None)
    with pytest.raises(DeviceError, match="pip install pynq"):
        open_pynq(SMALL)
    assert issubclass(DeviceError, VtakitError)


def test_pynq_adapters_over_a_fake_pynq(monkeypatch):
    """The adapters call pynq's MMIO / allocate as PYNQ documents them; the registers come from the
    simulated shell behind a fake pynq.MMIO."""
    shell = SimulatedShell(SMALL, size=1 << 16, phys_addr=PHYS)
    calls = []

    class FakeMMIO:
        def __init__(self, base, length):
            calls.append(("MMIO", base, length))

        def read(self, offset):
            return shell.read32(offset)

        def write(self, offset, value):
            shell.write32(offset, value)

    class FakeBuffer(np.ndarray):
        physical_address = PHYS

        def flush(self):
            calls.append("flush")

        def invalidate(self):
            calls.append("invalidate")

    def allocate(shape, dtype):
        calls.append(("allocate", shape, np.dtype(dtype)))
        buf = shell.buffer.array[:shape[0]].view(FakeBuffer)
        return buf

    fake = types.ModuleType("pynq")
    fake.MMIO, fake.allocate = FakeMMIO, allocate
    fake.Overlay = lambda path: calls.append(("Overlay", path))
    monkeypatch.setitem(sys.modules, "pynq", fake)
    dev = open_pynq(SMALL, buffer_size=1 << 16, bitstream="vta.bit")
    assert isinstance(dev.mmio, PynqMMIO) and isinstance(dev.buffer, PynqBuffer)
    program = gemm_program(SMALL, 8, 16, 32)
    stats = dev.run(program)
    _, ref = run_fresh(program)
    np.testing.assert_array_equal(dev.read(0, program.dram_size), ref)
    assert isinstance(stats, FPGAStats) and stats.cycles > 0
    assert calls[:3] == [("Overlay", "vta.bit"), ("MMIO", 0x43C0_0000, 0x1000), ("allocate", (1 << 16,), np.uint8)]
    assert calls[3:] == ["flush", "invalidate"]


def test_the_register_names_the_driver_uses_exist():
    assert {r.name for r in REGISTERS} >= {"CONTROL", "ID", "INSN_COUNT", "INSN_ADDR", "CYCLES", "CONFIG0", "CONFIG1"}
    shell = SimulatedShell(SMALL, size=4096)
    assert shell.read32(REG["ID"]) == SHELL_ID
    assert (shell.read32(REG["CONFIG0"]), shell.read32(REG["CONFIG1"])) == config_words(SMALL)


@pytest.mark.slow
@pytest.mark.parametrize("wl_args, vthreads", [((16, 16, 16, 16, 3, 1, 1), 2), ((14, 14, 8, 16, 3, 1, 2), 1)])
def test_larger_conv2d_layers_run_through_the_driver_like_fsim(wl_args, vthreads):
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload

    program, out, expect = _conv2d_program(Conv2dWorkload(*wl_args), vthreads)
    shell, mmio, dev = _board(size=1 << 20)
    stats = dev.run(program, timeout=600)
    _check_run(program, stats, dev, mmio.log)
    np.testing.assert_array_equal(dev.read(out.phys_addr, out.nbytes).view(np.int8).reshape(expect.shape), expect)


@pytest.mark.slow
def test_a_larger_blocked_gemm_runs_through_the_driver_like_the_rtl_backend():
    program = gemm_program(SMALL, 16, 32, 128, vthreads=2)
    shell, mmio, dev = _board(size=1 << 20)
    stats = dev.run(program, timeout=600)
    _check_run(program, stats, dev, mmio.log)
    assert stats.cycles == Device(SMALL, backend="rtl").run(program).cycles
