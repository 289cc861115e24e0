/*
 * The few primitives the kernel source needs, in two builds:
 *   nvcc     the real thing: threadIdx/blockDim, __syncthreads, system-scope acquire/release on the
 *            FIFO counters (PTX ld.acquire.sys / st.release.sys), __threadfence_system before a
 *            post, and cache-bypassing loads (ld.cv) for data another agent wrote (a slot is
 *            reused, so a stale L1 line would be wrong data);
 *   host C++ the shim that runs the same source on the CPU: a CTA's threads are host threads
 *            (thread-local index), __syncthreads is a barrier, fences and atomics are GCC's.
 * Only kernel.cu includes this header.
 */
#ifndef MEND_DEVICE_KERNEL_SYNC_H_
#define MEND_DEVICE_KERNEL_SYNC_H_

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)

#define KDEV static __device__ __forceinline__

/* The threads that run one lane: a CTA runs one lane with all its threads, or several lanes side
 * by side, each with a group of warps and its own named barrier (ids 1..15; 0 is __syncthreads). */
struct KGrp {
  uint32_t tid; /* thread index in the group */
  uint32_t n;   /* threads in the group (a multiple of 32) */
  uint32_t bar; /* named barrier id */
};
KDEV void kSync(const KGrp& g) { asm volatile("bar.sync %0, %1;" ::"r"(g.bar), "r"(g.n) : "memory"); }

KDEV uint64_t kLoadAcq(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
KDEV void kStoreRel(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
KDEV uint64_t kLoadVol64(const uint64_t* p) { return *(const volatile uint64_t*)p; }
KDEV void kStoreVol64(uint64_t* p, uint64_t v) { *(volatile uint64_t*)p = v; }
KDEV int32_t kLoadVol32(const volatile int32_t* p) { return *p; }
KDEV int32_t kCas32(volatile int32_t* p, int32_t expect, int32_t v) {
  return atomicCAS((int*)p, expect, v);
}
KDEV void kFenceSys(void) { __threadfence_system(); }
KDEV void kPause(void) { __nanosleep(64); }
/* A GPU launch serves one rank: its peers learn of its failure only through the FIFOs (they wait
 * until an abort).  The CPU build runs every rank of a group in one call, which must end. */
KDEV int kRunStopped(void) { return 0; }
KDEV void kRunStop(void) {}

/* 16-byte packs: loads bypass L1 (ld.global.cv), stores are plain (L1 is write-through). */
typedef uint4 KPack;
KDEV KPack kLoadPack(const char* p) { return __ldcv((const uint4*)p); }
KDEV void kStorePack(char* p, KPack v) { *(uint4*)p = v; }
template <typename T>
KDEV T kLoad(const T* p) { return *(const volatile T*)p; }

#else /* ---- the CPU shim ---- */

#include <sched.h>

#define KDEV static inline
#define __global__
#define __shared__

/* One CTA on the CPU: its barrier and its shared memory. */
struct kCta {
  uint32_t nThreads;       /* threads of the CTA */
  volatile uint32_t count; /* arrivals in the current barrier phase */
  volatile uint32_t sense; /* flips when a phase completes */
  void* shared;            /* the CTA's __shared__ state */
  volatile int32_t gate;   /* 0 until every thread of the CTA exists; 1: run; -1: leave at once */
  volatile int32_t* runStop; /* shared by every CTA of the call: one lane failed, all leave (the call
                                drives every rank of the group, like the host engine) */
};
/* The calling host thread's place in its CTA (set by mendKernelCpuRun). */
extern __thread uint32_t kTidTls;
extern __thread struct kCta* kCtaTls;

/* The threads that run one lane (on the CPU: one lane per CTA). */
struct KGrp {
  uint32_t tid; /* thread index in the group */
  uint32_t n;   /* threads in the group */
  uint32_t bar; /* unused on the CPU */
};

/* A waiting CTA thread lets others run: the next fiber of its worker, or (an OS thread per CTA
 * thread) sched_yield.  Defined in kernel.cu. */
void kCpuYield(void);

/* A sense-reversing barrier; waiters yield (a CPU runs more threads than it has cores). */
KDEV void kSyncCpu(void) {
  struct kCta* c = kCtaTls;
  uint32_t s = __atomic_load_n(&c->sense, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&c->count, 1, __ATOMIC_ACQ_REL) == c->nThreads) {
    __atomic_store_n(&c->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->sense, s ^ 1u, __ATOMIC_RELEASE);
    return;
  }
  while (__atomic_load_n(&c->sense, __ATOMIC_ACQUIRE) == s) kCpuYield();
}
KDEV void kSync(const KGrp& g) { (void)g; kSyncCpu(); }

KDEV uint64_t kLoadAcq(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
KDEV void kStoreRel(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
KDEV uint64_t kLoadVol64(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
KDEV void kStoreVol64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
KDEV int32_t kLoadVol32(const volatile int32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
KDEV int32_t kCas32(volatile int32_t* p, int32_t expect, int32_t v) {
  __atomic_compare_exchange_n(p, &expect, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return expect;
}
KDEV void kFenceSys(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
KDEV void kPause(void) { kCpuYield(); }
KDEV int kRunStopped(void) { return __atomic_load_n(kCtaTls->runStop, __ATOMIC_ACQUIRE) != 0; }
KDEV void kRunStop(void) { __atomic_store_n(kCtaTls->runStop, 1, __ATOMIC_RELEASE); }

struct KPack {
  uint64_t x, y;
};
KDEV KPack kLoadPack(const char* p) {
  KPack v;
  memcpy(&v, p, sizeof v);
  return v;
}
KDEV void kStorePack(char* p, KPack v) { memcpy(p, &v, sizeof v); }
template <typename T>
KDEV T kLoad(const T* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}

#endif

#endif
