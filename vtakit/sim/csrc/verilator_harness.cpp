// The `verilator` backend's harness (vtakit/sim/verilator.py, docs/verilator.md).
//
// Compiled together with the Verilator model of `vtakit_core` (VTACore wrapped with flat ports by
// vtakit/sim/verilator.py) into one shared library. Python calls `vk_run` once per program: the
// harness launches the core, drives the clock, serves the AXI4 port with the DRAM model of
// vtakit/sim/rtl.py (docs/timing.md §DRAM) in the launch's DRAM image, records retire cycles and
// returns at `done`, at the cycle the deadlock flag rises, or past the cycle limit. The cycle loop
// mirrors rtl.py's harness statement for statement so the two agree cycle for cycle.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "Vcore.h"
#include "verilated.h"

namespace {

// Port access for any width: Verilator holds <=64-bit ports as integers, wider ones as VlWide.
template <typename T> inline uint64_t rd(const T& v) { return static_cast<uint64_t>(v); }
template <std::size_t N> inline uint64_t rd(const VlWide<N>& v) {
  return static_cast<uint64_t>(v[0]) | (N > 1 ? static_cast<uint64_t>(v[1]) << 32 : 0);
}
template <typename T> inline void get_bytes(const T& v, uint8_t* out, int n) {
  uint64_t x = static_cast<uint64_t>(v);
  for (int i = 0; i < n; i++) out[i] = static_cast<uint8_t>(x >> (8 * i));
}
template <std::size_t N> inline void get_bytes(const VlWide<N>& v, uint8_t* out, int n) {
  for (int i = 0; i < n; i++) out[i] = static_cast<uint8_t>(v[i / 4] >> (8 * (i % 4)));
}
template <typename T> inline void set_bytes(T& v, const uint8_t* in, int n) {
  uint64_t x = 0;
  for (int i = 0; i < n; i++) x |= static_cast<uint64_t>(in[i]) << (8 * i);
  v = static_cast<T>(x);
}
template <std::size_t N> inline void set_bytes(VlWide<N>& v, const uint8_t* in, int n) {
  for (std::size_t w = 0; w < N; w++) v[w] = 0;
  for (int i = 0; i < n; i++) v[i / 4] |= static_cast<uint32_t>(in[i]) << (8 * (i % 4));
}

struct ReadBurst {
  int64_t first_cycle;
  int beats;
  int step;
  uint64_t addr;
  uint32_t id;
  std::vector<uint8_t> data;   // snapshot taken when the request is accepted (as rtl.py does)
};

struct WriteBurst {
  uint64_t addr;
  int step;
  int beat;
};

enum Status { OK = 0, DEADLOCK = 1, LIMIT = 2, MEMORY_ERROR = 3, SIM_ERROR = 4 };

struct Run {
  uint8_t* dram;
  uint64_t dram_size;
  int latency;
  int bus_bytes;
  std::deque<ReadBurst> reads;
  std::deque<WriteBurst> writes;
  int64_t last_beat_cycle = -1;
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  char* message;
  int message_size;

  int fail(int status, const char* text) {
    std::snprintf(message, message_size, "%s", text);
    return status;
  }
  int check(uint64_t addr, uint64_t nbytes, const char* what) {
    if (addr + nbytes > dram_size) {
      char text[256];
      std::snprintf(text, sizeof text,
                    "DRAM %s of %llu bytes at 0x%llx runs past the end of DRAM (%llu bytes)", what,
                    (unsigned long long)nbytes, (unsigned long long)addr, (unsigned long long)dram_size);
      return fail(MEMORY_ERROR, text);
    }
    return OK;
  }
  int check_axi(uint64_t addr, uint64_t beats, uint64_t step, const char* what) {
    if (addr % step || addr / 4096 != (addr + beats * step - 1) / 4096) {
      char text[256];
      std::snprintf(text, sizeof text,
                    "AXI4 violation: %s burst of %llu x %llu bytes at 0x%llx is unaligned or crosses a 4 KiB boundary",
                    what, (unsigned long long)beats, (unsigned long long)step, (unsigned long long)addr);
      return fail(SIM_ERROR, text);
    }
    return OK;
  }
  int read_request(int64_t cycle, uint64_t addr, int length, int size, uint32_t id) {
    int beats = length + 1, step = 1 << size;
    int status = check_axi(addr, beats, step, "read");
    if (status == OK) status = check(addr, static_cast<uint64_t>(beats) * step, "read");
    if (status != OK) return status;
    ReadBurst burst;
    int64_t first = cycle + latency;
    if (last_beat_cycle + 1 > first) first = last_beat_cycle + 1;
    burst.first_cycle = first;
    burst.beats = beats;
    burst.step = step;
    burst.addr = addr;
    burst.id = id;
    burst.data.assign(dram + addr, dram + addr + static_cast<uint64_t>(beats) * step);
    last_beat_cycle = first + beats - 1;
    read_bytes += static_cast<uint64_t>(beats) * step;
    reads.push_back(std::move(burst));
    return OK;
  }
  int write_beat(const uint8_t* wdata, bool last) {
    if (writes.empty()) return fail(SIM_ERROR, "DRAM model: W beat without a preceding AW request");
    WriteBurst& burst = writes.front();
    uint64_t addr = burst.addr + static_cast<uint64_t>(burst.beat) * burst.step;
    int status = check(addr, burst.step, "write");
    if (status != OK) return status;
    int lane = static_cast<int>(addr % bus_bytes);
    std::memcpy(dram + addr, wdata + lane, burst.step);
    write_bytes += burst.step;
    burst.beat += 1;
    if (last) writes.pop_front();
    return OK;
  }
};

}  // namespace

extern "C" {

// Outputs: retire[n_insns] (cycle of each instruction's retire event, -1 if none),
// status_words[n_status_words] (the wrapper's `status` port, 32 bits a word, sampled one edge
// after the end), result[4] = {end cycle, DRAM bytes read, DRAM bytes written, 0}.
int vk_run(uint8_t* dram, uint64_t dram_size, uint32_t insn_addr, uint32_t insn_count, int latency,
           int bus_bytes, int64_t max_cycles, int64_t* retire, uint32_t* status_words, int n_status_words,
           int64_t* result, char* message, int message_size) {
  auto context = std::make_unique<VerilatedContext>();
  context->fatalOnError(false);
  auto top = std::make_unique<Vcore>(context.get());
  Run run;
  run.dram = dram;
  run.dram_size = dram_size;
  run.latency = latency;
  run.bus_bytes = bus_bytes;
  run.message = message;
  run.message_size = message_size;
  message[0] = 0;
  for (uint32_t i = 0; i < insn_count; i++) retire[i] = -1;

  std::vector<uint8_t> beat(bus_bytes > 64 ? bus_bytes : 64);
  std::deque<int64_t> b_pending;
  bool r_driven = false, b_driven = false;

  top->clk = 0;
  top->rst = 0;
  top->start = 1;
  top->insn_addr = insn_addr;
  top->insn_count = insn_count;
  top->arready = 1;
  top->awready = 1;
  top->wready = 1;
  top->rvalid = 0;
  top->bvalid = 0;
  top->eval();

  int64_t cycle = 0;
  int status = OK;
  bool deadlock = false;
  for (;;) {
    // The outputs of cycle `cycle` (rtl.py samples them just before the clock edge).
    if (top->arvalid) {
      status = run.read_request(cycle, rd(top->araddr), static_cast<int>(rd(top->arlen)),
                                static_cast<int>(rd(top->arsize)), static_cast<uint32_t>(rd(top->arid)));
      if (status != OK) break;
    }
    if (top->awvalid) {
      int step = 1 << static_cast<int>(rd(top->awsize));
      status = run.check_axi(rd(top->awaddr), rd(top->awlen) + 1, step, "write");
      if (status != OK) break;
      run.writes.push_back(WriteBurst{rd(top->awaddr), step, 0});
    }
    if (top->wvalid) {
      bool last = top->wlast;
      get_bytes(top->wdata, beat.data(), bus_bytes);
      status = run.write_beat(beat.data(), last);
      if (status != OK) break;
      if (last) b_pending.push_back(cycle + 1);
    }
    if (top->ret_load | top->ret_compute | top->ret_store) {
      const uint64_t idx[3] = {top->ret_load ? rd(top->idx_load) : 0, top->ret_compute ? rd(top->idx_compute) : 0,
                               top->ret_store ? rd(top->idx_store) : 0};
      const bool valid[3] = {bool(top->ret_load), bool(top->ret_compute), bool(top->ret_store)};
      for (int k = 0; k < 3; k++) {
        if (!valid[k]) continue;
        if (idx[k] >= insn_count) {
          char text[160];
          std::snprintf(text, sizeof text, "retire event for instruction %llu of a %u-instruction program",
                        (unsigned long long)idx[k], insn_count);
          status = run.fail(SIM_ERROR, text);
          break;
        }
        retire[idx[k]] = cycle;
      }
      if (status != OK) break;
    }
    if (top->done || top->deadlock) {
      deadlock = top->deadlock;
      break;
    }
    // Clock edge, then the inputs of the next cycle.
    top->clk = 1;
    top->eval();
    cycle += 1;
    if (cycle == 1) top->start = 0;
    if (cycle > max_cycles) {
      status = LIMIT;
      break;
    }
    if (!run.reads.empty() && run.reads.front().first_cycle <= cycle) {
      ReadBurst& burst = run.reads.front();
      int index = static_cast<int>(cycle - burst.first_cycle);
      bool last = index == burst.beats - 1;
      std::memset(beat.data(), 0, bus_bytes);
      if (burst.step == bus_bytes) {
        std::memcpy(beat.data(), burst.data.data() + static_cast<std::size_t>(index) * bus_bytes, bus_bytes);
      } else {
        int lane = static_cast<int>((burst.addr + static_cast<uint64_t>(index) * burst.step) % bus_bytes);
        std::memcpy(beat.data() + lane, burst.data.data() + static_cast<std::size_t>(index) * burst.step, burst.step);
      }
      set_bytes(top->rdata, beat.data(), bus_bytes);
      top->rid = burst.id;
      top->rlast = last;
      top->rvalid = 1;
      r_driven = true;
      if (last) run.reads.pop_front();
    } else if (r_driven) {
      top->rvalid = 0;
      r_driven = false;
    }
    bool b_now = !b_pending.empty() && b_pending.front() == cycle;
    if (b_now) b_pending.pop_front();
    if (b_now != b_driven) {
      top->bvalid = b_now;
      b_driven = b_now;
    }
    top->clk = 0;
    top->eval();
  }
  result[0] = cycle;
  result[1] = static_cast<int64_t>(run.read_bytes);
  result[2] = static_cast<int64_t>(run.write_bytes);
  result[3] = 0;
  if (status != OK) return status;
  // Counters are frozen after done and a deadlock is stable: one more edge reads them (as rtl.py).
  top->clk = 1;
  top->eval();
  top->clk = 0;
  top->eval();
  std::vector<uint8_t> words(static_cast<std::size_t>(n_status_words) * 4);
  get_bytes(top->status, words.data(), n_status_words * 4);
  std::memcpy(status_words, words.data(), words.size());
  top->final();
  return deadlock ? DEADLOCK : OK;
}

}  // extern "C"
