"""``vtakit.lower`` shows the accelerator's intrinsics however the user asks for them."""

import pytest

import vtakit
from vtakit.compiler.build import implied_target
from vtakit.compiler.vta import build_config, get_env
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig

from tests.compiler.vta.test_vta_slice import _gemm_shift

INTRINSICS = ("vta.load_buffer_2d", "vta.store_buffer_2d", "vta.uop_push", "vta.dep_push", "vta.dep_pop")


def _lowered_text(how, config):
    env = get_env(config)
    s, args = _gemm_shift(env, 2, 3, 4)
    if how == "explicit-target":
        return str(vtakit.lower(s, args, target="vta", config=config))
    if how == "implied-by-scopes":
        return str(vtakit.lower(s, args))
    with build_config(config):
        return str(vtakit.lower(s, args))


@pytest.mark.parametrize("how", ["explicit-target", "implied-by-scopes", "tvm-style-context"])
def test_lower_shows_dma_uop_and_token_intrinsics(how):
    config = VTAConfig() if how == "implied-by-scopes" else VTAConfig.small()
    text = _lowered_text(how, config)
    for intrin in INTRINSICS:
        assert intrin in text, f"{intrin} missing from the IR lowered via {how}"


def test_explicit_config_reaches_the_passes():
    # 1x4x4 tiles: the same schedule lowers to different DMA sizes on the small configuration
    assert _lowered_text("explicit-target", VTAConfig.small()) != _lowered_text("explicit-target", VTAConfig())


def test_plain_cpu_schedules_imply_no_target():
    assert implied_target(["global", "local", "shared"]) is None
    assert implied_target(["local.acc_buffer", "global"]) == "vta"
    from vtakit import te
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B.op)
    assert "vta." not in str(vtakit.lower(s, [A, B]))
    with pytest.raises(CompileError, match="unknown target 'tpu'"):
        vtakit.lower(s, [A, B], target="tpu")
