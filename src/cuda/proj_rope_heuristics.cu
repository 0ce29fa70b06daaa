/*
 * proj_rope_heuristics.cu — proj_rope's kernel choice on the CUDA backend, made once when
 * a plan is made, and each kernel's geometry (docs/kernels/proj_rope_sm90.md,
 * docs/kernels/portable.md). Host code; the launch (proj_rope_cuda.cu) only reads it.
 *
 *   cc 9.0 and the sm_90a kernel takes the problem  -> cuda/sm90     (sm90/proj_rope_sm90.cu)
 *   any other problem on cc >= 8.0                  -> cuda/portable (portable/proj_rope_portable.cu)
 * MXFP8 inputs on the sm_90a kernel take the dequantize pre-pass. MXF_CONFIG may ask for
 * proj=portable|sm90 and mxfp8=mainloop|prepass. The sm_90a kernel needs aligned tensors:
 * a plan whose descriptor gave pointers it cannot take is made for the portable kernel;
 * a run of an sm_90a plan with such pointers is refused (proj_rope_cuda.cu).
 */
#include <stdio.h>
#include <string.h>

#include "cuda/proj_rope_config.h"

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* ------------------------------------------------------------ the portable kernel */
/* Its geometry on a device of max_smem bytes of opt-in shared memory per block: the Y
 * tile in shared memory, or in the workspace when it does not fit there. */
static void portable_geometry(const mxf_proj_problem *p, int max_smem, mxf_projp::geometry *g) {
  using namespace mxf_projp;
  g->nc64 = p->d % 64 == 0;
  const int main = mainloop_smem(g->nc64 ? 64 : 32);
  if (p->d <= 16384 && main + stage_bytes(p->d) <= max_smem)
    g->workspace = 0;
  else
    g->workspace =
        (size_t)((p->t + BM - 1) / BM) * (size_t)p->h * (size_t)BM * (size_t)(p->d + 8) * sizeof(float);
  g->smem = main + (g->workspace ? 0 : stage_bytes(p->d));
}

/* ------------------------------------------------------------ the sm_90a kernel */
/* Whether it runs p (D = 192, K % 8 == 0, MXFP8: K % 32 == 0, indices in 32 bits). */
static bool sm90_supports(const mxf_proj_problem *p) {
  using namespace mxf_proj90;
  if (p->d != BN || p->t < 1 || p->h < 1 || p->k < 1) return false;
  if (p->k % 8 != 0 || (p->mxfp8 && p->k % 32 != 0)) return false;
  if (p->t >= (1ll << 31) || p->k >= (1ll << 31) || p->h * p->d >= (1ll << 31)) return false;
  if ((p->t + BM - 1) / BM * p->h >= (1ll << 31)) return false;
  return true;
}

static int64_t sm90_nstages(const mxf_proj_problem *p) {
  return (p->k + mxf_proj90::BK - 1) / mxf_proj90::BK;
}

/* prepared scales (sf_prepare_kernel's entries) of the in-mainloop path: x, then w */
static int64_t mx_scale_entries(const mxf_proj_problem *p) {
  using namespace mxf_proj90;
  return ((p->t + BM - 1) / BM * (BM * 2) + p->h * (BN * 2)) * sm90_nstages(p);
}

/*
 * MXFP8 inputs: which path. The in-mainloop conversion decodes every x and w code once per
 * tile that reads it (w once per token tile, x once per head); the pre-pass decodes each
 * code once but writes and re-reads bf16 copies (~0.05 ms for DeepSeek's w). Measured on
 * the H200 (docs/decisions.md, proj_rope: MXFP8 inputs): the mainloop path is faster up to
 * T = 256 (1.96x vs 3.39x of cuBLAS at T = 128), the pre-pass from T = 512 on. The default
 * is the pre-pass at every T for now: compute-sanitizer's racecheck reports hazards in the
 * mainloop kernel that are not yet explained (same section), while its outputs match the
 * CPU in every test. MXF_CONFIG mxfp8=mainloop asks for the mainloop path, where its scale
 * index fits (sf_prepare_kernel's int index).
 */
static bool mainloop_fits(const mxf_proj_problem *p) { return p->mxfp8 && mx_scale_entries(p) < (1ll << 31); }

/* Its geometry on `sms` SMs; mainloop: the MXFP8 path chosen. */
static void sm90_geometry(const mxf_proj_problem *p, int sms, int mainloop, mxf_proj90::geometry *g) {
  using namespace mxf_proj90;
  const int64_t nsm = sms > 0 ? sms : 132;
  g->mainloop = mainloop;
  g->tiles_m = (p->t + BM - 1) / BM;
  g->nks = sm90_nstages(p);
  const int tiles = (int)(g->tiles_m * p->h);
  g->grid = (unsigned)(tiles < nsm ? tiles : nsm);
  /* Y_SPLIT for DeepSeek's split with bf16 staging (fourth stage), Y_F32 otherwise */
  g->variant = p->mxfp8 && mainloop ? Y_MX : !p->fp32_epilogue && p->rope == FAST_ROPE ? Y_SPLIT : Y_F32;
  g->sf_blocks = 0;
  g->off_w = 0;
  g->workspace = 0;
  if (!p->mxfp8) return;
  if (mainloop) {
    const int64_t blocks = (mx_scale_entries(p) + 255) / 256;
    g->sf_blocks = (unsigned)(blocks < nsm * 8 ? blocks : nsm * 8);
    const size_t scx = round256((size_t)g->tiles_m * (size_t)g->nks * SCX_BYTES);
    const size_t scw = round256((size_t)p->h * (size_t)g->nks * SCW_BYTES);
    g->off_w = scx;
    g->workspace = scx + scw;
  } else {
    g->off_w = round256((size_t)p->t * (size_t)p->k * 2);
    g->workspace = g->off_w + round256((size_t)p->h * (size_t)p->d * (size_t)p->k * 2);
  }
}

unsigned mxf_cuda_proj_sm90_align(const mxf_proj_problem *p, int mainloop, int i) {
  switch (i) {
  case MXF_PROJ_T_X:
  case MXF_PROJ_T_W: return 16;
  case MXF_PROJ_T_W_SCALE: return p->mxfp8 && !p->w_out_in && !mainloop ? 16 : 0;
  case MXF_PROJ_T_OUT_ROW:
  case MXF_PROJ_T_OUT_COL:
  case MXF_PROJ_T_OUT_SCALES_COL: return 4;
  case MXF_PROJ_T_OUT_SCALES_ROW: return 2;
  default: return 0;
  }
}

/* Whether the pointers the plan's descriptor gave (p->addr_low) suit the sm_90a kernel. */
static bool sm90_aligned(const mxf_proj_problem *p, int mainloop) {
  for (int i = 0; i < 8; ++i) {
    const unsigned a = mxf_cuda_proj_sm90_align(p, mainloop, i);
    if (a && (p->addr_low[i] & (a - 1))) return false;
  }
  return true;
}

mxf_status mxf_cuda_proj_rope_choose(const mxf_proj_problem *p, const mxf_cuda_device_info_t *info,
                                     const mxf_cuda_override *ov, mxf_cuda_proj_config *cfg, char *name,
                                     size_t name_len) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kernel = MXF_KERNEL_PORTABLE;
  cfg->sm_count = info->sm_count;
  portable_geometry(p, info->max_smem_optin, &cfg->portable);
  cfg->workspace = cfg->portable.workspace;
  snprintf(name, name_len, "cuda/portable");
#if defined(MXF_HAVE_SM90)
  const int mainloop = ov->mxfp8 == 1 && mainloop_fits(p);
  if (info->cc == 90 && ov->proj != MXF_KERNEL_PORTABLE && sm90_supports(p) && sm90_aligned(p, mainloop)) {
    cfg->kernel = MXF_KERNEL_SM90;
    snprintf(name, name_len, "cuda/sm90%s", !p->mxfp8 ? "" : mainloop ? " mainloop" : " prepass");
    sm90_geometry(p, info->sm_count, mainloop, &cfg->sm90);
    cfg->workspace = cfg->sm90.workspace; /* a plan runs its own kernel only (proj_rope_cuda.cu) */
  }
#else
  (void)ov;
#endif
  return MXF_OK;
}
