/*
 * onednn_cpu.c — the onednn GEMM core of the CPU backend (cpu.h: mxf_cpu_bf16_*):
 * oneDNN's bf16 matmul primitives of every tile shape a plan's panel driver runs, made
 * with the plan, Y blocks in the weights layout oneDNN picks (offset tables for the
 * fill; every primitive of one Y shape takes the first one's layout, so that a Y block
 * serves all row chunks; later K panels add through a sum post-op), on bf16 units only.
 * Built without oneDNN, creation refuses and says so.
 * Story (layouts, the flushing below 2^-126, threads): docs/kernels/cpu.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/parallel.h"

#if defined(MXF_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#if defined(MXF_HAVE_OPENMP)
#include <omp.h>
#endif

#define MXF_BF16_SHAPES 12

typedef struct bf16_prim {
  int64_t m, n, k;
  int accumulate;
  dnnl_memory_desc_t x, y, acc, scratch;
  dnnl_primitive_t prim;
} bf16_prim;

#define MXF_BF16_Y_SHAPES 6 /* (columns, K) pairs: 2 x 3 at most */

typedef struct bf16_ylayout {
  int64_t n, k;
  dnnl_memory_desc_t md;
  mxf_cpu_bf16_layout pub;
} bf16_ylayout;

struct mxf_cpu_bf16 {
  dnnl_engine_t engine;
  int count, y_count;
  size_t scratch; /* bytes, the largest scratchpad */
  size_t y_bytes; /* bytes, the largest Y block */
  bf16_prim p[MXF_BF16_SHAPES];
  bf16_ylayout y[MXF_BF16_Y_SHAPES];
};

static const bf16_ylayout *ylayout_find(const mxf_cpu_bf16 *b, int64_t n, int64_t k) {
  for (int i = 0; i < b->y_count; ++i)
    if (b->y[i].n == n && b->y[i].k == k) return &b->y[i];
  return NULL;
}

/* The part of an element's offset in a blocked layout that index i of dimension d
 * contributes: its outer block times the dimension's stride, plus its place in each
 * inner block of that dimension (inner blocks listed outermost first; the last one
 * takes the index's lowest digits and varies fastest). */
static int64_t md_dim_offset(const dnnl_memory_desc_t *md, int d, int64_t i) {
  const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
  int64_t inner = 1;
  for (int j = 0; j < bd->inner_nblks; ++j)
    if (bd->inner_idxs[j] == d) inner *= bd->inner_blks[j];
  int64_t off = i / inner * bd->strides[d], below = 1, stride = 1;
  for (int j = bd->inner_nblks - 1; j >= 0; --j) {
    if (bd->inner_idxs[j] == d) {
      off += i / below % bd->inner_blks[j] * stride;
      below *= bd->inner_blks[j];
    }
    stride *= bd->inner_blks[j];
  }
  return off;
}

/* Records the Y layout oneDNN chose for n columns x k (weights md dims (k, n)), with its
 * offset tables; refuses layouts the tables cannot express. */
static mxf_status ylayout_add(mxf_cpu_bf16 *b, int64_t n, int64_t k, const dnnl_memory_desc_t *md) {
  if (b->y_count == MXF_BF16_Y_SHAPES)
    return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: too many oneDNN weights shapes");
  const size_t bytes = dnnl_memory_desc_get_size(md);
  if (md->format_kind != dnnl_blocked || md->extra.flags != 0 || md->ndims != 2 ||
      bytes / sizeof(uint16_t) > (size_t)INT32_MAX)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                         "cpu backend: oneDNN's weights layout for %lld x %lld is not a plain blocked one",
                         (long long)k, (long long)n);
  bf16_ylayout *y = &b->y[b->y_count];
  int32_t *row = (int32_t *)malloc((size_t)n * sizeof(int32_t)),
          *kk = (int32_t *)malloc((size_t)k * sizeof(int32_t));
  if (!row || !kk) {
    free(row), free(kk);
    return mxf_set_error(MXF_ERR_NO_MEMORY, "cpu backend: out of memory");
  }
  for (int64_t j = 0; j < n; ++j)
    row[j] = (int32_t)(md->offset0 + md_dim_offset(md, 1, j));
  for (int64_t i = 0; i < k; ++i)
    kk[i] = (int32_t)md_dim_offset(md, 0, i);
  y->n = n, y->k = k, y->md = *md;
  y->pub.row_off = row, y->pub.k_off = kk, y->pub.bytes = bytes;
  y->pub.padded = md->padded_dims[0] != k || md->padded_dims[1] != n || md->offset0 != 0;
  y->pub.pairs = 1;
  for (int64_t i = 0; i + 1 < k; i += 2)
    y->pub.pairs &= kk[i + 1] == kk[i] + 1;
  if (bytes > b->y_bytes) b->y_bytes = bytes;
  ++b->y_count;
  return MXF_OK;
}

static mxf_status dnnl_refuse(dnnl_status_t st, const char *what) {
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: oneDNN %s failed (dnnl status %d)", what,
                       (int)st);
}

/* One primitive: acc (m x n, dense rows) [+]= X (m x k) Y (n x k)^T, X rows of k values,
 * Y in the layout of its shape (the one oneDNN picks for the first primitive of that
 * shape). acc's rows are exactly n values apart: oneDNN 2.6's brgemm matmul takes no
 * other destination stride, and given one (the panel's, for a narrower last panel) it
 * fell back to its 'gemm:jit' implementation, which plain plans refuse.
 * Its scratchpad is the caller's (part of the plan's workspace), so that a plan holds
 * no memory of its own beyond oneDNN's code and the layouts' offset tables. */
static mxf_status bf16_prim_create(mxf_cpu_bf16 *b, const mxf_cpu_panels *pp, int64_t m, int64_t n, int64_t k,
                                   int accumulate, int forced, char *name, size_t name_size) {
  bf16_prim *q = &b->p[b->count];
  memset(q, 0, sizeof *q);
  q->m = m, q->n = n, q->k = k, q->accumulate = accumulate;
  dnnl_dims_t xd = {m, k}, xs = {k, 1};
  dnnl_dims_t yd = {k, n}; /* weights (k x n): Y's rows are its columns */
  dnnl_dims_t cd = {m, n}, cs = {n, 1};
  const bf16_ylayout *known = ylayout_find(b, n, k);
  dnnl_status_t st;
  if ((st = dnnl_memory_desc_init_by_strides(&q->x, 2, xd, dnnl_bf16, xs)) != dnnl_success ||
      (st = dnnl_memory_desc_init_by_strides(&q->acc, 2, cd, dnnl_f32, cs)) != dnnl_success)
    return dnnl_refuse(st, "memory descriptor");
  if (known)
    q->y = known->md;
  else if ((st = dnnl_memory_desc_init_by_tag(&q->y, 2, yd, dnnl_bf16, dnnl_format_tag_any)) != dnnl_success)
    return dnnl_refuse(st, "memory descriptor");
  dnnl_matmul_desc_t md;
  if ((st = dnnl_matmul_desc_init(&md, &q->x, &q->y, NULL, &q->acc)) != dnnl_success)
    return dnnl_refuse(st, "matmul descriptor");
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success) return dnnl_refuse(st, "attribute");
  if ((st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success) {
    dnnl_primitive_attr_destroy(attr);
    return dnnl_refuse(st, "scratchpad mode");
  }
  if (accumulate) {
    if ((st = dnnl_post_ops_create(&po)) != dnnl_success ||
        (st = dnnl_post_ops_append_sum(po, 1.0f)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_post_ops(attr, po)) != dnnl_success) {
      if (po) dnnl_post_ops_destroy(po);
      dnnl_primitive_attr_destroy(attr);
      return dnnl_refuse(st, "sum post-op");
    }
  }
  dnnl_primitive_desc_t pd = NULL;
  st = dnnl_primitive_desc_create(&pd, &md, attr, b->engine, NULL);
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  if (st == dnnl_unimplemented)
    return mxf_set_error(
        MXF_ERR_NOT_SUPPORTED,
        "cpu backend: oneDNN has no bf16 matmul on this processor (it needs AVX512-BF16 or AMX)");
  if (st != dnnl_success) return dnnl_refuse(st, "matmul primitive descriptor");
  const char *impl = "";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  const int units = strstr(impl, "amx") != NULL || strstr(impl, "avx512_core_bf16") != NULL;
  if (!units && (!forced || strncmp(impl, "ref", 3) == 0)) {
    mxf_status r =
        mxf_set_error(MXF_ERR_NOT_SUPPORTED,
                      "cpu backend: oneDNN's bf16 matmul here is '%s', not one on bf16 units (AMX or "
                      "AVX512-BF16)%s",
                      impl, forced ? "" : "; MXF_CONFIG=cpu=onednn takes any but the reference one");
    dnnl_primitive_desc_destroy(pd);
    return r;
  }
  if (b->count == 0)
    snprintf(name, name_size, "onednn %s",
             strstr(impl, "amx")                ? "amx"
             : strstr(impl, "avx512_core_bf16") ? "avx512bf16"
                                                : impl);
  if (!known) {
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    mxf_status r = w ? ylayout_add(b, n, k, w)
                     : mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: oneDNN gave no weights layout");
    if (r != MXF_OK) {
      dnnl_primitive_desc_destroy(pd);
      return r;
    }
    q->y = *w;
  }
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (sp) q->scratch = *sp;
  const size_t sp_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  if (sp_bytes > b->scratch) b->scratch = sp_bytes;
  st = dnnl_primitive_create(&q->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success) return dnnl_refuse(st, "matmul primitive");
  ++b->count;
  return MXF_OK;
}

static const bf16_prim *bf16_find(const mxf_cpu_bf16 *b, int64_t m, int64_t n, int64_t k, int accumulate) {
  for (int i = 0; i < b->count; ++i) {
    const bf16_prim *q = &b->p[i];
    if (q->m == m && q->n == n && q->k == k && q->accumulate == accumulate) return q;
  }
  return NULL;
}

/* Set once oneDNN said it has no bf16 matmul on bf16 units here: the processor does not
 * change, so unforced plans stop asking. */
static int g_no_units;

mxf_status mxf_cpu_bf16_create(const mxf_cpu_panels *pp, int forced, mxf_cpu_bf16 **out, char *name,
                               size_t name_size) {
  *out = NULL;
  if (pp->rows <= 0 || pp->cols <= 0 || pp->k <= 0)
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: the onednn core takes no empty GEMM");
  if (!forced && __atomic_load_n(&g_no_units, __ATOMIC_RELAXED))
    return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: oneDNN has no bf16 matmul on bf16 units here");
  mxf_cpu_bf16 *b = (mxf_cpu_bf16 *)calloc(1, sizeof *b);
  if (!b) return mxf_set_error(MXF_ERR_NO_MEMORY, "cpu backend: out of memory");
  dnnl_status_t st = dnnl_engine_create(&b->engine, dnnl_cpu, 0);
  if (st != dnnl_success) {
    free(b);
    return dnnl_refuse(st, "CPU engine");
  }
  /* the shapes the driver runs: rows, columns, and (K, accumulate) of the first, middle
   * and last K panels */
  const int64_t ms[2] = {pp->rc, pp->rows % pp->rc}, ns[2] = {pp->nc, pp->cols % pp->nc};
  const int64_t k_panels = mxf_cdiv(pp->k, pp->kc), k_last = pp->k - (k_panels - 1) * pp->kc;
  int64_t ks[3][2];
  int nk = 0;
  ks[nk][0] = k_panels == 1 ? pp->k : pp->kc, ks[nk++][1] = 0;
  if (k_panels > 2 || (k_panels == 2 && k_last == pp->kc)) ks[nk][0] = pp->kc, ks[nk++][1] = 1;
  if (k_panels >= 2 && k_last != pp->kc) ks[nk][0] = k_last, ks[nk++][1] = 1;
  mxf_status r = MXF_OK;
  for (int i = 0; i < 2 && r == MXF_OK; ++i)
    for (int j = 0; j < 2 && r == MXF_OK; ++j)
      for (int q = 0; q < nk && r == MXF_OK; ++q) {
        if (ms[i] == 0 || (i == 1 && ms[1] == ms[0]) || ns[j] == 0 || (j == 1 && ns[1] == ns[0])) continue;
        if (bf16_find(b, ms[i], ns[j], ks[q][0], (int)ks[q][1])) continue;
        r = bf16_prim_create(b, pp, ms[i], ns[j], ks[q][0], (int)ks[q][1], forced, name, name_size);
      }
  if (r != MXF_OK) {
    if (b->count == 0 && !forced) __atomic_store_n(&g_no_units, 1, __ATOMIC_RELAXED);
    mxf_cpu_bf16_destroy(b);
    return r;
  }
  *out = b;
  return MXF_OK;
}

void mxf_cpu_bf16_destroy(mxf_cpu_bf16 *b) {
  if (!b) return;
  for (int i = 0; i < b->count; ++i)
    dnnl_primitive_destroy(b->p[i].prim);
  for (int i = 0; i < b->y_count; ++i) {
    free((void *)b->y[i].pub.row_off);
    free((void *)b->y[i].pub.k_off);
  }
  if (b->engine) dnnl_engine_destroy(b->engine);
  free(b);
}

size_t mxf_cpu_bf16_scratchpad(const mxf_cpu_bf16 *b) { return b ? b->scratch : 0; }

size_t mxf_cpu_bf16_y_bytes(const mxf_cpu_bf16 *b) { return b ? b->y_bytes : 0; }

const mxf_cpu_bf16_layout *mxf_cpu_bf16_y_layout(const mxf_cpu_bf16 *b, int64_t n, int64_t k) {
  const bf16_ylayout *y = ylayout_find(b, n, k);
  return y ? &y->pub : NULL;
}

mxf_status mxf_cpu_bf16_gemm(const mxf_cpu_bf16 *b, int64_t m, int64_t n, int64_t k, const uint16_t *x,
                             const uint16_t *y, float *acc, int accumulate, void *scratch) {
  const bf16_prim *q = bf16_find(b, m, n, k, accumulate);
  if (!q) /* the driver runs only the shapes created for its geometry */
    return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: no oneDNN primitive for a %lld x %lld x %lld tile",
                         (long long)m, (long long)n, (long long)k);
#if defined(MXF_HAVE_OPENMP)
  const int omp_before = omp_get_max_threads();
  omp_set_num_threads(mxf_cpu_threads());
#endif
  dnnl_stream_t stream = NULL;
  dnnl_memory_t mx = NULL, my = NULL, mc = NULL, ms = NULL;
  int ok = dnnl_stream_create(&stream, b->engine, dnnl_stream_default_flags) == dnnl_success &&
           dnnl_memory_create(&mx, &q->x, b->engine, (void *)x) == dnnl_success &&
           dnnl_memory_create(&my, &q->y, b->engine, (void *)y) == dnnl_success &&
           dnnl_memory_create(&mc, &q->acc, b->engine, acc) == dnnl_success &&
           dnnl_memory_create(&ms, &q->scratch, b->engine, scratch) == dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, my}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}};
    ok = dnnl_primitive_execute(q->prim, stream, 4, args) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
  }
  if (ms) dnnl_memory_destroy(ms);
  if (mc) dnnl_memory_destroy(mc);
  if (my) dnnl_memory_destroy(my);
  if (mx) dnnl_memory_destroy(mx);
  if (stream) dnnl_stream_destroy(stream);
#if defined(MXF_HAVE_OPENMP)
  omp_set_num_threads(omp_before);
#endif
  return ok ? MXF_OK
            : mxf_set_error(MXF_ERR_INTERNAL,
                            "cpu backend: oneDNN's matmul failed on a %lld x %lld x %lld tile", (long long)m,
                            (long long)n, (long long)k);
}

#else /* !MXF_HAVE_ONEDNN */

mxf_status mxf_cpu_bf16_create(const mxf_cpu_panels *pp, int forced, mxf_cpu_bf16 **out, char *name,
                               size_t name_size) {
  (void)pp, (void)forced, (void)name, (void)name_size;
  *out = NULL;
  return mxf_set_error(MXF_ERR_NOT_SUPPORTED, "cpu backend: built without oneDNN (the onednn core)");
}
void mxf_cpu_bf16_destroy(mxf_cpu_bf16 *b) { (void)b; }
size_t mxf_cpu_bf16_scratchpad(const mxf_cpu_bf16 *b) {
  (void)b;
  return 0;
}
size_t mxf_cpu_bf16_y_bytes(const mxf_cpu_bf16 *b) {
  (void)b;
  return 0;
}
const mxf_cpu_bf16_layout *mxf_cpu_bf16_y_layout(const mxf_cpu_bf16 *b, int64_t n, int64_t k) {
  (void)b, (void)n, (void)k;
  return NULL;
}
mxf_status mxf_cpu_bf16_gemm(const mxf_cpu_bf16 *b, int64_t m, int64_t n, int64_t k, const uint16_t *x,
                             const uint16_t *y, float *acc, int accumulate, void *scratch) {
  (void)b, (void)m, (void)n, (void)k, (void)x, (void)y, (void)acc, (void)accumulate, (void)scratch;
  return mxf_set_error(MXF_ERR_INTERNAL, "cpu backend: built without oneDNN (the onednn core)");
}

#endif
