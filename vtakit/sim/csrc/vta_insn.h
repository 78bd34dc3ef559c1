/* Decoding VTA instructions, shared by the simulators' compiled cores.
 *
 * The field layout depends on the configuration (SRAM depths set some widths), so it is not
 * compiled in: Python passes the table from vtakit.sim.native.layout_table(config), int32
 * triples (offset, width, signed) per opcode (0..7) and field (VTA_F_*), width 0 where the
 * opcode has no such field. Offsets are absolute bit offsets in the 128-bit little-endian word,
 * as vtakit.hw.isa.layout gives them; no field crosses a 64-bit word.
 */
#ifndef VTAKIT_VTA_INSN_H
#define VTAKIT_VTA_INSN_H

#include <stdint.h>
#include <string.h>

/* Field ids: the order of vtakit.sim.native.FIELDS (keep the two in step). */
enum {
    VTA_F_OPCODE, VTA_F_POP_PREV, VTA_F_POP_NEXT, VTA_F_PUSH_PREV, VTA_F_PUSH_NEXT,
    VTA_F_MEMORY_TYPE, VTA_F_SRAM_BASE, VTA_F_DRAM_BASE, VTA_F_Y_SIZE, VTA_F_X_SIZE, VTA_F_X_STRIDE,
    VTA_F_Y_PAD_0, VTA_F_Y_PAD_1, VTA_F_X_PAD_0, VTA_F_X_PAD_1,
    VTA_F_RESET_REG, VTA_F_UOP_BGN, VTA_F_UOP_END, VTA_F_ITER_OUT, VTA_F_ITER_IN,
    VTA_F_DST_FACTOR_OUT, VTA_F_DST_FACTOR_IN, VTA_F_SRC_FACTOR_OUT, VTA_F_SRC_FACTOR_IN,
    VTA_F_WGT_FACTOR_OUT, VTA_F_WGT_FACTOR_IN, VTA_F_ALU_OPCODE, VTA_F_USE_IMM, VTA_F_IMM,
    VTA_NFIELDS
};

enum { VTA_LOAD = 0, VTA_STORE = 1, VTA_GEMM = 2, VTA_FINISH = 3, VTA_ALU = 4 };
enum { VTA_MEM_UOP = 0, VTA_MEM_WGT = 1, VTA_MEM_INP = 2, VTA_MEM_ACC = 3, VTA_MEM_OUT = 4, VTA_MEM_ACC_8BIT = 5 };
enum { VTA_ALU_MIN = 0, VTA_ALU_MAX = 1, VTA_ALU_ADD = 2, VTA_ALU_SHR = 3, VTA_ALU_MUL = 4, VTA_ALU_REQUANT = 5 };

#define VTA_INSN_BYTES 16
#define VTA_NOPCODES 8

/* (offset, width, signed) of every field of every opcode. */
typedef struct {
    int32_t f[VTA_NOPCODES][VTA_NFIELDS][3];
} vta_layout;

/* One decoded instruction: every field (0 where its opcode has none). */
typedef struct {
    int64_t v[VTA_NFIELDS];
} vta_insn;

static inline uint64_t vta_word(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);      /* little-endian hosts (x86_64, aarch64) */
    return w;
}

/* Field k of the instruction whose two words are w, from its opcode's layout row (0 where the opcode
 * has none). The cores read single fields where they need only a few of an instruction's. */
static inline int64_t vta_field(const uint64_t w[2], const int32_t (*row)[3], int k)
{
    const int offset = row[k][0], width = row[k][1];
    if (!width)
        return 0;
    const uint64_t mask = width >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << width) - 1);
    int64_t value = (int64_t)((w[offset >> 6] >> (offset & 63)) & mask);
    if (row[k][2] && width < 64 && (value >> (width - 1)) & 1)
        value -= (int64_t)1 << width;
    return value;
}

/* Whether every field of a layout table lies inside one 64-bit half of the 128-bit word, as the
 * decoding above assumes (a table from Python always does; the cores check what they are given). */
static inline int vta_layout_ok(const vta_layout *layout)
{
    for (int op = 0; op < VTA_NOPCODES; op++)
        for (int k = 0; k < VTA_NFIELDS; k++) {
            const int32_t *f = layout->f[op][k];
            if (f[1] < 0 || f[1] > 64 || (f[1] && (f[0] < 0 || f[0] >= 128 || (f[0] & 63) + f[1] > 64)))
                return 0;
        }
    return 1;
}

/* Decode the 16 bytes at p. Returns the opcode, or -1 if the opcode has no layout. */
static inline int vta_decode(const uint8_t *p, const vta_layout *layout, vta_insn *out)
{
    const uint64_t w[2] = {vta_word(p), vta_word(p + 8)};
    const int opcode = (int)(w[0] & 7);
    memset(out, 0, sizeof *out);
    if (layout->f[opcode][VTA_F_OPCODE][1] == 0)
        return -1;
    for (int k = 0; k < VTA_NFIELDS; k++)
        out->v[k] = vta_field(w, layout->f[opcode], k);
    return opcode;
}

#endif
