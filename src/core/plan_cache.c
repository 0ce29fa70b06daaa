/*
 * plan_cache.c — the one-call form's small LRU cache of plans and their workspaces.
 *
 * Key: op + the normalized problem's bytes (zeroed before filling, so padding compares
 * equal) + device + stream + the calling thread where a shared workspace could be used
 * concurrently: always on the CPU (runs execute on the caller's thread), and on CUDA for
 * the NULL stream (which may be per-thread). Runs on one non-NULL CUDA stream are
 * ordered by the stream, so they may share a workspace.
 * Entries in use are never evicted; a clear frees them when their last user is done.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"

#define MXF_CACHE_ENTRIES 64

typedef struct cache_key {
  mxf_op op;
  int32_t device;
  const void *stream;
  const void *thread;
  union {
    mxf_gemm_problem gemm;
    mxf_proj_problem proj;
    mxf_quant_problem quant;
  } p;
} cache_key;

typedef struct cache_entry {
  int used;      /* slot holds a plan */
  int stale;     /* cleared while in use: free when refs drops to 0 */
  int refs;      /* runs in flight */
  uint64_t tick; /* last use, for LRU */
  cache_key key;
  mxf_plan *plan;
  void *ws;
} cache_entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry g_cache[MXF_CACHE_ENTRIES];
static uint64_t g_tick;
static _Thread_local char g_thread_token; /* its address tells threads apart */

static void release_plan(mxf_plan *plan, void *ws) {
  if (!plan) return;
  if (ws) plan->backend->free(plan->device, ws);
  mxf_plan_destroy(plan);
}

/* A new plan and its workspace, outside the lock (planning may be slow). */
static mxf_status make_entry(const cache_key *key, size_t problem_size, mxf_plan **plan, void **ws) {
  *plan = NULL;
  *ws = NULL;
  mxf_status st = mxf_plan_create(key->op, &key->p, problem_size, key->device, plan);
  if (st != MXF_OK) return st;
  st = (*plan)->backend->alloc(key->device, (*plan)->workspace_size, ws);
  if (st != MXF_OK) {
    mxf_plan_destroy(*plan);
    *plan = NULL;
    *ws = NULL;
  }
  return st;
}

mxf_status mxf_cache_run(mxf_op op, const void *problem, size_t problem_size, int32_t device, void *stream,
                         const void *args) {
  cache_key key;
  memset(&key, 0, sizeof key);
  if (problem_size > sizeof key.p)
    return mxf_set_error(MXF_ERR_INTERNAL, "plan cache: problem of %zu bytes does not fit", problem_size);
  key.op = op;
  key.device = device;
  key.stream = stream;
  key.thread = (device == MXF_DEVICE_CPU || !stream) ? (const void *)&g_thread_token : NULL;
  memcpy(&key.p, problem, problem_size);

  cache_entry *e = NULL;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MXF_CACHE_ENTRIES; ++i)
    if (g_cache[i].used && !g_cache[i].stale && !memcmp(&g_cache[i].key, &key, sizeof key)) {
      e = &g_cache[i];
      e->refs++;
      e->tick = ++g_tick;
      break;
    }
  pthread_mutex_unlock(&g_lock);

  mxf_plan *plan;
  void *ws;
  mxf_plan *victim_plan = NULL;
  void *victim_ws = NULL;
  if (e) {
    plan = e->plan;
    ws = e->ws;
  } else {
    mxf_status st = make_entry(&key, problem_size, &plan, &ws);
    if (st != MXF_OK) return st;
    /* keep it: a free slot, else the least recently used idle one */
    pthread_mutex_lock(&g_lock);
    cache_entry *slot = NULL;
    for (int i = 0; i < MXF_CACHE_ENTRIES && !slot; ++i)
      if (!g_cache[i].used) slot = &g_cache[i];
    if (!slot)
      for (int i = 0; i < MXF_CACHE_ENTRIES; ++i)
        if (g_cache[i].refs == 0 && (!slot || g_cache[i].tick < slot->tick)) slot = &g_cache[i];
    if (slot) {
      if (slot->used) {
        victim_plan = slot->plan;
        victim_ws = slot->ws;
      }
      memset(slot, 0, sizeof *slot);
      slot->used = 1;
      slot->refs = 1;
      slot->tick = ++g_tick;
      slot->key = key;
      slot->plan = plan;
      slot->ws = ws;
      e = slot;
    }
    pthread_mutex_unlock(&g_lock);
    release_plan(victim_plan, victim_ws);
  }

  mxf_status st = mxf_plan_run(plan, op, args, ws, plan->workspace_size, stream);

  if (!e) {
    release_plan(plan, ws); /* every slot in use: ran uncached */
    return st;
  }
  victim_plan = NULL;
  victim_ws = NULL;
  pthread_mutex_lock(&g_lock);
  if (--e->refs == 0 && e->stale) {
    victim_plan = e->plan;
    victim_ws = e->ws;
    memset(e, 0, sizeof *e);
  }
  pthread_mutex_unlock(&g_lock);
  release_plan(victim_plan, victim_ws);
  return st;
}

void mxf_plan_cache_clear(void) {
  mxf_plan *plans[MXF_CACHE_ENTRIES];
  void *wss[MXF_CACHE_ENTRIES];
  int n = 0;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < MXF_CACHE_ENTRIES; ++i) {
    cache_entry *e = &g_cache[i];
    if (!e->used) continue;
    if (e->refs > 0) {
      e->stale = 1;
      continue;
    }
    plans[n] = e->plan;
    wss[n] = e->ws;
    ++n;
    memset(e, 0, sizeof *e);
  }
  pthread_mutex_unlock(&g_lock);
  for (int i = 0; i < n; ++i)
    release_plan(plans[i], wss[i]);
}
