"""``get_env``: TVM's ``vta.Environment`` names, configuration files, and wrong arguments."""

import pytest

from vtakit.compiler.vta import get_env
from vtakit.compiler.vta.env import TVM_NAMES
from vtakit.errors import ConfigError
from vtakit.hw.config import VTAConfig


def test_tvm_upper_case_names_of_the_default():
    env = get_env()
    # the values TVM's vta.Environment gives for the default vta_config.json (target "sim")
    expect = dict(TARGET="sim", HW_VER="0.0.2", LOG_INP_WIDTH=3, LOG_WGT_WIDTH=3, LOG_ACC_WIDTH=5, LOG_BATCH=0,
                  LOG_BLOCK=4, LOG_BLOCK_IN=4, LOG_BLOCK_OUT=4, LOG_UOP_BUFF_SIZE=15, LOG_INP_BUFF_SIZE=15,
                  LOG_WGT_BUFF_SIZE=18, LOG_ACC_BUFF_SIZE=17, LOG_OUT_WIDTH=3, LOG_OUT_BUFF_SIZE=15,
                  INP_WIDTH=8, WGT_WIDTH=8, ACC_WIDTH=32, OUT_WIDTH=8, BATCH=1, BLOCK_IN=16, BLOCK_OUT=16,
                  UOP_BUFF_SIZE=1 << 15, INP_BUFF_SIZE=1 << 15, WGT_BUFF_SIZE=1 << 18, ACC_BUFF_SIZE=1 << 17,
                  OUT_BUFF_SIZE=1 << 15, INP_ELEM_BITS=128, WGT_ELEM_BITS=2048, ACC_ELEM_BITS=512,
                  OUT_ELEM_BITS=128, INP_ELEM_BYTES=16, WGT_ELEM_BYTES=256, ACC_ELEM_BYTES=64, OUT_ELEM_BYTES=16,
                  MODEL="sim_1x16_i8w8a32_15_15_18_17")
    assert {name: getattr(env, name) for name in expect} == expect
    assert TVM_NAMES <= set(expect) and TVM_NAMES <= set(dir(env))
    assert (env.inp_dtype, env.wgt_dtype, env.acc_dtype, env.out_dtype) == ("int8", "int8", "int32", "int8")
    assert (env.target, env.target_host, env.dma_copy, env.alu) == ("vta", "llvm", "dma_copy", "alu")
    assert env.inp_scope == "local.inp_buffer" and env.acc_scope == "local.acc_buffer"


def test_names_follow_the_configuration():
    env = get_env(VTAConfig.small(LOG_BATCH=1))
    assert (env.BATCH, env.BLOCK_IN, env.BLOCK_OUT, env.LOG_BLOCK) == (2, 4, 4, 2)
    assert env.INP_ELEM_BYTES == env.config.inp_elem_bytes == 8
    assert env.OUT_BUFF_SIZE == env.config.out_buff_size


def test_unknown_name_and_split_block():
    env = get_env(VTAConfig.small(log_block_out=3, log_wgt_buff_size=11))
    with pytest.raises(AttributeError, match="VTAEnv has no attribute 'BLOCK'"):
        env.BLOCK  # noqa: B018
    with pytest.raises(ConfigError, match="LOG_BLOCK is undefined for 1x4x8.*LOG_BLOCK_IN=2 differs from "
                                          "LOG_BLOCK_OUT=3"):
        env.LOG_BLOCK  # noqa: B018
    assert (env.BLOCK_IN, env.BLOCK_OUT) == (4, 8)


def test_get_env_reads_a_config_file(tmp_path):
    path = tmp_path / "vta_config.json"
    VTAConfig.small().to_json(path)
    assert get_env(path) is get_env(str(path)) is get_env(VTAConfig.small())
    assert get_env(path).BLOCK_IN == 4
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        get_env(tmp_path / "missing.json")


@pytest.mark.parametrize("bad", [3, {"LOG_BLOCK": 4}, get_env])
def test_get_env_rejects_other_types(bad):
    with pytest.raises(ConfigError, match=f"get_env expects a VTAConfig, the path of a vta_config.json file or "
                                          f"None, got {type(bad).__name__}"):
        get_env(bad)
