"""VTAConfig: defaults, derived quantities, JSON round trip, and every rejection path."""

import json
import re

import pytest

from vtakit.errors import ConfigError
from vtakit.hw.config import VTAConfig


def test_default_is_vta_pynq():
    c = VTAConfig()
    assert c.model == "1x16_i8w8a32_15_15_18_17"
    assert (c.batch, c.block_in, c.block_out) == (1, 16, 16)
    assert (c.inp_elem_bytes, c.wgt_elem_bytes, c.acc_elem_bytes, c.out_elem_bytes) == (16, 256, 64, 16)
    assert (c.uop_depth, c.inp_depth, c.wgt_depth, c.acc_depth, c.out_depth) == (8192, 2048, 1024, 2048, 2048)
    assert c.out_buff_size == 32 * 1024
    assert c.macs_per_cycle == 256
    assert (c.bus_width, c.dram_latency, c.dram_outstanding) == (64, 32, 8)
    assert (c.token_queue_depth, c.cmd_queue_depth, c.alu_mul) == (8, 8, False)


def test_small():
    c = VTAConfig.small()
    assert c.model == "1x4_i8w8a32_10_9_10_11"
    assert (c.uop_depth, c.inp_depth, c.wgt_depth, c.acc_depth) == (256, 128, 64, 128)


def test_vta_json_round_trip(tmp_path):
    raw = {"TARGET": "pynq", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5,
           "LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 15,
           "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}
    path = tmp_path / "vta_config.json"
    path.write_text(json.dumps(raw))
    c = VTAConfig.from_json(path)
    assert c == VTAConfig(target="pynq")
    assert c.bus_width == 64  # our keys default
    out = tmp_path / "out.json"
    c.to_json(out)
    assert VTAConfig.from_json(out) == c
    assert json.loads(out.read_text())["LOG_BLOCK"] == 4


def test_our_keys_and_split_block():
    c = VTAConfig.from_dict({"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 4, "LOG_INP_BUFF_SIZE": 14,
                                "LOG_WGT_BUFF_SIZE": 17, "BUS_WIDTH": 128, "ALU_MUL": True})
    assert (c.block_in, c.block_out, c.bus_width, c.alu_mul) == (8, 16, 128, True)
    assert c.model.startswith("1x8x16_")
    assert VTAConfig.from_dict(json.loads(c.to_json())) == c


@pytest.mark.parametrize("raw, match", [
    ({"LOG_BLOK": 4}, r"unknown configuration key\(s\) \['LOG_BLOK'\]"),
    ({"LOG_BLOCK": 4, "LOG_BLOCK_IN": 3}, "LOG_BLOCK_IN=3 disagrees with LOG_BLOCK=4"),
    ({"LOG_ACC_WIDTH": 4}, r"LOG_ACC_WIDTH=\(3, 3, 4\)|\(3, 3, 4\) unsupported"),
    ({"LOG_BATCH": "0"}, "LOG_BATCH='0' must be of type int"),
    ({"BUS_WIDTH": 48}, "BUS_WIDTH=48 unsupported"),
    ({"DRAM_LATENCY": 0}, "DRAM_LATENCY=0 must be at least 1"),
    ({"LOG_ACC_BUFF_SIZE": 18}, "cannot be encoded: GEMM word 1 needs 66 bits"),
    ({"LOG_ACC_BUFF_SIZE": 4}, "smaller than one acc element"),
    ({"ALU_MUL": 1}, "ALU_MUL=1 must be of type bool"),
    ({"LOG_BLOCK": "4"}, "LOG_BLOCK='4' must be of type int"),
    ({"CLOCK_MHZ": float("nan")}, "CLOCK_MHZ=nan must be positive and finite"),
    ({"CLOCK_MHZ": float("inf")}, "CLOCK_MHZ=inf must be positive and finite"),
    ({"LOG_BLOCK": True}, "LOG_BLOCK=True must be of type int"),
])
def test_rejections(raw, match):
    with pytest.raises(ConfigError, match=match):
        VTAConfig.from_dict(raw)


def test_unencodable_alu_word():
    # ACC depth 4096 with small INP/WGT: GEMM word 1 fits but ALU's 4 x 12 + 20 bits do not.
    with pytest.raises(ConfigError, match="ALU word 1 needs 68 bits"):
        VTAConfig(log_acc_buff_size=18, log_inp_buff_size=12, log_wgt_buff_size=14)


@pytest.mark.parametrize("keys, advice", [
    ({"LOG_BLOCK": 3}, "shrink LOG_ACC_BUFF_SIZE to 13"),
    ({"LOG_UOP_BUFF_SIZE": 30}, "shrink LOG_UOP_BUFF_SIZE to 15"),
    ({"LOG_INP_BUFF_SIZE": 16}, "shrink one of LOG_INP_BUFF_SIZE to 15, LOG_WGT_BUFF_SIZE to 17 or LOG_ACC_BUFF_SIZE to 16"),
    ({"LOG_BLOCK": 0}, "shrink LOG_INP_BUFF_SIZE to 11, LOG_WGT_BUFF_SIZE to 10, LOG_ACC_BUFF_SIZE to 13"),
])
def test_unencodable_says_which_keys_to_shrink(keys, advice):
    """The advice is exact: each key it names, set to the value it gives (or all of them when it names
    no alternatives), makes the configuration valid, and one step less shrinking does not."""
    with pytest.raises(ConfigError, match="cannot be encoded") as info:
        VTAConfig.from_dict(keys)
    assert str(info.value).endswith("; " + advice)
    fixes = {f"LOG_{name}_BUFF_SIZE": int(value) for name, value in re.findall(r"LOG_(\w+?)_BUFF_SIZE to (\d+)", advice)}
    groups = [{k: v} for k, v in fixes.items()] if "one of" in advice or len(fixes) == 1 else [fixes]
    for group in groups:
        VTAConfig.from_dict({**keys, **group})
        for name in group:
            with pytest.raises(ConfigError, match="cannot be encoded"):
                VTAConfig.from_dict({**keys, **group, name: group[name] + 1})


def test_reads_what_vtakit_info_writes(tmp_path):
    """``vtakit info --json`` holds the keys apart, as a ``config`` object this reads back; the model
    string and derived sizes beside it are reports."""
    config = VTAConfig.small(bus_width=128, alu_mul=True)
    summary = config.summary()
    assert summary["config"] == config.to_dict() and summary["derived"]["block_in"] == 4
    assert not set(summary["derived"]) & {k.lower() for k in summary["config"]}
    path = tmp_path / "info.json"
    path.write_text(json.dumps({"version": "0", **summary, "backends": ["fsim"]}))
    assert VTAConfig.from_json(path) == config
    path.write_text(json.dumps({"model": "1x4", "config": {"LOG_BLOK": 2}}))
    with pytest.raises(ConfigError, match=r"unknown configuration key\(s\) \['LOG_BLOK'\]"):
        VTAConfig.from_json(path)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        VTAConfig.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        VTAConfig.from_json(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        VTAConfig.from_json(bad)
    bad.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        VTAConfig.from_json(bad)


def test_field_names_checked_and_differences_named():
    with pytest.raises(ConfigError, match=r"unknown configuration field\(s\) \['log_blok'\]"):
        VTAConfig.small(log_blok=3)
    with pytest.raises(ConfigError, match=r"unknown configuration field\(s\) \['bogus'\]"):
        VTAConfig().replace(bogus=1)
    assert VTAConfig.small().differences(VTAConfig.small()) == ""
    assert VTAConfig.small().differences(VTAConfig.small(alu_mul=True, bus_width=128)) == \
        "BUS_WIDTH=64 vs 128, ALU_MUL=False vs True"


def test_json_keys_as_keywords():
    small = dict(LOG_UOP_BUFF_SIZE=10, LOG_INP_BUFF_SIZE=9, LOG_WGT_BUFF_SIZE=12, LOG_ACC_BUFF_SIZE=11)
    c = VTAConfig(LOG_BLOCK=3, BUS_WIDTH=128, **small)
    assert (c.block_in, c.block_out, c.bus_width, c.model) == (8, 8, 128, "1x8_i8w8a32_10_9_12_11")
    assert c == VTAConfig.from_dict({"LOG_BLOCK": 3, "BUS_WIDTH": 128, **small})
    assert VTAConfig(LOG_BATCH=1, log_block_in=2, log_block_out=2, **small).model == "2x4_i8w8a32_10_9_12_11"
    assert VTAConfig.small(LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=12) == c.replace(BUS_WIDTH=64)
    assert VTAConfig.small().replace(ALU_MUL=True).alu_mul


@pytest.mark.parametrize("keys, match", [
    (dict(LOG_BLOCK=3, log_block_in=4), r"LOG_BLOCK_IN is given twice, as log_block_in=4 and as a JSON key \(3\)"),
    (dict(LOG_BLOK=3), r"unknown configuration key\(s\) \['LOG_BLOK'\]"),
    (dict(log_blok=3), r"unknown configuration field\(s\) \['log_blok'\]"),
    (dict(LOG_BLOCK="3"), r"LOG_BLOCK='3' must be of type int"),
])
def test_json_keywords_rejected(keys, match):
    with pytest.raises(ConfigError, match=match):
        VTAConfig(**keys)
