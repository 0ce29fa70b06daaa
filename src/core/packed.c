/*
 * packed.c — the packed weights (SPEC §7): mxf_pack_weights_size, mxf_pack_weights, and
 * the header that names a buffer's geometry (written here, checked by validate.c when
 * gemm_amax runs on it). The layout's offsets are packed.h's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/packed.h"
#include "core/validate.h"

static void put64(uint8_t *p, int64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}
static int64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= (uint64_t)p[i] << (8 * i);
  return (int64_t)v;
}

void mxf_packed_header(const mxf_packed_geom *g, uint8_t *h) {
  memset(h, 0, MXF_PACKED_HEADER);
  memcpy(h, MXF_PACKED_MAGIC, 8);
  h[8] = (uint8_t)g->fmt;
  h[9] = (uint8_t)g->sf_fmt;
  h[10] = (uint8_t)g->sf_vec;
  put64(h + 16, g->n);
  put64(h + 24, g->k);
  put64(h + 32, g->l);
  put64(h + 40, g->bytes);
}

int mxf_packed_header_check(const mxf_packed_geom *g, const uint8_t *h, char *msg, size_t msg_size) {
  if (memcmp(h, MXF_PACKED_MAGIC, 8)) {
    snprintf(msg, msg_size, "its first 8 bytes are not \"" MXF_PACKED_MAGIC "\"");
    return 1;
  }
  const struct {
    const char *name;
    int64_t have, want;
  } f[] = {{"format", h[8], (int64_t)g->fmt}, {"scale dtype", h[9], (int64_t)g->sf_fmt},
           {"sf_vec", h[10], g->sf_vec},      {"N", get64(h + 16), g->n},
           {"K", get64(h + 24), g->k},        {"L", get64(h + 32), g->l},
           {"size", get64(h + 40), g->bytes}};
  for (size_t i = 0; i < sizeof f / sizeof *f; ++i)
    if (f[i].have != f[i].want) {
      if (i < 2)
        snprintf(msg, msg_size, "its %s is %s, the plan's %s", f[i].name,
                 mxf_dtype_name((mxf_dtype)f[i].have), mxf_dtype_name((mxf_dtype)f[i].want));
      else
        snprintf(msg, msg_size, "its %s is %" PRId64 ", the plan's %" PRId64, f[i].name, f[i].have,
                 f[i].want);
      return 1;
    }
  return 0;
}

mxf_status mxf_pack_weights_size(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec, size_t *bytes) {
  mxf_gemm_problem p;
  int32_t device;
  if (!bytes) return mxf_set_error(MXF_ERR_INVALID_VALUE, "pack_weights_size: bytes is NULL");
  mxf_status st = mxf_validate_pack_weights(b, sfb, sf_vec, 0, &p, &device);
  if (st != MXF_OK) return st;
  *bytes = (size_t)mxf_packed_geom_of(&p).bytes;
  return MXF_OK;
}

/* Code byte o (in K order) of row n of batch l of B: 0 past the row's K values. */
static uint8_t code_byte(const mxf_gemm_problem *p, const uint8_t *b, int64_t n, int64_t l, int64_t o) {
  if (p->b_fmt == MXF_E2M1) { /* k-major: values 2o, 2o + 1 */
    if (2 * o >= p->k) return 0;
    return b[(n * p->b_ns + l * p->b_ls) / 2 + o];
  }
  if (o >= p->k) return 0;
  return b[n * p->b_ns + o * p->b_ks + l * p->b_ls];
}

mxf_status mxf_pack_weights(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec, void *packed,
                            size_t packed_size) {
  mxf_gemm_problem p;
  int32_t device;
  mxf_status st = mxf_validate_pack_weights(b, sfb, sf_vec, 1, &p, &device);
  if (st != MXF_OK) return st;
  if (MXF_DEVICE_IS_CUDA(device))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "pack_weights: b and sfb are on cuda:%d; packing reads and writes host memory "
                         "(packed weights are the CPU's layout, SPEC §7)",
                         (int)MXF_DEVICE_ORDINAL(device));
  st = mxf_validate_pack_output(&p, b->data, sfb->data, packed, packed_size);
  if (st != MXF_OK) return st;
  const mxf_packed_geom g = mxf_packed_geom_of(&p);
  uint8_t *out = (uint8_t *)packed;
  const uint8_t *bd = (const uint8_t *)b->data, *sd = (const uint8_t *)sfb->data;
  const uint8_t one = p.sfb_fmt == MXF_E4M3 ? 0x38 : 127; /* the scale 1 (SPEC §7.2 padding) */
  const int64_t per_sf = (int64_t)1 << g.sf_shift,
                per_code = (int64_t)1 << g.code_shift; /* a row's, a chunk */
  mxf_packed_header(&g, out);
  for (int64_t l = 0; l < p.l; ++l)
    for (int64_t pn = 0; pn < g.panels; ++pn) {
      uint8_t *panel = out + mxf_packed_panel_at(&g, l, pn);
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t n = 16 * pn + i;
        const int real = n < p.n;
        for (int64_t c = 0; c < g.chunks; ++c) {
          for (int64_t j = 0; j < per_sf; ++j) {
            const int64_t kb = c * per_sf + j;
            panel[mxf_packed_sf_at(&g, i, kb)] =
                real && kb < p.kb ? sd[mxf_gemm_sf_offset(p.sfb_layout, p.n, p.kb, n, kb, l)] : one;
          }
          const int64_t o_end =
              (c + 1 < g.chunks ? per_code : (g.blocks - c * MXF_PACKED_CHUNK_BLOCKS) * g.rb);
          uint8_t *words = panel + mxf_packed_code_at(&g, i, c * per_code); /* word w at + 64 w */
          if (real && p.b_ks == 1) { /* k-major rows: whole words copied */
            const int64_t at = n * p.b_ns + l * p.b_ls, row_bytes = p.b_fmt == MXF_E2M1 ? p.k / 2 : p.k;
            const uint8_t *row = bd + (p.b_fmt == MXF_E2M1 ? at / 2 : at) + c * per_code;
            const int64_t left = row_bytes - c * per_code; /* the row's bytes from the chunk's start */
            for (int64_t ob = 0; ob < o_end; ob += 4)
              if (ob + 4 <= left)
                memcpy(words + ob * 16, row + ob, 4);
              else
                for (int64_t t = 0; t < 4; ++t)
                  words[ob * 16 + t] = ob + t < left ? row[ob + t] : 0;
          } else {
            for (int64_t ob = 0; ob < o_end; ++ob)
              words[(ob >> 2) * 64 + (ob & 3)] = real ? code_byte(&p, bd, n, l, c * per_code + ob) : 0;
          }
        }
      }
    }
  return MXF_OK;
}
