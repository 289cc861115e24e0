/*
 * Small helpers every layer needs: hashing, monotonic time, checked allocation, host identity.
 * Host identity tells apart hosts (and containers) so ranks can decide what shares memory:
 * NCCL_HOSTID when set, else "<hostname>:<boot_id>", because containers on one machine may share a
 * hostname but then also share the boot id (and shared memory), while different machines never do.
 */
#ifndef MEND_MISC_UTILS_H_
#define MEND_MISC_UTILS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "nccl.h"

/* 64-bit FNV-1a of `len` bytes: cheap, stable across processes and builds (used in wire ids). */
uint64_t mendHash(const void* data, size_t len);
/* Fold another value into a running hash (order matters). */
uint64_t mendHashCombine(uint64_t h, uint64_t v);

/* CLOCK_MONOTONIC in nanoseconds / milliseconds. */
uint64_t mendTimeNs(void);
int64_t mendTimeMs(void);

/* calloc(n, size) that WARNs with the size on failure and honours the "host.calloc" fault site.
 * n == 0 or size == 0 still returns a valid (1-byte) allocation, so NULL always means failure. */
ncclResult_t mendCalloc(void** ptr, size_t n, size_t size);
/* Typed form: MENDCALLOC(p, n) allocates n zeroed elements of *p. */
#define MENDCALLOC(ptr, n) __extension__({                                  \
    void* mendCallocP_ = NULL;                                              \
    ncclResult_t mendCallocR_ = mendCalloc(&mendCallocP_, (n), sizeof(*(ptr))); \
    (ptr) = (__typeof__(ptr))mendCallocP_;                                  \
    mendCallocR_;                                                           \
  })

/* n zeroed elements of `size` bytes for one call's own use: the caller's `local` array (of `localBytes`)
 * when they fit, else the heap (mendCalloc); release with MENDLOCALFREE.  Small calls (one operation,
 * a few works) then allocate nothing. */
static inline ncclResult_t mendLocalCalloc(void** ptr, size_t n, size_t size, void* local, size_t localBytes) {
  if (local != NULL && size > 0 && n > 0 && n <= localBytes / size) { /* inline: a small call's path */
    memset(local, 0, n * size);
    *ptr = local;
    return ncclSuccess;
  }
  return mendCalloc(ptr, n, size);
}
#define MENDLOCALCALLOC(ptr, n, local) __extension__({                                          \
    void* mendLocalP_ = NULL;                                                                   \
    ncclResult_t mendLocalR_ = mendLocalCalloc(&mendLocalP_, (n), sizeof(*(ptr)), (local), sizeof(local)); \
    (ptr) = (__typeof__(ptr))mendLocalP_;                                                        \
    mendLocalR_;                                                                                \
  })
static inline void mendLocalFree(void* p, const void* local) {
  if (p != local) free(p);
}
#define MENDLOCALFREE(ptr, local) mendLocalFree((ptr), (local))

/* Host identity string (NCCL_HOSTID, else hostname:boot_id) and its hash; cached. */
const char* mendHostId(void);
uint64_t mendHostHash(void);
/* Identity of this process across the job: host hash, pid namespace inode and pid. */
uint64_t mendPidHash(void);
/* Forget the cached host identity (tests that change NCCL_HOSTID). */
void mendHostIdReset(void);
/* CPUs this process may run on (its affinity), at least 1: a fact of the machine, read once
 * (sched_getaffinity is a system call, too slow for every 8-byte operation). */
int mendCpusAvailable(void);
/* Short hostname (up to the first '.'), as log lines and %h print it. */
void mendHostName(char* buf, size_t len);

#endif
