/*
 * host_rng.h — the one seeded random generator of the host-side programs (the mxfuse
 * tool, the C tests): xoshiro256** seeded through splitmix64. Header-only, so that the
 * tool and the tests share it without either linking the other; libmxfuse never uses it.
 *
 * The same seed gives the same stream in every program, so a seed printed by one can be
 * replayed by any other.
 */
#ifndef MXF_HOST_RNG_H
#define MXF_HOST_RNG_H

#include <stdint.h>

typedef struct mxf_rng {
  uint64_t s[4];
} mxf_rng;

static inline uint64_t mxf_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* splitmix64 spreads any seed (0 included) over the whole state. */
static inline void mxf_rng_init(mxf_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; ++i) {
    uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r->s[i] = z ^ (z >> 31);
  }
}

static inline uint64_t mxf_rng_u64(mxf_rng *r) {
  uint64_t *s = r->s, out = mxf_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = mxf_rng_rotl(s[3], 45);
  return out;
}

/* Uniform double in [0, 1): the top 53 bits. */
static inline double mxf_rng_uniform(mxf_rng *r) { return (double)(mxf_rng_u64(r) >> 11) * 0x1.0p-53; }

#endif /* MXF_HOST_RNG_H */
