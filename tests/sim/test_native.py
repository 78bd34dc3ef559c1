"""vtakit.sim.native: the layout table the compiled cores decode with, and the stream they are given."""

import numpy as np
import pytest

from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.sim import native


@pytest.mark.parametrize("config", [VTAConfig(), VTAConfig.small()], ids=["default", "small"])
def test_layout_table_is_isa_layout(config):
    table = np.frombuffer(native.layout_table(config), dtype=np.int32).reshape(8, len(native.FIELDS), 3)
    for opcode in range(8):
        fields = {f.name: f for f in isa.layout(opcode, config)} if opcode in set(isa.Opcode) else {}
        for k, name in enumerate(native.FIELDS):
            f = fields.get(name)
            expected = (f.offset, f.width, int(f.signed)) if f else (0, 0, 0)
            assert tuple(table[opcode, k]) == expected, (opcode, name)
    assert set().union(*({f.name for f in isa.layout(op, config)} for op in isa.Opcode)) == set(native.FIELDS)


def test_encoded_stream_prefers_the_placed_bytes():
    config = VTAConfig.small()
    insns = [isa.FinishInsn()]
    placed = isa.encode(insns, config)
    assert native.encoded_stream(insns, config, placed) is placed
    assert native.encoded_stream(insns, config, None) == placed
    assert native.encoded_stream(insns, config, b"") == placed      # a stream of the wrong length is not used


def test_native_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("VTAKIT_NATIVE", "0")
    assert not native.enabled() and native.core("_fsim_core") is None
