/*
 * packed.h — the packed weights layout (SPEC §7.2): its geometry and byte offsets, for
 * the packing (packed.c), core's checks (validate.c) and the CPU backend's readers.
 */
#ifndef MXF_PACKED_H
#define MXF_PACKED_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

#define MXF_PACKED_HEADER 64
#define MXF_PACKED_MAGIC "MXFPACK1" /* 8 bytes, no NUL */
#define MXF_PACKED_CHUNK_BLOCKS 16  /* blocks of 32 values a chunk */

typedef struct mxf_packed_geom {
  int64_t n, k, l;
  mxf_dtype fmt;    /* MXF_E2M1, MXF_E4M3 or MXF_E5M2 */
  mxf_dtype sf_fmt; /* MXF_E8M0 or MXF_E4M3 (ue4m3) */
  int sf_vec;
  int64_t rb;      /* code bytes of a row per block of 32 values: 16 (e2m1) or 32 */
  int code_shift;  /* log2 of a row's code bytes a chunk (16 rb) */
  int sf_shift;    /* log2 of a row's scales a chunk (16 * 32 / sf_vec) */
  int64_t blocks;  /* Bk = ceil(K / 32) */
  int64_t chunks;  /* Ck = ceil(K / 512) */
  int64_t sf_area; /* S: scale bytes of a chunk */
  int64_t chunk;   /* bytes of a whole chunk: S + 16 * 16 * rb */
  int64_t panels;  /* P = ceil(N / 16) */
  int64_t panel;   /* bytes of a panel */
  int64_t bytes;   /* of the buffer, header included */
} mxf_packed_geom;

static inline void mxf_packed_geom_init(mxf_packed_geom *g, mxf_dtype fmt, mxf_dtype sf_fmt, int sf_vec,
                                        int64_t n, int64_t k, int64_t l) {
  g->n = n, g->k = k, g->l = l;
  g->fmt = fmt, g->sf_fmt = sf_fmt, g->sf_vec = sf_vec;
  g->rb = fmt == MXF_E2M1 ? 16 : 32;
  g->code_shift = fmt == MXF_E2M1 ? 8 : 9;
  g->sf_shift = sf_vec == 32 ? 4 : 5;
  g->blocks = mxf_cdiv(k, 32);
  g->chunks = mxf_cdiv(k, 32 * MXF_PACKED_CHUNK_BLOCKS);
  g->sf_area = 256 * (32 / sf_vec);
  g->chunk = g->sf_area + 16 * MXF_PACKED_CHUNK_BLOCKS * g->rb;
  g->panels = mxf_cdiv(n, 16);
  g->panel = g->chunks * g->sf_area + g->blocks * 16 * g->rb;
  g->bytes = MXF_PACKED_HEADER + l * g->panels * g->panel;
}

/* The packed layout of a gemm problem's B (its b and sfb fields). */
static inline mxf_packed_geom mxf_packed_geom_of(const mxf_gemm_problem *p) {
  mxf_packed_geom g;
  mxf_packed_geom_init(&g, p->b_fmt, p->sfb_fmt, p->sf_vec, p->n, p->k, p->l);
  return g;
}

/* From a panel's start: the 64 bytes of the 16 rows' word of code bytes o .. o + 3 (o a
 * multiple of 4; row i's at + 4 i); row i's (0..15) code byte o (its bytes in K order);
 * its scale j (of sf_vec values each). */
static inline int64_t mxf_packed_word_at(const mxf_packed_geom *g, int64_t o) {
  const int64_t c = o >> g->code_shift;
  return c * g->chunk + g->sf_area + ((o - (c << g->code_shift)) << 4);
}
static inline int64_t mxf_packed_code_at(const mxf_packed_geom *g, int64_t i, int64_t o) {
  return mxf_packed_word_at(g, o & ~(int64_t)3) + i * 4 + (o & 3);
}
static inline int64_t mxf_packed_sf_at(const mxf_packed_geom *g, int64_t i, int64_t j) {
  const int64_t c = j >> g->sf_shift, jb = j - (c << g->sf_shift);
  return c * g->chunk + (jb >> 2) * 64 + i * 4 + (jb & 3);
}
/* Panel p of batch b from the buffer's start. */
static inline int64_t mxf_packed_panel_at(const mxf_packed_geom *g, int64_t b, int64_t p) {
  return MXF_PACKED_HEADER + (b * g->panels + p) * g->panel;
}

/* The header of g into h (64 bytes), and whether h is it: 0 when it is, else writes
 * what differs into msg (the field, the buffer's value and g's). */
MXF_INTERNAL void mxf_packed_header(const mxf_packed_geom *g, uint8_t *h);
MXF_INTERNAL int mxf_packed_header_check(const mxf_packed_geom *g, const uint8_t *h, char *msg,
                                         size_t msg_size);

#endif
