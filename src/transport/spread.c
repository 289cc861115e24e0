/*
 * Spreading the ranks of one host over its CPUs.  Unbound ranks can end up on one CPU while another
 * CPU they may use stays idle: a rank that slept through a slow peer's init exchange is woken onto its
 * waker's CPU, and two ranks that then hand work to each other keep being woken there (on the 2-CPU
 * reference machine for 30-50 ms, at 4-5x the time of each operation) until the kernel's load balancer
 * separates them.  The host engine notices it from the inside: a yield during its spin that took
 * longer than a bare yield means another thread ran on this CPU in between (mendSpreadCheck).
 *
 * Every rank publishes the CPU it last ran its engine on in its bell page, a cache line away from
 * the bell word (MEND_BELL_CPU_OFFSET; shm peers map that page already).  Of the ranks that
 * published one CPU, the one with the lowest rank stays and the others move, each to another CPU of
 * its own affinity mask that no rank of the host published: the thread's mask is narrowed to that
 * CPU, which moves it at once, and then restored, so the mask the caller set is what it finds.  A
 * rank bound to one CPU, a host with more ranks than CPUs, or no free CPU: nothing moves.
 * MEND_SPREAD=0 turns it off (the host engine then neither publishes nor looks).  Checked at most once a
 * millisecond per thread.
 */
#include "transport/transport_priv.h"

#include <sched.h>

#include "comm.h"
#include "misc/utils.h"

#define SPREAD_CHECK_NS 1000000ull /* at most one check a millisecond per thread */
#define SPREAD_MAX_PEERS 256       /* local peers looked at (a host has far fewer ranks) */

static _Atomic int* cpuSlot(void* bellPage) { return (_Atomic int*)((char*)bellPage + MEND_BELL_CPU_OFFSET); }

/* This rank's bell page, or NULL: a communicator without one (the loopback world's bells are not
 * pages, nor is its comm->transport a struct mendTransport). */
static void* ownPage(struct ncclComm* comm) { return comm->bellPage; }

void mendSpreadPublish(struct ncclComm* comm) {
  void* page = ownPage(comm);
  if (!page) return;
  int cpu = sched_getcpu();
  if (cpu < 0) return;
  _Atomic int* slot = cpuSlot(page);
  if (atomic_load_explicit(slot, memory_order_relaxed) != cpu + 1) atomic_store_explicit(slot, cpu + 1, memory_order_relaxed);
}

int mendSpreadChoose(int myCpu, int myRank, const cpu_set_t* mask, const int* peerCpu, const int* peerRank,
                     int nPeers) {
  int ahead = 0; /* ranks below mine on my CPU: I am the ahead-th to move (they stay or move first) */
  for (int i = 0; i < nPeers; i++)
    if (peerCpu[i] == myCpu && peerRank[i] < myRank) ahead++;
  if (ahead == 0) return -1;
  int nFree = 0, freeCpu[CPU_SETSIZE];
  for (int k = 1; k < CPU_SETSIZE; k++) { /* from the CPU after mine, round the set */
    int c = (myCpu + k) % CPU_SETSIZE;
    if (!CPU_ISSET(c, mask)) continue;
    int taken = 0;
    for (int i = 0; i < nPeers && !taken; i++) taken = peerCpu[i] == c;
    if (!taken) freeCpu[nFree++] = c;
  }
  return nFree > 0 ? freeCpu[(ahead - 1) % nFree] : -1;
}

int mendSpreadCheck(struct ncclComm* comm) {
  static __thread uint64_t nextNs;
  struct mendTransport* t = comm->transport;
  void* page = ownPage(comm);
  if (!page || !t->peerBellMap) return 0;
  uint64_t now = mendTimeNs();
  if (now < nextNs) return 0;
  nextNs = now + SPREAD_CHECK_NS;
  int myCpu = sched_getcpu();
  if (myCpu < 0 || myCpu >= CPU_SETSIZE) return 0;
  atomic_store_explicit(cpuSlot(page), myCpu + 1, memory_order_relaxed);
  int peerCpu[SPREAD_MAX_PEERS], peerRank[SPREAD_MAX_PEERS], n = 0;
  for (int r = 0; r < comm->nRanks && n < SPREAD_MAX_PEERS; r++) {
    if (r == comm->rank || !t->peerBellMap[r]) continue;
    int v = atomic_load_explicit(cpuSlot(t->peerBellMap[r]), memory_order_relaxed);
    if (v < 1 || v > CPU_SETSIZE) continue; /* not published yet, or nonsense: ignored */
    peerCpu[n] = v - 1;
    peerRank[n++] = r;
  }
  cpu_set_t mask, one;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 0;
  int to = mendSpreadChoose(myCpu, comm->rank, &mask, peerCpu, peerRank, n);
  if (to < 0) return 0;
  CPU_ZERO(&one);
  CPU_SET(to, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return 0; /* a cpuset may forbid it: stay */
  int now2 = sched_getcpu();
  if (sched_setaffinity(0, sizeof(mask), &mask) != 0)
    WARN("Spread: rank %d could not restore its CPU mask after moving to CPU %d", comm->rank, to);
  atomic_store_explicit(cpuSlot(page), now2 + 1, memory_order_relaxed);
  INFO(NCCL_INIT, "Spread: rank %d shared CPU %d with a lower rank of its host; moved to CPU %d", comm->rank,
       myCpu, now2);
  return 1;
}
