"""The thread pool every compiled C module carries: `taso_parallel_for(n, fn, ctx, limit)`.

Why not OpenMP's `parallel for`: a model is hundreds of kernels, and each OpenMP region
forks and joins a team. With libgomp's default wait policy its threads spin for a while and
then sleep, so a small kernel pays a wake-up (tens of microseconds in a VM) and the machine
looks busy; a static schedule waits at the end of every loop for its slowest thread, and when
another process holds a core that thread is descheduled for a whole time slice (the compiled
ResNet-50 ran 10x slower beside one busy loop). This pool is ORT's answer to the same
problem: the caller runs chunks itself, workers claim chunks from one atomic counter (so a
descheduled worker just claims fewer), the caller waits only for chunks that were claimed
(spinning briefly, then asleep until the last one is done, so that its core goes idle and the
scheduler can move a descheduled worker there), and idle workers spin briefly (`TASO_SPIN_US`,
default 100 microseconds: back-to-back kernels find them awake) and then sleep on a condition
variable. A thread of the pool that waited 3 ms of 10 on the run queue (the kernel's
schedstat: not its voluntary sleeps, not the time a VM's host takes the virtual CPU) means
another process wants a core; for `TASO_SOLO_MS` (default 100 ms) loops then run on the caller
alone, and then try the workers again; only loops that took `TASO_SHARE_US` (default 500) thread
microseconds or more when they last ran still go to the workers in such a spell.

Where the threads run matters as much under load. Beside one busy process, two pool threads and
the busy loop are three runnable threads on two cores, and the kernel's balancer sees the same
imbalance whichever two share a core, so it often leaves both pool threads on one core (one
core's worth for the module, measured: ResNet-50 at its one-thread speed). A worker that finds
itself on the caller's CPU when a job starts moves off it (its affinity narrowed for one system
call, then restored), and a caller about to sleep for a chunk a worker still holds pulls that
worker onto its own CPU first (its core is about to idle, and the worker, likely queued behind
the other process, is too recently run for the balancer to move it). Beside a busy loop the
compiled ResNet-50 went from 62 ms (one core's worth) to 45 ms; on an idle machine neither happens
more than about once in ten runs.

A job is (generation, next index) packed in one 64-bit atomic; a worker claims a chunk with a
compare-and-swap on it. The caller first moves the state to an odd generation (closed), then
writes the job, then publishes the next even one: a worker whose claim succeeds has therefore
read the fields of the job it claims from, never a newer one's. Threads: `TASO_NUM_THREADS`,
else `OMP_NUM_THREADS`, else the CPUs this process may run on. A forked child starts with no workers and makes its own.
"""

POOL_C = r"""
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
typedef void (*taso_task)(void* ctx, int32_t begin, int32_t end);
#define TASO_TRACKED 64  /* workers the caller may pull onto its core (any beyond are never pulled) */
static struct {
  pthread_mutex_t submit, sleep_mu, done_mu;
  pthread_cond_t wake, done_cv;
  _Atomic uint64_t state;          /* generation << 32 | next item */
  _Atomic int32_t done, total, chunk, limit, sleepers, waiting, worker_waited;
  _Atomic(taso_task) fn;
  _Atomic(void*) ctx;
  int threads, started;
  long spin_ns, solo_ns, solo_until;  /* solo_until: loops run on the caller alone until then */
  long share_ns, solo_spells, pulls;
  _Atomic long moves;
  struct { taso_task fn; long ns; } size[256];  /* a loop's thread-ns when it last ran, by function */
  _Atomic int caller_cpu;                        /* the CPU the running job was submitted from */
  _Atomic int tid[TASO_TRACKED], chunk_state[TASO_TRACKED];  /* per worker: TASO_IDLE, _HOLDING, _PULLED */
  pthread_mutex_t pull_mu;  /* a pull's pin happens before the pulled worker's unpin */
} taso_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
               PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, .pull_mu = PTHREAD_MUTEX_INITIALIZER};
enum { TASO_IDLE, TASO_HOLDING, TASO_PULLED };

#define TASO_WAITED_NS 3000000L  /* run-queue wait in a probe that means another process wants a core */
#define TASO_PROBE_NS 10000000L  /* at most one look at the scheduler's statistics per thread this often */
static inline long taso_now_ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
static inline void taso_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
/* Whether this thread waited over TASO_WAITED_NS on the run queue (runnable, another thread on
   its core) since it last looked, looking at most every TASO_PROBE_NS: the kernel's
   /proc/thread-self/schedstat counts that wait, and neither voluntary sleep nor, in a VM, the
   time the host takes the virtual CPU away. A kernel thread's moment on the core is far below
   the threshold; a time slice of another process (a few ms) far above. */
static __thread int taso_sched_fd = -2;
static __thread long taso_probe_at, taso_probe_wait;
static int taso_waited_for_core(void) {
  long now = taso_now_ns();
  if (now - taso_probe_at < TASO_PROBE_NS) return 0;
  if (taso_sched_fd == -2) taso_sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  char buf[96];
  ssize_t k = taso_sched_fd >= 0 ? pread(taso_sched_fd, buf, sizeof buf - 1, 0) : -1;
  long run, wait;
  if (k <= 0) return 0;
  buf[k] = 0;
  if (sscanf(buf, "%ld %ld", &run, &wait) != 2) return 0;
  int waited = taso_probe_at && wait - taso_probe_wait > TASO_WAITED_NS;
  taso_probe_at = now;
  taso_probe_wait = wait;
  return waited;
}
/* The CPUs a worker may run on, as it started: a move or a pull narrows them for a moment. */
static __thread cpu_set_t taso_own_cpus;
/* Migrate this worker off `cpu` (the caller's), then let it run anywhere it could before. */
static void taso_move_off(int cpu) {
  cpu_set_t others = taso_own_cpus;
  CPU_CLR(cpu, &others);
  if (CPU_COUNT(&others) == 0 || sched_setaffinity(0, sizeof others, &others) != 0) return;
  sched_setaffinity(0, sizeof taso_own_cpus, &taso_own_cpus);
  atomic_fetch_add_explicit(&taso_pool.moves, 1, memory_order_relaxed);
}
/* Claim and run chunks of job `gen` until none is left; returns once the counter is past the end.
   A worker that waited for its core since it last looked says so (`worker_waited`). */
static void taso_work(uint32_t gen, int32_t id) {
  int claimed = 0, tracked = id >= 0 && id < TASO_TRACKED;
  uint64_t s = atomic_load_explicit(&taso_pool.state, memory_order_acquire);
  taso_task fn = atomic_load_explicit(&taso_pool.fn, memory_order_relaxed);
  void* ctx = atomic_load_explicit(&taso_pool.ctx, memory_order_relaxed);
  int32_t total = atomic_load_explicit(&taso_pool.total, memory_order_relaxed);
  int32_t chunk = atomic_load_explicit(&taso_pool.chunk, memory_order_relaxed);
  if (id >= atomic_load_explicit(&taso_pool.limit, memory_order_relaxed)) return;
  int caller_cpu = atomic_load_explicit(&taso_pool.caller_cpu, memory_order_relaxed);
  if (id >= 0 && sched_getcpu() == caller_cpu) taso_move_off(caller_cpu);
  for (;;) {
    if ((uint32_t)(s >> 32) != gen || (int32_t)(uint32_t)s >= total) break;
    int32_t i = (int32_t)(uint32_t)s;
    int32_t end = i + chunk < total ? i + chunk : total;
    if (atomic_compare_exchange_weak_explicit(&taso_pool.state, &s, ((uint64_t)gen << 32) | (uint32_t)end,
                                              memory_order_acq_rel, memory_order_acquire)) {
      claimed = 1;
      if (tracked) atomic_store(&taso_pool.chunk_state[id], TASO_HOLDING);
      fn(ctx, i, end);
      if (tracked && atomic_exchange(&taso_pool.chunk_state[id], TASO_IDLE) == TASO_PULLED) {
        pthread_mutex_lock(&taso_pool.pull_mu);  /* after the caller's pin, never before it */
        sched_setaffinity(0, sizeof taso_own_cpus, &taso_own_cpus);
        pthread_mutex_unlock(&taso_pool.pull_mu);
      }
      /* the last chunk wakes a caller that stopped spinning (seq_cst: see taso_parallel_for) */
      if (atomic_fetch_add(&taso_pool.done, end - i) + (end - i) >= total && id >= 0
          && atomic_load(&taso_pool.waiting)) {
        pthread_mutex_lock(&taso_pool.done_mu);
        pthread_cond_signal(&taso_pool.done_cv);
        pthread_mutex_unlock(&taso_pool.done_mu);
      }
      s = atomic_load_explicit(&taso_pool.state, memory_order_acquire);
    }
  }
  if (claimed && id >= 0 && taso_waited_for_core()) atomic_store(&taso_pool.worker_waited, 1);
}
/* The caller is about to sleep until the workers' last chunks are done, so its core will idle:
   move one worker that still holds a chunk onto it (pinned until that chunk ends). */
static void taso_pull_one_worker(void) {
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(sched_getcpu(), &here);
  for (int w = 0; w < taso_pool.threads - 1 && w < TASO_TRACKED; ++w) {
    int tid = atomic_load(&taso_pool.tid[w]);
    int holding = TASO_HOLDING;
    if (!tid) continue;
    pthread_mutex_lock(&taso_pool.pull_mu);
    int pulled = atomic_compare_exchange_strong(&taso_pool.chunk_state[w], &holding, TASO_PULLED)
                 && sched_setaffinity(tid, sizeof here, &here) == 0;
    pthread_mutex_unlock(&taso_pool.pull_mu);
    if (pulled) { taso_pool.pulls++; return; }
  }
}
static inline uint32_t taso_generation(void) {
  return (uint32_t)(atomic_load_explicit(&taso_pool.state, memory_order_acquire) >> 32); }
static void* taso_worker(void* arg) {
  int32_t id = (int32_t)(intptr_t)arg;
  sched_getaffinity(0, sizeof taso_own_cpus, &taso_own_cpus);
  if (id < TASO_TRACKED) atomic_store(&taso_pool.tid[id], (int)gettid());
  uint32_t seen = taso_generation() & ~1u;
  for (;;) {
    long deadline = taso_now_ns() + taso_pool.spin_ns;
    uint32_t gen;
    for (int k = 0; (gen = taso_generation()) == seen || (gen & 1); ++k) {
      taso_relax();
      if ((k & 63) == 63 && taso_now_ns() > deadline) {
        pthread_mutex_lock(&taso_pool.sleep_mu);
        atomic_fetch_add(&taso_pool.sleepers, 1);
        while (taso_generation() == seen)
          pthread_cond_wait(&taso_pool.wake, &taso_pool.sleep_mu);
        atomic_fetch_sub(&taso_pool.sleepers, 1);
        pthread_mutex_unlock(&taso_pool.sleep_mu);
        deadline = taso_now_ns() + taso_pool.spin_ns;
      }
    }
    seen = gen;
    taso_work(gen, id);
  }
  return 0;
}
static void taso_pool_forget(void) {
  taso_pool.started = 0; taso_pool.threads = 0;
  for (int w = 0; w < TASO_TRACKED; ++w) {  /* the parent's workers: never move those from here */
    atomic_store(&taso_pool.tid[w], 0); atomic_store(&taso_pool.chunk_state[w], TASO_IDLE); }
  if (taso_sched_fd >= 0) close(taso_sched_fd);  /* it names the parent's thread */
  taso_sched_fd = -2; taso_probe_at = 0; }
static int taso_env_int(const char* name) { const char* v = getenv(name); return v && *v ? atoi(v) : 0; }
static void taso_pool_start(void) {
  int n = taso_env_int("TASO_NUM_THREADS");
  if (n <= 0) n = taso_env_int("OMP_NUM_THREADS");
  if (n <= 0) { cpu_set_t set; n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1; }
  long spin = taso_env_int("TASO_SPIN_US");
  taso_pool.spin_ns = (getenv("TASO_SPIN_US") ? spin : 100) * 1000L;
  long solo = taso_env_int("TASO_SOLO_MS");
  taso_pool.solo_ns = (getenv("TASO_SOLO_MS") ? solo : 100) * 1000000L;
  long share = taso_env_int("TASO_SHARE_US");
  taso_pool.share_ns = (getenv("TASO_SHARE_US") ? share : 500) * 1000L;
  taso_pool.threads = n < 1 ? 1 : n;
  pthread_atfork(0, 0, taso_pool_forget);
  for (int k = 1; k < taso_pool.threads; ++k) {
    pthread_t t; pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 1 << 20);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, taso_worker, (void*)(intptr_t)(k - 1)) != 0) { taso_pool.threads = k; break; }
    pthread_attr_destroy(&a);
  }
  taso_pool.started = 1;
}
/* Record a loop's thread-ns for the solo spells' choice (the caller holds `submit`). */
static inline void taso_remember_size(unsigned slot, taso_task fn, long thread_ns) {
  taso_pool.size[slot].fn = fn;
  taso_pool.size[slot].ns = thread_ns;
}
/* fn(ctx, begin, end) over [0, n) in chunks, on up to `limit` threads (0: all); the caller works too. */
static void taso_parallel_for(int32_t n, taso_task fn, void* ctx, int32_t limit) {
  if (n <= 0) return;
  if (n == 1 || limit == 1 || pthread_mutex_trylock(&taso_pool.submit) != 0) { fn(ctx, 0, n); return; }
  if (!taso_pool.started) taso_pool_start();
  int32_t threads = limit > 0 && limit < taso_pool.threads ? limit : taso_pool.threads;
  unsigned slot = (unsigned)((uintptr_t)fn >> 4) * 2654435761u >> 24;  /* Fibonacci hash, 8 bits */
  int big = taso_pool.size[slot].fn == fn && taso_pool.size[slot].ns >= taso_pool.share_ns;
  if (threads <= 1 || (!big && taso_pool.solo_until && taso_now_ns() < taso_pool.solo_until)) {
    long t0 = taso_now_ns();
    fn(ctx, 0, n);
    taso_remember_size(slot, fn, taso_now_ns() - t0);
    pthread_mutex_unlock(&taso_pool.submit);
    return;
  }
  int32_t chunk = n / (threads * 32);  /* small enough that a descheduled worker holds little */
  uint32_t gen = taso_generation() + 2;
  atomic_store(&taso_pool.state, (uint64_t)(gen - 1) << 32);  /* closed while the job is written */
  atomic_store_explicit(&taso_pool.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&taso_pool.ctx, ctx, memory_order_relaxed);
  atomic_store_explicit(&taso_pool.total, n, memory_order_relaxed);
  atomic_store_explicit(&taso_pool.chunk, chunk < 1 ? 1 : chunk, memory_order_relaxed);
  atomic_store_explicit(&taso_pool.limit, threads - 1, memory_order_relaxed);
  atomic_store_explicit(&taso_pool.done, 0, memory_order_relaxed);
  atomic_store_explicit(&taso_pool.caller_cpu, sched_getcpu(), memory_order_relaxed);
  atomic_store(&taso_pool.state, (uint64_t)gen << 32);
  if (atomic_load(&taso_pool.sleepers) > 0) {
    pthread_mutex_lock(&taso_pool.sleep_mu);
    pthread_cond_broadcast(&taso_pool.wake);
    pthread_mutex_unlock(&taso_pool.sleep_mu);
  }
  long began = taso_now_ns();
  taso_work(gen, -1);
  /* Spin while the last claimed chunks finish (in a quiet machine, within a chunk's time), then
     sleep until the worker that finishes the last one wakes us: a worker descheduled while it
     holds a chunk waits behind another process for a time slice, and only an idle core here
     lets the kernel's scheduler move it over at once. */
  long now = taso_now_ns(), patience = (now - began) / 4 + 5000;
  for (int k = 0; atomic_load_explicit(&taso_pool.done, memory_order_acquire) < n; ++k) {
    taso_relax();
    if ((k & 63) == 63 && taso_now_ns() - now > patience) {
      taso_pull_one_worker();
      pthread_mutex_lock(&taso_pool.done_mu);
      atomic_store(&taso_pool.waiting, 1);
      while (atomic_load(&taso_pool.done) < n) pthread_cond_wait(&taso_pool.done_cv, &taso_pool.done_mu);
      atomic_store(&taso_pool.waiting, 0);
      pthread_mutex_unlock(&taso_pool.done_mu);
    }
  }
  /* A thread of the pool waited for its core: another process wants one of the cores. A worker's
     next chunk could stall the caller for a time slice, and a caller that shares a core while a
     worker spins on the other runs at half speed; loops run on the caller alone for a while, so
     that the scheduler gives it the free core (measured: a compiled NASNet-A beside a busy loop,
     45 ms on two threads, 27 on one). */
  taso_remember_size(slot, fn, (taso_now_ns() - began) * threads);
  if ((taso_waited_for_core() | atomic_exchange(&taso_pool.worker_waited, 0)) && taso_pool.solo_ns > 0) {
    taso_pool.solo_until = taso_now_ns() + taso_pool.solo_ns;
    taso_pool.solo_spells++;
  }
  pthread_mutex_unlock(&taso_pool.submit);
}
/* How often the loops went to the caller alone since the module was loaded (tests, profiles). */
long taso_pool_solo_spells(void) { return taso_pool.solo_spells; }
/* How often a worker moved off the caller's CPU, and how often the caller pulled one over. */
long taso_pool_moves(void) { return atomic_load(&taso_pool.moves); }
long taso_pool_pulls(void) { return taso_pool.pulls; }
/* The kernel's thread id of worker k, 0 before it started (tests place the threads). */
int taso_pool_worker_tid(int k) { return k >= 0 && k < TASO_TRACKED ? atomic_load(&taso_pool.tid[k]) : 0; }
"""
