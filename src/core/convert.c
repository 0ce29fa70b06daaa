/*
 * convert.c — mxf_convert: host-array conversions between f32 and every dtype (SPEC §0).
 *
 * One table maps each dtype to how one value is read as f32 (decode) and written from
 * f32 (encode), both straight from src/formats.h; a conversion is decode-then-encode
 * through that table, so no format's bits are handled here. A same-dtype request is a
 * byte copy (e2m1 keeps the last high nibble of an odd count untouched).
 */
#include <string.h>

#include "core/internal.h"

typedef float (*cv_load_fn)(const void *p, int64_t i);
typedef void (*cv_store_fn)(void *p, int64_t i, float v);

static float load_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static float load_f16(const void *p, int64_t i) { return mxf_f16_to_f32(((const uint16_t *)p)[i]); }
static float load_bf16(const void *p, int64_t i) { return mxf_bf16_to_f32(((const uint16_t *)p)[i]); }
static float load_e4m3(const void *p, int64_t i) { return mxf_e4m3_to_f32(((const uint8_t *)p)[i]); }
static float load_e5m2(const void *p, int64_t i) { return mxf_e5m2_to_f32(((const uint8_t *)p)[i]); }
static float load_e2m1(const void *p, int64_t i) {
  return mxf_e2m1_to_f32(mxf_e2m1_get((const uint8_t *)p, i));
}
static float load_e8m0(const void *p, int64_t i) { return mxf_e8m0_to_f32(((const uint8_t *)p)[i]); }

static void store_f32(void *p, int64_t i, float v) { ((float *)p)[i] = v; }
static void store_f16(void *p, int64_t i, float v) { ((uint16_t *)p)[i] = mxf_f32_to_f16(v); }
static void store_bf16(void *p, int64_t i, float v) { ((uint16_t *)p)[i] = mxf_f32_to_bf16(v); }
static void store_e4m3(void *p, int64_t i, float v) { ((uint8_t *)p)[i] = mxf_f32_to_e4m3(v); }
static void store_e5m2(void *p, int64_t i, float v) { ((uint8_t *)p)[i] = mxf_f32_to_e5m2(v); }
static void store_e2m1(void *p, int64_t i, float v) { mxf_e2m1_set((uint8_t *)p, i, mxf_f32_to_e2m1(v)); }

/* `load`/`store` NULL: the dtype cannot be read resp. written as numbers. `storage`
 * groups dtypes with identical bytes (e2m1 described by values or by pairs). */
typedef struct cv_format {
  cv_load_fn load;
  cv_store_fn store;
  int bits;          /* storage bits per value */
  mxf_dtype storage; /* 0: the dtype itself */
} cv_format;

static const cv_format cv_formats[MXF_DTYPE_COUNT] = {
    [MXF_F32] = {load_f32, store_f32, 32, 0},
    [MXF_F16] = {load_f16, store_f16, 16, 0},
    [MXF_BF16] = {load_bf16, store_bf16, 16, 0},
    [MXF_E4M3] = {load_e4m3, store_e4m3, 8, 0},
    [MXF_E5M2] = {load_e5m2, store_e5m2, 8, 0},
    [MXF_E2M1] = {load_e2m1, store_e2m1, 4, 0},
    [MXF_E2M1X2] = {load_e2m1, store_e2m1, 4, MXF_E2M1},
    /* SPEC §0 gives no rule for encoding a value to e8m0: scales come from a block's
     * amax (SPEC §2.3), which mxf_quantize computes. */
    [MXF_E8M0] = {load_e8m0, NULL, 8, 0},
    [MXF_U8] = {NULL, NULL, 8, 0},
    [MXF_I8] = {NULL, NULL, 8, 0},
};

static int cv_valid(mxf_dtype d) {
  return d > MXF_DTYPE_INVALID && d < MXF_DTYPE_COUNT && cv_formats[d].bits;
}

static mxf_dtype cv_storage(mxf_dtype d) { return cv_formats[d].storage ? cv_formats[d].storage : d; }

static void cv_copy(const void *src, void *dst, int64_t n, int bits) {
  if (bits >= 8) {
    memmove(dst, src, (size_t)n * (size_t)(bits / 8));
    return;
  }
  memmove(dst, src, (size_t)(n / 2));
  if (n & 1) mxf_e2m1_set((uint8_t *)dst, n - 1, mxf_e2m1_get((const uint8_t *)src, n - 1));
}

mxf_status mxf_convert(const void *src, mxf_dtype src_dtype, void *dst, mxf_dtype dst_dtype, int64_t n) {
  if (!cv_valid(src_dtype))
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: src_dtype %d is not a dtype", (int)src_dtype);
  if (!cv_valid(dst_dtype))
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: dst_dtype %d is not a dtype", (int)dst_dtype);
  if (!src) return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: src is NULL");
  if (!dst) return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: dst is NULL");
  if (n < 0) return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: n = %lld is negative", (long long)n);

  const cv_format *s = &cv_formats[src_dtype], *d = &cv_formats[dst_dtype];
  if (cv_storage(src_dtype) == cv_storage(dst_dtype)) {
    cv_copy(src, dst, n, s->bits);
    return MXF_OK;
  }
  if (src_dtype != MXF_F32 && dst_dtype != MXF_F32)
    return mxf_set_error(MXF_ERR_INVALID_VALUE,
                         "mxf_convert: %s -> %s is not a supported pair; one side must be f32, or "
                         "both the same dtype",
                         mxf_dtype_name(src_dtype), mxf_dtype_name(dst_dtype));
  if (!s->load)
    return mxf_set_error(MXF_ERR_INVALID_VALUE,
                         "mxf_convert: %s holds raw bytes, not numbers; no conversion to %s",
                         mxf_dtype_name(src_dtype), mxf_dtype_name(dst_dtype));
  if (dst_dtype == MXF_E8M0)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "mxf_convert: encoding to e8m0 is not supported (only decoding): e8m0 scales "
                         "come from a block amax, see mxf_quantize");
  if (!d->store)
    return mxf_set_error(MXF_ERR_INVALID_VALUE,
                         "mxf_convert: %s holds raw bytes, not numbers; no conversion from %s",
                         mxf_dtype_name(dst_dtype), mxf_dtype_name(src_dtype));

  for (int64_t i = 0; i < n; ++i)
    d->store(dst, i, s->load(src, i));
  return MXF_OK;
}
