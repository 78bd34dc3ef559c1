"""The GEMM core's int8 multipliers, two products per DSP48E1 where two lanes share an operand.

A BATCH x BLOCK_IN x BLOCK_OUT GEMM needs that many int8 x int8 products per cycle; with one
DSP48E1 each, VTA's default 1x16x16 needs 256 of the xc7z020's 220. Two output channels o and o+1
multiply the same input element ``x = inp[b][i]``, so their weights can share one multiplier:

    P = (w_hi * 2^16 + w_lo) * x = w_hi*x * 2^16 + w_lo*x

``w_hi * 2^16 + w_lo`` is a signed 25-bit value (the DSP48E1's A port) and ``x`` fits its 18-bit B
port, so the whole product is one DSP48E1 (written as one Amaranth multiply of a wide signed value
by an 8-bit signed one, which Yosys maps to a single cell). Since ``|w_lo*x| <= 2^14``, the low
product is exactly ``P[0:16]`` read as int16, and the high one is ``(P - sext16(P[0:16])) / 2^16``,
which is ``P[16:32] + P[15]`` (the carry a negative low product borrowed) wrapped to 16 bits.
Both are exact for every int8 operand (tests/hw/test_mac.py checks all of them).

(Leaving the ``+ P[15]`` corrections to the lanes' adder trees as 1-bit terms was measured too:
Yosys maps it to about 5% more LUTs than one 16-bit add per product.)

``GEMM_DSP_PACKING`` (:class:`vtakit.hw.config.VTAConfig`) chooses this structure (the default)
or one multiplier per product, as VTA has.

``GEMM_LUT_LANES`` moves the last output channels of every batch row off the DSPs: their products
are radix-4 Booth multipliers written as logic (:func:`lut_product`: four partial products
selected from 0, +-w, +-2w and summed), so no ``$mul`` cell reaches Yosys' DSP mapper and they
become LUTs and carry chains (about 75 LUT6 per product with synth_xilinx, against 134 for Yosys'
own soft multiplier; no DSP48E1 or MULT18X18D). That is how a 512-MAC array fits the xc7z020's 220
DSP48E1.
"""

from __future__ import annotations

from amaranth.hdl import Const, Mux, Value

from vtakit.hw.config import VTAConfig

__all__ = ["PACK_SHIFT", "product_pair", "lut_product", "lane_terms"]

#: The high weight's offset in the packed multiplicand: 16 keeps it within the DSP48E1's 25-bit A port.
PACK_SHIFT = 16


def product_pair(x: Value, w_hi: Value, w_lo: Value) -> tuple[Value, Value]:
    """``(w_hi * x, w_lo * x)`` as signed 16-bit values from one multiply; every operand is signed 8-bit."""
    product = ((w_hi.as_signed() << PACK_SHIFT) + w_lo.as_signed()) * x.as_signed()
    low = product[:PACK_SHIFT].as_signed()
    high = (product[PACK_SHIFT:2 * PACK_SHIFT] + product[PACK_SHIFT - 1])[:PACK_SHIFT].as_signed()
    return high, low


def lut_product(x: Value, w: Value) -> Value:
    """``x * w`` as a signed 16-bit value built from logic only (radix-4 Booth); both operands signed 8-bit.

    Digit k of ``x`` is ``-2*x[2k+1] + x[2k] + x[2k-1]`` (``x[-1] = 0``), in -2..2, and
    ``x = sum_k digit_k * 4^k``. Partial product k is ``|digit_k| * w`` (0, w or 2w, 10 bits) inverted
    when the digit is negative; the +1 that completes the two's complement negation is added to its
    row (``row + neg``), and the rows are summed in a tree of three adds. The +1s ride on the adds
    Yosys already makes (measured: 75 LUT6 and 13 CARRY4 per product, vs 100 with the four +1s
    gathered in a separate term)."""
    x = x.as_signed()
    w = w.as_signed()
    rows = []
    for k in range(4):
        hi, mid = x[2 * k + 1], x[2 * k]
        lo = x[2 * k - 1] if k else Const(0, 1)
        one = mid ^ lo                                   # digit +-1
        two = (hi & ~mid & ~lo) | (~hi & mid & lo)       # digit +-2
        neg = hi & ~(mid & lo)                           # digit < 0 (111 is 0, not -0)
        magnitude = Mux(one, w, Mux(two, w << 1, 0))     # signed, 9 bits
        rows.append((magnitude ^ neg.replicate(10).as_signed()) + neg)
    low = rows[0] + (rows[1] << 2)
    high = rows[2] + (rows[3] << 2)
    return (low + (high << 4))[:16].as_signed()


def lane_terms(config: VTAConfig, inp: Value, wgt: Value) -> list[list[list[Value]]]:
    """``terms[b][o]``: the products ``inp[b][i] * wgt[o][i]`` (signed) whose sum is GEMM lane (b, o)'s
    dot product. The last ``config.gemm_lut_lanes`` output channels take LUT multipliers
    (:func:`lut_product`). With ``config.gemm_dsp_packing`` the other channels are paired (o, o + 1)
    and each pair takes one multiplier per input element (:func:`product_pair`); an odd last DSP
    channel, or every DSP channel without packing, takes one multiplier per product."""
    def x(b: int, i: int) -> Value:
        return inp.word_select(b * config.block_in + i, 8).as_signed()

    def w(o: int, i: int) -> Value:
        return wgt.word_select(o * config.block_in + i, 8).as_signed()

    terms: list[list[list[Value]]] = [[[] for _ in range(config.block_out)] for _ in range(config.batch)]
    dsp_lanes = config.block_out - config.gemm_lut_lanes
    paired = dsp_lanes // 2 * 2 if config.gemm_dsp_packing else 0
    for b in range(config.batch):
        for o in range(0, paired, 2):
            pairs = [product_pair(x(b, i), w(o, i), w(o + 1, i)) for i in range(config.block_in)]
            terms[b][o] = [high for high, _ in pairs]
            terms[b][o + 1] = [low for _, low in pairs]
        for o in range(paired, dsp_lanes):
            terms[b][o] = [x(b, i) * w(o, i) for i in range(config.block_in)]
        for o in range(dsp_lanes, config.block_out):
            terms[b][o] = [lut_product(x(b, i), w(o, i)) for i in range(config.block_in)]
    return terms
