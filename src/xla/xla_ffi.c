/*
 * xla_ffi.c — XLA FFI handlers: the ops as custom calls of jax.jit programs (mxfuse.jax).
 *
 * Written against the XLA FFI C API header of the installed jaxlib (found at build time
 * through jax.ffi.include_dir()). Each op has one handler per platform, registered by
 * mxfuse.jax as the target "mxfuse_<op>" for CUDA and for the host:
 *   mxf_xla_<op>_cuda   runs on XLA's stream (XLA_FFI_Stream_Get) on the device that
 *                       XLA names (XLA_FFI_DeviceOrdinal_Get), and refuses to run where
 *                       the FFI cannot name it;
 *   mxf_xla_<op>_host   runs on the CPU backend.
 * A handler answers XLA's metadata query (API version, and the command-buffer-compatible
 * trait: a run allocates nothing and never synchronizes, so XLA may capture it in a CUDA
 * graph), turns its buffers (row-major arrays) into the library's tensors and runs the
 * one-call form with the caller's workspace, which plans (or finds the plan in the
 * library's one-call cache) for that device: the last result of every custom call is a
 * uint8 workspace that XLA allocates, sized by mxfuse.jax at trace time as the largest
 * over the kinds of device the call may run on. Attributes (all
 * scalars): see each handler. Errors come back to XLA with the library's message.
 *
 * Operands and results by op (mxfuse.jax builds the calls):
 *   gemm_amax   a, b, sfa, sfb [, amax_in aliased to amax] -> c, amax, workspace
 *               (attribute has_sfa = 0: a bf16 a, no sfa operand)
 *               attributes sf_vec, flags, alpha, has_alpha; with flags holding
 *               MXF_AMAX_B_PACKED b is the packed weights (SPEC §7, a uint8 vector), no
 *               sfb operand, and the b and sfb they were packed from are described by
 *               the attributes b_dtype, b_ndim, b_d0.., sfb_dtype, sfb_ndim, sfb_d0..
 *               (row-major, as every JAX array)
 *   proj_rope   x, w, cos, sin [, x_scale, w_scale] -> out_row, out_scales_row, out_col,
 *               out_scales_col, workspace; attribute flags
 *   quantize    x -> [q_row, s_row] [q_col, s_col], workspace; attribute directions
 *   dequantize  q, s -> y, workspace; attribute direction
 *   grouped_gemm_amax  a, b [, sfa], sfb, offs [, group_alpha] -> c, amax, group_amax,
 *               workspace (the contiguous layout, SPEC §6); attributes has_sfa,
 *               has_group_alpha, sf_vec, alpha, has_alpha
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "mxfuse.h"
#include "xla/ffi/api/c_api.h"

#define MXF_XLA_API __attribute__((visibility("default")))

typedef struct frame {
  XLA_FFI_CallFrame *f;
  int32_t device; /* MXF_DEVICE_CPU or MXF_DEVICE_CUDA(i) */
  void *stream;
} frame;

static XLA_FFI_Error *ffi_error(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *msg) {
  XLA_FFI_Error_Create_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  a.message = msg;
  a.errc = code;
  return api->XLA_FFI_Error_Create(&a);
}

static XLA_FFI_Error *status_error(const XLA_FFI_Api *api, mxf_status st) {
  XLA_FFI_Error_Code code = st == MXF_ERR_INVALID_VALUE   ? XLA_FFI_Error_Code_INVALID_ARGUMENT
                            : st == MXF_ERR_NOT_SUPPORTED ? XLA_FFI_Error_Code_UNIMPLEMENTED
                            : st == MXF_ERR_NO_MEMORY     ? XLA_FFI_Error_Code_RESOURCE_EXHAUSTED
                                                          : XLA_FFI_Error_Code_INTERNAL;
  return ffi_error(api, code, mxf_last_error());
}

/* XLA's metadata query: fills it and returns 1, or returns 0 for a real call. */
static int metadata_query(XLA_FFI_CallFrame *f) {
  /* (the extension's struct type has had two names across jaxlib versions; its layout, one) */
  if (!f->extension_start || f->extension_start->type != XLA_FFI_Extension_Metadata) return 0;
  XLA_FFI_Metadata *m = ((XLA_FFI_Metadata_Extension *)f->extension_start)->metadata;
  m->api_version.major_version = XLA_FFI_API_MAJOR;
  m->api_version.minor_version = XLA_FFI_API_MINOR;
  m->traits = XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE;
  return 1;
}

/* The device and stream of a real call. */
static XLA_FFI_Error *frame_open(XLA_FFI_CallFrame *f, int cuda, frame *fr) {
  const XLA_FFI_Api *api = f->api;
  fr->f = f;
  fr->device = MXF_DEVICE_CPU;
  fr->stream = NULL;
  if (!cuda) return NULL;
  XLA_FFI_Stream_Get_Args s;
  memset(&s, 0, sizeof s);
  s.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
  s.ctx = f->ctx;
  XLA_FFI_Error *err = api->XLA_FFI_Stream_Get(&s);
  if (err) return err;
  fr->stream = s.stream;
  /* the device XLA runs the call on; an FFI without XLA_FFI_DeviceOrdinal_Get cannot say,
   * and a guess could run the call on another device than its buffers' */
  if (api->struct_size < offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) + sizeof(void *) ||
      !api->XLA_FFI_DeviceOrdinal_Get)
    return ffi_error(api, XLA_FFI_Error_Code_UNIMPLEMENTED,
                     "mxfuse: this XLA's FFI does not say which GPU runs the custom call "
                     "(no XLA_FFI_DeviceOrdinal_Get); a jaxlib whose FFI has it is needed");
  XLA_FFI_DeviceOrdinal_Get_Args d;
  memset(&d, 0, sizeof d);
  d.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
  d.ctx = f->ctx;
  err = api->XLA_FFI_DeviceOrdinal_Get(&d);
  if (err) return err;
  if (d.device_ordinal < 0) {
    char msg[128];
    snprintf(msg, sizeof msg,
             "mxfuse: XLA's FFI gives the custom call device ordinal %d; expected a GPU's (>= 0)",
             (int)d.device_ordinal);
    return ffi_error(api, XLA_FFI_Error_Code_INTERNAL, msg);
  }
  fr->device = MXF_DEVICE_CUDA(d.device_ordinal);
  return NULL;
}

/* Every handler's start: 0 when it returns *err at once (XLA's metadata query answered,
 * *err NULL; or the stream or device could not be had), 1 with the call's frame open. */
static int call_begin(XLA_FFI_CallFrame *f, int cuda, frame *fr, XLA_FFI_Error **err) {
  *err = NULL;
  if (metadata_query(f)) return 0;
  *err = frame_open(f, cuda, fr);
  return *err == NULL;
}

/* Every handler's end: the library's status as XLA's error (NULL when it ran). */
static XLA_FFI_Error *call_end(const frame *fr, mxf_status st) {
  return st == MXF_OK ? NULL : status_error(fr->f->api, st);
}

static mxf_dtype dtype_of(XLA_FFI_DataType t) {
  switch (t) {
  case XLA_FFI_DataType_F32: return MXF_F32;
  case XLA_FFI_DataType_F16: return MXF_F16;
  case XLA_FFI_DataType_BF16: return MXF_BF16;
  case XLA_FFI_DataType_F8E4M3FN: return MXF_E4M3;
  case XLA_FFI_DataType_F8E5M2: return MXF_E5M2;
  case XLA_FFI_DataType_F8E8M0FNU: return MXF_E8M0;
  case XLA_FFI_DataType_U8: return MXF_U8;
  case XLA_FFI_DataType_S8: return MXF_I8;
  case XLA_FFI_DataType_S32: return MXF_I32;
  default: return MXF_DTYPE_INVALID; /* refused by the library's validation, with the tensor named */
  }
}

/* A row-major buffer as a C-contiguous tensor (all strides 0). */
static void tensor_of(const XLA_FFI_Buffer *b, int32_t device, mxf_tensor *t) {
  memset(t, 0, sizeof *t);
  t->data = b->data;
  t->dtype = dtype_of(b->dtype);
  t->device = device;
  t->ndim = b->rank > MXF_MAX_DIMS ? MXF_MAX_DIMS + 1 : (int32_t)b->rank;
  for (int64_t i = 0; i < b->rank && i < MXF_MAX_DIMS; ++i)
    t->shape[i] = b->dims[i];
}

static const XLA_FFI_Buffer *arg(const frame *fr, int64_t i) {
  const XLA_FFI_Args *a = &fr->f->args;
  return i < a->size && a->types[i] == XLA_FFI_ArgType_BUFFER ? (const XLA_FFI_Buffer *)a->args[i] : NULL;
}

static const XLA_FFI_Buffer *ret(const frame *fr, int64_t i) {
  const XLA_FFI_Rets *r = &fr->f->rets;
  return i < r->size && r->types[i] == XLA_FFI_RetType_BUFFER ? (const XLA_FFI_Buffer *)r->rets[i] : NULL;
}

/* A scalar attribute by name as a double (integer or float); `fallback` when absent. */
static double attr(const frame *fr, const char *name, double fallback) {
  const XLA_FFI_Attrs *a = &fr->f->attrs;
  size_t n = strlen(name);
  for (int64_t i = 0; i < a->size; ++i) {
    const XLA_FFI_ByteSpan *s = a->names[i];
    if (a->types[i] != XLA_FFI_AttrType_SCALAR || s->len != n || memcmp(s->ptr, name, n)) continue;
    const XLA_FFI_Scalar *v = (const XLA_FFI_Scalar *)a->attrs[i];
    switch (v->dtype) {
    case XLA_FFI_DataType_S8: return *(const int8_t *)v->value;
    case XLA_FFI_DataType_S16: return *(const int16_t *)v->value;
    case XLA_FFI_DataType_S32: return *(const int32_t *)v->value;
    case XLA_FFI_DataType_S64: return (double)*(const int64_t *)v->value;
    case XLA_FFI_DataType_U8: return *(const uint8_t *)v->value;
    case XLA_FFI_DataType_U32: return *(const uint32_t *)v->value;
    case XLA_FFI_DataType_U64: return (double)*(const uint64_t *)v->value;
    case XLA_FFI_DataType_F32: return *(const float *)v->value;
    case XLA_FFI_DataType_F64: return *(const double *)v->value;
    case XLA_FFI_DataType_PRED: return *(const uint8_t *)v->value;
    default: return fallback;
    }
  }
  return fallback;
}

/* Checks the operand and result counts; the workspace (the last result) as pointer and size. */
static XLA_FFI_Error *shape_check(const frame *fr, const char *op, int64_t nargs_a, int64_t nargs_b,
                                  int64_t nrets, void **ws, size_t *ws_size) {
  const XLA_FFI_Api *api = fr->f->api;
  char msg[160];
  int64_t na = fr->f->args.size, nr = fr->f->rets.size;
  if ((na != nargs_a && na != nargs_b) || nr != nrets) {
    snprintf(msg, sizeof msg,
             "mxfuse_%s: custom call with %lld operands and %lld results; expected %lld or %lld and %lld", op,
             (long long)na, (long long)nr, (long long)nargs_a, (long long)nargs_b, (long long)nrets);
    return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
  }
  for (int64_t i = 0; i < na; ++i)
    if (!arg(fr, i)) {
      snprintf(msg, sizeof msg, "mxfuse_%s: operand %lld is not a buffer", op, (long long)i);
      return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    }
  for (int64_t i = 0; i < nr; ++i)
    if (!ret(fr, i)) {
      snprintf(msg, sizeof msg, "mxfuse_%s: result %lld is not a buffer", op, (long long)i);
      return ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, msg);
    }
  const XLA_FFI_Buffer *w = ret(fr, nr - 1);
  size_t bytes = 1;
  for (int64_t i = 0; i < w->rank; ++i)
    bytes *= (size_t)w->dims[i];
  *ws = w->data;
  *ws_size = bytes;
  return NULL;
}

/* A row-major tensor described by the attributes <p>_dtype, <p>_ndim, <p>_d0.. (no data). */
static void tensor_attrs(const frame *fr, const char *p, mxf_tensor *t) {
  char name[32];
  memset(t, 0, sizeof *t);
  snprintf(name, sizeof name, "%s_dtype", p);
  t->dtype = (mxf_dtype)attr(fr, name, MXF_DTYPE_INVALID);
  t->device = fr->device;
  snprintf(name, sizeof name, "%s_ndim", p);
  const double nd = attr(fr, name, 0);
  t->ndim = nd < 0 || nd > MXF_MAX_DIMS ? MXF_MAX_DIMS + 1 : (int32_t)nd; /* refused by validation */
  for (int i = 0; i < t->ndim && i < MXF_MAX_DIMS; ++i) {
    snprintf(name, sizeof name, "%s_d%d", p, i);
    t->shape[i] = (int64_t)attr(fr, name, -1);
  }
}

/* ------------------------------------------------------------ the ops */
static XLA_FFI_Error *gemm_amax(XLA_FFI_CallFrame *f, int cuda) {
  frame fr;
  XLA_FFI_Error *err;
  if (!call_begin(f, cuda, &fr, &err)) return err;
  void *ws;
  size_t ws_size;
  /* has_sfa = 0: a bf16 a, no sfa operand (a, b, sfb [, amax_in]); packed b: no sfb */
  const int has_sfa = attr(&fr, "has_sfa", 1) != 0;
  const unsigned flags = (unsigned)attr(&fr, "flags", 0);
  const int has_sfb = !(flags & MXF_AMAX_B_PACKED);
  if ((err = shape_check(&fr, "gemm_amax", 2 + has_sfa + has_sfb, 3 + has_sfa + has_sfb, 3, &ws, &ws_size)))
    return err;
  mxf_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  tensor_of(arg(&fr, 0), fr.device, &d.a);
  if (has_sfa) tensor_of(arg(&fr, 2), fr.device, &d.sfa);
  if (has_sfb) {
    tensor_of(arg(&fr, 1), fr.device, &d.b);
    tensor_of(arg(&fr, 2 + has_sfa), fr.device, &d.sfb);
  } else { /* the packed bytes, described as the b and sfb they were packed from */
    tensor_attrs(&fr, "b", &d.b);
    tensor_attrs(&fr, "sfb", &d.sfb);
    d.b.data = arg(&fr, 1)->data;
  }
  tensor_of(ret(&fr, 0), fr.device, &d.c);
  tensor_of(ret(&fr, 1), fr.device, &d.amax);
  d.sf_vec = (int)attr(&fr, "sf_vec", 32);
  d.flags = flags;
  float alpha = (float)attr(&fr, "alpha", 1.0);
  d.alpha = attr(&fr, "has_alpha", 0) != 0 ? &alpha : NULL;
  return call_end(&fr, mxf_gemm_amax_with_workspace(&d, ws, ws_size, fr.stream));
}

static XLA_FFI_Error *proj_rope(XLA_FFI_CallFrame *f, int cuda) {
  frame fr;
  XLA_FFI_Error *err;
  if (!call_begin(f, cuda, &fr, &err)) return err;
  void *ws;
  size_t ws_size;
  if ((err = shape_check(&fr, "proj_rope", 4, 6, 5, &ws, &ws_size))) return err;
  mxf_proj_rope_desc d;
  memset(&d, 0, sizeof d);
  tensor_of(arg(&fr, 0), fr.device, &d.x);
  tensor_of(arg(&fr, 1), fr.device, &d.w);
  tensor_of(arg(&fr, 2), fr.device, &d.cos);
  tensor_of(arg(&fr, 3), fr.device, &d.sin);
  if (f->args.size == 6) {
    tensor_of(arg(&fr, 4), fr.device, &d.x_scale);
    tensor_of(arg(&fr, 5), fr.device, &d.w_scale);
  }
  tensor_of(ret(&fr, 0), fr.device, &d.out_row);
  tensor_of(ret(&fr, 1), fr.device, &d.out_scales_row);
  tensor_of(ret(&fr, 2), fr.device, &d.out_col);
  tensor_of(ret(&fr, 3), fr.device, &d.out_scales_col);
  d.flags = (unsigned)attr(&fr, "flags", 0);
  return call_end(&fr, mxf_proj_rope_with_workspace(&d, ws, ws_size, fr.stream));
}

static XLA_FFI_Error *quantize(XLA_FFI_CallFrame *f, int cuda) {
  frame fr;
  XLA_FFI_Error *err;
  if (!call_begin(f, cuda, &fr, &err)) return err;
  unsigned dirs = (unsigned)attr(&fr, "directions", 0);
  int64_t nrets = 1 + ((dirs & MXF_QUANT_ROWS) ? 2 : 0) + ((dirs & MXF_QUANT_COLS) ? 2 : 0);
  void *ws;
  size_t ws_size;
  if ((err = shape_check(&fr, "quantize", 1, 1, nrets, &ws, &ws_size))) return err;
  mxf_quantize_desc d;
  memset(&d, 0, sizeof d);
  d.directions = dirs;
  tensor_of(arg(&fr, 0), fr.device, &d.x);
  int64_t r = 0;
  if (dirs & MXF_QUANT_ROWS) {
    tensor_of(ret(&fr, r++), fr.device, &d.q_row);
    tensor_of(ret(&fr, r++), fr.device, &d.s_row);
  }
  if (dirs & MXF_QUANT_COLS) {
    tensor_of(ret(&fr, r++), fr.device, &d.q_col);
    tensor_of(ret(&fr, r++), fr.device, &d.s_col);
  }
  return call_end(&fr, mxf_quantize_with_workspace(&d, ws, ws_size, fr.stream));
}

static XLA_FFI_Error *dequantize(XLA_FFI_CallFrame *f, int cuda) {
  frame fr;
  XLA_FFI_Error *err;
  if (!call_begin(f, cuda, &fr, &err)) return err;
  void *ws;
  size_t ws_size;
  if ((err = shape_check(&fr, "dequantize", 2, 2, 2, &ws, &ws_size))) return err;
  mxf_dequantize_desc d;
  memset(&d, 0, sizeof d);
  d.direction = (unsigned)attr(&fr, "direction", MXF_QUANT_ROWS);
  tensor_of(arg(&fr, 0), fr.device, &d.q);
  tensor_of(arg(&fr, 1), fr.device, &d.s);
  tensor_of(ret(&fr, 0), fr.device, &d.y);
  return call_end(&fr, mxf_dequantize_with_workspace(&d, ws, ws_size, fr.stream));
}

static XLA_FFI_Error *grouped_gemm_amax(XLA_FFI_CallFrame *f, int cuda) {
  frame fr;
  XLA_FFI_Error *err;
  if (!call_begin(f, cuda, &fr, &err)) return err;
  void *ws;
  size_t ws_size;
  const int has_sfa = attr(&fr, "has_sfa", 1) != 0, has_ga = attr(&fr, "has_group_alpha", 0) != 0;
  const int64_t n = 4 + has_sfa + has_ga;
  if ((err = shape_check(&fr, "grouped_gemm_amax", n, n, 4, &ws, &ws_size))) return err;
  mxf_grouped_gemm_amax_desc d;
  memset(&d, 0, sizeof d);
  int64_t i = 0;
  tensor_of(arg(&fr, i++), fr.device, &d.a);
  tensor_of(arg(&fr, i++), fr.device, &d.b);
  if (has_sfa) tensor_of(arg(&fr, i++), fr.device, &d.sfa);
  tensor_of(arg(&fr, i++), fr.device, &d.sfb);
  tensor_of(arg(&fr, i++), fr.device, &d.offs);
  if (has_ga) tensor_of(arg(&fr, i++), fr.device, &d.group_alpha);
  tensor_of(ret(&fr, 0), fr.device, &d.c);
  tensor_of(ret(&fr, 1), fr.device, &d.amax);
  tensor_of(ret(&fr, 2), fr.device, &d.group_amax);
  d.sf_vec = (int)attr(&fr, "sf_vec", 32);
  float alpha = (float)attr(&fr, "alpha", 1.0);
  d.alpha = attr(&fr, "has_alpha", 0) != 0 ? &alpha : NULL;
  return call_end(&fr, mxf_grouped_gemm_amax_with_workspace(&d, ws, ws_size, fr.stream));
}

MXF_XLA_API XLA_FFI_Error *mxf_xla_gemm_amax_cuda(XLA_FFI_CallFrame *f) { return gemm_amax(f, 1); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_gemm_amax_host(XLA_FFI_CallFrame *f) { return gemm_amax(f, 0); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_proj_rope_cuda(XLA_FFI_CallFrame *f) { return proj_rope(f, 1); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_proj_rope_host(XLA_FFI_CallFrame *f) { return proj_rope(f, 0); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_quantize_cuda(XLA_FFI_CallFrame *f) { return quantize(f, 1); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_quantize_host(XLA_FFI_CallFrame *f) { return quantize(f, 0); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_dequantize_cuda(XLA_FFI_CallFrame *f) { return dequantize(f, 1); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_dequantize_host(XLA_FFI_CallFrame *f) { return dequantize(f, 0); }
MXF_XLA_API XLA_FFI_Error *mxf_xla_grouped_gemm_amax_cuda(XLA_FFI_CallFrame *f) {
  return grouped_gemm_amax(f, 1);
}
MXF_XLA_API XLA_FFI_Error *mxf_xla_grouped_gemm_amax_host(XLA_FFI_CallFrame *f) {
  return grouped_gemm_amax(f, 0);
}
