/*
 * dtype.c — the one dtype traits table (name, storage bits, roles, how a value is read
 * and written as f32). Every question "what is this dtype / may it play this role / how
 * does mxf_convert read it" is answered here; the values' bits are formats.h's.
 */
#include "core/validate.h"

static float load_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static float load_f16(const void *p, int64_t i) { return mxf_f16_to_f32(((const uint16_t *)p)[i]); }
static float load_bf16(const void *p, int64_t i) { return mxf_bf16_to_f32(((const uint16_t *)p)[i]); }
static float load_e4m3(const void *p, int64_t i) { return mxf_e4m3_to_f32(((const uint8_t *)p)[i]); }
static float load_e5m2(const void *p, int64_t i) { return mxf_e5m2_to_f32(((const uint8_t *)p)[i]); }
static float load_e2m1(const void *p, int64_t i) { return mxf_e2m1_to_f32(mxf_e2m1_get((const uint8_t *)p, i)); }
static float load_e8m0(const void *p, int64_t i) { return mxf_e8m0_to_f32(((const uint8_t *)p)[i]); }

static void store_f32(void *p, int64_t i, float v) { ((float *)p)[i] = v; }
static void store_f16(void *p, int64_t i, float v) { ((uint16_t *)p)[i] = mxf_f32_to_f16(v); }
static void store_bf16(void *p, int64_t i, float v) { ((uint16_t *)p)[i] = mxf_f32_to_bf16(v); }
static void store_e4m3(void *p, int64_t i, float v) { ((uint8_t *)p)[i] = mxf_f32_to_e4m3(v); }
static void store_e5m2(void *p, int64_t i, float v) { ((uint8_t *)p)[i] = mxf_f32_to_e5m2(v); }
static void store_e2m1(void *p, int64_t i, float v) { mxf_e2m1_set((uint8_t *)p, i, mxf_f32_to_e2m1(v)); }

/* SPEC §0 gives no rule for encoding a value to e8m0: scales come from a block's amax
 * (SPEC §2.3), which mxf_quantize computes; u8 / i8 are raw bytes. */
static const mxf_dtype_traits g_traits[MXF_DTYPE_COUNT] = {
    [MXF_DTYPE_INVALID] = {"invalid", 0, 0, NULL, NULL, MXF_DTYPE_INVALID},
    [MXF_F32] = {"f32", 32, MXF_DK_FLOAT, load_f32, store_f32, MXF_F32},
    [MXF_F16] = {"f16", 16, MXF_DK_FLOAT, load_f16, store_f16, MXF_F16},
    [MXF_BF16] = {"bf16", 16, MXF_DK_FLOAT, load_bf16, store_bf16, MXF_BF16},
    [MXF_E4M3] = {"e4m3", 8, MXF_DK_FP8 | MXF_DK_SCALE_UE4M3, load_e4m3, store_e4m3, MXF_E4M3},
    [MXF_E5M2] = {"e5m2", 8, MXF_DK_FP8, load_e5m2, store_e5m2, MXF_E5M2},
    [MXF_E2M1] = {"e2m1", 4, MXF_DK_E2M1_VALUES, load_e2m1, store_e2m1, MXF_E2M1},
    [MXF_E2M1X2] = {"e2m1x2", 8, MXF_DK_E2M1_BYTES, load_e2m1, store_e2m1, MXF_E2M1},
    [MXF_E8M0] = {"e8m0", 8, MXF_DK_SCALE_E8M0, load_e8m0, NULL, MXF_E8M0},
    [MXF_U8] = {"u8", 8, MXF_DK_E2M1_BYTES | MXF_DK_SCALE_E8M0 | MXF_DK_RAW, NULL, NULL, MXF_U8},
    [MXF_I8] = {"i8", 8, MXF_DK_E2M1_BYTES | MXF_DK_SCALE_E8M0 | MXF_DK_RAW, NULL, NULL, MXF_I8},
    [MXF_I32] = {"i32", 32, MXF_DK_INDEX, NULL, NULL, MXF_I32},
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
