"""Device: arrays, memory errors, and running programs given as Program, instruction list or bytes."""

import gc

import numpy as np
import pytest

from vtakit.errors import AllocationError, ISAError, ProgramError, VtakitError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.runtime import Device, ProgramBuilder
from vtakit.runtime import device as device_module
from vtakit.runtime.blocked_gemm import gemm_program

SMALL = VTAConfig.small()


def test_array_round_trip_and_properties():
    dev = Device(SMALL, dram_size=1 << 16)
    data = np.arange(-8, 16, dtype=np.int16).reshape(4, 6)
    arr = dev.array(data, name="x")
    assert arr.shape == (4, 6) and arr.dtype == np.int16 and arr.nbytes == 48
    assert arr.phys_addr % dev.alignment == 0 and dev.alignment >= SMALL.wgt_elem_bytes
    np.testing.assert_array_equal(arr.numpy(), data)
    arr.copyfrom(data[::-1])
    np.testing.assert_array_equal(arr.numpy(), data[::-1])
    assert bytes(dev.read(arr.phys_addr, 4)) == data[::-1].tobytes()[:4]
    second = dev.empty((3,), np.int32)
    assert second.phys_addr >= arr.phys_addr + arr.nbytes and second.phys_addr % dev.alignment == 0


def test_copyfrom_shape_mismatch():
    arr = Device(SMALL, dram_size=4096).empty((2, 3), np.int8, name="a")
    with pytest.raises(VtakitError, match=r"shape \(3, 2\) into device array a of shape \(2, 3\)"):
        arr.copyfrom(np.zeros((3, 2)))


def test_free_double_free_and_use_after_free():
    dev = Device(SMALL, dram_size=4096)
    arr = dev.empty(16)
    dev.free(arr)
    assert arr.freed and dev.allocator.used == 0
    with pytest.raises(AllocationError, match="double free of device array"):
        arr.free()
    with pytest.raises(AllocationError, match="was freed"):
        arr.numpy()
    other = Device(SMALL, dram_size=4096).empty(4)
    with pytest.raises(AllocationError, match="belongs to another device"):
        dev.free(other)


def test_garbage_collected_arrays_release_memory():
    dev = Device(SMALL, dram_size=4096)
    arr = dev.empty(1000)
    assert dev.allocator.used == 1000
    del arr
    gc.collect()
    assert dev.allocator.used == 0


def test_exhaustion_and_bad_shapes():
    dev = Device(SMALL, dram_size=4096)
    with pytest.raises(AllocationError, match="out of device memory: cannot allocate 8192 bytes"):
        dev.empty(8192)
    with pytest.raises(AllocationError, match="negative dimension"):
        dev.empty((2, -1))
    with pytest.raises(AllocationError, match="cannot allocate 1208925819614629174706176 bytes"):
        dev.empty((1 << 40, 1 << 40))      # 2**80 bytes, not an int64 product that wraps to 0
    with pytest.raises(AllocationError, match="outside the device"):
        dev.read(4000, 200)
    with pytest.raises(AllocationError, match="outside the device"):
        dev.write(-1, b"x")


def test_bad_dram_sizes_shapes_and_dtypes():
    for size in ("1M", 1.5e6, True, 0, -4):
        with pytest.raises(AllocationError, match=f"DRAM size {size!r} must be positive"):
            Device(SMALL, dram_size=size)
    with pytest.raises(AllocationError, match="at most 4294967296 \\(the 32-bit DRAM address space\\)"):
        Device(SMALL, dram_size=1 << 40)
    dev = Device(SMALL, dram_size=4096)
    with pytest.raises(AllocationError, match=r"array shape \(2.5, 3\) must be a tuple of integers"):
        dev.empty((2.5, 3))
    with pytest.raises(AllocationError, match="dtype 'no-such-type' is not a numpy data type"):
        dev.empty(4, "no-such-type")
    with pytest.raises(AllocationError, match="dtype object cannot live in device DRAM"):
        dev.array(np.array([object()]))


def test_bad_backend_and_config():
    with pytest.raises(VtakitError, match=r"unknown backend 'verilog'; expected one of \['cycle', 'fsim', 'rtl', 'verilator'\]"):
        Device(SMALL, backend="verilog")
    with pytest.raises(VtakitError, match="config must be a VTAConfig, got dict"):
        Device({"LOG_BLOCK": 2})


def _add_program(dev: Device, x, y, uops) -> list:
    """LOAD ACC x; ALU ADD 5; STORE to y -- hand-encoded with absolute addresses."""
    cfg = dev.config
    return [MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, dram_base=uops.phys_addr // 4, x_size=1, x_stride=1),
            MemInsn(opcode=Opcode.LOAD, memory_type=MemId.ACC, dram_base=x.phys_addr // cfg.acc_elem_bytes,
                    x_size=6, x_stride=6),
            AluInsn(alu_opcode=AluOp.ADD, use_imm=True, imm=5, uop_end=1, iter_out=6, dst_factor_out=1,
                    push_next=True),
            MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, dram_base=y.phys_addr // cfg.out_elem_bytes,
                    x_size=6, x_stride=6, pop_prev=True, push_prev=True),
            MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, x_size=0, pop_next=True),
            FinishInsn()]


@pytest.mark.parametrize("form", ["list", "bytes", "program"])
def test_run_instruction_list_bytes_and_program(form):
    dev = Device(SMALL, dram_size=1 << 16)
    rng = np.random.default_rng(1)
    data = rng.integers(-2**31, 2**31, size=(6, 1, 4), dtype=np.int32)
    x, y = dev.array(data), dev.empty((6, 1, 4), np.int8)
    uops = dev.array(np.frombuffer(isa.encode_uops([Uop(0)], SMALL), np.uint8))
    insns = _add_program(dev, x, y, uops)
    runnable = {"list": insns, "bytes": isa.encode(insns, SMALL), "program": None}[form]
    if runnable is None:
        from vtakit.sim.program import Program
        runnable = Program(SMALL, insns)
    used = dev.allocator.used
    stats = dev.run(runnable)
    assert dev.allocator.used == used                     # the instruction region was temporary
    np.testing.assert_array_equal(y.numpy(), (data.astype(np.int64) + 5).astype(np.int8))
    assert stats.counters["alu_counter"] == 6 and stats.cycles is None and stats.sim_seconds > 0


def test_run_rejects_bad_programs():
    dev = Device(SMALL, dram_size=1 << 16)
    with pytest.raises(ProgramError, match="cannot run a dict"):
        dev.run({"insns": []})
    with pytest.raises(ISAError, match="not a multiple of 16"):
        dev.run(b"\x00" * 10)
    other = gemm_program(VTAConfig.small(log_acc_buff_size=10), 4, 4, 4)
    with pytest.raises(ProgramError, match=r"was built for 1x4_i8w8a32_10_9_10_10, this device is "
                                           r"1x4_i8w8a32_10_9_10_11: LOG_ACC_BUFF_SIZE=10 vs 11$"):
        dev.run(other)


def test_launch_gets_the_encoded_stream_in_dram(monkeypatch):
    seen = {}

    def probe(launch):
        code = isa.encode(launch.insns, launch.config)
        seen["stream"] = bytes(launch.dram[launch.insn_addr:launch.insn_addr + len(code)])
        seen["code"] = code
        from vtakit.sim.stats import RunStats
        return RunStats(backend="probe")

    monkeypatch.setattr(device_module, "get_backend", lambda name: probe)
    dev = Device(SMALL, dram_size=1 << 16)
    dev.run(gemm_program(SMALL, 4, 4, 8))
    assert seen["stream"] == seen["code"] and len(seen["code"]) > 0


def test_rerun_after_editing_the_program_runs_the_new_instructions(monkeypatch):
    streams = []

    def probe(launch):
        code = isa.encode(launch.insns, launch.config)
        assert bytes(launch.dram[launch.insn_addr:launch.insn_addr + len(code)]) == code
        streams.append(code)
        from vtakit.sim.stats import RunStats
        return RunStats(backend="probe")

    monkeypatch.setattr(device_module, "get_backend", lambda name: probe)
    dev = Device(SMALL, dram_size=1 << 16)
    program = gemm_program(SMALL, 4, 4, 8)
    dev.run(program)
    dev.run(program)                                   # the cached encoding
    program.insns[-1] = FinishInsn(pop_prev=False)     # an equal instruction: same stream
    program.insns.insert(0, MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, x_size=0))
    dev.run(program)
    assert streams[0] == streams[1] and streams[2] == isa.encode(program.insns, SMALL) != streams[0]


def test_rerunning_bare_instructions_reuses_their_encoding(monkeypatch):
    streams, calls = [], {"encode": 0, "decode": 0}

    def probe(launch):
        streams.append(bytes(launch.dram[launch.insn_addr:launch.insn_addr + 16 * len(launch.insns)]))
        from vtakit.sim.stats import RunStats
        return RunStats(backend="probe")

    def counting(name):
        real = getattr(isa, name)

        def wrapper(*args):
            calls[name] += 1
            return real(*args)
        monkeypatch.setattr(isa, name, wrapper)

    counting("encode")
    counting("decode")
    monkeypatch.setattr(device_module, "get_backend", lambda name: probe)
    dev = Device(SMALL, dram_size=1 << 16)
    insns = [GemmInsn(reset_reg=True), FinishInsn()]
    dev.run(insns)
    dev.run(list(insns))                               # the same instruction objects: encoded once
    assert calls["encode"] == 1
    insns[0] = GemmInsn(reset_reg=True, uop_end=2)
    dev.run(insns)
    assert calls["encode"] == 2 and streams[2] == isa.encode(insns, SMALL) != streams[0] == streams[1]
    code = isa.encode([FinishInsn(pop_prev=False)], SMALL)
    dev.run(code)
    dev.run(bytearray(code))                           # the same stream: decoded once
    assert calls["decode"] == 1 and streams[-1] == streams[-2] == code


def test_device_built_program_runs_on_current_array_contents():
    dev = Device(SMALL, dram_size=1 << 16)
    b = ProgramBuilder(SMALL, dev)
    x = dev.array(np.zeros((4, 1, 4), np.int32))
    y = dev.empty((4, 1, 4), np.int8)
    b.load_2d(MemId.ACC, 0, x, 1, 4)
    b.alu(AluOp.ADD, [Uop(0)], iter_out=4, dst_factor=(1, 0), imm=1)
    b.dep_push(isa.Stage.COMPUTE, isa.Stage.STORE)
    b.dep_pop(isa.Stage.COMPUTE, isa.Stage.STORE)
    b.store_2d(0, y, 1, 4)
    program = b.finish()
    assert [s.name for s in program.segments] == [""]     # the load source, snapshotted for saving
    dev.run(program)
    np.testing.assert_array_equal(y.numpy(), np.ones((4, 1, 4)))
    x.copyfrom(np.full((4, 1, 4), 41, np.int32))          # new input, same program
    dev.run(program)
    np.testing.assert_array_equal(y.numpy(), np.full((4, 1, 4), 42))


def test_foreign_program_needs_its_dram_range():
    program = gemm_program(SMALL, 4, 4, 8)
    dev = Device(SMALL, dram_size=1 << 16)
    dev.run(program)                                      # fresh device: placed at its addresses
    assert dev.allocator.used == 0
    blocker = dev.empty(16)  # noqa: F841 (kept alive: it occupies address 0)
    with pytest.raises(AllocationError, match="run it on a fresh Device"):
        dev.run(program)
    with pytest.raises(AllocationError, match=f"needs {program.dram_size} bytes of DRAM"):
        Device(SMALL, dram_size=128).run(program)


def _acc_copy_program(dev):
    b = ProgramBuilder(SMALL, dev)
    x = dev.array(np.arange(16, dtype=np.int32).reshape(4, 1, 4), name="x")
    y = dev.empty((4, 1, 4), np.int8, name="y")
    b.load_2d(MemId.ACC, 0, x, 1, 4)
    b.alu(AluOp.SHR, [Uop(0)], iter_out=4, dst_factor=(1, 0), imm=0)
    b.dep_push(isa.Stage.COMPUTE, isa.Stage.STORE)
    b.dep_pop(isa.Stage.COMPUTE, isa.Stage.STORE)
    b.store_2d(0, y, 1, 4)
    return b.finish(), x, y


def test_device_built_program_elsewhere_and_after_free():
    dev = Device(SMALL, dram_size=1 << 16)
    program, x, y = _acc_copy_program(dev)
    fresh = Device(SMALL, dram_size=1 << 16)              # another device: placed from its snapshots
    fresh.run(program)
    np.testing.assert_array_equal(fresh.read(y.phys_addr, 16).view(np.int8), np.arange(16))
    x.free()
    with pytest.raises(AllocationError, match=r"reads the device array at 0x0 \(x\), which has been freed"):
        dev.run(program)


def test_micro_op_image_lives_as_long_as_the_program():
    dev = Device(SMALL, dram_size=1 << 16)
    program, x, y = _acc_copy_program(dev)
    assert dev.allocator.used == x.nbytes + y.nbytes + 4 * len(program.uops)
    del program
    gc.collect()
    assert dev.allocator.used == x.nbytes + y.nbytes


def test_foreign_program_is_never_mistaken_for_the_device_s_own():
    program = gemm_program(SMALL, 4, 4, 8)
    dev = Device(SMALL, dram_size=1 << 16)
    big = dev.empty(4096, name="big")                     # covers the program's addresses
    with pytest.raises(AllocationError, match="brings its own DRAM layout"):
        dev.run(program)
    assert not big.freed
