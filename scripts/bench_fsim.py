"""Functional-simulator speed: a blocked int8 GEMM, checked against numpy, in GEMM micro-ops per second.

The program is assembled here at the instruction level (serialised load -> compute -> store
tiles with VTA's token protocol), so the figure measures fsim alone. Default: 1024x1024x1024 on
the default 1x16x16 configuration, 4,194,304 GEMM micro-ops.

    python scripts/bench_fsim.py [--m 1024 --n 1024 --k 1024] [--small] [--no-races] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop, encode_uops
from vtakit.sim.fsim import simulate


def _mem(opcode, mem, sram, dram, y, x, stride, **flags):
    return MemInsn(opcode=opcode, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=stride, **flags)


def gemm_program(config: VTAConfig, m: int, n: int, k: int, seed: int = 0):
    """(insns, dram, a, w, out_addr): out = int8(a @ w.T), tiled to fit the SRAMs."""
    c = config
    mb, nb, kb = m // c.batch, n // c.block_out, k // c.block_in
    tn = max(1, min(nb, c.wgt_depth // kb))               # output blocks per weight tile
    tm = max(1, min(mb, c.inp_depth // kb, c.acc_depth // tn))   # row blocks per input tile
    if nb % tn or mb % tm or tn * kb > c.wgt_depth or tm * kb > c.inp_depth:
        raise SystemExit(f"cannot tile {m}x{n}x{k} on {c.model}")
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    w = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    inp = a.reshape(mb, c.batch, kb, c.block_in).transpose(0, 2, 1, 3)
    wgt = w.reshape(nb, c.block_out, kb, c.block_in).transpose(0, 2, 1, 3)
    uops = [Uop(o, i, o * kb + i) for i in range(kb) for o in range(tn)]
    uop_bytes = encode_uops(uops, c)
    inp_addr = -(-len(uop_bytes) // 256) * 256
    wgt_addr = inp_addr + inp.nbytes
    out_addr = wgt_addr + wgt.nbytes
    dram = np.zeros(out_addr + mb * nb * c.out_elem_bytes, dtype=np.uint8)
    dram[:len(uop_bytes)] = np.frombuffer(uop_bytes, dtype=np.uint8)
    dram[inp_addr:wgt_addr] = inp.reshape(-1).view(np.uint8)
    dram[wgt_addr:out_addr] = wgt.reshape(-1).view(np.uint8)
    L, S = Opcode.LOAD, Opcode.STORE
    insns = [_mem(L, MemId.UOP, 0, 0, 1, len(uops), len(uops))]
    tiles = [(j, i) for j in range(0, nb, tn) for i in range(0, mb, tm)]
    for t, (j, i) in enumerate(tiles):
        first, last = t == 0, t == len(tiles) - 1
        loads = []
        if i == 0:
            loads.append(_mem(L, MemId.WGT, 0, wgt_addr // c.wgt_elem_bytes + j * kb, 1, tn * kb, tn * kb))
        loads.append(_mem(L, MemId.INP, 0, inp_addr // c.inp_elem_bytes + i * kb, 1, tm * kb, tm * kb,
                          push_next=True))
        loads[0] = dataclasses.replace(loads[0], pop_next=not first)   # wait until compute freed the SRAMs
        insns += loads
        walk = dict(uop_bgn=0, uop_end=len(uops), iter_out=tm, dst_factor_out=tn, src_factor_out=kb)
        insns.append(GemmInsn(reset_reg=True, uop_bgn=0, uop_end=tn, iter_out=tm, dst_factor_out=tn,
                              pop_next=not first))
        insns.append(GemmInsn(pop_prev=True, push_prev=not last, push_next=True, **walk))
        insns.append(_mem(S, MemId.OUT, 0, out_addr // c.out_elem_bytes + i * nb + j, tm, tn, nb,
                          pop_prev=True, push_prev=True))
    insns.append(FinishInsn(pop_next=True))
    return insns, dram, a, w, out_addr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--small", action="store_true", help="use VTAConfig.small() (1x4x4)")
    parser.add_argument("--no-races", action="store_true", help="skip the happens-before race checks")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = VTAConfig.small() if args.small else VTAConfig()
    insns, dram, a, w, out_addr = gemm_program(config, args.m, args.n, args.k)
    start = time.perf_counter()
    stats = simulate(config, insns, dram, check_races=not args.no_races).stats
    seconds = time.perf_counter() - start
    c = config
    got = dram[out_addr:out_addr + args.m * args.n].view(np.int8).reshape(
        args.m // c.batch, args.n // c.block_out, c.batch, c.block_out).transpose(0, 2, 1, 3).reshape(args.m, args.n)
    start = time.perf_counter()
    ref = (a.astype(np.int32) @ w.astype(np.int32).T).astype(np.int8)
    numpy_seconds = time.perf_counter() - start
    result = {"config": config.model, "m": args.m, "n": args.n, "k": args.k, "instructions": len(insns),
              "gemm_uops": stats.counters["gemm_counter"], "correct": bool(np.array_equal(got, ref)),
              "race_checks": not args.no_races, "sim_seconds": round(seconds, 3),
              "uops_per_second": round(stats.counters["gemm_counter"] / seconds),
              "numpy_int32_matmul_seconds": round(numpy_seconds, 3)}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
