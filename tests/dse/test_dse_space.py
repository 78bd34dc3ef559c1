"""The design space: valid, fitting proposals; the part's clock, bus and batch bounds; budgets."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.dse import DesignSpace, config_key, fmax_mhz
from vtakit.dse.fmax import ECP5_CALIBRATION, FIXED_CLOCK_MHZ, dram_latency_cycles
from vtakit.errors import ConfigError, DSEError
from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import estimate


@pytest.mark.parametrize("part", ["xc7z020", "ecp5-85k", "ecp5-25k"])
def test_every_proposal_validates_and_fits(part):
    space = DesignSpace(part, max_batch=1)
    configs = space.sample(np.random.default_rng(7), 40)
    configs += space.neighbours(configs[0])
    assert len(configs) >= 40
    keys = set()
    for c in configs:
        again = VTAConfig.from_dict(c.to_dict())          # validates: encodable, known keys
        assert again == c
        est = estimate(c, part)
        assert est.fits, (c.model, est.to_dict())
        assert c.batch == 1
        assert c.clock_mhz == fmax_mhz(c, part)
        assert c.dram_latency == dram_latency_cycles(c.clock_mhz)
        keys.add(c.model + str(c.to_dict()))
    assert len(keys) == len(configs)                     # distinct


def test_the_xc7z020_bounds_the_bus_and_fixes_the_clock():
    space = DesignSpace("xc7z020", max_batch=4)
    knobs = {k.name: k.values for k in space.knobs}
    assert max(knobs["bus_width"]) == 64
    assert knobs["log_batch"] == (0, 1, 2)                # BATCH never exceeds the network's batch
    configs = space.sample(np.random.default_rng(1), 30)
    assert all(c.bus_width <= 64 and c.clock_mhz == FIXED_CLOCK_MHZ and c.dram_latency == 32 for c in configs)
    assert any(c.batch > 1 for c in configs)


def test_sampling_is_deterministic_and_excludes():
    space = DesignSpace("xc7z020")
    a = space.sample(np.random.default_rng(5), 10)
    assert a == space.sample(np.random.default_rng(5), 10)
    b = space.sample(np.random.default_rng(5), 10, exclude={config_key(a[0])})
    assert a[0] not in b and len(b) == 10


def test_space_varies_block_buffer_bus_and_feature_keys():
    names = {k.name for k in DesignSpace("ecp5-85k").knobs}
    assert {"log_block_in", "log_block_out", "log_batch", "log_inp_depth", "log_wgt_depth", "log_acc_depth",
            "log_uop_depth", "bus_width", "dram_outstanding", "token_queue_depth", "cmd_queue_depth",
            "alu_mul", "alu_requant", "bias_preload", "gemm_out_requant", "gemm_dsp_packing", "acc_read_ports",
            "gemm_lut_lanes"} <= names


def test_lut_lanes_let_512_macs_fit_the_xc7z020():
    """GEMM_LUT_LANES moves products from DSP48E1s to LUTs: the space holds 512-MAC arrays on the xc7z020
    (1x32x16 with 4 LUT lanes by the estimate), which all-DSP arrays cannot reach."""
    space = DesignSpace("xc7z020")
    point = {"log_block_in": 5, "log_block_out": 4, "log_inp_depth": 11, "log_wgt_depth": 9, "log_acc_depth": 11}
    all_dsp = space.fit(space.config({**point, "gemm_lut_lanes": 0}))
    assert not all_dsp.fits and all_dsp.binding == "dsp"
    lanes = space.config({**point, "gemm_lut_lanes": 4})
    assert lanes.macs_per_cycle == 512 and space.fit(lanes).fits
    assert lanes in space.neighbours(space.config({**point, "gemm_lut_lanes": 2}))   # one knob step away
    # doubling VTA's default array is one step when the step is repaired: LUT lanes for the DSPs
    ref = space.reference()
    doubled = [c for c in space.neighbours(ref) if c.macs_per_cycle == 2 * ref.macs_per_cycle]
    assert doubled and all(space.fit(c).fits and c.gemm_lut_lanes > 0 for c in doubled)
    assert {(c.block_in, c.block_out) for c in doubled} <= {(32, 16), (16, 32)}


def test_repair_moves_the_area_knobs_until_it_fits():
    space = DesignSpace("xc7z020")
    point = space.point(space.reference())
    big = {**point, "log_block_in": 5}
    assert not space.fit(space.config(big)).fits
    fixed = space.repair(big, keep="log_block_in")
    assert fixed is not None and space.fit(space.config(fixed)).fits and fixed["log_block_in"] == 5
    assert {k for k in fixed if fixed[k] != big[k]} <= {"gemm_lut_lanes", "gemm_dsp_packing", "log_wgt_depth",
                                                         "log_acc_depth", "log_inp_depth", "log_uop_depth",
                                                         "acc_read_ports"}
    assert space.repair(point) == point                                   # a fitting point as it is
    huge = {**point, "log_block_in": 6, "log_block_out": 6}
    assert space.repair(huge) is None                                     # 4096 MACs: no repair fits


def test_ecp5_clock_model_reproduces_its_calibration_and_slows_with_the_tree():
    for point in ECP5_CALIBRATION:
        config = VTAConfig.small(log_block_in=point.log_block_in)
        assert fmax_mhz(config, "ecp5-85k") == pytest.approx(point.fmax_mhz, abs=0.1)
    assert fmax_mhz(VTAConfig(), "ecp5-85k") < fmax_mhz(VTAConfig.small(), "ecp5-85k")
    ref = DesignSpace("ecp5-85k").reference()
    assert ref.clock_mhz == fmax_mhz(ref, "ecp5-85k") and ref.dram_latency == dram_latency_cycles(ref.clock_mhz)
    assert dram_latency_cycles(100.0) == 32 and dram_latency_cycles(40.0) == 13


def test_reference_is_vta_default_on_the_part_even_if_it_does_not_fit():
    space = DesignSpace("xc7z020")
    ref = space.reference()
    assert ref.replace(clock_mhz=100.0, dram_latency=32) == VTAConfig()
    fit = space.fit(ref)
    assert fit.binding in ("lut", "ff", "dsp", "bram")
    assert fit.describe().startswith(fit.binding.upper())


def test_a_budget_nothing_fits_names_the_binding_resource():
    for part, kind in (("xc7z020", "dsp"), ("ecp5-25k", "bram"), ("xc7z020", "lut")):
        space = DesignSpace(part, budget={kind: 0.01})
        fit = space.fit(space.smallest())
        assert fit.binding == kind and not fit.fits
        with pytest.raises(DSEError, match=rf"binding resource is {kind.upper()}") as info:
            space.check_nonempty()
        assert fit.describe(kind) in str(info.value) and "budget 1%" in str(info.value)
    DesignSpace("xc7z020", budget=0.5).check_nonempty()   # the smallest configuration fits half the part


@pytest.mark.parametrize("budget, match", [
    (0.0, r"budget for LUT must be a share of the part in \(0, 1\], got 0.0"),
    (1.5, r"got 1.5"),
    ({"luts": 0.5}, r"unknown resource kind\(s\) \['luts'\]"),
    ({"dsp": "half"}, r"budget for DSP .* got 'half'"),
])
def test_bad_budgets_are_errors(budget, match):
    with pytest.raises(DSEError, match=match):
        DesignSpace("xc7z020", budget=budget)


def test_unknown_part_and_bad_batch():
    with pytest.raises(ConfigError, match=r"unknown FPGA part 'xc7z999'.*xc7z020"):
        DesignSpace("xc7z999")
    with pytest.raises(DSEError, match=r"batch must be a positive int, got 0"):
        DesignSpace("xc7z020", max_batch=0)


def test_sampled_configurations_elaborate():
    """The RTL of proposed configurations elaborates (two 32-MAC ones: 7.5 and 9.9 s under load), with the SRAMs the
    configuration asks for (element width in bits, depth)."""
    import re

    from vtakit.hw.verilog import generate_verilog

    space = DesignSpace("xc7z020", budget=0.25)
    for config in space.sample(np.random.default_rng(11), 2):
        text = generate_verilog(config, assertions=False)
        assert text.startswith(f"// vtakit accelerator {config.model}: generated by `vtakit verilog`")
        assert "\nmodule vtakit_top(" in text and text.count("\nmodule ") == text.count("endmodule") > 1
        mems = {name: (int(hi) + 1, max(int(a), int(b)) + 1)
                for hi, name, a, b in re.findall(r"reg \[(\d+):0\] (\w+_mem) \[(\d+):(\d+)\]", text)}
        assert mems == {k: (getattr(config, f"{k[:3]}_elem_bytes") * 8, getattr(config, f"{k[:3]}_depth"))
                        for k in ("inp_mem", "wgt_mem", "acc_mem", "out_mem", "uop_mem")}, config.model


def _near_the_top(space: DesignSpace) -> list[VTAConfig]:
    """Configurations of ``space`` whose estimated LUTs lie between ``1 - LUT_MARGIN`` of the part and
    the whole part, every other resource within it (1x16x32 arrays, varying the LUT lanes and the
    feature keys)."""
    import itertools

    from vtakit.hw.estimate import LUT_MARGIN

    cap = space.part.capacity["lut"]
    found = []
    for lanes, alu_mul, requant, out_requant, bias, wgt in itertools.product(
            (0, 2, 4, 6, 8, 12), (False, True), (False, True), (False, True), (False, True), (8, 9)):
        try:
            config = space.config({"log_block_in": 4, "log_block_out": 5, "gemm_lut_lanes": lanes, "alu_mul": alu_mul,
                                   "alu_requant": requant, "gemm_out_requant": out_requant, "bias_preload": bias,
                                   "log_wgt_depth": wgt})
        except ConfigError:
            continue
        e = estimate(config, space.part)
        others_fit = all(getattr(e, k).fraction <= 1 for k in ("ff", "dsp", "bram"))
        if (1 - LUT_MARGIN) * cap < e.lut.used <= cap and others_fit:
            found.append(config)
    return found


def test_a_point_within_the_estimates_lut_error_of_the_part_is_not_admitted():
    """By default the LUT budget holds back the estimate's held-out error (LUT_MARGIN): a configuration
    the estimate puts under the part's LUTs, but within that error of them, does not fit the search's
    budget (only synthesis can say), and the search never proposes it; ``lut_margin=0`` admits it."""
    from vtakit.hw.estimate import LUT_MARGIN

    space, trusting = DesignSpace("xc7z020"), DesignSpace("xc7z020", lut_margin=0.0)
    assert 0 < LUT_MARGIN < 0.15 and space.budget["lut"] == 1 - LUT_MARGIN and trusting.budget["lut"] == 1.0
    near = _near_the_top(trusting)
    assert near
    for config in near:
        assert estimate(config, "xc7z020").fits and trusting.fit(config).fits
        fit = space.fit(config)
        assert not fit.fits and fit.binding == "lut"
        assert f"the estimate's {100 * LUT_MARGIN:g}% error margin" in fit.describe()
        assert space.admit(space.point(config), set()) is None
        assert trusting.admit(trusting.point(config), set()) == config
    # a smaller budget than the margin's stays; the budget handed to the evaluation jobs is the one in force
    assert DesignSpace("xc7z020", budget={"lut": 0.5}).budget["lut"] == 0.5
    assert DesignSpace("xc7z020", budget=space.budget, lut_margin=0.0).budget == space.budget


@pytest.mark.parametrize("margin", [-0.01, 1.0, True, "3%"])
def test_bad_lut_margins_are_errors(margin):
    with pytest.raises(DSEError, match=r"lut_margin must be a share of the part's LUTs in \[0, 1\)"):
        DesignSpace("xc7z020", lut_margin=margin)
