/*
 * dtype.c — the one dtype traits table (name, storage bits, roles). Every question
 * "what is this dtype / may it play this role" is answered here, never by a switch
 * elsewhere.
 */
#include "core/validate.h"

static const mxf_dtype_traits g_traits[MXF_DTYPE_COUNT] = {
    [MXF_DTYPE_INVALID] = {"invalid", 0, 0},
    [MXF_F32] = {"f32", 32, MXF_DK_FLOAT},
    [MXF_F16] = {"f16", 16, MXF_DK_FLOAT},
    [MXF_BF16] = {"bf16", 16, MXF_DK_FLOAT},
    [MXF_E4M3] = {"e4m3", 8, MXF_DK_FP8 | MXF_DK_SCALE_UE4M3},
    [MXF_E5M2] = {"e5m2", 8, MXF_DK_FP8},
    [MXF_E2M1] = {"e2m1", 4, MXF_DK_E2M1_VALUES},
    [MXF_E2M1X2] = {"e2m1x2", 8, MXF_DK_E2M1_BYTES},
    [MXF_E8M0] = {"e8m0", 8, MXF_DK_SCALE_E8M0},
    [MXF_U8] = {"u8", 8, MXF_DK_E2M1_BYTES | MXF_DK_SCALE_E8M0 | MXF_DK_RAW},
    [MXF_I8] = {"i8", 8, MXF_DK_E2M1_BYTES | MXF_DK_SCALE_E8M0 | MXF_DK_RAW},
};

const mxf_dtype_traits *mxf_dtype_traits_of(mxf_dtype dtype) {
  if ((int)dtype <= (int)MXF_DTYPE_INVALID || (int)dtype >= (int)MXF_DTYPE_COUNT) return NULL;
  return &g_traits[dtype];
}

int mxf_dtype_is(mxf_dtype dtype, unsigned kinds) {
  const mxf_dtype_traits *t = mxf_dtype_traits_of(dtype);
  return t && (t->kinds & kinds) != 0;
}

const char *mxf_dtype_name(mxf_dtype dtype) {
  const mxf_dtype_traits *t = mxf_dtype_traits_of(dtype);
  return t ? t->name : g_traits[MXF_DTYPE_INVALID].name;
}

int mxf_dtype_bits(mxf_dtype dtype) {
  const mxf_dtype_traits *t = mxf_dtype_traits_of(dtype);
  return t ? t->bits : 0;
}
