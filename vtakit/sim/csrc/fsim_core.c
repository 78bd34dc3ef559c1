/* The functional simulator's compiled core: a whole program's run, as vtakit.sim.fsim does it.
 *
 * Why it exists: on short programs the Python engine (fsim's scheduler, Machine's numpy steps,
 * hb's race detector, check_program's static checks) spends ~15-30 us per instruction in
 * interpreter and numpy call overhead, more than a simulator meant to run ~1000x faster than the
 * RTL may spend. This core does the same work in C, on the very arrays of a fresh
 * vtakit.sim.machine.Machine (SRAMs, written masks), so a Machine after a native run is
 * indistinguishable from one after a Python run.
 *
 * Contract (vtakit/sim/native.py): the core completes only programs it vouches for. Whatever the
 * Python engine would reject (illegal instructions, FINISH rules, unbalanced tokens, deadlock,
 * SRAM/DRAM ranges, uninitialised reads, races) or this core does not support makes it DECLINE:
 * it undoes its DRAM writes (an undo log of the bytes each STORE overwrote, replayed backwards)
 * and returns the reason as a string; fsim then runs the program on a fresh Machine and raises
 * its usual error. The SRAM arrays and masks it was given are garbage after a decline.
 *
 * What it models, section by section (each mirrors a Python function):
 *   static checks   fsim.check_program / machine.checked_stage: legality, one FINISH last, balance
 *   scheduler       fsim._Simulator.fetch/drain in the default order (fetch, load, compute, store,
 *                   each as far as it goes), so the stall statistics equal fsim's too
 *   race detector   hb.RaceDetector's semantics: vector clocks, tokens carry snapshots, per shared
 *                   location and module the epochs of its latest read and write (SRAM: dense
 *                   arrays; DRAM: granule epochs in lazily allocated pages of a hash table)
 *   data effects    Machine.load/store/gemm/alu, with its range and written-mask checks; a GEMM
 *                   micro-op's dot products use SSE2's pmaddwd where the block allows (else plain C)
 *
 * Plain CPython C API and the buffer protocol. The GIL is released while a program runs and taken
 * back between slices of about SLICE_NS to run Python's signal handlers (poll_signals), so Ctrl-C
 * interrupts a long run: a KeyboardInterrupt ends it like a decline (DRAM restored) and propagates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vta_insn.h"

/* ------------------------------------------------------------------------------------------ */
/* Names shared with the Python side                                                            */

enum { MOD_LOAD, MOD_COMPUTE, MOD_STORE, NMODULES };             /* hb.MODULES order */
enum { Q_L2C, Q_C2L, Q_C2S, Q_S2C, NQUEUES };                     /* machine.QUEUE_NAMES order */
enum { S_UOP, S_INP, S_WGT, S_ACC, S_OUT, NSRAMS };               /* Machine.written_at order */
enum { C_INP, C_WGT, C_ACC, C_UOP, C_OUT, C_GEMM, C_ALU, NCOUNTERS };  /* stats.COUNTER_NAMES */
enum { HB_INP, HB_WGT, HB_OUT, NSHARED };                         /* machine.SHARED_SRAMS */
enum { READ = 0, WRITE = 1 };

/* The configuration as fsim._native_params(config) passes it: these int64s, in this order. */
typedef struct {
    int64_t batch, block_in, block_out;
    int64_t depth[NSRAMS];          /* entries of uop, inp, wgt, acc, out */
    int64_t written_at[NSRAMS];     /* where each SRAM's mask starts in the machine's one mask array */
    int64_t uop_bytes, inp_bytes, wgt_bytes, acc_bytes, acc8_bytes, out_bytes;   /* DRAM element bytes */
    int64_t uop_shift[3], uop_mask[3];   /* micro-op fields (dst, src, wgt) */
    int64_t cmd_depth, token_depth, alu_mul, granule, alu_requant;
    int64_t bias_preload, gemm_out_requant;   /* GEMM's epilogue bit (isa.GEMM_EPILOGUE_BIT) with either */
} fs_config;
#define FS_NPARAMS ((Py_ssize_t)(sizeof(fs_config) / sizeof(int64_t)))

/* ------------------------------------------------------------------------------------------ */
/* Race detector state                                                                          */

/* One shared SRAM: per entry, the epoch of each module's latest read and write (0: none). */
typedef struct {
    int64_t size;
    int32_t *last[2][NMODULES];     /* [kind][module], allocated on first record */
    int32_t latest[2][NMODULES];    /* the largest epoch ever recorded in each array */
} hb_sram;

/* DRAM: the same per granule, in pages of HB_PAGE granules found through an open-addressing
 * hash table (DRAM can be 256 MiB+, a program touches a little of it). */
#define HB_PAGE_BITS 10
#define HB_PAGE (1 << HB_PAGE_BITS)
typedef struct {
    int64_t key;                    /* page number, -1 for an empty slot */
    int32_t *epochs;                /* [kind][module][HB_PAGE] */
} hb_page;
typedef struct {
    hb_page *slots;
    int64_t cap, used;
    int32_t latest[2][NMODULES];
} hb_dram;

/* An access of one kind by one module to one space, ready to be applied entry by entry: the
 * per-entry epochs it records into, and the others' arrays holding epochs it may not see. */
typedef struct {
    int32_t *mine;
    const int32_t *against[2 * NMODULES];
    int32_t seen[2 * NMODULES];
    int n;
    int32_t epoch;
} hb_probe;

/* ------------------------------------------------------------------------------------------ */
/* Run state                                                                                    */

typedef struct { int32_t c[NMODULES]; } stamp;

typedef struct {
    int64_t current;                /* instruction in progress, -1 when idle */
    int popping;                    /* 1 while taking pops, 0 while posting pushes */
    int step;                       /* pops taken / pushes posted so far */
    int64_t *cmd;                   /* command queue ring buffer of cmd_depth entries */
    int64_t cmd_head, cmd_len;
} fs_unit;

typedef struct {
    stamp *buf;
    int head, len;
} token_queue;

typedef struct {
    int64_t offset, length;         /* DRAM bytes a STORE overwrote; their old values are in undo_bytes */
} undo_entry;

typedef struct {
    const fs_config *cfg;
    const vta_layout *layout;
    const uint8_t *stream;
    int64_t count, last;

    uint8_t *dram;
    int64_t dram_size;
    int64_t *uop;                   /* [uop_depth][3] */
    int8_t *inp, *wgt, *out;
    int32_t *acc;
    uint8_t *written[NSRAMS];
    int64_t counters[NCOUNTERS];

    /* routing: per instruction, module (bits 0-1) and the four flags (bits 2-5) */
    uint8_t *route;
    uint8_t *stalls;                /* per instruction: bit 0 fetch stall, bit 1 + q push stall on queue q */
    int64_t totals[NMODULES];
    fs_unit units[NMODULES];
    token_queue tokens[NQUEUES];
    int64_t fetched;
    int finished;

    int check_races;
    int64_t requant;                /* the requant register: the last ALU REQUANT's control bits (Machine.requant) */
    int32_t clock[NMODULES][NMODULES];
    hb_sram shared[NSHARED];
    hb_dram dram_hb;

    undo_entry *undo;
    int64_t undo_len, undo_cap;
    uint8_t *undo_bytes;
    int64_t undo_bytes_len, undo_bytes_cap;

    char reason[256];

    /* interruption (poll_signals) */
    PyThreadState *tstate;          /* saved while the GIL is released */
    int64_t work, polled_ns;        /* work since the clock was last read; when signals were last checked */
    int interrupted;                /* a signal handler raised: its exception is set */
} fs_run;

/* Record why the run declines; returns -1 for `return decline(...)`. */
static int decline(fs_run *r, int64_t index, const char *fmt, ...)
{
    char text[200];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    if (index >= 0)
        snprintf(r->reason, sizeof r->reason, "instruction %lld: %s", (long long)index, text);
    else
        snprintf(r->reason, sizeof r->reason, "%s", text);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Interruption: the run is cut into slices of SLICE_NS; between two, Python's signal handlers run */

#define SLICE_NS 50000000LL                 /* 50 ms: Ctrl-C answers within about that */
#define SLICE_WORK ((int64_t)1 << 16)       /* work units (about a byte or a MAC each) between clock reads */

static int64_t now_ns(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);   /* C11; a clock that jumps back only delays the next check */
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Account `work` units; at the end of a slice take the GIL back, let Python run its signal
 * handlers, release it again. -1 (a decline with `interrupted` set) when a handler raised. */
static int poll_signals(fs_run *r, int64_t work)
{
    r->work += work;
    if (r->work < SLICE_WORK)
        return 0;
    r->work = 0;
    const int64_t now = now_ns();
    if (now - r->polled_ns < SLICE_NS && now >= r->polled_ns)
        return 0;
    r->polled_ns = now;
    PyEval_RestoreThread(r->tstate);
    const int raised = PyErr_CheckSignals() < 0;
    r->tstate = PyEval_SaveThread();
    if (!raised)
        return 0;
    r->interrupted = 1;
    return decline(r, -1, "interrupted");
}

/* ------------------------------------------------------------------------------------------ */
/* Routing (machine.POP_QUEUES / PUSH_QUEUES): flags are bits of route >> 2                     */

enum { F_POP_PREV = 1, F_POP_NEXT = 2, F_PUSH_PREV = 4, F_PUSH_NEXT = 8 };

/* The queues an instruction pops (in order); returns how many. */
static inline int route_pops(uint8_t route, int queues[2])
{
    const int module = route & 3, flags = route >> 2;
    int n = 0;
    if (module == MOD_LOAD) {
        if (flags & F_POP_NEXT) queues[n++] = Q_C2L;
    } else if (module == MOD_COMPUTE) {
        if (flags & F_POP_PREV) queues[n++] = Q_L2C;
        if (flags & F_POP_NEXT) queues[n++] = Q_S2C;
    } else {
        if (flags & F_POP_PREV) queues[n++] = Q_C2S;
    }
    return n;
}

/* The queues an instruction pushes (in order); returns how many. */
static inline int route_pushes(uint8_t route, int queues[2])
{
    const int module = route & 3, flags = route >> 2;
    int n = 0;
    if (module == MOD_LOAD) {
        if (flags & F_PUSH_NEXT) queues[n++] = Q_L2C;
    } else if (module == MOD_COMPUTE) {
        if (flags & F_PUSH_PREV) queues[n++] = Q_C2L;
        if (flags & F_PUSH_NEXT) queues[n++] = Q_C2S;
    } else {
        if (flags & F_PUSH_PREV) queues[n++] = Q_S2C;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Static checks (fsim.check_program, machine.checked_stage)                                    */

/* GEMM's epilogue bit (isa.GEMM_EPILOGUE_BIT, the last bit of word 0), decoded only with either key. */
static inline int gemm_epilogue(const fs_config *c, const uint8_t *p)
{
    return (c->bias_preload || c->gemm_out_requant) && (vta_word(p) >> 63) != 0;
}

/* One field of the instruction at p; the static checks read a few fields of every instruction, so
 * they do not decode all of them. */
static inline int64_t insn_field(const uint8_t *p, const vta_layout *layout, int opcode, int k)
{
    const uint64_t w[2] = {vta_word(p), vta_word(p + 8)};
    return vta_field(w, layout->f[opcode], k);
}

static int check_program(fs_run *r)
{
    const fs_config *c = r->cfg;
    int64_t pushes[NQUEUES] = {0}, pops[NQUEUES] = {0};
    int64_t finishes = 0, finish_at = -1;
    for (int64_t i = 0; i < r->count; i++) {
        const uint8_t *p = r->stream + i * VTA_INSN_BYTES;
        const int opcode = p[0] & 7;
        if (!r->layout->f[opcode][VTA_F_OPCODE][1])
            return decline(r, i, "illegal instruction: opcode %d is not an instruction", opcode);
#define F(k) insn_field(p, r->layout, opcode, k)
        int module;
        if (opcode == VTA_STORE)
            module = MOD_STORE;
        else if (opcode == VTA_LOAD && (F(VTA_F_MEMORY_TYPE) == VTA_MEM_INP || F(VTA_F_MEMORY_TYPE) == VTA_MEM_WGT))
            module = MOD_LOAD;
        else
            module = MOD_COMPUTE;
        const int flags = (F(VTA_F_POP_PREV) ? F_POP_PREV : 0) | (F(VTA_F_POP_NEXT) ? F_POP_NEXT : 0)
                        | (F(VTA_F_PUSH_PREV) ? F_PUSH_PREV : 0) | (F(VTA_F_PUSH_NEXT) ? F_PUSH_NEXT : 0);
        if (module == MOD_LOAD && (flags & (F_POP_PREV | F_PUSH_PREV)))
            return decline(r, i, "illegal instruction: flag pop_prev/push_prev is illegal on the load module");
        if (module == MOD_STORE && (flags & (F_POP_NEXT | F_PUSH_NEXT)))
            return decline(r, i, "illegal instruction: flag pop_next/push_next is illegal on the store module");
        if ((opcode == VTA_LOAD || opcode == VTA_STORE) && F(VTA_F_X_SIZE) != 0) {
            if (opcode == VTA_LOAD && F(VTA_F_MEMORY_TYPE) == VTA_MEM_OUT)
                return decline(r, i, "illegal instruction: LOAD of memory type OUT");
            if (opcode == VTA_STORE && F(VTA_F_MEMORY_TYPE) != VTA_MEM_OUT)
                return decline(r, i, "illegal instruction: STORE of a memory type other than OUT");
            if (opcode == VTA_STORE && (F(VTA_F_Y_PAD_0) || F(VTA_F_Y_PAD_1) || F(VTA_F_X_PAD_0) || F(VTA_F_X_PAD_1)))
                return decline(r, i, "illegal instruction: STORE with padding");
        }
        /* enum fields must name an ISA value (machine._validate; the hardware's ALU yields 0 for 5-7) */
        if ((opcode == VTA_LOAD || opcode == VTA_STORE) && F(VTA_F_MEMORY_TYPE) > VTA_MEM_ACC_8BIT)
            return decline(r, i, "illegal instruction: memory type %lld", (long long)F(VTA_F_MEMORY_TYPE));
        if (opcode == VTA_ALU && F(VTA_F_ALU_OPCODE) > VTA_ALU_REQUANT)
            return decline(r, i, "illegal instruction: ALU opcode %lld", (long long)F(VTA_F_ALU_OPCODE));
        if (opcode == VTA_ALU && F(VTA_F_ALU_OPCODE) == VTA_ALU_MUL && !c->alu_mul)
            return decline(r, i, "illegal instruction: ALU MUL without ALU_MUL");
        if (opcode == VTA_ALU && F(VTA_F_ALU_OPCODE) == VTA_ALU_REQUANT && !c->alu_requant)
            return decline(r, i, "illegal instruction: ALU REQUANT without ALU_REQUANT");
        if (opcode == VTA_GEMM && gemm_epilogue(c, p)) {   /* isa.gemm_epilogue_missing */
            if (F(VTA_F_RESET_REG) ? !c->bias_preload : !c->gemm_out_requant)
                return decline(r, i, "illegal instruction: GEMM epilogue bit without its key");
        }
        if (opcode == VTA_FINISH) {
            finishes++;
            finish_at = i;
        }
        r->route[i] = (uint8_t)(module | flags << 2);
        r->totals[module]++;
        int queues[2];
        for (int k = route_pops(r->route[i], queues); k-- > 0;)
            pops[queues[k]]++;
        for (int k = route_pushes(r->route[i], queues); k-- > 0;)
            pushes[queues[k]]++;
    }
#undef F
    if (finishes != 1 || finish_at != r->count - 1)
        return decline(r, -1, "FINISH rules: %lld FINISH instructions, expected one, last", (long long)finishes);
    for (int q = 0; q < NQUEUES; q++)
        if (pushes[q] != pops[q])
            return decline(r, -1, "unbalanced tokens on queue %d", q);
    r->last = r->count - 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Race detector (hb.RaceDetector's semantics)                                                  */

/* Module `me` accesses a space whose latest epochs are `latest`: fill `probe` with the arrays
 * (from `arrays`, [kind][module]) it must be checked against, those whose latest epoch me's
 * clock does not cover (usually none). */
static inline void probe_others(const fs_run *r, hb_probe *probe, int me, int kind,
                                int32_t latest[2][NMODULES], int32_t *arrays[2][NMODULES])
{
    probe->n = 0;
    probe->epoch = r->clock[me][me];
    for (int other = 0; other < NMODULES; other++) {
        if (other == me)
            continue;
        const int32_t seen = r->clock[me][other];
        for (int k = kind == WRITE ? READ : WRITE; k <= WRITE; k++) {   /* a write conflicts with both kinds */
            if (latest[k][other] > seen && arrays[k][other] != NULL) {
                probe->against[probe->n] = arrays[k][other];
                probe->seen[probe->n] = seen;
                probe->n++;
            }
        }
    }
}

/* Check entry e against the others and record this access; nonzero on a race. */
static inline int probe_touch(const hb_probe *probe, int64_t e)
{
    for (int k = 0; k < probe->n; k++)
        if (probe->against[k][e] > probe->seen[k])
            return 1;
    probe->mine[e] = probe->epoch;
    return 0;
}

/* Prepare an access to a shared SRAM; returns -1 when out of memory. */
static int hb_sram_probe(fs_run *r, int space, int kind, int me, hb_probe *probe)
{
    hb_sram *sp = &r->shared[space];
    int32_t **mine = &sp->last[kind][me];
    if (*mine == NULL && (*mine = calloc((size_t)sp->size, sizeof(int32_t))) == NULL)
        return -1;
    probe_others(r, probe, me, kind, sp->latest, sp->last);
    probe->mine = *mine;
    sp->latest[kind][me] = probe->epoch;
    return 0;
}

static const char *const SHARED_NAMES[NSHARED] = {"INP", "WGT", "OUT"};

/* A module's access to SRAM entries [low, high). */
static int hb_sram_range(fs_run *r, int64_t index, int space, int kind, int me, int64_t low, int64_t high)
{
    if (high <= low)
        return 0;
    hb_probe probe;
    if (hb_sram_probe(r, space, kind, me, &probe) < 0)
        return decline(r, index, "out of memory");
    for (int64_t e = low; e < high; e++)
        if (probe_touch(&probe, e))
            return decline(r, index, "data race on %s entry %lld", SHARED_NAMES[space], (long long)e);
    return 0;
}

static inline uint64_t page_hash(int64_t key, int64_t cap)
{
    return ((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 20 & (uint64_t)(cap - 1);
}

/* The page of DRAM granules `key`, allocated (zeroed) on first use; NULL when out of memory. */
static int32_t *dram_page(hb_dram *d, int64_t key)
{
    if (2 * (d->used + 1) > d->cap) {   /* grow: keep the load factor at most 1/2 */
        const int64_t cap = d->cap ? 2 * d->cap : 64;
        hb_page *slots = malloc((size_t)cap * sizeof *slots);
        if (slots == NULL)
            return NULL;
        for (int64_t s = 0; s < cap; s++)
            slots[s].key = -1;
        for (int64_t s = 0; s < d->cap; s++) {
            if (d->slots[s].key < 0)
                continue;
            uint64_t h = page_hash(d->slots[s].key, cap);
            while (slots[h].key >= 0)
                h = (h + 1) & (uint64_t)(cap - 1);
            slots[h] = d->slots[s];
        }
        free(d->slots);
        d->slots = slots;
        d->cap = cap;
    }
    uint64_t h = page_hash(key, d->cap);
    while (d->slots[h].key >= 0) {
        if (d->slots[h].key == key)
            return d->slots[h].epochs;
        h = (h + 1) & (uint64_t)(d->cap - 1);
    }
    int32_t *epochs = calloc((size_t)2 * NMODULES * HB_PAGE, sizeof(int32_t));
    if (epochs == NULL)
        return NULL;
    d->slots[h].key = key;
    d->slots[h].epochs = epochs;
    d->used++;
    return epochs;
}

/* A module's DMA over DRAM rows (bytes: `rows` rows of `row_bytes` bytes, `stride` apart from
 * `start`), granule by granule. */
static int hb_dram_rows(fs_run *r, int64_t index, int kind, int me, int64_t start, int64_t row_bytes,
                        int64_t rows, int64_t stride)
{
    if (rows == 0 || row_bytes == 0)
        return 0;
    hb_dram *d = &r->dram_hb;
    const int64_t g = r->cfg->granule;
    const int32_t epoch = r->clock[me][me];
    /* which other (kind, module) arrays can hold epochs this access may not see: the same for every page */
    int against[2 * NMODULES], nagainst = 0;
    int32_t seen[2 * NMODULES];
    for (int other = 0; other < NMODULES; other++) {
        if (other == me)
            continue;
        for (int k = kind == WRITE ? READ : WRITE; k <= WRITE; k++)
            if (d->latest[k][other] > r->clock[me][other]) {
                against[nagainst] = k * NMODULES + other;
                seen[nagainst++] = r->clock[me][other];
            }
    }
    d->latest[kind][me] = epoch;
    const int mine = kind * NMODULES + me;
    for (int64_t y = 0; y < rows; y++) {
        int64_t first = (start + y * stride) / g;
        const int64_t stop = first + row_bytes / g;
        while (first < stop) {
            const int64_t key = first >> HB_PAGE_BITS;
            int32_t *page = dram_page(d, key);
            if (page == NULL)
                return decline(r, index, "out of memory");
            const int64_t lo = first & (HB_PAGE - 1);
            const int64_t hi = (stop - (key << HB_PAGE_BITS)) < HB_PAGE ? stop - (key << HB_PAGE_BITS) : HB_PAGE;
            for (int k = 0; k < nagainst; k++) {
                const int32_t *theirs = page + (int64_t)against[k] * HB_PAGE;
                for (int64_t e = lo; e < hi; e++)
                    if (theirs[e] > seen[k])
                        return decline(r, index, "data race on DRAM bytes [%#llx, %#llx)",
                                       (unsigned long long)(((key << HB_PAGE_BITS) + e) * g),
                                       (unsigned long long)(((key << HB_PAGE_BITS) + e + 1) * g));
            }
            int32_t *record = page + (int64_t)mine * HB_PAGE;
            for (int64_t e = lo; e < hi; e++)
                record[e] = epoch;
            first = (key << HB_PAGE_BITS) + hi;
        }
    }
    return 0;
}

static void hb_free(fs_run *r)
{
    for (int s = 0; s < NSHARED; s++)
        for (int k = 0; k < 2; k++)
            for (int m = 0; m < NMODULES; m++)
                free(r->shared[s].last[k][m]);
    for (int64_t s = 0; s < r->dram_hb.cap; s++)
        if (r->dram_hb.slots[s].key >= 0)
            free(r->dram_hb.slots[s].epochs);
    free(r->dram_hb.slots);
}

/* ------------------------------------------------------------------------------------------ */
/* Masks, ranges and the DRAM undo log                                                          */

/* Whether SRAM `sram` entries [low, high) were all written during this run. */
static inline int all_written(const fs_run *r, int sram, int64_t low, int64_t high)
{
    const uint8_t *mask = r->written[sram];
    for (int64_t e = low; e < high; e++)
        if (!mask[e])
            return 0;
    return 1;
}

static const char *const SRAM_NAMES[NSRAMS] = {"UOP", "INP", "WGT", "ACC", "OUT"};

/* Check a DMA's DRAM footprint (machine.Machine._dram_rows): only rows that exist are checked. */
static int dram_range(fs_run *r, int64_t index, int64_t start, int64_t row_bytes, int64_t rows, int64_t stride)
{
    if (rows == 0)
        return 0;
    const int64_t end = row_bytes == 0 ? start : start + (rows - 1) * stride + row_bytes;
    if (start < 0 || end > r->dram_size)
        return decline(r, index, "out of range: DRAM bytes [%#llx, %#llx)", (long long)start, (long long)end);
    return 0;
}

/* Save DRAM bytes [offset, offset + length) before a STORE overwrites them. */
static int undo_save(fs_run *r, int64_t offset, int64_t length)
{
    if (r->undo_len == r->undo_cap) {
        const int64_t cap = r->undo_cap ? 2 * r->undo_cap : 64;
        undo_entry *grown = realloc(r->undo, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        r->undo = grown;
        r->undo_cap = cap;
    }
    if (r->undo_bytes_len + length > r->undo_bytes_cap) {
        int64_t cap = r->undo_bytes_cap ? 2 * r->undo_bytes_cap : 4096;
        while (cap < r->undo_bytes_len + length)
            cap *= 2;
        uint8_t *grown = realloc(r->undo_bytes, (size_t)cap);
        if (grown == NULL)
            return -1;
        r->undo_bytes = grown;
        r->undo_bytes_cap = cap;
    }
    memcpy(r->undo_bytes + r->undo_bytes_len, r->dram + offset, (size_t)length);
    r->undo_bytes_len += length;
    r->undo[r->undo_len++] = (undo_entry){offset, length};
    return 0;
}

/* Put back every byte the run's STOREs overwrote, newest first. */
static void undo_replay(fs_run *r)
{
    for (int64_t k = r->undo_len; k-- > 0;) {
        const undo_entry *u = &r->undo[k];
        r->undo_bytes_len -= u->length;
        memcpy(r->dram + u->offset, r->undo_bytes + r->undo_bytes_len, (size_t)u->length);
    }
    r->undo_len = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* LOAD (Machine.load): 2-D strided DRAM -> SRAM copy with zero padding around it               */

static int do_load(fs_run *r, int64_t index, const int64_t *v, int me)
{
    const fs_config *c = r->cfg;
    int sram, counter;
    int64_t elem, counted;
    switch (v[VTA_F_MEMORY_TYPE]) {
    case VTA_MEM_UOP: sram = S_UOP; elem = counted = c->uop_bytes; counter = C_UOP; break;
    case VTA_MEM_INP: sram = S_INP; elem = counted = c->inp_bytes; counter = C_INP; break;
    case VTA_MEM_WGT: sram = S_WGT; elem = counted = c->wgt_bytes; counter = C_WGT; break;
    case VTA_MEM_ACC: sram = S_ACC; elem = counted = c->acc_bytes; counter = C_ACC; break;
    case VTA_MEM_ACC_8BIT: sram = S_ACC; elem = c->acc8_bytes; counted = c->acc_bytes; counter = C_ACC; break;
    default:   /* OUT and types past ACC_8BIT: check_program declined them */
        return decline(r, index, "illegal instruction: LOAD of memory type %lld", (long long)v[VTA_F_MEMORY_TYPE]);
    }
    const int64_t y_size = v[VTA_F_Y_SIZE], x_size = v[VTA_F_X_SIZE];
    const int64_t y_pad_0 = v[VTA_F_Y_PAD_0], x_pad_0 = v[VTA_F_X_PAD_0];
    const int64_t height = y_pad_0 + y_size + v[VTA_F_Y_PAD_1];
    const int64_t width = x_pad_0 + x_size + v[VTA_F_X_PAD_1];
    const int64_t base = v[VTA_F_SRAM_BASE], entries = height * width;
    if (base < 0 || base + entries > c->depth[sram])
        return decline(r, index, "out of range: %s entries [%lld, %lld)", SRAM_NAMES[sram],
                       (long long)base, (long long)(base + entries));
    const int64_t start = v[VTA_F_DRAM_BASE] * elem, row_bytes = x_size * elem, stride = v[VTA_F_X_STRIDE] * elem;
    if (dram_range(r, index, start, row_bytes, y_size, stride) < 0)
        return -1;
    if (r->check_races) {
        if (hb_dram_rows(r, index, READ, me, start, row_bytes, y_size, stride) < 0)
            return -1;
        if ((sram == S_INP || sram == S_WGT)
            && hb_sram_range(r, index, sram == S_INP ? HB_INP : HB_WGT, WRITE, me, base, base + entries) < 0)
            return -1;
    }
    const int padded = height != y_size || width != x_size;
    if (sram == S_UOP) {
        int64_t *target = r->uop + base * 3;
        if (padded)
            memset(target, 0, (size_t)entries * 3 * sizeof(int64_t));
        for (int64_t y = 0; y < y_size; y++) {
            const uint8_t *row = r->dram + start + y * stride;
            int64_t *entry = target + ((y_pad_0 + y) * width + x_pad_0) * 3;
            for (int64_t x = 0; x < x_size; x++, entry += 3) {
                const uint32_t word = (uint32_t)row[4 * x] | (uint32_t)row[4 * x + 1] << 8
                                    | (uint32_t)row[4 * x + 2] << 16 | (uint32_t)row[4 * x + 3] << 24;
                for (int f = 0; f < 3; f++)
                    entry[f] = (int64_t)((word >> c->uop_shift[f]) & (uint64_t)c->uop_mask[f]);
            }
        }
    } else if (v[VTA_F_MEMORY_TYPE] == VTA_MEM_ACC_8BIT) {   /* int8 values sign-extended into ACC */
        const int64_t lanes = c->batch * c->block_out;
        int32_t *target = r->acc + base * lanes;
        if (padded)
            memset(target, 0, (size_t)entries * lanes * sizeof(int32_t));
        for (int64_t y = 0; y < y_size; y++) {
            const int8_t *row = (const int8_t *)(r->dram + start + y * stride);
            int32_t *entry = target + ((y_pad_0 + y) * width + x_pad_0) * lanes;
            for (int64_t k = 0; k < x_size * lanes; k++)
                entry[k] = row[k];
        }
    } else {   /* an element's DRAM bytes are its SRAM entry's bytes (ACC: little-endian int32) */
        uint8_t *sram_bytes = sram == S_INP ? (uint8_t *)r->inp : sram == S_WGT ? (uint8_t *)r->wgt : (uint8_t *)r->acc;
        uint8_t *target = sram_bytes + base * elem;
        if (padded)
            memset(target, 0, (size_t)(entries * elem));
        for (int64_t y = 0; y < y_size; y++)
            memcpy(target + ((y_pad_0 + y) * width + x_pad_0) * elem, r->dram + start + y * stride, (size_t)row_bytes);
    }
    memset(r->written[sram] + base, 1, (size_t)entries);
    r->counters[counter] += y_size * x_size * counted;
    return poll_signals(r, entries * elem);
}

/* ------------------------------------------------------------------------------------------ */
/* STORE (Machine.store): 2-D strided OUT -> DRAM copy, rows in order (later rows win)          */

static int do_store(fs_run *r, int64_t index, const int64_t *v, int me)
{
    const fs_config *c = r->cfg;
    const int64_t y_size = v[VTA_F_Y_SIZE], x_size = v[VTA_F_X_SIZE];
    const int64_t base = v[VTA_F_SRAM_BASE], entries = y_size * x_size;
    if (base < 0 || base + entries > c->depth[S_OUT])
        return decline(r, index, "out of range: OUT entries [%lld, %lld)", (long long)base, (long long)(base + entries));
    const int64_t elem = c->out_bytes;
    const int64_t start = v[VTA_F_DRAM_BASE] * elem, row_bytes = x_size * elem, stride = v[VTA_F_X_STRIDE] * elem;
    if (dram_range(r, index, start, row_bytes, y_size, stride) < 0)
        return -1;
    if (r->check_races) {
        if (hb_sram_range(r, index, HB_OUT, READ, me, base, base + entries) < 0)
            return -1;
        if (hb_dram_rows(r, index, WRITE, me, start, row_bytes, y_size, stride) < 0)
            return -1;
    }
    if (!all_written(r, S_OUT, base, base + entries))
        return decline(r, index, "uninitialised read of an OUT entry");
    const uint8_t *source = (const uint8_t *)r->out + base * elem;
    for (int64_t y = 0; y < y_size; y++) {
        if (undo_save(r, start + y * stride, row_bytes) < 0)
            return decline(r, index, "out of memory");
        memcpy(r->dram + start + y * stride, source + y * row_bytes, (size_t)row_bytes);
    }
    r->counters[C_OUT] += entries * elem;
    return poll_signals(r, entries * elem);
}

/* ------------------------------------------------------------------------------------------ */
/* Micro-coded loops (Machine._uops, _check_index_ranges)                                       */

/* The loop's micro-ops must be in the cache and written; each operand's largest index (None
 * columns: depth < 0) must fit its SRAM. */
static int check_loop(fs_run *r, int64_t index, const int64_t *v, const int64_t depths[3])
{
    const int64_t bgn = v[VTA_F_UOP_BGN], end = v[VTA_F_UOP_END];
    if (end > r->cfg->depth[S_UOP])
        return decline(r, index, "out of range: micro-ops [%lld, %lld)", (long long)bgn, (long long)end);
    if (!all_written(r, S_UOP, bgn, end))
        return decline(r, index, "uninitialised read of a micro-op");
    static const int FACTORS[3][2] = {{VTA_F_DST_FACTOR_OUT, VTA_F_DST_FACTOR_IN},
                                      {VTA_F_SRC_FACTOR_OUT, VTA_F_SRC_FACTOR_IN},
                                      {VTA_F_WGT_FACTOR_OUT, VTA_F_WGT_FACTOR_IN}};
    for (int col = 0; col < 3; col++) {
        if (depths[col] < 0)
            continue;
        int64_t peak = 0;
        for (int64_t k = bgn; k < end; k++)
            if (r->uop[3 * k + col] > peak)
                peak = r->uop[3 * k + col];
        const int64_t top = peak + (v[VTA_F_ITER_OUT] - 1) * v[FACTORS[col][0]] + (v[VTA_F_ITER_IN] - 1) * v[FACTORS[col][1]];
        if (top >= depths[col])
            return decline(r, index, "out of range: operand %d index %lld (%lld entries)", col, (long long)top,
                           (long long)depths[col]);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* GEMM (Machine.gemm): acc[dst] += inp[src] . wgt[wgt]^T in loop order, or reset              */

/* The race checks of a GEMM/ALU loop, all before any data moves (as Machine reports the
 * accesses to its observer first): OUT written at every dst; a GEMM without reset also reads
 * INP at every src and WGT at every wgt (ALU reads ACC, which no other module touches). */
static int loop_races(fs_run *r, int64_t index, const int64_t *v, int reads, int me)
{
    hb_probe inp_probe, wgt_probe, out_probe;
    if (hb_sram_probe(r, HB_OUT, WRITE, me, &out_probe) < 0
        || (reads && (hb_sram_probe(r, HB_INP, READ, me, &inp_probe) < 0
                      || hb_sram_probe(r, HB_WGT, READ, me, &wgt_probe) < 0)))
        return decline(r, index, "out of memory");
    const int64_t bgn = v[VTA_F_UOP_BGN], end = v[VTA_F_UOP_END];
    for (int64_t i = 0; i < v[VTA_F_ITER_OUT]; i++) {
        for (int64_t j = 0; j < v[VTA_F_ITER_IN]; j++) {
            const int64_t d0 = i * v[VTA_F_DST_FACTOR_OUT] + j * v[VTA_F_DST_FACTOR_IN];
            const int64_t s0 = i * v[VTA_F_SRC_FACTOR_OUT] + j * v[VTA_F_SRC_FACTOR_IN];
            const int64_t w0 = i * v[VTA_F_WGT_FACTOR_OUT] + j * v[VTA_F_WGT_FACTOR_IN];
            for (int64_t k = bgn; k < end; k++) {
                const int64_t *u = r->uop + 3 * k;
                if (probe_touch(&out_probe, u[0] + d0))
                    return decline(r, index, "data race on OUT entry %lld", (long long)(u[0] + d0));
                if (!reads)
                    continue;
                if (probe_touch(&inp_probe, u[1] + s0))
                    return decline(r, index, "data race on INP entry %lld", (long long)(u[1] + s0));
                if (probe_touch(&wgt_probe, u[2] + w0))
                    return decline(r, index, "data race on WGT entry %lld", (long long)(u[2] + w0));
            }
        }
    }
    return 0;
}

/* One micro-op's arithmetic: acc entry a (and its OUT entry o, the low 8 bits) += x . wt^T, for
 * x [batch][bi] and wt [bo][bi] int8. Each dot product of bi <= 64 int8 x int8 products is exact
 * in int32 (|sum| <= 64 * 2**14); adding it to ACC wraps mod 2**32. */
#if defined(__SSE2__)
#include <emmintrin.h>

/* int8 lanes 0-7 / 8-15 of v, sign-extended to int16 */
static inline __m128i widen_lo(__m128i v) { return _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8); }
static inline __m128i widen_hi(__m128i v) { return _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8); }

/* Partial sums (4 int32 lanes adding up to the dot product) of x, already widened to int16 in
 * bi / 8 vectors, with the bi int8 weights at w. */
static inline __m128i dot_lanes(const __m128i *xw, const int8_t *w, int64_t bi)
{
    __m128i sum = _mm_setzero_si128();
    int64_t m = 0;
    for (; m + 16 <= bi; m += 16) {
        const __m128i wv = _mm_loadu_si128((const __m128i *)(w + m));
        sum = _mm_add_epi32(sum, _mm_madd_epi16(xw[m / 8], widen_lo(wv)));
        sum = _mm_add_epi32(sum, _mm_madd_epi16(xw[m / 8 + 1], widen_hi(wv)));
    }
    if (m < bi)   /* bi % 16 == 8 */
        sum = _mm_add_epi32(sum, _mm_madd_epi16(xw[m / 8], widen_lo(_mm_loadl_epi64((const __m128i *)(w + m)))));
    return sum;
}
#endif

static inline void gemm_entry(int32_t *a, int8_t *o, const int8_t *x, const int8_t *wt, int64_t batch, int64_t bi,
                              int64_t bo)
{
    for (int64_t b = 0; b < batch; b++, x += bi, a += bo, o += bo) {
        int64_t n = 0;
#if defined(__SSE2__)
        if (bi % 8 == 0 && bi <= 64) {   /* four outputs at a time: pmaddwd dot products, one 4x4 reduction */
            __m128i xw[8];
            for (int64_t m = 0; m < bi; m += 16) {
                const __m128i xv = bi - m >= 16 ? _mm_loadu_si128((const __m128i *)(x + m))
                                                : _mm_loadl_epi64((const __m128i *)(x + m));
                xw[m / 8] = widen_lo(xv);
                xw[m / 8 + 1] = widen_hi(xv);
            }
            for (; n + 4 <= bo; n += 4) {
                const __m128i s0 = dot_lanes(xw, wt + n * bi, bi), s1 = dot_lanes(xw, wt + (n + 1) * bi, bi);
                const __m128i s2 = dot_lanes(xw, wt + (n + 2) * bi, bi), s3 = dot_lanes(xw, wt + (n + 3) * bi, bi);
                const __m128i u0 = _mm_add_epi32(_mm_unpacklo_epi32(s0, s1), _mm_unpackhi_epi32(s0, s1));
                const __m128i u1 = _mm_add_epi32(_mm_unpacklo_epi32(s2, s3), _mm_unpackhi_epi32(s2, s3));
                const __m128i sums = _mm_add_epi32(_mm_unpacklo_epi64(u0, u1), _mm_unpackhi_epi64(u0, u1));
                const __m128i total = _mm_add_epi32(_mm_loadu_si128((const __m128i *)(a + n)), sums);   /* wraps */
                _mm_storeu_si128((__m128i *)(a + n), total);
                /* the low 8 bits of each lane (0..255 pack exactly through both saturating packs) */
                const __m128i low = _mm_and_si128(total, _mm_set1_epi32(0xFF));
                const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(low, low), low));
                memcpy(o + n, &bytes, 4);
            }
        }
#endif
        for (; n < bo; n++) {
            int32_t sum = 0;
            for (int64_t m = 0; m < bi; m++)
                sum += (int32_t)x[m] * (int32_t)wt[n * bi + m];
            const uint32_t total = (uint32_t)a[n] + (uint32_t)sum;   /* wraps mod 2**32 */
            a[n] = (int32_t)total;
            o[n] = (int8_t)(uint8_t)total;                           /* low 8 bits */
        }
    }
}

/* REQUANT (machine.requant_op): clip(wrap32(a + addend + rounding) >> shift, lo, 127), its control
 * bits in the immediate field (shift 4:0, relu 5, rounding 6; isa.requant_fields). */
static inline int32_t requant_op(int32_t a, int64_t addend, int64_t imm)
{
    const int shift = (int)(imm & 31);
    const uint32_t rounding = (imm & 64) && shift ? (uint32_t)1 << (shift - 1) : 0;
    const int32_t t = (int32_t)((uint32_t)a + (uint32_t)(int32_t)addend + rounding);
    const int32_t r = t >> shift;                                   /* arithmetic (gcc, clang) */
    const int32_t lo = (imm & 32) ? 0 : -128;
    return r < lo ? lo : r > 127 ? 127 : r;
}

/* BIAS_PRELOAD's bias reset (Machine._gemm_bias): acc[dst] = acc[src'] with src' indexing ACC, out[dst]
 * its low 8 bits, in micro-op order. */
static int do_gemm_bias(fs_run *r, int64_t index, const int64_t *v, int me)
{
    const fs_config *c = r->cfg;
    const int64_t depths[3] = {c->depth[S_ACC], c->depth[S_ACC], -1};
    if (check_loop(r, index, v, depths) < 0)
        return -1;
    if (r->check_races && loop_races(r, index, v, 0, me) < 0)
        return -1;
    const int64_t lanes = c->batch * c->block_out;
    uint8_t *acc_written = r->written[S_ACC], *out_written = r->written[S_OUT];
    const int64_t bgn = v[VTA_F_UOP_BGN], end = v[VTA_F_UOP_END];
    for (int64_t i = 0; i < v[VTA_F_ITER_OUT]; i++) {
        for (int64_t j = 0; j < v[VTA_F_ITER_IN]; j++) {
            const int64_t d0 = i * v[VTA_F_DST_FACTOR_OUT] + j * v[VTA_F_DST_FACTOR_IN];
            const int64_t s0 = i * v[VTA_F_SRC_FACTOR_OUT] + j * v[VTA_F_SRC_FACTOR_IN];
            for (int64_t k = bgn; k < end; k++) {
                const int64_t d = r->uop[3 * k] + d0, s = r->uop[3 * k + 1] + s0;
                if (!acc_written[s])
                    return decline(r, index, "uninitialised read of an ACC entry");
                int32_t *a = r->acc + d * lanes;
                int8_t *o = r->out + d * lanes;
                memmove(a, r->acc + s * lanes, (size_t)lanes * sizeof(int32_t));
                for (int64_t n = 0; n < lanes; n++)
                    o[n] = (int8_t)(uint8_t)(uint32_t)a[n];
                acc_written[d] = out_written[d] = 1;
            }
            if (poll_signals(r, (end - bgn) * lanes) < 0)
                return -1;
        }
    }
    return 0;
}

static int do_gemm(fs_run *r, int64_t index, const int64_t *v, int me, int epilogue)
{
    const fs_config *c = r->cfg;
    const int64_t iter_out = v[VTA_F_ITER_OUT], iter_in = v[VTA_F_ITER_IN];
    const int64_t bgn = v[VTA_F_UOP_BGN], end = v[VTA_F_UOP_END];
    if (end <= bgn || iter_out == 0 || iter_in == 0)
        return 0;
    const int reset = v[VTA_F_RESET_REG] != 0;
    if (reset && epilogue)
        return do_gemm_bias(r, index, v, me);
    const int64_t requant = r->requant;   /* GEMM_OUT_REQUANT: OUT gets each new value requantised */
    const int64_t depths[3] = {c->depth[S_ACC], reset ? -1 : c->depth[S_INP], reset ? -1 : c->depth[S_WGT]};
    if (check_loop(r, index, v, depths) < 0)
        return -1;
    if (r->check_races && loop_races(r, index, v, !reset, me) < 0)
        return -1;
    const int64_t batch = c->batch, bi = c->block_in, bo = c->block_out;
    const int64_t acc_lanes = batch * bo, inp_lanes = batch * bi, wgt_lanes = bo * bi;
    const uint8_t *inp_written = r->written[S_INP], *wgt_written = r->written[S_WGT];
    uint8_t *acc_written = r->written[S_ACC], *out_written = r->written[S_OUT];
    for (int64_t i = 0; i < iter_out; i++) {
        for (int64_t j = 0; j < iter_in; j++) {
            const int64_t d0 = i * v[VTA_F_DST_FACTOR_OUT] + j * v[VTA_F_DST_FACTOR_IN];
            const int64_t s0 = i * v[VTA_F_SRC_FACTOR_OUT] + j * v[VTA_F_SRC_FACTOR_IN];
            const int64_t w0 = i * v[VTA_F_WGT_FACTOR_OUT] + j * v[VTA_F_WGT_FACTOR_IN];
            for (int64_t k = bgn; k < end; k++) {
                const int64_t *u = r->uop + 3 * k;
                const int64_t d = u[0] + d0;
                int32_t *a = r->acc + d * acc_lanes;
                if (reset) {
                    memset(a, 0, (size_t)acc_lanes * sizeof(int32_t));
                    memset(r->out + d * acc_lanes, 0, (size_t)acc_lanes);
                    acc_written[d] = out_written[d] = 1;
                    continue;
                }
                const int64_t s = u[1] + s0, w = u[2] + w0;
                if (!inp_written[s] || !wgt_written[w] || !acc_written[d])
                    return decline(r, index, "uninitialised read of an INP, WGT or ACC entry");
                gemm_entry(a, r->out + d * acc_lanes, r->inp + s * inp_lanes, r->wgt + w * wgt_lanes, batch, bi, bo);
                if (epilogue) {
                    int8_t *o = r->out + d * acc_lanes;
                    for (int64_t n = 0; n < acc_lanes; n++)
                        o[n] = (int8_t)requant_op(a[n], 0, requant);
                }
                out_written[d] = 1;
            }
            if (poll_signals(r, (end - bgn) * (reset ? acc_lanes : acc_lanes * bi)) < 0)
                return -1;
        }
    }
    if (!reset)
        r->counters[C_GEMM] += iter_out * iter_in * (end - bgn);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* ALU (Machine.alu, machine.alu_op): acc[dst] = op(acc[dst], imm or acc[src]), in order       */

static inline int32_t alu_op(int64_t op, int32_t a, int64_t b)
{
    switch (op) {
    case VTA_ALU_MIN: return a < b ? a : (int32_t)b;
    case VTA_ALU_MAX: return a > b ? a : (int32_t)b;
    case VTA_ALU_ADD: return (int32_t)((uint32_t)a + (uint32_t)b);
    case VTA_ALU_SHR: {
        const int shift = (int)(((b & 63) ^ 32) - 32);            /* low 6 bits, signed: -32..31 */
        if (shift >= 0)
            return a >> shift;                                      /* arithmetic (gcc, clang) */
        return (int32_t)(uint32_t)((uint64_t)(uint32_t)a << -shift);   /* wrapped; by 32 gives 0 */
    }
    default: {                                                      /* MUL: low 16 bits of b, signed */
        const int64_t factor = ((b & 0xFFFF) ^ 0x8000) - 0x8000;
        return (int32_t)(uint32_t)((uint64_t)((int64_t)a * factor));
    }
    }
}

static int do_alu(fs_run *r, int64_t index, const int64_t *v, int me)
{
    const fs_config *c = r->cfg;
    const int64_t iter_out = v[VTA_F_ITER_OUT], iter_in = v[VTA_F_ITER_IN];
    const int64_t bgn = v[VTA_F_UOP_BGN], end = v[VTA_F_UOP_END];
    const int64_t op = v[VTA_F_ALU_OPCODE];   /* MIN..REQUANT: check_program declined the rest */
    if (op == VTA_ALU_REQUANT)                /* sets the requant register, with or without micro-ops */
        r->requant = v[VTA_F_IMM] & 127;
    if (end <= bgn || iter_out == 0 || iter_in == 0)
        return 0;
    const int use_imm = v[VTA_F_USE_IMM] != 0;
    const int64_t imm = v[VTA_F_IMM];
    const int64_t depths[3] = {c->depth[S_ACC], use_imm ? -1 : c->depth[S_ACC], -1};
    if (check_loop(r, index, v, depths) < 0)
        return -1;
    if (r->check_races && loop_races(r, index, v, 0, me) < 0)
        return -1;
    const int64_t lanes = c->batch * c->block_out;
    const uint8_t *acc_written = r->written[S_ACC];
    uint8_t *out_written = r->written[S_OUT];
    for (int64_t i = 0; i < iter_out; i++) {
        for (int64_t j = 0; j < iter_in; j++) {
            const int64_t d0 = i * v[VTA_F_DST_FACTOR_OUT] + j * v[VTA_F_DST_FACTOR_IN];
            const int64_t s0 = i * v[VTA_F_SRC_FACTOR_OUT] + j * v[VTA_F_SRC_FACTOR_IN];
            for (int64_t k = bgn; k < end; k++) {
                const int64_t d = r->uop[3 * k] + d0, s = r->uop[3 * k + 1] + s0;
                if (!acc_written[d] || (!use_imm && !acc_written[s]))
                    return decline(r, index, "uninitialised read of an ACC entry");
                int32_t *a = r->acc + d * lanes;
                const int32_t *b = use_imm ? NULL : r->acc + s * lanes;   /* may be a: each lane read before written */
                int8_t *o = r->out + d * lanes;
                for (int64_t n = 0; n < lanes; n++) {
                    const int32_t result = op == VTA_ALU_REQUANT ? requant_op(a[n], use_imm ? 0 : b[n], imm)
                                                                 : alu_op(op, a[n], use_imm ? imm : b[n]);
                    a[n] = result;
                    o[n] = (int8_t)(uint8_t)(uint32_t)result;
                }
                out_written[d] = 1;
            }
            if (poll_signals(r, (end - bgn) * lanes) < 0)
                return -1;
        }
    }
    r->counters[C_ALU] += iter_out * iter_in * (end - bgn);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Scheduler (fsim._Simulator.fetch / drain / check_finish)                                     */

/* The data effect of instruction `index` (machine.Machine.apply), by module `me`. */
static int apply(fs_run *r, int64_t index, int me)
{
    if (poll_signals(r, 16) < 0)   /* (token-only instructions are work too) */
        return -1;
    vta_insn insn;
    const int opcode = vta_decode(r->stream + index * VTA_INSN_BYTES, r->layout, &insn);
    const int64_t *v = insn.v;
    switch (opcode) {
    case VTA_LOAD: return v[VTA_F_X_SIZE] ? do_load(r, index, v, me) : 0;
    case VTA_STORE: return v[VTA_F_X_SIZE] ? do_store(r, index, v, me) : 0;
    case VTA_GEMM: return do_gemm(r, index, v, me, gemm_epilogue(r->cfg, r->stream + index * VTA_INSN_BYTES));
    case VTA_ALU: return do_alu(r, index, v, me);
    default: return 0;   /* FINISH before the last instruction cannot pass check_program */
    }
}

/* FINISH: every instruction of load and store happens before it. */
static int check_finish(fs_run *r)
{
    for (int m = 0; m < NMODULES; m++)
        if (m != MOD_COMPUTE && r->clock[MOD_COMPUTE][m] < r->totals[m])
            return decline(r, r->last, "FINISH does not wait for every %s instruction",
                           m == MOD_LOAD ? "load" : "store");
    return 0;
}

/* Dispatch as many instructions as fit their command queues; returns how many. */
static int64_t fetch(fs_run *r)
{
    int64_t done = 0;
    const int64_t depth = r->cfg->cmd_depth;
    while (r->fetched < r->count) {
        fs_unit *u = &r->units[r->route[r->fetched] & 3];
        if (u->cmd_len >= depth) {
            r->stalls[r->fetched] |= 1;
            break;
        }
        u->cmd[(u->cmd_head + u->cmd_len) % depth] = r->fetched;
        u->cmd_len++;
        r->fetched++;
        done++;
    }
    return done;
}

/* Every action module `m` can take: 1 if it took any, 0 if none, -1 to decline. */
static int drain(fs_run *r, int m)
{
    if (r->finished)
        return 0;
    fs_unit *u = &r->units[m];
    const int64_t cmd_depth = r->cfg->cmd_depth;
    const int token_depth = (int)r->cfg->token_depth;
    int progress = 0;
    for (;;) {
        if (u->current < 0) {
            if (!u->cmd_len)
                break;
            u->current = u->cmd[u->cmd_head];
            u->cmd_head = (u->cmd_head + 1) % cmd_depth;
            u->cmd_len--;
            u->popping = 1;
            u->step = 0;
            r->clock[m][m]++;                       /* hb.begin */
            progress = 1;
        }
        const uint8_t route = r->route[u->current];
        int queues[2];
        if (u->popping) {
            const int npops = route_pops(route, queues);
            while (u->step < npops) {
                token_queue *q = &r->tokens[queues[u->step]];
                if (!q->len)
                    return progress;
                const stamp *s = &q->buf[q->head];   /* hb.join */
                for (int k = 0; k < NMODULES; k++)
                    if (s->c[k] > r->clock[m][k])
                        r->clock[m][k] = s->c[k];
                q->head = (q->head + 1) % token_depth;
                q->len--;
                u->step++;
                progress = 1;
            }
            if (u->current == r->last) {
                if (check_finish(r) < 0)
                    return -1;
            } else if (apply(r, u->current, m) < 0) {
                return -1;
            }
            u->popping = 0;
            u->step = 0;
            progress = 1;
        }
        const int npushes = route_pushes(route, queues);
        while (u->step < npushes) {
            token_queue *q = &r->tokens[queues[u->step]];
            if (q->len >= token_depth) {
                r->stalls[u->current] |= (uint8_t)(2 << queues[u->step]);
                return progress;
            }
            stamp *s = &q->buf[(q->head + q->len) % token_depth];   /* hb.snapshot */
            for (int k = 0; k < NMODULES; k++)
                s->c[k] = r->clock[m][k];
            q->len++;
            u->step++;
            progress = 1;
        }
        const int finished = u->current == r->last;
        u->current = -1;
        progress = 1;
        if (finished) {
            r->finished = 1;
            break;
        }
    }
    return progress;
}

/* The whole program: 0 when it ran to FINISH, -1 to decline. */
static int run_program(fs_run *r)
{
    if (r->count == 0)
        return decline(r, -1, "empty program");
    if (check_program(r) < 0)
        return -1;
    while (!r->finished) {
        int progress = fetch(r) > 0;
        for (int m = 0; m < NMODULES; m++) {
            const int took = drain(r, m);
            if (took < 0)
                return -1;
            progress |= took;
        }
        if (!progress)
            return decline(r, -1, "deadlock");
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Python entry point                                                                           */

static void run_free(fs_run *r)
{
    free(r->route);
    free(r->stalls);
    for (int m = 0; m < NMODULES; m++)
        free(r->units[m].cmd);
    for (int q = 0; q < NQUEUES; q++)
        free(r->tokens[q].buf);
    hb_free(r);
    free(r->undo);
    free(r->undo_bytes);
}

/* Allocate the per-run arrays; -1 when out of memory. */
static int run_alloc(fs_run *r)
{
    const size_t count = (size_t)(r->count ? r->count : 1);
    r->route = calloc(count, 1);
    r->stalls = calloc(count, 1);
    if (r->route == NULL || r->stalls == NULL)
        return -1;
    for (int m = 0; m < NMODULES; m++) {
        r->units[m].current = -1;
        if ((r->units[m].cmd = malloc((size_t)r->cfg->cmd_depth * sizeof(int64_t))) == NULL)
            return -1;
    }
    for (int q = 0; q < NQUEUES; q++)
        if ((r->tokens[q].buf = malloc((size_t)r->cfg->token_depth * sizeof(stamp))) == NULL)
            return -1;
    const int64_t shared_depth[NSHARED] = {r->cfg->depth[S_INP], r->cfg->depth[S_WGT], r->cfg->depth[S_OUT]};
    for (int s = 0; s < NSHARED; s++)
        r->shared[s].size = shared_depth[s];
    return 0;
}

/* Fill `c` from the params tuple; 0 on success, -1 with a Python exception set. */
static int parse_config(PyObject *params, fs_config *c)
{
    if (!PyTuple_Check(params) || PyTuple_GET_SIZE(params) != FS_NPARAMS) {
        PyErr_Format(PyExc_ValueError, "params must be a tuple of %zd ints", FS_NPARAMS);
        return -1;
    }
    int64_t *fields = (int64_t *)c;
    for (Py_ssize_t k = 0; k < FS_NPARAMS; k++) {
        fields[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(params, k));
        if (fields[k] == -1 && PyErr_Occurred())
            return -1;
    }
    /* The core indexes memory with these, so they must be what fsim._native_params derives from a
     * VTAConfig: element sizes that match the SRAM entry shapes, masks laid out one after the
     * other, micro-op fields inside a 32-bit word, a granule dividing every element. */
    int ok = c->batch >= 1 && c->block_in >= 1 && c->block_in <= 4096 && c->block_out >= 1 && c->block_out <= 4096
          && c->batch <= 4096 && c->cmd_depth >= 1 && c->token_depth >= 1
          && c->token_depth <= 255 && c->granule >= 1 && c->uop_bytes == 4 && c->inp_bytes == c->batch * c->block_in
          && c->wgt_bytes == c->block_out * c->block_in && c->acc_bytes == 4 * c->batch * c->block_out
          && c->acc8_bytes == c->batch * c->block_out && c->out_bytes == c->batch * c->block_out;
    for (int s = 0; ok && s < NSRAMS; s++)
        ok = c->depth[s] >= 0 && c->depth[s] <= ((int64_t)1 << 32)
          && c->written_at[s] == (s ? c->written_at[s - 1] + c->depth[s - 1] : 0);
    for (int f = 0; ok && f < 3; f++)
        ok = c->uop_shift[f] >= 0 && c->uop_shift[f] < 32 && c->uop_mask[f] >= 0 && c->uop_mask[f] <= 0xFFFFFFFF;
    const int64_t elems[] = {c->uop_bytes, c->inp_bytes, c->wgt_bytes, c->acc_bytes, c->acc8_bytes, c->out_bytes};
    for (int e = 0; ok && e < 6; e++)
        ok = elems[e] % c->granule == 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "params out of range or inconsistent (see fsim._native_params)");
        return -1;
    }
    return 0;
}

enum { B_LAYOUT, B_STREAM, B_DRAM, B_UOP, B_INP, B_WGT, B_ACC, B_OUT, B_WRITTEN, NBUFFERS };

PyDoc_STRVAR(run_doc,
"run(layout, stream, params, dram, uop, inp, wgt, acc, out, written, check_races)\n"
"\n"
"Run the encoded program `stream` (vtakit.sim.native.layout_table decodes it) on a fresh\n"
"Machine's arrays and DRAM, as vtakit.sim.fsim.simulate does. Returns (counters, fetch_stalls,\n"
"push_stalls) as tuples of ints (stats.COUNTER_NAMES, hb.MODULES, machine.QUEUE_NAMES order), or\n"
"a string saying why it declines (DRAM then holds its original bytes again).");

static PyObject *fsim_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objects[NBUFFERS], *params;
    int check_races;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOp:run", &objects[B_LAYOUT], &objects[B_STREAM], &params,
                          &objects[B_DRAM], &objects[B_UOP], &objects[B_INP], &objects[B_WGT], &objects[B_ACC],
                          &objects[B_OUT], &objects[B_WRITTEN], &check_races))
        return NULL;
    fs_config cfg;
    if (parse_config(params, &cfg) < 0)
        return NULL;
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1)   /* instruction words, micro-ops and ACC elements are little-endian */
        return PyUnicode_FromString("not supported: a big-endian host");
    Py_buffer views[NBUFFERS];
    int acquired = 0;
    PyObject *result = NULL;
    for (; acquired < NBUFFERS; acquired++) {
        int flags = acquired <= B_STREAM ? PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE;
        if (acquired == B_DRAM)
            flags |= PyBUF_FORMAT;
        if (PyObject_GetBuffer(objects[acquired], &views[acquired], flags) < 0) {
            if (acquired == B_DRAM) {   /* the Python engine reports what is wrong with it */
                PyErr_Clear();
                result = PyUnicode_FromString("DRAM is not a writable contiguous 1-D uint8 array");
            }
            goto done;
        }
        if (acquired == B_DRAM && (views[B_DRAM].ndim != 1 || views[B_DRAM].format == NULL
                                   || strcmp(views[B_DRAM].format, "B") != 0)) {
            acquired++;
            result = PyUnicode_FromString("DRAM is not a writable contiguous 1-D uint8 array");
            goto done;
        }
    }
    if (views[B_LAYOUT].len == (Py_ssize_t)sizeof(vta_layout) && !vta_layout_ok(views[B_LAYOUT].buf)) {
        PyErr_SetString(PyExc_ValueError, "layout table has a field outside its 64-bit word");
        goto done;
    }
    /* every array must have exactly the size the configuration gives it */
    const int64_t expected[NBUFFERS] = {
        (int64_t)sizeof(vta_layout), views[B_STREAM].len - views[B_STREAM].len % VTA_INSN_BYTES, views[B_DRAM].len,
        cfg.depth[S_UOP] * 3 * 8, cfg.depth[S_INP] * cfg.batch * cfg.block_in,
        cfg.depth[S_WGT] * cfg.block_out * cfg.block_in, cfg.depth[S_ACC] * cfg.batch * cfg.block_out * 4,
        cfg.depth[S_OUT] * cfg.batch * cfg.block_out, cfg.written_at[S_OUT] + cfg.depth[S_OUT]};
    for (int b = 0; b < NBUFFERS; b++) {
        if (views[b].len != expected[b]) {
            PyErr_Format(PyExc_ValueError, "buffer %d holds %zd bytes, expected %lld", b, views[b].len,
                         (long long)expected[b]);
            goto done;
        }
    }
    fs_run *r = calloc(1, sizeof *r);
    if (r == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    r->cfg = &cfg;
    r->layout = views[B_LAYOUT].buf;
    r->stream = views[B_STREAM].buf;
    r->count = views[B_STREAM].len / VTA_INSN_BYTES;
    /* a command queue never holds more than the program: deeper ones behave alike (and a huge
     * CMD_QUEUE_DEPTH, which VTAConfig allows, must not size an allocation) */
    if (cfg.cmd_depth > r->count)
        cfg.cmd_depth = r->count > 0 ? r->count : 1;
    r->dram = views[B_DRAM].buf;
    r->dram_size = views[B_DRAM].len;
    r->uop = views[B_UOP].buf;
    r->inp = views[B_INP].buf;
    r->wgt = views[B_WGT].buf;
    r->acc = views[B_ACC].buf;
    r->out = views[B_OUT].buf;
    for (int s = 0; s < NSRAMS; s++)
        r->written[s] = (uint8_t *)views[B_WRITTEN].buf + cfg.written_at[s];
    r->check_races = check_races;
    r->tstate = PyEval_SaveThread();
    r->polled_ns = now_ns();
    const int status = run_alloc(r) < 0 ? decline(r, -1, "out of memory") : run_program(r);
    if (status < 0)
        undo_replay(r);
    PyEval_RestoreThread(r->tstate);
    if (r->interrupted) {
        result = NULL;   /* the signal handler's exception (KeyboardInterrupt) propagates */
    } else if (status < 0) {
        result = PyUnicode_FromString(r->reason);
    } else {
        int64_t fetch_stalls[NMODULES] = {0}, push_stalls[NQUEUES] = {0};
        for (int64_t i = 0; i < r->count; i++) {
            const uint8_t s = r->stalls[i];
            if (!s)
                continue;
            if (s & 1)
                fetch_stalls[r->route[i] & 3]++;
            for (int q = 0; q < NQUEUES; q++)
                if (s & (2 << q))
                    push_stalls[q]++;
        }
        const int64_t *k = r->counters;
        result = Py_BuildValue("((LLLLLLL)(LLL)(LLLL)L)", (long long)k[0], (long long)k[1], (long long)k[2],
                               (long long)k[3], (long long)k[4], (long long)k[5], (long long)k[6],
                               (long long)fetch_stalls[0], (long long)fetch_stalls[1], (long long)fetch_stalls[2],
                               (long long)push_stalls[0], (long long)push_stalls[1], (long long)push_stalls[2],
                               (long long)push_stalls[3], (long long)r->requant);
    }
    run_free(r);
    free(r);
done:
    while (acquired-- > 0)
        PyBuffer_Release(&views[acquired]);
    return result;
}

static PyMethodDef methods[] = {
    {"run", fsim_run, METH_VARARGS, run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fsim_core",
    "The functional simulator's compiled core (see vtakit/sim/csrc/fsim_core.c and vtakit.sim.native).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fsim_core(void)
{
    return PyModule_Create(&module);
}
