/*
 * host_moe.h — the mixture-of-experts shape and routing of the host-side programs (the
 * mxfuse demo, the CPU benchmark): DeepSeek-V3's MoE up-projection on one expert-parallel
 * rank, and a random top-8 routing of T tokens onto it. Header-only, beside host_rng.h;
 * libmxfuse never uses it.
 *
 * DeepSeek-V3 routes each token to 8 of 256 experts; a rank of an 8-way expert-parallel
 * layer holds 32 of them: the tokens' choices that fall on the rank's experts become the
 * rows of its grouped GEMM, sorted by expert (grouped_gemm_amax's contiguous layout,
 * SPEC §6). The routing here leaves MXF_MOE_COLD experts of the rank without a token, so
 * that empty groups are always part of it.
 */
#ifndef MXF_HOST_MOE_H
#define MXF_HOST_MOE_H

#include <stdint.h>

#include "host_rng.h"

#define MXF_MOE_EXPERTS 256 /* routed experts of the layer */
#define MXF_MOE_TOPK 8      /* experts per token */
#define MXF_MOE_LOCAL 32    /* experts on one rank: the groups */
#define MXF_MOE_N 4096      /* the up-projection's output features (gate and up, 2 x 2048) */
#define MXF_MOE_K 7168      /* the model's hidden size */
#define MXF_MOE_COLD 4      /* the rank's experts no token picks (every eighth) */

/* Top-8 of T tokens onto the rank's experts 0..31 (of 256), the rank's experts 7, 15, 23,
 * 31 never picked. offs[g] (MXF_MOE_LOCAL) gets the ends of the groups' rows; token[r]
 * (room for T * MXF_MOE_TOPK) the token of row r when not NULL. Returns the rows, M. */
static inline int64_t mxf_moe_route(mxf_rng *r, int64_t tokens, int32_t *offs, int32_t *token) {
  int64_t count[MXF_MOE_LOCAL] = {0}, m = 0;
  int32_t *pick = token; /* (expert, token) pairs, counted first, then placed */
  for (int pass = 0; pass < 2; ++pass) {
    mxf_rng rr = *r;
    int64_t at[MXF_MOE_LOCAL];
    for (int g = 0, s = 0; g < MXF_MOE_LOCAL; s += (int)count[g], ++g)
      at[g] = s;
    for (int64_t t = 0; t < tokens; ++t) {
      int chosen[MXF_MOE_TOPK], n = 0;
      while (n < MXF_MOE_TOPK) {
        int e = (int)(mxf_rng_u64(&rr) % MXF_MOE_EXPERTS), dup = 0;
        if (e < MXF_MOE_LOCAL && e % 8 == 7) continue; /* a cold expert of the rank */
        for (int i = 0; i < n; ++i)
          dup |= chosen[i] == e;
        if (dup) continue;
        chosen[n++] = e;
        if (e >= MXF_MOE_LOCAL) continue;
        if (pass == 0)
          count[e]++;
        else if (pick)
          pick[at[e]++] = (int32_t)t;
      }
    }
    if (pass == 1) *r = rr;
  }
  for (int g = 0; g < MXF_MOE_LOCAL; ++g)
    offs[g] = (int32_t)(m += count[g]);
  return m;
}

#endif /* MXF_HOST_MOE_H */
