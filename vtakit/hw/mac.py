"""The GEMM core's int8 multipliers, two products per DSP48E1 where two lanes share an operand.

A BATCH x BLOCK_IN x BLOCK_OUT GEMM needs that many int8 x int8 products per cycle; with one
DSP48E1 each, VTA's default 1x16x16 needs 256 of the xc7z020's 220. Two output channels o and o+1
multiply the same input element ``x = inp[b][i]``, so their weights can share one multiplier:

    P = (w_hi * 2^16 + u) * x = w_hi*x * 2^16 + u*x,   u = w_lo mod 256 (0..255)

The multiplicand ``w_hi * 2^16 + u`` is wiring only (``Cat(w_lo, 0, w_hi)``: no add in front of the
multiplier), a signed 24-bit value (the DSP48E1's A port) and ``x`` fits its 18-bit B port, so the
whole product is one DSP48E1 (written as one Amaranth multiply of a wide signed value by an 8-bit
signed one, which Yosys maps to a single cell). Since ``|u*x| < 2^15``, ``u*x`` is exactly
``P[0:16]`` read as int16, and the high product is ``(P - sext16(P[0:16])) / 2^16``, which is
``P[16:32] + P[15]`` (the carry a negative low product borrowed) wrapped to 16 bits; the low one is
``u*x - 256*x`` when ``w_lo < 0``: ``P[0:8]`` and ``P[8:16] - x`` above it. Both are exact for
every int8 operand (tests/hw/test_mac.py checks all of them). The GEMM core registers the raw
product ``P`` (with ``x`` and ``w_lo``'s sign) and unpacks it in the next stage
(:func:`lane_products`), so the multiplier's stage is a register, the multiplier and a register.

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

from collections.abc import Callable, Sequence

from amaranth.hdl import Cat, Const, Mux, Value

from vtakit.hw.config import VTAConfig

__all__ = ["PACK_SHIFT", "packed_product", "unpack_high", "unpack_low", "product_pair", "lut_product",
           "lane_products", "lane_terms"]

#: The high weight's offset in the packed multiplicand: 16 keeps it within the DSP48E1's 25-bit A port.
PACK_SHIFT = 16


def packed_product(x: Value, w_hi: Value, w_lo: Value) -> Value:
    """The multiply of a pair: ``(w_hi * 2^16 + (w_lo mod 256)) * x``, signed 32-bit; operands signed 8-bit."""
    return Cat(w_lo, Const(0, PACK_SHIFT - 8), w_hi).as_signed() * x.as_signed()


def unpack_high(product: Value) -> Value:
    """``w_hi * x`` (signed 16-bit) from :func:`packed_product`'s result."""
    return (product[PACK_SHIFT:2 * PACK_SHIFT] + product[PACK_SHIFT - 1])[:PACK_SHIFT].as_signed()


def unpack_low(product: Value, x: Value, lo_sign: Value) -> Value:
    """``w_lo * x`` (signed 16-bit) from :func:`packed_product`'s result, ``x`` and ``w_lo``'s sign bit."""
    return Cat(product[:8], (product[8:PACK_SHIFT] - Mux(lo_sign, x.as_signed(), 0))[:8]).as_signed()


def product_pair(x: Value, w_hi: Value, w_lo: Value) -> tuple[Value, Value]:
    """``(w_hi * x, w_lo * x)`` as signed 16-bit values from one multiply; every operand is signed 8-bit."""
    product = packed_product(x, w_hi, w_lo)
    return unpack_high(product), unpack_low(product, x, w_lo[7])


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


Terms = list[list[list[Value]]]


def lane_products(config: VTAConfig, inp: Value, wgt: Value) -> tuple[list[Value], Callable[[Sequence[Value]], Terms]]:
    """The GEMM's multipliers in two steps, for a register between them: ``(raw, terms)``, where ``raw``
    are the multipliers' outputs (and the operand bits a packed pair's unpacking needs) and
    ``terms(raw)`` gives :func:`lane_terms` from them (``raw`` itself, or registered copies of it): the
    products as they are, a packed pair unpacked (:func:`unpack_high`, :func:`unpack_low`)."""
    def x(b: int, i: int) -> Value:
        return inp.word_select(b * config.block_in + i, 8).as_signed()

    def w(o: int, i: int) -> Value:
        return wgt.word_select(o * config.block_in + i, 8).as_signed()

    raw: list[Value] = []

    def keep(value: Value) -> int:
        raw.append(value)
        return len(raw) - 1

    # plan[b][o]: per product, how to read it from raw (or registered copies of raw)
    Read = Callable[[Sequence[Value]], Value]
    plan: list[list[list[Read]]] = [[[] for _ in range(config.block_out)] for _ in range(config.batch)]

    def as_is(k: int) -> Read:
        return lambda v: v[k]

    def high(p: int) -> Read:
        return lambda v: unpack_high(v[p])

    def low(p: int, xi: int, sign: int) -> Read:
        return lambda v: unpack_low(v[p], v[xi], v[sign])

    dsp_lanes = config.block_out - config.gemm_lut_lanes
    paired = dsp_lanes // 2 * 2 if config.gemm_dsp_packing else 0
    for b in range(config.batch):
        xs = [keep(x(b, i)) for i in range(config.block_in)] if paired else []
        for o in range(0, paired, 2):
            for i in range(config.block_in):
                p = keep(packed_product(x(b, i), w(o, i), w(o + 1, i)))
                plan[b][o].append(high(p))
                plan[b][o + 1].append(low(p, xs[i], keep(w(o + 1, i)[7])))
        for o in range(paired, dsp_lanes):
            plan[b][o] = [as_is(keep(x(b, i) * w(o, i))) for i in range(config.block_in)]
        for o in range(dsp_lanes, config.block_out):
            plan[b][o] = [as_is(keep(lut_product(x(b, i), w(o, i)))) for i in range(config.block_in)]

    def terms(values: Sequence[Value]) -> Terms:
        return [[[read(values) for read in lane] for lane in row] for row in plan]

    return raw, terms


def lane_terms(config: VTAConfig, inp: Value, wgt: Value) -> Terms:
    """``terms[b][o]``: the products ``inp[b][i] * wgt[o][i]`` (signed) whose sum is GEMM lane (b, o)'s
    dot product. The last ``config.gemm_lut_lanes`` output channels take LUT multipliers
    (:func:`lut_product`). With ``config.gemm_dsp_packing`` the other channels are paired (o, o + 1)
    and each pair takes one multiplier per input element (:func:`product_pair`); an odd last DSP
    channel, or every DSP channel without packing, takes one multiplier per product."""
    raw, terms = lane_products(config, inp, wgt)
    return terms(raw)
