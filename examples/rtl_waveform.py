"""Watch the accelerator's RTL run a small program: write a VCD waveform and read it back.

The ``rtl`` backend simulates the Amaranth design itself (fetch, load, compute, store, token
queues, the AXI4 memory master) against a DRAM model. Given ``trace="....vcd"`` it also writes a
waveform of the core's control signals, with a GTKWave save file beside it
(``gtkwave gemm.vcd gemm.gtkw``).

The program is written by hand with ``ProgramBuilder`` on the small 1x4x4 test configuration:
load a 4x8 int8 matrix A and a 4x8 W, reset the accumulator, GEMM, requantise on the ALU
(shift right, clip to int8), store, with the load -> compute -> store tokens VTA's runtime would
use. The result is checked against numpy and the waveform against the run's statistics.

Run it as it is: ``python examples/rtl_waveform.py [--output gemm.vcd]``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

import vtakit
from vtakit.hw.isa import AluOp, MemId, Stage, Uop
from vtakit.runtime import ProgramBuilder
from vtakit.runtime.packing import dense_reference, pack_matrix, requantize, unpack_matrix
from vtakit.sim.program import Program

M, N, K, SHIFT = 4, 4, 8, 6


def gemm_program(builder: ProgramBuilder, a: object, w: object, c: object) -> Program:
    """C = clip((A . W^T) >> SHIFT, -128, 127) for one 4x4 output block (BATCH 1, BLOCK 4)."""
    k_blocks = K // 4
    builder.load_2d(MemId.INP, 0, a, y_size=M, x_size=k_blocks)       # 4 rows x 2 INP entries
    builder.load_2d(MemId.WGT, 0, w, y_size=1, x_size=k_blocks)       # 2 WGT entries (4x4 each)
    builder.dep_push(Stage.LOAD, Stage.COMPUTE)
    builder.dep_pop(Stage.LOAD, Stage.COMPUTE)
    rows = dict(iter_out=M, dst_factor=(1, 0))                        # one ACC entry per row of A
    builder.gemm([Uop(0)], reset=True, **rows)
    builder.gemm([Uop(0, kb, kb) for kb in range(k_blocks)], src_factor=(k_blocks, 0), **rows)
    for op, imm in ((AluOp.SHR, SHIFT), (AluOp.MAX, -128), (AluOp.MIN, 127)):
        builder.alu(op, [Uop(0)], imm=imm, **rows)
    builder.dep_push(Stage.COMPUTE, Stage.STORE)
    builder.dep_pop(Stage.COMPUTE, Stage.STORE)
    builder.store_2d(0, c, y_size=M, x_size=1)
    return builder.finish()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("gemm.vcd"), help="the waveform to write (.vcd)")
    args = parser.parse_args()

    config = vtakit.VTAConfig.small()
    dev = vtakit.Device(config, backend="rtl")
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    a_dev = dev.array(pack_matrix(a, config.batch, config.block_in))
    w_dev = dev.array(pack_matrix(w, config.block_out, config.block_in))
    c_dev = dev.empty((M // config.batch, N // config.block_out, config.batch, config.block_out), np.int8)
    program = gemm_program(ProgramBuilder(config, dev, name="tiny_gemm"), a_dev, w_dev, c_dev)
    stats = dev.run(program, trace=args.output)

    expect = requantize(dense_reference(a, w), None, SHIFT, (-128, 127))
    np.testing.assert_array_equal(unpack_matrix(c_dev.numpy()), expect)
    print(f"{program.name}: {len(program.insns)} instructions on the RTL ({config.model}), {stats.cycles} cycles, "
          f"equals numpy")

    text = args.output.read_text()                          # open the waveform: VCD is plain text
    signals = re.findall(r"\$var \S+ \d+ \S+ (\S+)", text)
    done = re.search(r"\$var wire 1 (\S+) done \$end", text).group(1)     # the core's done output
    period = 10 ** 7                                        # one 100 MHz cycle in the file's 1 fs units
    now, done_at = 0, None
    for line in text.splitlines():
        if line.startswith("#"):
            now = int(line[1:])
        elif line == "1" + done and done_at is None:
            done_at = now // period
    assert done_at == stats.cycles, (done_at, stats.cycles)   # RunStats.cycles counts from start to done
    print(f"wrote {args.output}: {len(signals)} signals ({', '.join(signals[:5])}, ...); 'done' rises in cycle "
          f"{done_at}, as the run's statistics say; view it with gtkwave {args.output} "
          f"{args.output.with_suffix('.gtkw')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
