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

static mxf_packed_geom pack_geom(const mxf_gemm_problem *p) {
  mxf_packed_geom g;
  mxf_packed_geom_init(&g, p->b_fmt, p->sfb_fmt, p->sf_vec, p->n, p->k, p->l);
  return g;
}

mxf_status mxf_pack_weights_size(const mxf_tensor *b, const mxf_tensor *sfb, int sf_vec, size_t *bytes) {
  mxf_gemm_problem p;
  int32_t device;
  if (!bytes) return mxf_set_error(MXF_ERR_INVALID_VALUE, "pack_weights_size: bytes is NULL");
  mxf_status st = mxf_validate_pack_weights(b, sfb, sf_vec, 0, &p, &device);
  if (st != MXF_OK) return st;
  *bytes = (size_t)pack_geom(&p).bytes;
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
  const mxf_packed_geom g = pack_geom(&p);
  if (!packed) return mxf_set_error(MXF_ERR_INVALID_VALUE, "pack_weights: packed is NULL");
  if (packed_size < (size_t)g.bytes)
    return mxf_set_error(MXF_ERR_INVALID_VALUE,
                         "pack_weights: packed_size %zu is too small; b and sfb pack into %" PRId64
                         " bytes (mxf_pack_weights_size)",
                         packed_size, g.bytes);
  /* the output overlaps no input (SPEC §4): spans from the lowest to the highest byte */
  const uintptr_t lo = (uintptr_t)packed, hi = lo + (uintptr_t)g.bytes;
  const int64_t bits = mxf_dtype_bits(p.b_fmt);
  const int64_t b_span =
      p.n && p.l ? ((p.n - 1) * p.b_ns + (p.k - 1) * p.b_ks + (p.l - 1) * p.b_ls + 1) * bits / 8 + 1 : 0;
  const int64_t sf_span =
      p.sfb_layout == MXF_SF_COMPACT ? p.l * p.n * p.kb : p.l * mxf_cdiv(p.n, 128) * mxf_cdiv(p.kb, 4) * 512;
  const struct {
    const char *name;
    const void *ptr;
    int64_t bytes;
  } in[] = {{"b", b->data, b_span}, {"sfb", sfb->data, sf_span}};
  for (int i = 0; i < 2; ++i) {
    const uintptr_t l2 = (uintptr_t)in[i].ptr, h2 = l2 + (uintptr_t)in[i].bytes;
    if (in[i].bytes > 0 && lo < h2 && l2 < hi)
      return mxf_set_error(MXF_ERR_INVALID_VALUE,
                           "pack_weights: packed [%p, +%" PRId64 " bytes) overlaps %s [%p, +%" PRId64
                           " bytes); the output may overlap no input",
                           packed, g.bytes, in[i].name, in[i].ptr, in[i].bytes);
  }

  uint8_t *out = (uint8_t *)packed;
  const uint8_t *bd = (const uint8_t *)b->data, *sd = (const uint8_t *)sfb->data;
  const uint8_t one = p.sfb_fmt == MXF_E4M3 ? 0x38 : 127; /* the scale 1 (SPEC §7.2 padding) */
  const int64_t per_sf = MXF_PACKED_CHUNK_BLOCKS * (32 / sf_vec), per_code = MXF_PACKED_CHUNK_BLOCKS * g.rb;
  const int64_t chunks = mxf_cdiv(p.k, 32 * MXF_PACKED_CHUNK_BLOCKS);
  mxf_packed_header(&g, out);
  for (int64_t l = 0; l < p.l; ++l)
    for (int64_t pn = 0; pn < g.panels; ++pn) {
      uint8_t *panel = out + mxf_packed_panel_at(&g, l, pn);
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t n = 16 * pn + i;
        const int real = n < p.n;
        for (int64_t c = 0; c < chunks; ++c) {
          for (int64_t j = 0; j < per_sf; ++j) {
            const int64_t kb = c * per_sf + j;
            panel[mxf_packed_sf_at(&g, i, kb)] =
                real && kb < p.kb ? sd[mxf_gemm_sf_offset(p.sfb_layout, p.n, p.kb, n, kb, l)] : one;
          }
          const int64_t o_end = (c + 1 < chunks ? per_code : (g.blocks - c * MXF_PACKED_CHUNK_BLOCKS) * g.rb);
          for (int64_t ob = 0; ob < o_end; ++ob) {
            const int64_t o = c * per_code + ob;
            panel[mxf_packed_code_at(&g, i, o)] = real ? code_byte(&p, bd, n, l, o) : 0;
          }
        }
      }
    }
  return MXF_OK;
}
