/*
 * oneshot.c — the one-call form (mxf_<op>, mxf_<op>_workspace_size,
 * mxf_<op>_with_workspace), above the plan API of api.c: a small LRU cache of plans keyed
 * by op, normalized problem, device and MXF_CONFIG's text, and the workspace arenas its
 * runs share, one per (device, stream, thread where runs may overlap). How entries and
 * arenas are kept, grown and freed: docs/design.md, "How a call flows", step 5.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"

#define MXF_CACHE_ENTRIES 64
#define MXF_ARENAS 32

typedef struct cache_key {
  mxf_op op;
  int32_t device;
  char config[MXF_CONFIG_MAX]; /* MXF_CONFIG's text: plans made under another override differ */
  union {
    mxf_gemm_problem gemm;
    mxf_proj_problem proj;
    mxf_quant_problem quant;
    mxf_grouped_problem grouped;
  } p;
} cache_key;

/* What the plan entries and the arenas share: a slot of a small LRU table. */
typedef struct slot_state {
  int used;      /* holds something */
  int stale;     /* cleared while in use: free when refs drops to 0 */
  int refs;      /* runs in flight */
  uint64_t tick; /* last use, for LRU */
} slot_state;

typedef struct cache_entry {
  slot_state s;
  cache_key key;
  mxf_plan *plan;
} cache_entry;

typedef struct arena {
  slot_state s;
  int32_t device;
  const void *stream;
  const void *thread; /* NULL where the stream orders the runs */
  const mxf_backend *backend;
  void *ptr;
  size_t size;
} arena;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry g_cache[MXF_CACHE_ENTRIES];
static arena g_arenas[MXF_ARENAS];
static uint64_t g_tick;
static _Thread_local char g_thread_token; /* its address tells threads apart */

/* fork(): the child gets g_lock unlocked and the tables as they were. Registered first
 * (constructor priority), so that this prepares after the CPU backend's fork gate has
 * waited for the runs in flight (which take g_lock when they end). */
static void fork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void fork_child(void) { /* the parent's plans may hold vendor thread state: not reused (leaked) */
  pthread_mutex_init(&g_lock, NULL);
  memset(g_cache, 0, sizeof g_cache);
  memset(g_arenas, 0, sizeof g_arenas);
}
__attribute__((constructor(101))) static void fork_register(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* A thread's arenas are freed when it exits (a key's destructor), so that workspace
 * memory follows the live threads; an arena in use then is freed by its last run. */
static pthread_key_t g_thread_key;
static pthread_once_t g_thread_key_once = PTHREAD_ONCE_INIT;

static void arena_free_memory(const struct mxf_backend *backend, int32_t device, void *ptr);

/* Empties the arenas of `thread` (NULL: all) into freed[] (their memory the caller's to
 * free, outside the lock); one in use is marked stale, freed by its last run. Under
 * g_lock; returns the count. */
static int arenas_take(const void *thread, arena *freed) {
  int n = 0;
  for (int i = 0; i < MXF_ARENAS; ++i) {
    arena *a = &g_arenas[i];
    if (!a->s.used || (thread && a->thread != thread)) continue;
    if (a->s.refs > 0) {
      a->s.stale = 1;
      continue;
    }
    freed[n++] = *a;
    memset(a, 0, sizeof *a);
  }
  return n;
}

static void thread_exit(void *token) {
  arena freed[MXF_ARENAS];
  pthread_mutex_lock(&g_lock);
  const int n = arenas_take(token, freed);
  pthread_mutex_unlock(&g_lock);
  for (int i = 0; i < n; ++i)
    arena_free_memory(freed[i].backend, freed[i].device, freed[i].ptr);
}

static void thread_key_create(void) { pthread_key_create(&g_thread_key, thread_exit); }

/* This thread's token, its exit hook set on first use. */
static const void *thread_token(void) {
  pthread_once(&g_thread_key_once, thread_key_create);
  if (!pthread_getspecific(g_thread_key)) pthread_setspecific(g_thread_key, &g_thread_token);
  return &g_thread_token;
}

/* The slot to fill in a table of n elements of `size` bytes, each starting with a
 * slot_state: a free one, else the least recently used idle one, else -1. Under g_lock. */
static int pick_slot(void *table, int n, size_t size) {
  int best = -1;
  for (int i = 0; i < n; ++i) {
    const slot_state *t = (const slot_state *)((char *)table + (size_t)i * size);
    if (!t->used) return i;
    if (t->refs == 0 &&
        (best < 0 || t->tick < ((const slot_state *)((char *)table + (size_t)best * size))->tick))
      best = i;
  }
  return best;
}

/* ------------------------------------------------------------ plans */
/* The cached plan of a problem (created on a miss, outside the lock: planning may be
 * slow), with a reference taken; *entry is NULL when every slot is in use and the plan
 * is the caller's to destroy. */
static mxf_status plan_acquire(const cache_key *key, size_t problem_size, mxf_plan **plan,
                               cache_entry **entry) {
  *plan = NULL;
  *entry = NULL;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MXF_CACHE_ENTRIES; ++i) {
    cache_entry *e = &g_cache[i];
    if (e->s.used && !e->s.stale && !memcmp(&e->key, key, sizeof *key)) {
      e->s.refs++;
      e->s.tick = ++g_tick;
      *plan = e->plan;
      *entry = e;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (*entry) return MXF_OK;

  mxf_status st = mxf_plan_create(key->op, &key->p, problem_size, key->device, plan);
  if (st != MXF_OK) return st;
  /* keep it (pick_slot: a free slot, else the least recently used idle one) */
  mxf_plan *victim = NULL;
  pthread_mutex_lock(&g_lock);
  int pick = pick_slot(g_cache, MXF_CACHE_ENTRIES, sizeof *g_cache);
  cache_entry *slot = pick >= 0 ? &g_cache[pick] : NULL;
  if (slot) {
    if (slot->s.used) victim = slot->plan;
    memset(slot, 0, sizeof *slot);
    slot->s.used = 1;
    slot->s.refs = 1;
    slot->s.tick = ++g_tick;
    slot->key = *key;
    slot->plan = *plan;
    *entry = slot;
  }
  pthread_mutex_unlock(&g_lock);
  mxf_plan_destroy(victim);
  return MXF_OK;
}

static void plan_release(mxf_plan *plan, cache_entry *e) {
  if (!e) {
    mxf_plan_destroy(plan); /* every slot in use: ran uncached */
    return;
  }
  mxf_plan *victim = NULL;
  pthread_mutex_lock(&g_lock);
  if (--e->s.refs == 0 && e->s.stale) {
    victim = e->plan;
    memset(e, 0, sizeof *e);
  }
  pthread_mutex_unlock(&g_lock);
  mxf_plan_destroy(victim);
}

/* ------------------------------------------------------------ arenas */
typedef struct run_workspace {
  arena *a;  /* the arena lent, or NULL */
  void *own; /* or a workspace of this run's own (freed after it) */
  void *ptr;
  size_t size;
} run_workspace;

static void arena_free_memory(const mxf_backend *backend, int32_t device, void *ptr) {
  if (ptr) backend->free(device, ptr);
}

/* A workspace of at least `need` bytes for a run of `plan` on `stream`. */
static mxf_status workspace_acquire(const mxf_plan *plan, void *stream, size_t need, run_workspace *w) {
  memset(w, 0, sizeof *w);
  if (need == 0) return MXF_OK;
  const mxf_backend *be = plan->backend;
  const void *thread = (plan->device == MXF_DEVICE_CPU || !stream) ? thread_token() : NULL;
  arena *a = NULL, *victim = NULL;
  void *old_ptr = NULL;
  int32_t old_device = 0;
  const mxf_backend *old_backend = NULL;
  int grow = 0;

  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MXF_ARENAS && !a; ++i) {
    arena *x = &g_arenas[i];
    if (x->s.used && !x->s.stale && x->device == plan->device && x->stream == stream && x->thread == thread)
      a = x;
  }
  if (!a) { /* a free slot, else the least recently used idle arena */
    int pick = pick_slot(g_arenas, MXF_ARENAS, sizeof *g_arenas);
    a = pick >= 0 ? &g_arenas[pick] : NULL;
    if (a) {
      if (a->s.used) victim = a;
      old_ptr = victim ? victim->ptr : NULL;
      old_device = victim ? victim->device : 0;
      old_backend = victim ? victim->backend : NULL;
      memset(a, 0, sizeof *a);
      a->s.used = 1;
      a->device = plan->device;
      a->stream = stream;
      a->thread = thread;
      a->backend = be;
    }
  }
  if (a && a->size >= need) {
    a->s.refs++;
  } else if (a && a->s.refs == 0) {
    grow = 1; /* nobody else holds it: replace its memory */
    a->s.refs = 1;
    if (!old_ptr) {
      old_ptr = a->ptr;
      old_device = a->device;
      old_backend = a->backend;
    }
    a->ptr = NULL;
    a->size = 0;
  } else {
    a = NULL; /* every arena busy, or this one busy and too small: a workspace of its own */
  }
  if (a) a->s.tick = ++g_tick;
  pthread_mutex_unlock(&g_lock);

  if (old_ptr) arena_free_memory(old_backend, old_device, old_ptr);
  if (!a) {
    mxf_status st = be->alloc(plan->device, need, stream, &w->own);
    if (st != MXF_OK) return st;
    w->ptr = w->own;
    w->size = need;
    return MXF_OK;
  }
  if (grow) {
    void *p = NULL;
    mxf_status st = be->alloc(plan->device, need, stream, &p);
    pthread_mutex_lock(&g_lock);
    if (st == MXF_OK) {
      a->ptr = p;
      a->size = need;
    } else {
      a->s.refs--; /* an empty arena stays; the next run tries again */
    }
    pthread_mutex_unlock(&g_lock);
    if (st != MXF_OK) return st;
  }
  w->a = a;
  w->ptr = a->ptr;
  w->size = a->size;
  return MXF_OK;
}

static void workspace_release(const mxf_plan *plan, run_workspace *w) {
  if (w->own) plan->backend->free(plan->device, w->own);
  if (!w->a) return;
  arena *a = w->a;
  void *ptr = NULL;
  int32_t device = 0;
  const mxf_backend *be = NULL;
  pthread_mutex_lock(&g_lock);
  if (--a->s.refs == 0 && a->s.stale) {
    ptr = a->ptr;
    device = a->device;
    be = a->backend;
    memset(a, 0, sizeof *a);
  }
  pthread_mutex_unlock(&g_lock);
  if (ptr) arena_free_memory(be, device, ptr);
}

/* ------------------------------------------------------------ the one-call form */
/* The cached plan of a problem, with a reference taken (plan_acquire under its key: the
 * problem's bytes, zeroed first so that padding compares equal). */
static mxf_status plan_lookup(mxf_op op, const void *problem, size_t problem_size, int32_t device,
                              mxf_plan **plan, cache_entry **entry) {
  cache_key key;
  memset(&key, 0, sizeof key);
  if (problem_size > sizeof key.p)
    return mxf_set_error(MXF_ERR_INTERNAL, "plan cache: problem of %zu bytes does not fit", problem_size);
  key.op = op;
  key.device = device;
  /* the text alone: a miss parses it (mxf_plan_create), a hit's text made a plan already */
  mxf_status st = mxf_override_text(key.config);
  if (st != MXF_OK) return st;
  memcpy(&key.p, problem, problem_size);
  return plan_acquire(&key, problem_size, plan, entry);
}

static mxf_status cache_run(mxf_op op, const void *problem, size_t problem_size, int32_t device, void *stream,
                            const void *args, int own_workspace, void *ws, size_t ws_size) {
  mxf_plan *plan;
  cache_entry *e;
  mxf_status st = plan_lookup(op, problem, problem_size, device, &plan, &e);
  if (st != MXF_OK) return st;
  if (own_workspace) {
    st = mxf_plan_run(plan, op, args, ws, ws_size, stream);
  } else {
    run_workspace w;
    st = workspace_acquire(plan, stream, plan->workspace_size, &w);
    if (st == MXF_OK) {
      st = mxf_plan_run(plan, op, args, w.ptr, w.size, stream);
      workspace_release(plan, &w);
    }
  }
  plan_release(plan, e);
  return st;
}

static mxf_status cache_workspace_size(mxf_op op, const void *problem, size_t problem_size, int32_t device,
                                       size_t *size) {
  mxf_plan *plan;
  cache_entry *e;
  mxf_status st = plan_lookup(op, problem, problem_size, device, &plan, &e);
  if (st != MXF_OK) return st;
  *size = plan->workspace_size;
  plan_release(plan, e);
  return MXF_OK;
}

size_t mxf_plan_cache_workspace_bytes(void) {
  size_t total = 0;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MXF_ARENAS; ++i)
    if (g_arenas[i].s.used) total += g_arenas[i].size;
  pthread_mutex_unlock(&g_lock);
  return total;
}

void mxf_plan_cache_clear(void) {
  mxf_plan *plans[MXF_CACHE_ENTRIES];
  arena freed[MXF_ARENAS];
  int n = 0, na = 0;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MXF_CACHE_ENTRIES; ++i) {
    cache_entry *e = &g_cache[i];
    if (!e->s.used) continue;
    if (e->s.refs > 0) {
      e->s.stale = 1;
      continue;
    }
    plans[n++] = e->plan;
    memset(e, 0, sizeof *e);
  }
  na = arenas_take(NULL, freed);
  pthread_mutex_unlock(&g_lock);
  for (int i = 0; i < n; ++i)
    mxf_plan_destroy(plans[i]);
  for (int i = 0; i < na; ++i)
    arena_free_memory(freed[i].backend, freed[i].device, freed[i].ptr);
}

/* ------------------------------------------------------------ the public one-call forms */
static void gemm_args(mxf_gemm_amax_args *a, const mxf_gemm_amax_desc *d) {
  a->a = d->a.data;
  a->b = d->b.data;
  a->sfa = d->sfa.data;
  a->sfb = d->sfb.data;
  a->c = d->c.data;
  a->amax = d->amax.data;
  a->alpha = d->alpha;
}

static void proj_args(mxf_proj_rope_args *a, const mxf_proj_rope_desc *d) {
  a->x = d->x.data;
  a->w = d->w.data;
  a->x_scale = d->x_scale.data;
  a->w_scale = d->w_scale.data;
  a->cos = d->cos.data;
  a->sin = d->sin.data;
  a->out_row = d->out_row.data;
  a->out_scales_row = d->out_scales_row.data;
  a->out_col = d->out_col.data;
  a->out_scales_col = d->out_scales_col.data;
}

static void quant_args(mxf_quantize_args *a, const mxf_quantize_desc *d) {
  a->x = d->x.data;
  if (d->directions & MXF_QUANT_ROWS) {
    a->q_row = d->q_row.data;
    a->s_row = d->s_row.data;
  }
  if (d->directions & MXF_QUANT_COLS) {
    a->q_col = d->q_col.data;
    a->s_col = d->s_col.data;
  }
}

static void dequant_args(mxf_dequantize_args *a, const mxf_dequantize_desc *d) {
  a->q = d->q.data;
  a->s = d->s.data;
  a->y = d->y.data;
}

/* One op's one-call forms: validate with data pointers, then a cached plan run on an
 * arena (mxf_<op>) or on the caller's workspace (mxf_<op>_with_workspace). */
#define MXF_DEFINE_ONESHOT(name, OP, desc_t, args_t, problem_t, validate, make_args)                         \
  static mxf_status name##_one_call(const desc_t *desc, void *stream, int own_workspace, void *workspace,    \
                                    size_t workspace_size) {                                                 \
    problem_t p;                                                                                             \
    int32_t device;                                                                                          \
    memset(&p, 0, sizeof p);                                                                                 \
    mxf_status st = validate(desc, 1, &p, &device);                                                          \
    if (st != MXF_OK) return st;                                                                             \
    args_t args;                                                                                             \
    memset(&args, 0, sizeof args);                                                                           \
    make_args(&args, desc);                                                                                  \
    return cache_run(OP, &p, sizeof p, device, stream, &args, own_workspace, workspace, workspace_size);     \
  }                                                                                                          \
  mxf_status mxf_##name(const desc_t *desc, void *stream) {                                                  \
    return name##_one_call(desc, stream, 0, NULL, 0);                                                        \
  }                                                                                                          \
  mxf_status mxf_##name##_workspace_size(const desc_t *desc, size_t *workspace_size) {                       \
    if (!workspace_size)                                                                                     \
      return mxf_set_error(MXF_ERR_INVALID_VALUE, #name "_workspace_size: workspace_size is NULL");          \
    problem_t p;                                                                                             \
    int32_t device;                                                                                          \
    memset(&p, 0, sizeof p);                                                                                 \
    mxf_status st = validate(desc, 0, &p, &device);                                                          \
    if (st != MXF_OK) return st;                                                                             \
    return cache_workspace_size(OP, &p, sizeof p, device, workspace_size);                                   \
  }                                                                                                          \
  mxf_status mxf_##name##_with_workspace(const desc_t *desc, void *workspace, size_t workspace_size,         \
                                         void *stream) {                                                     \
    return name##_one_call(desc, stream, 1, workspace, workspace_size);                                      \
  }

MXF_DEFINE_ONESHOT(gemm_amax, MXF_OP_GEMM_AMAX, mxf_gemm_amax_desc, mxf_gemm_amax_args, mxf_gemm_problem,
                   mxf_validate_gemm_amax, gemm_args)
MXF_DEFINE_ONESHOT(proj_rope, MXF_OP_PROJ_ROPE, mxf_proj_rope_desc, mxf_proj_rope_args, mxf_proj_problem,
                   mxf_validate_proj_rope, proj_args)
MXF_DEFINE_ONESHOT(quantize, MXF_OP_QUANTIZE, mxf_quantize_desc, mxf_quantize_args, mxf_quant_problem,
                   mxf_validate_quantize, quant_args)
static void grouped_args(mxf_grouped_gemm_amax_args *a, const mxf_grouped_gemm_amax_desc *d) {
  a->a = d->a.data;
  a->b = d->b.data;
  a->sfa = d->sfa.data;
  a->sfb = d->sfb.data;
  a->c = d->c.data;
  a->amax = d->amax.data;
  a->offs = d->offs.data;
  a->counts = d->counts.data;
  a->group_alpha = d->group_alpha.data;
  a->group_amax = d->group_amax.data;
  a->alpha = d->alpha;
}

MXF_DEFINE_ONESHOT(dequantize, MXF_OP_DEQUANTIZE, mxf_dequantize_desc, mxf_dequantize_args, mxf_quant_problem,
                   mxf_validate_dequantize, dequant_args)
MXF_DEFINE_ONESHOT(grouped_gemm_amax, MXF_OP_GROUPED_GEMM_AMAX, mxf_grouped_gemm_amax_desc,
                   mxf_grouped_gemm_amax_args, mxf_grouped_problem, mxf_validate_grouped_gemm_amax,
                   grouped_args)
