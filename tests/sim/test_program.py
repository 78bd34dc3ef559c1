"""Program: DRAM image assembly, the encoding cache, disassembly, and the file format incl. malformed files."""

import json
import re
import zipfile

import numpy as np
import pytest

from vtakit.errors import ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.sim.program import Program, Segment


def _program(config=VTAConfig.small()):
    insns = [MemInsn(opcode=Opcode.LOAD, memory_type=MemId.UOP, dram_base=64, x_size=2, x_stride=2),
             GemmInsn(reset_reg=True, uop_end=2),
             AluInsn(alu_opcode=AluOp.SHR, use_imm=True, imm=-3, uop_end=2),
             FinishInsn()]
    return Program(config, insns, uops=[Uop(0, 1, 2), Uop(1, 0, 3)], uop_addr=256,
                   segments=[Segment(0, bytes(range(32)), "a"), Segment(100, b"\x05\x06", "b")], name="tiny")


def test_dram_image_places_everything():
    p = _program()
    assert p.dram_size == 256 + 8
    dram = p.initial_dram()
    assert dram.dtype == np.uint8 and dram.size == 264
    assert bytes(dram[:32]) == bytes(range(32)) and bytes(dram[100:102]) == b"\x05\x06"
    assert bytes(dram[256:264]) == p.uop_segment.data
    assert p.initial_dram(1024).size == 1024
    with pytest.raises(ProgramError, match="needs 264 bytes of DRAM, got 100"):
        p.initial_dram(100)


def test_encoding_is_cached_until_the_program_changes():
    p = _program()
    code, uops = p.encoded_insns(), p.encoded_uops()
    assert code == isa.encode(p.insns, p.config) and uops == isa.encode_uops(p.uops, p.config)
    assert p.encoded_insns() is code and p.encoded_uops() is uops          # reused, not re-encoded
    p.insns[1] = GemmInsn(reset_reg=True, uop_end=2)                       # an equal, new object: re-encoded
    assert p.encoded_insns() is not code and p.encoded_insns() == code
    p.insns[1] = GemmInsn(reset_reg=True, uop_bgn=1, uop_end=2)           # changed in place
    assert p.encoded_insns() == isa.encode(p.insns, p.config) != code
    p.insns.append(FinishInsn())                                           # grown
    assert len(p.encoded_insns()) == 16 * 5
    p.insns = p.insns[:2]                                                  # replaced
    assert p.encoded_insns() == isa.encode(p.insns, p.config)
    p.uops[1] = Uop(3, 2, 1)
    assert bytes(p.initial_dram()[256:264]) == isa.encode_uops([Uop(0, 1, 2), Uop(3, 2, 1)], p.config)
    wide = VTAConfig()                                                     # other field widths
    p.config = wide
    assert p.encoded_insns() == isa.encode(p.insns, wide) != isa.encode(p.insns, VTAConfig.small())
    assert p.encoded_uops() == isa.encode_uops(p.uops, wide) != isa.encode_uops(p.uops, VTAConfig.small())


def test_place_writes_the_initial_image():
    p = _program()
    dram = np.full(300, 0xAA, dtype=np.uint8)
    p.place(dram)
    assert np.array_equal(dram[:264], p.initial_dram()) and (dram[264:] == 0xAA).all()
    with pytest.raises(ProgramError, match="needs 264 bytes of DRAM, got 200"):
        p.place(np.zeros(200, np.uint8))
    with pytest.raises(ProgramError, match=r"writable 1-D contiguous uint8 DRAM array, got ndarray int32\(300,\)"):
        p.place(np.zeros(300, np.int32))
    with pytest.raises(ProgramError, match="got ndarray uint8"):
        p.place(np.zeros(600, np.uint8)[::2])
    frozen = np.zeros(300, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ProgramError, match="writable"):
        p.place(frozen)
    with pytest.raises(ProgramError, match="got bytearray"):
        p.place(bytearray(300))


def test_save_load_round_trip(tmp_path):
    p = _program()
    path = tmp_path / "p.vtaprog"
    p.save(path)
    q = Program.load(path)
    assert (q.config, q.insns, q.uops, q.uop_addr, q.dram_size, q.name) == \
        (p.config, p.insns, p.uops, p.uop_addr, p.dram_size, p.name)
    assert [(s.addr, s.data, s.name) for s in q.segments] == [(s.addr, s.data, s.name) for s in p.segments]
    assert Program.load(path, VTAConfig.small()).insns == p.insns
    with pytest.raises(ProgramError, match=r"was built for 1x4_i8w8a32_10_9_10_11, the requested configuration is "
                                           r"1x16_i8w8a32_15_15_18_17: LOG_BLOCK_IN=2 vs 4, LOG_BLOCK_OUT=2 vs 4"):
        Program.load(path, VTAConfig())
    with pytest.raises(ProgramError, match=r"was built for 1x4_i8w8a32_10_9_10_11 with other system keys than the "
                                           r"requested configuration: DRAM_LATENCY=32 vs 40$"):
        Program.load(path, VTAConfig.small(dram_latency=40))


def test_disasm_lists_instructions_and_uops():
    text = _program().disasm()
    assert "4 instructions, 2 micro-ops at 0x100" in text
    assert "    2  ALU SHR uop=[0,2) iter=(1,1) dst=(0,0) src=(0,0) imm=-3" in text
    assert "    1  uop 1 0 3" in text


def _rewrite_meta(path, out, change):
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.namelist():
            data = zin.read(item)
            if item == "meta.npy":
                import io
                arr = np.load(io.BytesIO(data))
                meta = json.loads(bytes(arr).decode())
                change(meta)
                buf = io.BytesIO()
                np.save(buf, np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
                data = buf.getvalue()
            zout.writestr(item, data)


@pytest.mark.parametrize("change, match", [
    (lambda m: m.update(format="other"), "format 'other' is not 'vtakit-program'"),
    (lambda m: m.update(version=99), "version 99 unsupported"),
    (lambda m: m["config"].update(LOG_BLOK=3), r"malformed: ConfigError: unknown configuration key"),
    (lambda m: m.pop("uop_addr"), r"malformed: KeyError"),
    (lambda m: m.update(uop_addr=-4), r"uop_addr=-4 must be an integer byte address in \[0, 0x100000000\]"),
    (lambda m: m.update(uop_addr="x"), r"uop_addr='x' must be an integer byte address"),
    (lambda m: m.update(dram_size=10**15), r"dram_size=1000000000000000 must be an integer byte address"),
    (lambda m: m["segments"][1].update(addr=-100), r"segment 1 \(b\) addr=-100 must be an integer byte address"),
    (lambda m: m["segments"][0].update(addr=3.5), r"segment 0 \(a\) addr=3.5 must be an integer byte address"),
    (lambda m: m["segments"][0].update(addr=(1 << 32) - 4), r"segment 0 \(a\) end=4294967324 must be"),
])
def test_malformed_meta(tmp_path, change, match):
    good = tmp_path / "good.vtaprog"
    _program().save(good)
    bad = tmp_path / "bad.vtaprog"
    _rewrite_meta(good, bad, change)
    with pytest.raises(ProgramError, match=match):
        Program.load(bad)


def test_not_a_program_file(tmp_path):
    with pytest.raises(ProgramError, match="cannot read program file"):
        Program.load(tmp_path / "missing.vtaprog")
    junk = tmp_path / "junk.vtaprog"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ProgramError, match="is not a vtakit program file"):
        Program.load(junk)
    junk.write_bytes(b"")
    with pytest.raises(ProgramError, match="is not a vtakit program file"):
        Program.load(junk)


def _npy(path):
    with open(path, "wb") as f:
        np.save(f, np.arange(3))


def _pickled_npz(path):
    with open(path, "wb") as f:
        np.savez(f, meta=np.array([{"format": "vtakit-program"}], dtype=object))


def _npz_without_meta(path):
    with open(path, "wb") as f:
        np.savez(f, insns=np.zeros(16, np.uint8))


def _npz_bad_meta(path):
    with open(path, "wb") as f:
        np.savez(f, meta=np.frombuffer(b"{not json", dtype=np.uint8))


@pytest.mark.parametrize("write, match", [
    (_npy, "does not start with a zip archive's header"),
    (lambda path: path.write_bytes(b"\x80\x04pickle"), "does not start with a zip archive's header"),
    (_pickled_npz, r"an entry is not a plain numpy array"),
    (_npz_without_meta, r"has no 'meta' entry, only \['insns'\]"),
    (_npz_bad_meta, "its 'meta' entry is not JSON text"),
])
def test_other_files_are_named_without_numpy_advice(tmp_path, write, match):
    """Other numpy files and pickles are not programs; the message never suggests allow_pickle."""
    path = tmp_path / "other.npz"
    write(path)
    with pytest.raises(ProgramError, match="is not a vtakit program file") as info:
        Program.load(path)
    assert re.search(match, str(info.value))
    assert "allow_pickle" not in str(info.value)


@pytest.mark.parametrize("key, value", [("insns", np.zeros(32, np.int64)), ("uops", np.zeros((2, 4), np.uint8))])
def test_arrays_must_be_bytes(tmp_path, key, value):
    good = tmp_path / "good.vtaprog"
    _program().save(good)
    arrays = dict(np.load(good))
    arrays[key] = value
    bad = tmp_path / "bad.vtaprog"
    with open(bad, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ProgramError, match=re.escape(f"array '{key}' is {value.dtype} with shape {value.shape}, expected 1-D")):
        Program.load(bad)


def test_corrupt_instruction_stream(tmp_path):
    good = tmp_path / "good.vtaprog"
    _program().save(good)
    arrays = dict(np.load(good))
    arrays["insns"] = arrays["insns"][:-3]
    bad = tmp_path / "bad.vtaprog"
    with open(bad, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ProgramError, match="malformed: ISAError: instruction stream of 61 bytes"):
        Program.load(bad)


def test_unaligned_uop_addr():
    with pytest.raises(ProgramError, match="uop_addr=6 must be a multiple of 4"):
        Program(VTAConfig.small(), [FinishInsn()], uops=[Uop(0)], uop_addr=6)
