/* The cycle model's timing solver, compiled: vtakit.sim._timing_core.
 *
 * A transcription of vtakit/sim/cycle.py's _Solver (read its docstring and docs/timing.md first):
 * the rules of docs/timing.md §2-§5 solved as recurrences, one instruction at a time. Each module
 * walks through its instructions as far as known cycles allow; only the read arbiter (§5), where
 * requesters compete, decides in cycle order. Timing depends only on instruction fields, never on
 * data, so this core computes no data: the cycle backend takes the data from the functional
 * simulator (fsim), which for programs it accepts gives the same DRAM in any valid schedule. One
 * exception: with one ACC read port a tensor ALU micro-op takes 1 or 2 cycles depending on its src
 * address (docs/timing.md §4), so the core keeps the micro-op cache's src fields as the LOAD UOPs
 * (compute's, in program order) fill them from DRAM, and declines a program whose STOREs may write
 * what a LOAD UOP reads (the DRAM it is given is the DRAM before the run).
 *
 * Contract (vtakit/sim/native.py): the core answers only for programs it fully understands. On
 * anything else -- an opcode without a layout, a flag illegal on its module, a memory type the
 * module does not take, FINISH missing or not last, unbalanced tokens, a configuration it cannot
 * time, a deadlock -- it DECLINES (returns a short string naming why) and Python's solver runs
 * the program, producing the usual error. It never loops forever and never reads out of bounds on
 * garbage: every index it follows is checked or bounded by construction.
 *
 * solve(stream, layout, params, insn_addr, dram) -> str (declined) or
 *     (cycles, retire_cycles: list, stats: 12-tuple, dram_read_bytes, dram_write_bytes, events, detail: bytes)
 *   stream: the encoded program (16 bytes per instruction); layout: native.layout_table(config);
 *   params: (Qc, Qt, L, O, bus bytes, ALU flags, out elem bytes, elem bytes of UOP, WGT, INP, ACC,
 *            ACC_8BIT, UOP depth, ACC depth, D of GEMM, D of ALU, LOAD preparation cycles); insn_addr: the stream's byte address in DRAM; dram: the
 *            DRAM before the run (a contiguous buffer), or its size in bytes (then it reads as zeros).
 *   D: e - s - M of a GEMM or ALU with micro-ops (docs/timing.md section 4, vtakit/hw/pipeline.py).
 *   ALU flags: bit 0, ALU MUL is legal (ALU_MUL); bit 1, a tensor ALU micro-op takes 2 cycles unless
 *            it hits the src register (ACC_READ_PORTS 1, docs/timing.md section 4); bit 2, ALU
 *            REQUANT is legal (ALU_REQUANT). Every ALU micro-op that reads the entry the micro-op
 *            before it writes takes 2 cycles as well (section 4).
 *   stats: busy, token-stall and memory-stall cycles of fetch, load, compute, store (4 each).
 *   detail: int64 array, see write_detail().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "vta_insn.h"

#define FETCH_BURST 4           /* instructions per fetch burst (aligned groups, §2) */
#define FETCH_DEPTH 16          /* instruction-buffer entries (§2) */
#define MAX_BURST 256           /* AXI beats per burst (§4) */
#define BOUNDARY 4096           /* bursts never cross 4 KiB (§4) */
#define NEVER ((int64_t)1 << 62)
/* Bounds that keep every cycle in int64 with room to spare: one step of the recurrences adds at most
 * a GEMM's micro-ops (< 2^42), a DMA's beats or pads (< 2^46) or the DRAM latency (<= MAX_LATENCY)
 * to a known cycle, so a run that stops at CYCLE_CAP never reaches NEVER (the Python solver's
 * sentinel too) nor overflows. Configurations beyond the bounds, and runs beyond the cap, are
 * declined (the Python solver, on unbounded integers, runs them). */
#define CYCLE_CAP ((int64_t)1 << 60)
#define MAX_LATENCY ((int64_t)1 << 40)
#define MAX_BYTES ((int64_t)1 << 16)   /* bus and element sizes (VTAConfig's are <= 16 KiB) */
#define MAX_DEPTH ((int64_t)1 << 24)   /* UOP and ACC entries */

enum { LOAD, COMPUTE, STORE, NMODULES };
enum { IDLE, WAIT, EXEC, RETIRE };
enum { L2C, C2L, C2S, S2C, NQUEUES };                 /* token queues: vtakit.sim.machine.QUEUE_NAMES */
enum { K_MICRO, K_FINISH, K_STORE, K_LOAD };           /* what an instruction's datapath is (§4) */
/* What a waiting module waits for: a token in queue q (q), room in queue q (ON_ROOM + q), its next
 * instruction's dispatch, or nobody else's action (its LOAD's bursts, which the arbiter finishes). */
enum { ON_NOTHING = -1, ON_ROOM = 4, ON_DISPATCH = 8 };
#define WAKE_DISPATCH 8         /* wake bits: 1 << module, and dispatch */
#define WAKE_ALL 15
#define POLL_STEPS 4096u        /* solver steps between checks for signals (a check is an atomic load) */

static const int PRODUCER[NQUEUES] = {LOAD, COMPUTE, COMPUTE, STORE};
static const int CONSUMER[NQUEUES] = {COMPUTE, LOAD, STORE, COMPUTE};

/* What the solver needs of one instruction. */
typedef struct {
    int8_t kind, module, npop, npush, pop[2], push[2];
    int8_t mem;                 /* LOAD: memory type */
    int64_t micro;              /* GEMM/ALU: e - s, the micro-ops' cycles M plus D (0 without micro-ops) */
    int64_t x_size, y_size, pads, dram_base, x_stride;
} insn_t;

/* A LOAD's read bursts, generated one at a time as the arbiter accepts them (cycle.py's _bursts). */
typedef struct {
    int64_t row_beats, rows, y, left, beat;
    uint64_t base, stride, addr;
} bursts_t;

/* A growable int64 array. */
typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} vec_t;

/* Room for k more entries (the array doubles as it grows); -1 when memory runs out. */
static int vec_reserve(vec_t *a, Py_ssize_t k)
{
    if (a->n + k > a->cap) {
        Py_ssize_t cap = a->cap ? 2 * a->cap : 96;
        int64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    return 0;
}

static int vec_push3(vec_t *a, int64_t x, int64_t y, int64_t z)
{
    if (vec_reserve(a, 3) < 0)
        return -1;
    a->v[a->n++] = x;
    a->v[a->n++] = y;
    a->v[a->n++] = z;
    return 0;
}

typedef struct {
    /* configuration */
    int64_t qc, qt, latency, limit, bus, out_elem, elem[6], dram_size;
    int alu_mul, alu_requant;
    /* the micro-op cache's src and dst fields (their low log2(ACC depth) bits) as compute's LOAD UOPs
     * leave them: an ALU micro-op takes 2 cycles when it reads the entry the previous one writes, and
     * with one ACC read port (ALU flags bit 1) a tensor one that misses the src register (§4) */
    uint32_t *uop_src, *uop_dst;
    int one_port;
    int64_t uop_depth, acc_depth;
    int64_t gemm_delay, alu_delay;   /* D = e - s - M of a GEMM, an ALU with micro-ops (§4) */
    int64_t load_prep;               /* a LOAD with x_size != 0 starts its pads and requests from s + load_prep */
    int log_acc_depth;
    const uint8_t *dram;        /* the DRAM before the run (NULL: zeros) */
    vec_t uop_reads, stores;    /* (first, end) DRAM bytes of each LOAD UOP and each STORE */
    int uop_timed;              /* some ALU's timing depends on the micro-op cache */
    /* program */
    Py_ssize_t count;
    insn_t *insns;
    Py_ssize_t *lists[NMODULES], nlist[NMODULES];  /* each module's instructions, in order */
    Py_ssize_t *freed_by;       /* dispatch waits for the take of the instruction Qc ahead in its queue */
    /* per instruction (-1: not yet) */
    int64_t *fetched, *dispatched, *taken, *started, *finished, *retired, *pads, *write_beats;
    /* token queues: the cycle of every push and pop */
    int64_t *push_cycles[NQUEUES], *pop_cycles[NQUEUES];
    Py_ssize_t npushed[NQUEUES], npopped[NQUEUES];
    /* modules: next instruction (position in its list), state, cycle cursor, token step, wait */
    Py_ssize_t next[NMODULES];
    int state[NMODULES], step[NMODULES], waits[NMODULES], dispatch_wait;
    int64_t cursor[NMODULES];
    /* each module's LOAD while its bursts are being accepted (§4) */
    bursts_t reading[NMODULES];
    int64_t present[NMODULES];  /* NEVER: no LOAD reading */
    /* accounting (RunStats) */
    int64_t busy[NMODULES], token_stall[NMODULES], memory_stall[NMODULES];
    int64_t fetch_memory, fetch_queue, head_since, read_bytes, write_bytes;
    /* fetch (§2) and the read side of memory (§5) */
    int64_t slot0, insn_beats, insn_beat_bytes, fetch_from, frontier, chan_last;
    Py_ssize_t requested, n_dispatched, fetch_next;
    int64_t *lasts;             /* ring of the last O bursts' last beats (-1: long done) */
    int64_t lasts_head;         /* index of the O-th latest, lasts[-O] in cycle.py */
    vec_t reads;                /* (instruction or -1 for fetch, first beat, last beat) per burst, accepted order */
    int64_t done_cycle, events;
    unsigned steps;             /* solver steps and accepted bursts, for interrupted() */
    int64_t load_beats;         /* data beats of every LOAD, saturating at NEVER: bounds the bursts */
    const char *why;            /* set when a run must be declined midway (CYCLE_CAP) */
} solver_t;

static Py_ssize_t fetch_burst(const solver_t *s)
{
    Py_ssize_t left = s->count - s->requested;
    Py_ssize_t room = FETCH_BURST - (Py_ssize_t)((s->slot0 + s->requested) % FETCH_BURST);
    return left < room ? left : room;
}

/* ------------------------------------------------------------------ reading a program */

/* Only the fields used are decoded (most of this core's per-instruction cost saved). */
#define F(name) vta_field(w, row, VTA_F_##name)

/* Whether a layout table is one this core can decode safely: vta_layout_ok's, and the fields the
 * solver multiplies narrow enough that no product of them overflows (isa.layout's are at most 16
 * bits; DRAM_BASE 32). */
static int layout_ok(const vta_layout *layout)
{
    static vta_layout checked;          /* the last table found good (one per configuration in use) */
    static int have_checked;
    if (have_checked && !memcmp(layout, &checked, sizeof checked))
        return 1;
    for (int op = 0; op < VTA_NOPCODES; op++)
        for (int k = 0; k < VTA_NFIELDS; k++) {
            const int32_t width = layout->f[op][k][1], sign = layout->f[op][k][2];
            int limit = 64;
            switch (k) {
            case VTA_F_DRAM_BASE:
                limit = 32;
                break;
            case VTA_F_X_SIZE: case VTA_F_Y_SIZE: case VTA_F_X_STRIDE: case VTA_F_Y_PAD_0: case VTA_F_Y_PAD_1:
            case VTA_F_X_PAD_0: case VTA_F_X_PAD_1: case VTA_F_UOP_BGN: case VTA_F_UOP_END: case VTA_F_ITER_OUT:
            case VTA_F_ITER_IN:
                limit = 20;
                break;
            }
            if (width > limit || (sign != 0 && sign != 1))
                return 0;
        }
    if (!vta_layout_ok(layout))
        return 0;
    memcpy(&checked, layout, sizeof checked);
    have_checked = 1;
    return 1;
}

static int vec_push2(vec_t *a, int64_t x, int64_t y)
{
    if (vec_reserve(a, 2) < 0)
        return -1;
    a->v[a->n++] = x;
    a->v[a->n++] = y;
    return 0;
}

/* The DRAM bytes [first, end) of a 2-D transfer of rows x cols elements of `elem` bytes (fsim's
 * footprint; no wrap), as a pair appended to `a`; -1 when out of memory. */
static int footprint(vec_t *a, int64_t dram_base, int64_t x_size, int64_t y_size, int64_t x_stride, int64_t elem)
{
    if (!x_size || !y_size)
        return 0;
    const int64_t first = dram_base * elem;
    return vec_push2(a, first, first + ((y_size - 1) * x_stride + x_size) * elem);
}

/* A LOAD UOP on compute: write the src and dst fields it leaves in the micro-op cache (pads: 0). Entries
 * past the cache and words past the DRAM are fsim's MemoryAccessError: skipped (read as 0). */
static void uop_load(solver_t *s, const uint64_t w[2], const int32_t (*row)[3])
{
    const uint64_t width = (uint64_t)(F(X_PAD_0) + F(X_SIZE) + F(X_PAD_1));
    const uint64_t height = (uint64_t)(F(Y_PAD_0) + F(Y_SIZE) + F(Y_PAD_1));
    const uint64_t base = (uint64_t)F(SRAM_BASE), x0 = (uint64_t)F(X_PAD_0), y0 = (uint64_t)F(Y_PAD_0);
    const uint64_t xs = (uint64_t)F(X_SIZE), ys = (uint64_t)F(Y_SIZE), dram_base = (uint64_t)F(DRAM_BASE);
    const uint64_t stride = (uint64_t)F(X_STRIDE);
    const uint32_t mask = (uint32_t)(s->acc_depth - 1);
    if (base >= (uint64_t)s->uop_depth)
        return;
    uint64_t count = (uint64_t)s->uop_depth - base;
    if (height * width < count)            /* (sizes and pads are at most 20 bits each: no overflow) */
        count = height * width;
    for (uint64_t e = 0; e < count; e++) {
        const uint64_t y = e / width, x = e % width;
        uint32_t src = 0, dst = 0;
        if (s->dram && y >= y0 && y - y0 < ys && x >= x0 && x - x0 < xs) {
            const uint64_t addr = (dram_base + (y - y0) * stride + (x - x0)) * 4;
            if (addr + 4 <= (uint64_t)s->dram_size) {
                const uint8_t *p = s->dram + addr;
                const uint32_t word = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
                src = (word >> s->log_acc_depth) & mask;   /* src_idx follows dst_idx (log2 ACC depth bits) */
                dst = word & mask;
            }
        }
        s->uop_src[base + e] = src;
        s->uop_dst[base + e] = dst;
    }
}

/* floor(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* #{(i, j) in [i0, i1) x [j0, j1) : i * a + j * b == target (mod size)}, size a power of two;
 * cycle.py's _count_lattice: for each i of the shorter range, the j with j * b == target - i * a
 * form one residue class modulo size / g (g: the largest power of two dividing b), or none. */
static int64_t count_lattice(int64_t i0, int64_t i1, int64_t j0, int64_t j1, uint64_t a, uint64_t b,
                             uint64_t target, uint64_t size)
{
    if (i1 <= i0 || j1 <= j0)
        return 0;
    if (i1 - i0 > j1 - j0) {
        int64_t t0 = i0, t1 = i1;
        uint64_t ta = a;
        i0 = j0, i1 = j1, j0 = t0, j1 = t1, a = b, b = ta;
    }
    const uint64_t mask = size - 1;
    a &= mask;
    b &= mask;
    int64_t count = 0;
    if (!b) {
        for (int64_t i = i0; i < i1; i++)
            count += ((target - (uint64_t)i * a) & mask) == 0;
        return count * (j1 - j0);
    }
    const uint64_t g = b & (~b + 1), period = size / g, odd = b / g;
    uint64_t inv = odd;                      /* odd * inv == 1 mod 2^64 by Newton's iteration */
    for (int n = 0; n < 6; n++)
        inv *= 2 - odd * inv;
    for (int64_t i = i0; i < i1; i++) {
        const uint64_t rest = (target - (uint64_t)i * a) & mask;
        if (rest % g)
            continue;
        const int64_t first = (int64_t)(((rest / g) * inv) & (period - 1));
        count += floor_div(j1 - 1 - first, (int64_t)period) - floor_div(j0 - 1 - first, (int64_t)period);
    }
    return count;
}

/* docs/timing.md §4: how many micro-ops of an ALU loop take 2 cycles; cycle.py's _alu_extra_cycles.
 * Micro-op (i, j, k) writes (dst[k] + i * dst_factor_out + j * dst_factor_in) mod ACC depth and reads
 * it and, in the tensor form, (src[k] + i * src_factor_out + j * src_factor_in), k innermost: it takes
 * 2 when it reads the entry the micro-op before writes, or (one read port, tensor form) when its src
 * is not the previous micro-op's (the first one always). By kind of step from the micro-op before
 * (k within one (i, j), a j step, an i step): dst and src repeating depend on the step alone; src
 * meeting the previous dst is c + i * A + j * B == 0 with A, B the factors' differences. */
static int64_t alu_extra(const solver_t *s, int64_t bgn, int64_t end, int64_t iter_out, int64_t iter_in,
                         const uint64_t factor[4], int tensor)
{
    if (end <= bgn || iter_out <= 0 || iter_in <= 0 || bgn < 0 || end > s->uop_depth)
        return 0;
    const int two_read = tensor && s->one_port;
    const uint64_t size = (uint64_t)s->acc_depth, mask = size - 1;
    const uint64_t dfo = factor[0], dfi = factor[1], sfo = factor[2], sfi = factor[3];
    const uint64_t a = (sfo - dfo) & mask, b = (sfi - dfi) & mask;
    const uint32_t *d = s->uop_dst, *u = s->uop_src;
    const int64_t last = end - 1;
    int64_t extra = two_read;
    for (int64_t k = bgn; k <= last + 2; k++) {
        uint64_t dst_step, src_step, c;
        int64_t i0 = 0, i1 = iter_out, j0 = 0, j1 = iter_in;
        if (k == bgn)
            continue;
        if (k <= last) {                     /* within one (i, j) */
            dst_step = (uint64_t)d[k] - d[k - 1];
            src_step = (uint64_t)u[k] - u[k - 1];
            c = (uint64_t)u[k] - d[k - 1];
        } else if (k == last + 1) {          /* a j step */
            dst_step = (uint64_t)d[bgn] - d[last] + dfi;
            src_step = (uint64_t)u[bgn] - u[last] + sfi;
            c = (uint64_t)u[bgn] - d[last] + dfi;
            j0 = 1;
        } else {                             /* an i step */
            const uint64_t edge = dfo - (uint64_t)(iter_in - 1) * dfi;
            dst_step = (uint64_t)d[bgn] - d[last] + edge;
            src_step = (uint64_t)u[bgn] - u[last] + sfo - (uint64_t)(iter_in - 1) * sfi;
            c = (uint64_t)u[bgn] - d[last] + edge;
            i0 = 1;
            j1 = 1;
        }
        const int64_t count = (i1 > i0 && j1 > j0) ? (i1 - i0) * (j1 - j0) : 0;
        if (!(dst_step & mask) || (two_read && (src_step & mask)))
            extra += count;
        else if (tensor && count)
            extra += count_lattice(i0, i1, j0, j1, a, b, (0 - c) & mask, size);
    }
    return extra;
}

static int by_first(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether a STORE's bytes meet a LOAD UOP's (both lists sorted by first byte, then swept). */
static int stores_meet_uop_reads(solver_t *s)
{
    vec_t *r = &s->uop_reads, *w = &s->stores;
    if (!r->n || !w->n)
        return 0;
    qsort(r->v, (size_t)(r->n / 2), 2 * sizeof(int64_t), by_first);
    qsort(w->v, (size_t)(w->n / 2), 2 * sizeof(int64_t), by_first);
    Py_ssize_t i = 0, j = 0;
    while (i < r->n && j < w->n) {
        if (r->v[i] < w->v[j + 1] && w->v[j] < r->v[i + 1])
            return 1;
        if (r->v[i + 1] <= w->v[j + 1])
            i += 2;
        else
            j += 2;
    }
    return 0;
}

/* Decode and classify every instruction as check_program routes it; NULL when all is understood,
 * else why not (the caller declines). */
static const char *load_program(solver_t *s, const uint8_t *stream, const vta_layout *layout)
{
    Py_ssize_t finishes = 0, pushes[NQUEUES] = {0}, pops[NQUEUES] = {0};
    for (Py_ssize_t i = 0; i < s->count; i++) {
        const uint64_t w[2] = {vta_word(stream + VTA_INSN_BYTES * i), vta_word(stream + VTA_INSN_BYTES * i + 8)};
        const int opcode = layout->f[w[0] & 7][VTA_F_OPCODE][1] ? (int)(w[0] & 7) : -1;
        const int32_t(*row)[3] = layout->f[w[0] & 7];
        insn_t *t = &s->insns[i];
        const int pop_prev = F(POP_PREV) != 0, pop_next = F(POP_NEXT) != 0;
        const int push_prev = F(PUSH_PREV) != 0, push_next = F(PUSH_NEXT) != 0;
        t->x_size = F(X_SIZE);
        t->y_size = F(Y_SIZE);
        t->mem = (int8_t)F(MEMORY_TYPE);
        switch (opcode) {              /* routing (§2): STORE -> store, LOAD INP/WGT -> load, else compute */
        case VTA_LOAD:
            if (F(MEMORY_TYPE) < 0 || F(MEMORY_TYPE) > VTA_MEM_ACC_8BIT)
                return "memory type";
            if (t->mem == VTA_MEM_INP || t->mem == VTA_MEM_WGT)
                t->module = LOAD;
            else if (t->mem != VTA_MEM_OUT || t->x_size == 0)
                t->module = COMPUTE;
            else
                return "illegal instruction";   /* LOAD of OUT data */
            t->kind = K_LOAD;
            if (t->mem == VTA_MEM_UOP && t->x_size) {
                uop_load(s, w, row);
                if (footprint(&s->uop_reads, F(DRAM_BASE), t->x_size, t->y_size, F(X_STRIDE), 4) < 0)
                    return "out of memory";
            }
            break;
        case VTA_STORE:
            if (t->x_size != 0 && (t->mem != VTA_MEM_OUT || F(Y_PAD_0) || F(Y_PAD_1)
                                   || F(X_PAD_0) || F(X_PAD_1)))
                return "illegal instruction";
            t->module = STORE;
            t->kind = K_STORE;
            if (footprint(&s->stores, F(DRAM_BASE), t->x_size, t->y_size, F(X_STRIDE), s->out_elem) < 0)
                return "out of memory";
            break;
        case VTA_GEMM:
        case VTA_ALU:
            if (opcode == VTA_ALU && (F(ALU_OPCODE) < VTA_ALU_MIN || F(ALU_OPCODE) > VTA_ALU_REQUANT
                                      || (F(ALU_OPCODE) == VTA_ALU_MUL && !s->alu_mul)
                                      || (F(ALU_OPCODE) == VTA_ALU_REQUANT && !s->alu_requant)))
                return "illegal instruction";
            t->module = COMPUTE;
            t->kind = K_MICRO;
            t->micro = F(ITER_OUT) * F(ITER_IN) * (F(UOP_END) - F(UOP_BGN));
            if (opcode == VTA_ALU && t->micro > 0) {
                /* 1 cycle per micro-op, 2 for each that misses the src register or meets the previous one's write */
                const uint64_t factor[4] = {(uint64_t)F(DST_FACTOR_OUT), (uint64_t)F(DST_FACTOR_IN),
                                            (uint64_t)F(SRC_FACTOR_OUT), (uint64_t)F(SRC_FACTOR_IN)};
                if (F(UOP_END) > s->uop_depth || F(UOP_BGN) < 0)   /* past the cache: the program fails in fsim */
                    t->micro *= (!F(USE_IMM) && s->one_port) ? 2 : 1;
                else
                    t->micro += alu_extra(s, F(UOP_BGN), F(UOP_END), F(ITER_OUT), F(ITER_IN), factor, !F(USE_IMM));
                s->uop_timed = 1;
            }
            t->micro = t->micro > 0 ? t->micro + (opcode == VTA_ALU ? s->alu_delay : s->gemm_delay) : 0;
            break;
        case VTA_FINISH:
            t->module = COMPUTE;
            t->kind = K_FINISH;
            finishes++;
            if (i != s->count - 1)
                return "FINISH not last";
            break;
        default:
            return "opcode";
        }
        /* tokens, in flag order (§3); only the flags legal on the module (fsim checks them) */
        t->npop = t->npush = 0;
        if (t->module == LOAD) {
            if (pop_prev || push_prev)
                return "illegal flag";
            if (pop_next)
                t->pop[t->npop++] = C2L;
            if (push_next)
                t->push[t->npush++] = L2C;
        } else if (t->module == STORE) {
            if (pop_next || push_next)
                return "illegal flag";
            if (pop_prev)
                t->pop[t->npop++] = C2S;
            if (push_prev)
                t->push[t->npush++] = S2C;
        } else {
            if (pop_prev)
                t->pop[t->npop++] = L2C;
            if (pop_next)
                t->pop[t->npop++] = S2C;
            if (push_prev)
                t->push[t->npush++] = C2L;
            if (push_next)
                t->push[t->npush++] = C2S;
        }
        for (int k = 0; k < t->npop; k++)
            pops[t->pop[k]]++;
        for (int k = 0; k < t->npush; k++)
            pushes[t->push[k]]++;
        if (t->kind == K_LOAD && t->x_size) {
            const int64_t elem = s->elem[t->mem], beat = elem < s->bus ? elem : s->bus;
            if (elem <= 0 || elem % beat)
                return "element size";
            t->pads = (F(Y_PAD_0) + t->y_size + F(Y_PAD_1))
                      * (F(X_PAD_0) + t->x_size + F(X_PAD_1)) - t->x_size * t->y_size;
            t->dram_base = F(DRAM_BASE);
            t->x_stride = F(X_STRIDE);
            /* bounds the work: a LOAD reading more than the DRAM holds is fsim's MemoryAccessError */
            if (t->x_size * t->y_size * elem > s->dram_size)
                return "DMA larger than DRAM";
            if (s->load_beats < NEVER)
                s->load_beats += t->x_size * t->y_size * (elem / beat);
        }
    }
    if (finishes != 1)
        return "no FINISH";
    if (s->uop_timed && stores_meet_uop_reads(s))
        return "uops from stored data";        /* the DRAM given is not what such a LOAD UOP reads */
    for (int q = 0; q < NQUEUES; q++) {
        if (pushes[q] != pops[q])
            return "unbalanced tokens";
        s->push_cycles[q] = PyMem_Calloc((size_t)pushes[q] + 1, sizeof(int64_t));
        s->pop_cycles[q] = PyMem_Calloc((size_t)pops[q] + 1, sizeof(int64_t));
        if (!s->push_cycles[q] || !s->pop_cycles[q])
            return "out of memory";
    }
    return NULL;
}

/* ------------------------------------------------------------------ read bursts (§4) */

static void bursts_init(bursts_t *b, int64_t row_beats, int64_t rows, uint64_t base, uint64_t stride, int64_t beat)
{
    b->row_beats = row_beats;
    b->rows = rows;
    b->base = base;
    b->stride = stride;
    b->beat = beat;
    b->y = 0;
    b->addr = base & 0xFFFFFFFFu;
    b->left = row_beats;
}

/* The beats of the next burst (rows cut at 256 beats and at 4 KiB; addresses mod 2^32), or 0 if
 * the address is not beat-aligned (never for power-of-two element sizes; the caller declines). */
static int64_t bursts_take(bursts_t *b)
{
    int64_t beats = b->left < MAX_BURST ? b->left : MAX_BURST;
    const int64_t room = (int64_t)(BOUNDARY - (b->addr & (BOUNDARY - 1))) / b->beat;
    if (room < beats)
        beats = room;
    if (beats <= 0)
        return 0;
    b->addr = (b->addr + (uint64_t)(beats * b->beat)) & 0xFFFFFFFFu;
    b->left -= beats;
    if (!b->left && ++b->y < b->rows) {
        b->addr = (b->base + (uint64_t)b->y * b->stride) & 0xFFFFFFFFu;
        b->left = b->row_beats;
    }
    return beats;
}

static int bursts_done(const bursts_t *b)
{
    return b->y >= b->rows;
}

/* ------------------------------------------------------------------ dispatch (§2) */

/* Dispatch every fetched instruction whose command queue's room is known; returns the modules whose
 * next instruction may now be in their queue. */
static int dispatch(solver_t *s)
{
    Py_ssize_t d = s->n_dispatched;
    const Py_ssize_t requested = s->requested;
    if (d >= requested)
        return 0;
    int64_t last = d ? s->dispatched[d - 1] : 0, head_since = s->head_since, memory = 0, queue = 0;
    int wake = 0;
    s->dispatch_wait = -1;
    while (d < requested) {
        const int64_t complete = s->fetched[d];
        int64_t t = complete + 1;
        if (t <= last)
            t = last + 1;
        const Py_ssize_t f = s->freed_by[d];
        if (f >= 0) {              /* room: the instruction Qc ahead in the same queue has been taken */
            const int64_t freed = s->taken[f];
            if (freed < 0) {
                s->dispatch_wait = s->insns[d].module;
                break;
            }
            if (freed >= t)
                t = freed + 1;
        }
        s->dispatched[d] = last = t;
        wake |= 1 << s->insns[d].module;
        if (complete >= head_since) {
            memory += complete - head_since + 1;
            queue += t - complete - 1;
        } else {
            queue += t - head_since;
        }
        head_since = t + 1;
        d++;
    }
    s->fetch_memory += memory;
    s->fetch_queue += queue;
    s->head_since = head_since;
    s->n_dispatched = d;
    int waiting = 0;               /* wake the modules waiting for an instruction */
    for (int m = 0; m < NMODULES; m++)
        if (s->waits[m] == ON_DISPATCH)
            waiting |= 1 << m;
    return wake & waiting;
}

/* ------------------------------------------------------------------ modules (§3, §4) */

/* A DMA or FINISH instruction starts (its last pop) in `cycle`: its finish cycle e (§4), -1 for a
 * LOAD whose bursts the arbiter has yet to schedule, -2 for a burst layout it cannot cut. */
static int64_t start_dma(solver_t *s, int m, Py_ssize_t i, int64_t cycle)
{
    const insn_t *t = &s->insns[i];
    const int64_t start = cycle + 1;
    if (t->kind == K_FINISH || !t->x_size)
        return start;
    if (t->kind == K_STORE) {
        const int64_t elem = s->out_elem, beat = elem < s->bus ? elem : s->bus;
        const int64_t total = t->x_size * t->y_size * (elem / beat);
        s->write_beats[i] = total;
        if (__builtin_add_overflow(s->write_bytes, total * beat, &s->write_bytes))
            s->why = "byte count overflow";
        if (total)
            s->memory_stall[m] += 1;          /* the cycle waiting for the last write response */
        return start + total;
    }
    const int64_t data = t->x_size * t->y_size, pads = t->pads;
    s->pads[i] = pads;
    const int64_t start_walk = start + s->load_prep;   /* the engine prepares first (§4): memory stalls */
    if (!data)
        return pads ? start_walk + pads - 1 : start_walk;
    const int64_t elem = s->elem[t->mem], beat = elem < s->bus ? elem : s->bus, k = elem / beat;
    if (__builtin_add_overflow(s->read_bytes, data * elem, &s->read_bytes))
        s->why = "byte count overflow";
    s->memory_stall[m] -= cycle + pads + data * k;       /* + e when the last beat is known */
    bursts_init(&s->reading[m], t->x_size * k, t->y_size, (uint64_t)(t->dram_base * elem),
                (uint64_t)(t->x_stride * elem), beat);
    s->present[m] = pads > s->latency ? start_walk + pads - s->latency : start_walk;
    return -1;
}

/* Walk module m through its instructions until it needs a cycle not known yet; returns the
 * components its takes, pops and pushes unblock (s->why set: declined, a cycle beyond CYCLE_CAP). */
static int advance(solver_t *s, int m)
{
    const Py_ssize_t *lst = s->lists[m];
    const Py_ssize_t len = s->nlist[m];
    Py_ssize_t k = s->next[m];
    if (k >= len)
        return 0;
    int state = s->state[m], step = s->step[m], wait = ON_NOTHING, wake = 0, q = 0;
    int64_t cursor = s->cursor[m], busy = 0, token_stall = 0;
    for (;;) {
        const Py_ssize_t i = lst[k];
        const insn_t *t = &s->insns[i];
        if (state == IDLE) {               /* take (§3 IDLE) */
            if (i >= s->n_dispatched) {
                wait = ON_DISPATCH;
                break;
            }
            int64_t take = s->dispatched[i] + 1;
            if (take < cursor)
                take = cursor;
            s->taken[i] = take;
            if (s->dispatch_wait == m)
                wake |= WAKE_DISPATCH;
            state = WAIT;
            cursor = take + 1;
            step = 0;
        }
        if (state == WAIT) {               /* pops, then start */
            while (step < t->npop) {
                q = t->pop[step];
                const Py_ssize_t j = s->npopped[q];
                if (j >= s->npushed[q])
                    break;
                if (s->push_cycles[q][j] >= cursor)
                    cursor = s->push_cycles[q][j] + 1;
                s->pop_cycles[q][s->npopped[q]++] = cursor;
                if (s->waits[PRODUCER[q]] == ON_ROOM + q)
                    wake |= 1 << PRODUCER[q];
                step++;
            }
            if (step < t->npop) {
                wait = q;
                break;
            }
            s->started[i] = cursor;
            int64_t e;
            if (t->kind == K_MICRO) {       /* GEMM, ALU: e = s + M + D (s for N = 0), §4 */
                e = cursor + 1 + t->micro;
            } else {
                e = start_dma(s, m, i, cursor);
                if (e < 0) {               /* a LOAD's bursts: the arbiter finishes it */
                    state = EXEC;
                    wait = ON_NOTHING;
                    break;
                }
            }
            if (e >= CYCLE_CAP) {
                s->why = "cycles beyond 2^60";
                wait = ON_NOTHING;
                break;
            }
            s->finished[i] = e;
            state = RETIRE;
            cursor = e + 1;
            step = 0;
        } else if (state == EXEC) {
            wait = ON_NOTHING;
            break;
        }
        while (step < t->npush) {          /* RETIRE: pushes, then retire */
            q = t->push[step];
            const Py_ssize_t j = s->npushed[q] - s->qt;
            if (j >= 0) {
                if (j >= s->npopped[q])
                    break;
                if (s->pop_cycles[q][j] >= cursor)
                    cursor = s->pop_cycles[q][j] + 1;
            }
            s->push_cycles[q][s->npushed[q]++] = cursor;
            if (s->waits[CONSUMER[q]] == q)
                wake |= 1 << CONSUMER[q];
            step++;
        }
        if (step < t->npush) {
            wait = ON_ROOM + q;
            break;
        }
        s->retired[i] = cursor;
        busy += s->finished[i] - s->started[i] + 1;
        token_stall += s->started[i] - s->taken[i] + cursor - s->finished[i] - 2;
        if (i == s->count - 1)             /* FINISH: the last instruction */
            s->done_cycle = cursor;
        state = IDLE;
        cursor++;
        if (++k == len) {
            wait = ON_NOTHING;
            break;
        }
    }
    s->next[m] = k;
    s->state[m] = state;
    s->cursor[m] = cursor;
    s->step[m] = step;
    s->waits[m] = wait;
    s->busy[m] += busy;
    s->token_stall[m] += token_stall;
    return wake;
}

/* ------------------------------------------------------------------ the read arbiter (§5) */

static void lasts_append(solver_t *s, int64_t last)
{
    s->lasts[s->lasts_head] = last;
    if (++s->lasts_head == s->limit)
        s->lasts_head = 0;
}

/* Whether a signal handler raised (its exception is then set): the solver holds the GIL, so every
 * POLL_STEPS steps or accepted bursts it lets Python run its handlers; Ctrl-C stops a long run. */
static int interrupted(solver_t *s)
{
    return ++s->steps % POLL_STEPS == 0 && PyErr_CheckSignals() < 0;
}

/* Accept bursts, each in the earliest cycle in which a requester may be accepted and the window is
 * open, to the highest-priority one (fetch > compute > load), until an acceptance may unblock someone.
 * The grant is registered: a request presented from cycle p may be accepted from p + 1, so a requester
 * accepted in c is accepted again in c + 2 at the earliest and a lower-priority one may take c + 1:
 * returns whom (-1: nobody presents, ever: a deadlock; -2: a burst it cannot cut; -3: out of
 * memory; -4: a beat beyond CYCLE_CAP; -5: interrupted). Fewer than O bursts are in flight in cycle c iff the O-th
 * latest accepted one has its last beat before c (the DRAM serves bursts in order, so last beats
 * grow with acceptance). */
static int arbitrate(solver_t *s)
{
    int64_t fetch_present = NEVER;
    const Py_ssize_t n = s->fetch_next;
    if (n) {
        const Py_ssize_t x = s->requested + n - FETCH_DEPTH - 1;   /* the dispatch that makes room */
        if (x < 0) {
            fetch_present = s->fetch_from;
        } else if (x < s->n_dispatched) {
            fetch_present = s->dispatched[x] + 1;
            if (fetch_present < s->fetch_from)
                fetch_present = s->fetch_from;
        }
        if (fetch_present < NEVER)
            fetch_present++;              /* from here on: the first cycle each requester may be accepted */
    }
    const int64_t compute = s->present[COMPUTE] < NEVER ? s->present[COMPUTE] + 1 : NEVER;
    const int64_t load = s->present[LOAD] < NEVER ? s->present[LOAD] + 1 : NEVER;
    int64_t present = fetch_present;
    if (compute < present)
        present = compute;
    if (load < present)
        present = load;
    if (present >= NEVER)
        return -1;
    const int64_t latency = s->latency;
    int64_t c = present > s->frontier ? present : s->frontier;
    if (s->lasts[s->lasts_head] >= c)
        c = s->lasts[s->lasts_head] + 1;
    int64_t last = s->chan_last;
    if (fetch_present <= c) {
        const int64_t k = s->insn_beats;
        const int64_t first = c + latency > last ? c + latency : last + 1;
        last = first + (int64_t)n * k - 1;
        if (last >= CYCLE_CAP)
            return -4;
        lasts_append(s, last);
        s->chan_last = last;
        if (vec_push3(&s->reads, -1, first, last) < 0)
            return -3;
        const Py_ssize_t r = s->requested;   /* instruction j is complete with its k-th beat */
        for (Py_ssize_t j = 0; j < n; j++)
            s->fetched[r + j] = first + k - 1 + (int64_t)j * k;
        s->requested = r + n;
        s->fetch_next = fetch_burst(s);
        s->frontier = s->fetch_from = c + 1;
        return WAKE_DISPATCH;
    }
    int m;
    int64_t rival;
    if (compute <= c) {
        m = COMPUTE;
        rival = fetch_present < load ? fetch_present : load;
    } else {
        m = LOAD;
        rival = fetch_present < compute ? fetch_present : compute;
    }
    /* Accept its burst, and its further bursts while nobody else may be accepted first: it presents
     * from the cycle after each acceptance, so is accepted two cycles on unless the window delays it. */
    bursts_t *b = &s->reading[m];
    const Py_ssize_t i = s->lists[m][s->next[m]];
    for (;;) {
        const int64_t beats = bursts_take(b);
        if (!beats)
            return -2;
        const int64_t first = c + latency > last ? c + latency : last + 1;
        last = first + beats - 1;
        if (last >= CYCLE_CAP)
            return -4;
        lasts_append(s, last);
        if (vec_push3(&s->reads, i, first, last) < 0)
            return -3;
        if (bursts_done(b))
            break;
        if (interrupted(s))
            return -5;
        const int64_t oldest = s->lasts[s->lasts_head];
        const int64_t nc = oldest <= c + 1 ? c + 2 : oldest + 1;
        if (nc >= rival)
            break;
        c = nc;
    }
    s->chan_last = last;
    s->frontier = c + 1;
    if (!bursts_done(b)) {
        s->present[m] = c + 1;
        return 0;
    }
    s->present[m] = NEVER;            /* the LOAD finishes with its last beat (§4) */
    s->finished[i] = last;
    s->memory_stall[m] += last;        /* (the rest was counted at the start) */
    s->state[m] = RETIRE;
    s->cursor[m] = last + 1;
    s->step[m] = 0;
    return 1 << m;
}

/* ------------------------------------------------------------------ the loop */

/* Run to FINISH; NULL, or why the core declines ("interrupted": see interrupted()). */
static const char *run(solver_t *s)
{
    int wake = WAKE_ALL;
    for (;;) {
        /* Resolve every cycle that known cycles determine: `wake` holds the components whose inputs
         * changed; each reports whom it unblocks. */
        while (wake && !s->why) {
            if (interrupted(s))
                return "interrupted";
            if (wake & WAKE_DISPATCH) {
                wake ^= WAKE_DISPATCH;
                wake |= dispatch(s);
            } else {
                const int m = (wake & 1) ? LOAD : (wake & 2) ? COMPUTE : STORE;
                wake ^= 1 << m;
                wake |= advance(s, m);
            }
        }
        if (s->why)
            return s->why;
        if (s->done_cycle >= 0)
            return NULL;
        s->events++;
        wake = arbitrate(s);
        if (wake == -1)
            return "deadlock";
        if (wake == -2)
            return "burst layout";
        if (wake == -3)
            return "out of memory";
        if (wake == -5)
            return "interrupted";
        if (wake < 0)
            return "cycles beyond 2^60";
    }
}

/* ------------------------------------------------------------------ results */

/* The detail blob, int64: a header (count, read bursts, pushes per queue, pops per queue), then per
 * instruction (module, fetched, dispatched, taken, started, finished, retired, pads, write_beats),
 * then (instruction or -1 for fetch, first, last) per read burst in acceptance order, then each
 * queue's push cycles, then each queue's pop cycles. */
static PyObject *write_detail(const solver_t *s)
{
    const Py_ssize_t n = s->count, nr = s->reads.n / 3;
    Py_ssize_t size = 2 + 2 * NQUEUES + 9 * n + 3 * nr;
    for (int q = 0; q < NQUEUES; q++)
        size += s->npushed[q] + s->npopped[q];
    PyObject *blob = PyBytes_FromStringAndSize(NULL, size * (Py_ssize_t)sizeof(int64_t));
    if (!blob)
        return NULL;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(blob);
    *o++ = n;
    *o++ = nr;
    for (int q = 0; q < NQUEUES; q++)
        *o++ = s->npushed[q];
    for (int q = 0; q < NQUEUES; q++)
        *o++ = s->npopped[q];
    for (Py_ssize_t i = 0; i < n; i++) {
        *o++ = s->insns[i].module;
        *o++ = s->fetched[i];
        *o++ = s->dispatched[i];
        *o++ = s->taken[i];
        *o++ = s->started[i];
        *o++ = s->finished[i];
        *o++ = s->retired[i];
        *o++ = s->pads[i];
        *o++ = s->write_beats[i];
    }
    if (nr)
        memcpy(o, s->reads.v, (size_t)s->reads.n * sizeof *o);
    o += s->reads.n;
    for (int q = 0; q < NQUEUES; q++) {
        memcpy(o, s->push_cycles[q], (size_t)s->npushed[q] * sizeof *o);
        o += s->npushed[q];
    }
    for (int q = 0; q < NQUEUES; q++) {
        memcpy(o, s->pop_cycles[q], (size_t)s->npopped[q] * sizeof *o);
        o += s->npopped[q];
    }
    return blob;
}

static PyObject *results(const solver_t *s)
{
    const Py_ssize_t n = s->count;
    PyObject *retired = PyList_New(n);
    if (!retired)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(s->retired[i]);
        if (!v) {
            Py_DECREF(retired);
            return NULL;
        }
        PyList_SET_ITEM(retired, i, v);
    }
    PyObject *detail = write_detail(s);
    if (!detail) {
        Py_DECREF(retired);
        return NULL;
    }
    const int64_t fetch_busy = s->dispatched[n - 1];
    return Py_BuildValue(
        "(LN(LLLLLLLLLLLL)LLLN)", (long long)s->done_cycle, retired,
        (long long)fetch_busy, (long long)s->busy[LOAD], (long long)s->busy[COMPUTE], (long long)s->busy[STORE],
        (long long)s->fetch_queue, (long long)s->token_stall[LOAD], (long long)s->token_stall[COMPUTE],
        (long long)s->token_stall[STORE],
        (long long)s->fetch_memory, (long long)s->memory_stall[LOAD], (long long)s->memory_stall[COMPUTE],
        (long long)s->memory_stall[STORE],
        (long long)(s->read_bytes + (int64_t)n * s->insn_beats * s->insn_beat_bytes), (long long)s->write_bytes,
        (long long)s->events, detail);
}

/* ------------------------------------------------------------------ setup */

static void solver_free(solver_t *s)
{
    PyMem_Free(s->insns);
    for (int m = 0; m < NMODULES; m++)
        PyMem_Free(s->lists[m]);
    PyMem_Free(s->freed_by);
    PyMem_Free(s->fetched);          /* one block for all per-instruction int64 arrays */
    for (int q = 0; q < NQUEUES; q++) {
        PyMem_Free(s->push_cycles[q]);
        PyMem_Free(s->pop_cycles[q]);
    }
    PyMem_Free(s->lasts);
    PyMem_Free(s->reads.v);
    PyMem_Free(s->uop_src);
    PyMem_Free(s->uop_dst);
    PyMem_Free(s->uop_reads.v);
    PyMem_Free(s->stores.v);
}

/* Allocate and initialise everything after load_program; NULL or why not. */
static const char *solver_setup(solver_t *s, int64_t insn_addr)
{
    const Py_ssize_t n = s->count;
    for (int m = 0; m < NMODULES; m++) {
        s->lists[m] = PyMem_Malloc((size_t)n * sizeof(Py_ssize_t));
        if (!s->lists[m])
            return "out of memory";
    }
    /* Every burst is at least one beat (fetch: one instruction), so at most n + load_beats are ever
     * in flight: a larger window never fills, exactly like one of that size (and is not allocated). */
    if (s->limit > n + s->load_beats)
        s->limit = n + s->load_beats;
    s->freed_by = PyMem_Malloc((size_t)n * sizeof(Py_ssize_t));
    int64_t *block = PyMem_Malloc((size_t)n * 8 * sizeof(int64_t));
    s->lasts = PyMem_Malloc((size_t)s->limit * sizeof(int64_t));
    if (!s->freed_by || !block || !s->lasts) {
        PyMem_Free(block);
        return "out of memory";
    }
    s->fetched = block;
    s->dispatched = block + n;
    s->taken = block + 2 * n;
    s->started = block + 3 * n;
    s->finished = block + 4 * n;
    s->retired = block + 5 * n;
    s->pads = block + 6 * n;
    s->write_beats = block + 7 * n;
    for (Py_ssize_t i = 0; i < 6 * n; i++)
        block[i] = -1;
    memset(block + 6 * n, 0, (size_t)(2 * n) * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++) {
        const int m = s->insns[i].module;
        Py_ssize_t *lst = s->lists[m];
        s->freed_by[i] = s->nlist[m] >= s->qc ? lst[s->nlist[m] - s->qc] : -1;
        lst[s->nlist[m]++] = i;
    }
    for (int64_t j = 0; j < s->limit; j++)
        s->lasts[j] = -1;
    s->lasts_head = 0;
    s->chan_last = -1;
    s->dispatch_wait = -1;
    for (int m = 0; m < NMODULES; m++) {
        s->waits[m] = ON_DISPATCH;
        s->state[m] = IDLE;
        s->cursor[m] = 1;
        s->present[m] = NEVER;
    }
    s->head_since = 1;
    s->slot0 = insn_addr / VTA_INSN_BYTES;
    s->insn_beats = s->bus < VTA_INSN_BYTES ? VTA_INSN_BYTES / s->bus : 1;
    s->insn_beat_bytes = s->bus < VTA_INSN_BYTES ? s->bus : VTA_INSN_BYTES;
    s->fetch_from = s->frontier = 1;
    s->fetch_next = fetch_burst(s);
    s->done_cycle = -1;
    return NULL;
}

static PyObject *solve(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer stream, layout, image = {0};
    long long qc, qt, latency, limit, bus, alu_mul, out_elem, e_uop, e_wgt, e_inp, e_acc, e_acc8, uop_depth, acc_depth;
    long long gemm_delay, alu_delay, load_prep;
    long long dram, insn_addr;
    PyObject *dram_obj;
    if (!PyArg_ParseTuple(args, "y*y*(LLLLLLLLLLLLLLLLL)LO:solve", &stream, &layout, &qc, &qt, &latency, &limit, &bus,
                          &alu_mul, &out_elem, &e_uop, &e_wgt, &e_inp, &e_acc, &e_acc8, &uop_depth, &acc_depth,
                          &gemm_delay, &alu_delay, &load_prep,
                          &insn_addr, &dram_obj))
        return NULL;
    PyObject *out = NULL;
    const char *why = NULL;
    solver_t s;
    memset(&s, 0, sizeof s);
    if (PyLong_Check(dram_obj)) {          /* the DRAM's size: its contents read as zeros */
        dram = PyLong_AsLongLong(dram_obj);
        if (dram == -1 && PyErr_Occurred())
            goto done;
    } else {
        if (PyObject_GetBuffer(dram_obj, &image, PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        dram = image.len;
        s.dram = image.buf;
    }
    if (layout.len != (Py_ssize_t)sizeof(vta_layout)) {
        PyErr_Format(PyExc_ValueError, "layout table of %zd bytes; expected %zu", layout.len, sizeof(vta_layout));
        goto done;
    }
    if (!layout_ok(layout.buf)) {
        PyErr_SetString(PyExc_ValueError, "layout table with a field outside the 128-bit word or too wide");
        goto done;
    }
    if (stream.len == 0 || stream.len % VTA_INSN_BYTES)
        why = "stream length";
    else if (qc < 1 || qt < 1 || limit < 1 || latency < 0 || latency > MAX_LATENCY || bus < 1 || bus > MAX_BYTES
             || out_elem < 1 || out_elem > MAX_BYTES || insn_addr < 0 || insn_addr > NEVER
             || out_elem % (out_elem < bus ? out_elem : bus))
        why = "configuration";
    else if (e_uop > MAX_BYTES || e_wgt > MAX_BYTES || e_inp > MAX_BYTES || e_acc > MAX_BYTES || e_acc8 > MAX_BYTES)
        why = "configuration";      /* (non-positive element sizes are declined where a LOAD uses them) */
    else if (uop_depth < 1 || uop_depth > MAX_DEPTH || acc_depth < 1 || acc_depth > MAX_DEPTH
             || (acc_depth & (acc_depth - 1)))
        why = "configuration";
    else if (gemm_delay < 1 || gemm_delay > 64 || alu_delay < 1 || alu_delay > 64 || load_prep < 0 || load_prep > 64)
        why = "configuration";
    if (why)
        goto done;
    s.qc = qc;
    s.qt = qt;
    s.latency = latency;
    s.limit = limit;
    s.bus = bus;
    s.alu_mul = (alu_mul & 1) != 0;
    s.alu_requant = (alu_mul & 4) != 0;
    s.uop_depth = uop_depth;
    s.acc_depth = acc_depth;
    s.gemm_delay = gemm_delay;
    s.alu_delay = alu_delay;
    s.load_prep = load_prep;
    while ((1LL << s.log_acc_depth) < acc_depth)
        s.log_acc_depth++;
    s.one_port = (alu_mul & 2) != 0;   /* one ACC read port: the src register's misses take 2 cycles */
    {
        s.uop_src = PyMem_Calloc((size_t)uop_depth, sizeof(uint32_t));
        s.uop_dst = PyMem_Calloc((size_t)uop_depth, sizeof(uint32_t));
        if (!s.uop_src || !s.uop_dst) {
            why = "out of memory";
            goto done;
        }
    }
    s.out_elem = out_elem;
    s.elem[VTA_MEM_UOP] = e_uop;
    s.elem[VTA_MEM_WGT] = e_wgt;
    s.elem[VTA_MEM_INP] = e_inp;
    s.elem[VTA_MEM_ACC] = e_acc;
    s.elem[VTA_MEM_OUT] = 0;
    s.elem[VTA_MEM_ACC_8BIT] = e_acc8;
    s.dram_size = dram;
    s.count = stream.len / VTA_INSN_BYTES;
    s.insns = PyMem_Calloc((size_t)s.count, sizeof(insn_t));
    if (!s.insns) {
        why = "out of memory";
        goto done;
    }
    why = load_program(&s, stream.buf, layout.buf);
    if (!why)
        why = solver_setup(&s, insn_addr);
    if (!why)
        why = run(&s);
    if (!why)
        out = results(&s);
done:
    if (why && !PyErr_Occurred())
        out = PyUnicode_FromString(why);
    solver_free(&s);
    PyBuffer_Release(&stream);
    PyBuffer_Release(&layout);
    if (image.obj)
        PyBuffer_Release(&image);
    return out;
}

static PyMethodDef methods[] = {
    {"solve", solve, METH_VARARGS,
     "solve(stream, layout, params, insn_addr, dram) -> str (declined: why) or (cycles, retire_cycles, stats, "
     "dram_read_bytes, dram_write_bytes, events, detail); see vtakit/sim/csrc/timing_core.c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_timing_core",
    "The cycle model's timing solver, compiled (docs/timing.md; vtakit/sim/cycle.py's _Solver).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__timing_core(void)
{
    return PyModule_Create(&module);
}
