"""Functional-simulator speed: blocked int8 GEMMs, checked against numpy, in GEMM micro-ops per second.

Three programs of the same GEMM (default 1024x1024x1024 on the default 1x16x16 configuration,
4,194,304 GEMM micro-ops): ``builder_vt1`` / ``builder_vt2``, the runtime's double-buffered GEMM
built with ``ProgramBuilder`` (``vtakit.runtime.blocked_gemm``, with its requantisation
epilogue) on 1 and 2 virtual threads, and ``hand``, a serialised tile loop assembled here at the
instruction level. ``sim_seconds`` is fsim's own time (RunStats), excluding program building.

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


def bench_hand(config: VTAConfig, m: int, n: int, k: int, check_races: bool) -> dict:
    insns, dram, a, w, out_addr = gemm_program(config, m, n, k)
    stats = simulate(config, insns, dram, check_races=check_races).stats
    c = config
    got = dram[out_addr:out_addr + m * n].view(np.int8).reshape(
        m // c.batch, n // c.block_out, c.batch, c.block_out).transpose(0, 2, 1, 3).reshape(m, n)
    ref = (a.astype(np.int32) @ w.astype(np.int32).T).astype(np.int8)
    return {"program": "hand", "instructions": len(insns), "correct": bool(np.array_equal(got, ref)),
            "gemm_uops": stats.counters["gemm_counter"], "sim_seconds": stats.sim_seconds}


def bench_builder(config: VTAConfig, m: int, n: int, k: int, vthreads: int) -> dict:
    from vtakit.runtime.blocked_gemm import bench_gemm   # the runtime's ProgramBuilder GEMM
    result = bench_gemm(m, n, k, config=config, backend="fsim", vthreads=vthreads)
    return {"program": f"builder_vt{vthreads}", "instructions": None, "correct": result.correct,
            "gemm_uops": result.ideal_cycles, "sim_seconds": result.sim_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--small", action="store_true", help="use VTAConfig.small() (1x4x4)")
    parser.add_argument("--no-races", action="store_true", help="skip the happens-before race checks (hand only)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = VTAConfig.small() if args.small else VTAConfig()
    a, w = np.ones((args.m, args.k), np.int32), np.ones((args.n, args.k), np.int32)
    start = time.perf_counter()
    a @ w.T
    numpy_seconds = time.perf_counter() - start
    rows = [bench_builder(config, args.m, args.n, args.k, 1), bench_builder(config, args.m, args.n, args.k, 2),
            bench_hand(config, args.m, args.n, args.k, not args.no_races)]
    for row in rows:
        row["uops_per_second"] = round(row["gemm_uops"] / row["sim_seconds"])
        row["sim_seconds"] = round(row["sim_seconds"], 3)
    result = {"config": config.model, "m": args.m, "n": args.n, "k": args.k,
              "numpy_int32_matmul_seconds": round(numpy_seconds, 3), "runs": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"fsim GEMM {args.m}x{args.n}x{args.k} on {config.model} "
          f"(numpy int32 matmul of the same size: {result['numpy_int32_matmul_seconds']} s)")
    print(f"{'program':>12} {'correct':>8} {'gemm_uops':>10} {'sim_s':>8} {'uops/s':>12}")
    for row in rows:
        print(f"{row['program']:>12} {str(row['correct']):>8} {row['gemm_uops']:>10} {row['sim_seconds']:>8} "
              f"{row['uops_per_second']:>12,}")


if __name__ == "__main__":
    main()
