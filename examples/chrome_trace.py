"""Where did the cycles go? Write a Chrome trace of a compiled layer and read it back.

The cycle backend can record a run as a Chrome trace-event timeline: one track per module (load,
compute, store) with every instruction's execution and the cycles it waited for a token or for
DRAM, a fetch track, the DRAM bursts, and the token-queue occupancy. Open the ``.json`` in
https://ui.perfetto.dev (or chrome://tracing); one microsecond of trace time is one cycle.

This example compiles a packed dense layer with two virtual threads, runs it with
``dev.run(program, trace=...)``, checks the result against numpy, then opens the trace with
``json`` and sums each track's time by kind.

Run it as it is: ``python examples/chrome_trace.py [--output dense_trace.json]``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

import vtakit
from vtakit.compiler import topi_vta, vta
from vtakit.runtime.packing import dense_reference, pack_bias, pack_matrix, requantize, unpack_matrix

M, N, K, SHIFT = 64, 256, 512, 11


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("dense_trace.json"), help="the trace file to write")
    args = parser.parse_args()

    env = vta.get_env()
    s, tensors = topi_vta.dense(env, M, N, K, vthreads=2, shift=SHIFT)
    mod = vtakit.build(s, tensors, target=env.target, config=env)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    bias = rng.integers(-64, 64, N, dtype=np.int32)

    dev = vtakit.Device(env.config, backend="cycle")
    arrays = [dev.array(pack_matrix(a, env.BATCH, env.BLOCK_IN)),
              dev.array(pack_matrix(w, env.BLOCK_OUT, env.BLOCK_IN)),
              dev.array(pack_bias(bias, env.BATCH, env.BLOCK_OUT)),
              dev.empty((M // env.BATCH, N // env.BLOCK_OUT, env.BATCH, env.BLOCK_OUT), env.out_dtype)]
    program = mod.program_for(*arrays)         # what mod(*arrays) runs, so that it can run with a trace
    stats = dev.run(program, trace=args.output)
    expect = requantize(dense_reference(a, w), bias, SHIFT, (0, 127))   # (acc + bias) >> SHIFT
    np.testing.assert_array_equal(unpack_matrix(arrays[-1].numpy()), expect)
    print(f"dense {M}x{N}x{K} on the cycle model: {stats.cycles} cycles, utilization {stats.utilization:.1%}, "
          f"equals numpy")

    trace = json.loads(args.output.read_text())  # open the trace: Chrome's trace-event format
    events = trace["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    busy: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in events:
        if e["ph"] == "X":
            busy[tracks[e["tid"]]][e["cat"]] += e["dur"]
    end = max(e["ts"] + e["dur"] for e in events if e["ph"] == "X")
    assert end == stats.cycles, (end, stats.cycles)   # the last slice (FINISH) ends at the run's last cycle
    print(f"wrote {args.output}: {len(events)} events; open it in https://ui.perfetto.dev")
    kinds = ("exec", "token", "memory", "queue", "dram")      # slice categories: what a track spent cycles on
    print("  cycles by  " + " ".join(f"{kind:>8s}" for kind in kinds))
    for track in tracks.values():
        print(f"  {track:9s} " + " ".join(f"{busy[track][kind]:8d}" for kind in kinds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
