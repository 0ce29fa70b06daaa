/*
 * convert.c — mxf_convert: host-array conversions between f32 and every dtype (SPEC §0).
 *
 * The dtype traits table (dtype.c) says how each dtype's value is read as f32 and written
 * from f32, both straight from src/formats.h; a conversion is decode-then-encode through
 * it, so no format's bits are handled here. A same-dtype request (or two descriptions of
 * the same values, e2m1 and e2m1x2) is a byte copy (e2m1 keeps the last high nibble of an
 * odd count untouched).
 */
#include <string.h>

#include "core/internal.h"
#include "core/validate.h"

static void cv_copy(const void *src, void *dst, int64_t n, int bits) {
  if (bits >= 8) {
    memmove(dst, src, (size_t)n * (size_t)(bits / 8));
    return;
  }
  memmove(dst, src, (size_t)(n / 2));
  if (n & 1) mxf_e2m1_set((uint8_t *)dst, n - 1, mxf_e2m1_get((const uint8_t *)src, n - 1));
}

mxf_status mxf_convert(const void *src, mxf_dtype src_dtype, void *dst, mxf_dtype dst_dtype, int64_t n) {
  const mxf_dtype_traits *s = mxf_dtype_traits_of(src_dtype), *d = mxf_dtype_traits_of(dst_dtype);
  if (!s)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: src_dtype %d is not a dtype", (int)src_dtype);
  if (!d)
    return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: dst_dtype %d is not a dtype", (int)dst_dtype);
  if (!src) return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: src is NULL");
  if (!dst) return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: dst is NULL");
  if (n < 0) return mxf_set_error(MXF_ERR_INVALID_VALUE, "mxf_convert: n = %lld is negative", (long long)n);

  if (s->values == d->values) {
    cv_copy(src, dst, n, mxf_dtype_traits_of(s->values)->bits); /* n counts values */
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
