/*
 * One-sided operations and suspend/resume across processes, over shared memory and over sockets
 * (NCCL_SHM_DISABLE=1: every peer through the Net and the proxy; and through the resilient net,
 * MEND_RESILIENCE=1, the layer hot repair replays from):
 *   - ring_*: every rank registers two windows, puts three sizes (3, 2000 and 60000 floats, the last
 *     over many slots of a 64 KiB FIFO) into the next rank's window with a signal each, signals it
 *     twice more, puts into its own window, then waits for all of them in one ncclWaitSignal; every
 *     byte of the windows is checked (what the previous rank put, and -1 everywhere else), an
 *     AllReduce after is exact, and the window survives a second round that waits signal by signal;
 *   - errors_*: argument errors (window, range, sigIdx, ctx, group, suspended, deregistered), and a
 *     put the receiver must refuse (its window deregistered there only): the target's
 *     ncclWaitSignal fails with ncclRemoteError instead of writing freed memory;
 *   - fresh_*: a put right after the first registration on a fresh communicator (ncclCommSplit),
 *     FRESH_ROUNDS times: a peer may put the moment its own registration returns, so the target
 *     must accept puts into a window before its own ncclCommWindowRegister has returned;
 *   - suspend_*: MemStats before, while suspended (NCCL_SUSPEND_MEM frees the shm connectors: Total
 *     drops by exactly the releasable bytes, 0 over sockets) and after resume (the first AllReduce
 *     makes them again), every operation refused while suspended (collective, send, put, signal),
 *     collectives, send/recv and puts exact after resume.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_util.h"

#define NA 70000 /* floats in window A */
#define NB 64    /* floats in window B */
static const size_t kCount[3] = {3, 2000, 60000}; /* floats per put, round r */
static const size_t kOff[3] = {0, 16, 4096};      /* where round r lands in A */

static float valueOf(int rank, int r, size_t i) { return (float)(rank * 1000000 + r * 100000 + (int)i); }

/* The window after the ring rounds: prev's pattern in each round's range, -1 elsewhere. */
static int checkWindowA(const float* a, int prev) {
  for (size_t i = 0; i < NA; i++) {
    float want = -1;
    for (int r = 0; r < 3; r++)
      if (i >= kOff[r] && i < kOff[r] + kCount[r]) want = valueOf(prev, r, i - kOff[r]);
    if (a[i] != want) {
      fprintf(stderr, "rank %d: window A[%zu] = %g, want %g\n", mpRank, i, a[i], want);
      return 0;
    }
  }
  return 1;
}

static int allReduceOk(ncclComm_t comm, int rank, int n) {
  static float in[1024], out[1024];
  for (int i = 0; i < 1024; i++) in[i] = (float)(rank + i), out[i] = -1;
  if (ncclAllReduce(in, out, 1024, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) return 0;
  for (int i = 0; i < 1024; i++)
    if (out[i] != (float)(n * i + n * (n - 1) / 2)) return 0;
  return 1;
}

static void ring(const struct mpChild* c) {
  ncclComm_t comm = mpInitComm(c->rank, c->n, c->arg);
  int next = (c->rank + 1) % c->n, prev = (c->rank + c->n - 1) % c->n;
  CKR(ncclSignal(next, 0, 0, 0, comm, NULL), ncclInvalidUsage); /* no window yet */
  float* a = malloc(sizeof(float) * (NA + 16 * (size_t)c->rank));
  float* src = malloc(sizeof(float) * NA);
  static float b[NB], bsrc[NB];
  CK(a && src);
  for (size_t i = 0; i < NA; i++) a[i] = -1;
  ncclWindow_t wa = NULL, wb = NULL;
  CKOK(ncclCommWindowRegister(comm, a, sizeof(float) * (NA + 16 * (size_t)c->rank), &wa, NCCL_WIN_DEFAULT));
  CKOK(ncclCommWindowRegister(comm, b, sizeof(b), &wb, NCCL_WIN_STRICT_ORDERING));
  CK(wa != NULL && wb != NULL && wa != wb);
  void* p = NULL;
  CKOK(ncclWinGetUserPtr(comm, wa, &p));
  CK(p == a);
  for (int r = 0; r < 3; r++) {
    for (size_t i = 0; i < kCount[r]; i++) src[i] = valueOf(c->rank, r, i);
    CKOK(ncclPutSignal(src, kCount[r], ncclFloat, next, wa, kOff[r] * sizeof(float), 1, 0, 0, comm, NULL));
    for (size_t i = 0; i < kCount[r]; i++) src[i] = -7; /* reusable once the call returned */
  }
  CKOK(ncclSignal(next, 2, 0, 0, comm, NULL));
  CKOK(ncclSignal(next, 2, 0, 0, comm, NULL));
  for (int i = 0; i < NB; i++) bsrc[i] = (float)(c->rank * 10 + i);
  CKOK(ncclPutSignal(bsrc, NB, ncclFloat, c->rank, wb, 0, 3, 0, 0, comm, NULL));
  ncclWaitSignalDesc_t d[4] = {{2, prev, 1, 0}, {1, prev, 1, 0}, {2, prev, 2, 0}, {1, c->rank, 3, 0}};
  CKOK(ncclWaitSignal(4, d, comm, NULL));
  CK(checkWindowA(a, prev));
  for (int i = 0; i < NB; i++) CK(b[i] == (float)(c->rank * 10 + i));
  CK(allReduceOk(comm, c->rank, c->n));
  /* Round two: one put into B of the next rank, waited for alone, signal by signal. */
  for (int i = 0; i < NB; i++) bsrc[i] = (float)(c->rank * 100 + i);
  CKOK(ncclPutSignal(bsrc, NB / 2, ncclFloat, next, wb, sizeof(float) * NB / 2, 4, 0, 0, comm, NULL));
  ncclWaitSignalDesc_t one = {1, prev, 4, 0};
  CKOK(ncclWaitSignal(1, &one, comm, NULL));
  for (int i = 0; i < NB / 2; i++) CK(b[NB / 2 + i] == (float)(prev * 100 + i));
  CK(allReduceOk(comm, c->rank, c->n)); /* nobody deregisters while a put may still come */
  CKOK(ncclCommWindowDeregister(comm, wa));
  CKOK(ncclCommWindowDeregister(comm, wb));
  CKOK(ncclCommDestroy(comm));
  free(a);
  free(src);
}

/* The last WARN mentions `word`. */
static void lastWarn(const char* word) {
  const char* last = ncclGetLastError(NULL);
  if (!last || !strstr(last, word)) {
    fprintf(stderr, "rank %d: last error \"%s\" does not mention \"%s\"\n", mpRank, last ? last : "(null)", word);
    exit(1);
  }
}
#define CKE(call, want, word) \
  do {                        \
    CKR(call, want);          \
    lastWarn(word);           \
  } while (0)

static void argErrors(ncclComm_t comm, ncclWindow_t wa, int peer) {
  const ncclResult_t IA = ncclInvalidArgument, IU = ncclInvalidUsage;
  float x[8] = {0};
  CKE(ncclPutSignal(x, 8, ncclFloat, peer, wa, sizeof(float) * (NB - 7), 0, 0, 0, comm, NULL), IA, "do not fit");
  CKE(ncclPutSignal(x, 1, ncclFloat, peer, wa, (size_t)-1, 0, 0, 0, comm, NULL), IA, "do not fit");
  CKE(ncclPutSignal(x, 1, ncclFloat, peer, (ncclWindow_t)x, 0, 0, 0, 0, comm, NULL), IA, "not a live window");
  CKE(ncclPutSignal(x, 1, ncclFloat, peer, NULL, 0, 0, 0, 0, comm, NULL), IA, "not a live window");
  CKE(ncclPutSignal(x, 1, ncclFloat, peer, wa, 0, 64, 0, 0, comm, NULL), IA, "MEND_RMA_SIGNALS");
  CKE(ncclSignal(peer, 0, 1, 0, comm, NULL), IA, "numRmaCtx");
  ncclWaitSignalDesc_t d = {1, peer, 64, 0};
  CKE(ncclWaitSignal(1, &d, comm, NULL), IA, "sigIdx");
  CKOK(ncclGroupStart());
  CKE(ncclSignal(peer, 0, 0, 0, comm, NULL), IU, "ncclGroupStart");
  CKOK(ncclGroupEnd());
  CKOK(ncclCommSuspend(comm, 0));
  CKE(ncclPutSignal(x, 1, ncclFloat, peer, wa, 0, 0, 0, 0, comm, NULL), IU, "suspended");
  CKE(ncclWaitSignal(1, &d, comm, NULL), IU, "suspended");
  CKOK(ncclCommResume(comm));
  void* p = NULL;
  CKE(ncclWinGetUserPtr(comm, (ncclWindow_t)x, &p), IA, "not a live window");
  CK(p == NULL);
  CKE(ncclCommWindowDeregister(comm, (ncclWindow_t)x), IA, "not a live window");
  CKE(ncclCommWindowDeregister(comm, NULL), IA, "NULL");
}

static void errors(const struct mpChild* c) {
  ncclComm_t comm = mpInitComm(c->rank, c->n, c->arg);
  static float a[NB], b[NB];
  ncclWindow_t wa = NULL, wb = NULL;
  CKE(ncclWaitSignal(0, NULL, comm, NULL), ncclInvalidUsage, "register one");
  CKOK(ncclCommWindowRegister(comm, a, sizeof(a), &wa, 0));
  CKOK(ncclCommWindowRegister(comm, b, sizeof(b), &wb, 0));
  argErrors(comm, wa, 1 - c->rank);
  /* Rank 1 drops window B; rank 0 (whose view of B is still valid) puts into it: rank 1 refuses. */
  if (c->rank == 1) CKOK(ncclCommWindowDeregister(comm, wb));
  CK(allReduceOk(comm, c->rank, c->n));
  float x[4] = {1, 2, 3, 4};
  if (c->rank == 0) {
    CKOK(ncclPutSignal(x, 4, ncclFloat, 1, wb, 0, 5, 0, 0, comm, NULL));
  } else {
    ncclWaitSignalDesc_t d = {1, 0, 5, 0};
    CKE(ncclWaitSignal(1, &d, comm, NULL), ncclRemoteError, "refused a one-sided message");
    for (int i = 0; i < NB; i++) CK(b[i] == 0);
  }
  CK(allReduceOk(comm, c->rank, c->n));
  if (c->rank == 0) CKOK(ncclCommWindowDeregister(comm, wb));
  CKOK(ncclCommWindowDeregister(comm, wa));
  CKOK(ncclCommDestroy(comm));
}

/* Each round: a new communicator, one window, a put+signal into the next rank's window at once. */
#define FRESH_ROUNDS 40
static void fresh(const struct mpChild* c) {
  ncclComm_t comm = mpInitComm(c->rank, c->n, c->arg);
  int next = (c->rank + 1) % c->n, prev = (c->rank + c->n - 1) % c->n;
  static float win[NB], x[NB];
  for (int r = 0; r < FRESH_ROUNDS; r++) {
    ncclComm_t sub = NULL;
    ncclWindow_t w = NULL;
    CKOK(ncclCommSplit(comm, 0, c->rank, &sub, NULL));
    for (int i = 0; i < NB; i++) win[i] = -1, x[i] = (float)(c->rank * 1000 + r * 10 + i);
    CKOK(ncclCommWindowRegister(sub, win, sizeof(win), &w, 0));
    CKOK(ncclPutSignal(x, NB, ncclFloat, next, w, 0, 0, 0, 0, sub, NULL));
    ncclWaitSignalDesc_t d = {1, prev, 0, 0};
    CKOK(ncclWaitSignal(1, &d, sub, NULL));
    for (int i = 0; i < NB; i++) CK(win[i] == (float)(prev * 1000 + r * 10 + i));
    CK(allReduceOk(sub, c->rank, c->n)); /* nobody deregisters while a put may still come */
    CKOK(ncclCommWindowDeregister(sub, w));
    CKOK(ncclCommDestroy(sub));
  }
  CKOK(ncclCommDestroy(comm));
}

static uint64_t memStat(ncclComm_t comm, ncclCommMemStat_t s) {
  uint64_t v = UINT64_MAX;
  CKOK(ncclCommMemStats(comm, s, &v));
  return v;
}

/* MemStats before suspend, while suspended and after resume; releasable bytes only over shm. */
static void suspendStats(ncclComm_t comm, int rank, int n, int overShm) {
  uint64_t total = memStat(comm, ncclStatGpuMemTotal), canRelease = memStat(comm, ncclStatGpuMemSuspend);
  uint64_t persist = memStat(comm, ncclStatGpuMemPersist);
  CK(total > 0 && total != UINT64_MAX && canRelease + persist == total);
  CK(overShm ? canRelease > 0 : canRelease == 0); /* net and one-sided connectors stay */
  CKOK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  CK(memStat(comm, ncclStatGpuMemSuspended) == 1);
  uint64_t during = memStat(comm, ncclStatGpuMemTotal);
  CK(during == total - canRelease && memStat(comm, ncclStatGpuMemSuspend) == 0);
  CK(memStat(comm, ncclStatGpuMemPersist) == persist);
  fprintf(stderr, "# rank %d: MemStats total %llu before suspend (%llu releasable), %llu suspended\n", rank,
          (unsigned long long)total, (unsigned long long)canRelease, (unsigned long long)during);
  CKOK(ncclCommResume(comm));
  CK(memStat(comm, ncclStatGpuMemSuspended) == 0);
  CK(allReduceOk(comm, rank, n)); /* the same call as before: the same connectors, made again */
  uint64_t after = memStat(comm, ncclStatGpuMemTotal);
  if (after != total || memStat(comm, ncclStatGpuMemSuspend) != canRelease)
    fprintf(stderr, "rank %d: after resume and an AllReduce: total %llu, releasable %llu\n", rank,
            (unsigned long long)after, (unsigned long long)memStat(comm, ncclStatGpuMemSuspend));
  CK(after == total && memStat(comm, ncclStatGpuMemSuspend) == canRelease);
}

static void suspendResume(const struct mpChild* c) {
  ncclComm_t comm = mpInitComm(c->rank, c->n, c->arg);
  static float win[NB], x[NB], y[NB];
  ncclWindow_t w = NULL;
  int peer = (c->rank + 1) % c->n, prev = (c->rank + c->n - 1) % c->n;
  CKOK(ncclCommWindowRegister(comm, win, sizeof(win), &w, 0));
  CK(allReduceOk(comm, c->rank, c->n));
  suspendStats(comm, c->rank, c->n, getenv("NCCL_SHM_DISABLE") == NULL);
  CKOK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  CKE(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage, "suspended");
  CKE(ncclSend(x, 1, ncclFloat, peer, comm, NULL), ncclInvalidUsage, "suspended");
  CKE(ncclSignal(peer, 0, 0, 0, comm, NULL), ncclInvalidUsage, "suspended");
  CKE(ncclPutSignal(x, 1, ncclFloat, peer, w, 0, 0, 0, 0, comm, NULL), ncclInvalidUsage, "suspended");
  CKOK(ncclCommResume(comm));
  for (int r = 0; r < 3; r++) CK(allReduceOk(comm, c->rank, c->n));
  /* Send/recv after a release: its connectors are made on first use as well. */
  for (int i = 0; i < NB; i++) x[i] = (float)(c->rank * 1000 + i);
  CKOK(ncclGroupStart());
  CKOK(ncclSend(x, NB, ncclFloat, peer, comm, NULL));
  CKOK(ncclRecv(y, NB, ncclFloat, prev, comm, NULL)); /* not into the window: prev may put there already */
  CKOK(ncclGroupEnd());
  for (int i = 0; i < NB; i++) CK(y[i] == (float)(prev * 1000 + i));
  for (int i = 0; i < NB; i++) x[i] = (float)(c->rank * 2000 + i);
  CKOK(ncclPutSignal(x, NB, ncclFloat, peer, w, 0, 0, 0, 0, comm, NULL));
  ncclWaitSignalDesc_t d = {1, prev, 0, 0};
  CKOK(ncclWaitSignal(1, &d, comm, NULL));
  for (int i = 0; i < NB; i++) CK(win[i] == (float)(prev * 2000 + i));
  CK(allReduceOk(comm, c->rank, c->n));
  CKOK(ncclCommWindowDeregister(comm, w));
  CKOK(ncclCommDestroy(comm));
}

/* A rank launched by the testbed (RANK, WORLD_SIZE, NCCL_COMM_ID; tests/testbed/test_onesided_repair.sh):
 * OS_ROUNDS rounds of a 256 KiB put+signal to the next rank, each checked exactly and followed by an
 * AllReduce (so no rank runs more than one round ahead: rounds alternate between two halves of the
 * window).  Prints one line; exit 0 when every round was exact. */
#define TB_COUNT 65536
static int testbedRank(void) {
  int rank = atoi(getenv("RANK")), n = atoi(getenv("WORLD_SIZE"));
  int rounds = getenv("OS_ROUNDS") ? atoi(getenv("OS_ROUNDS")) : 600;
  mpRank = rank;
  setvbuf(stdout, NULL, _IOLBF, 0);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  CKOK(ncclGetUniqueId(&id));
  CKOK(ncclCommInitRank(&comm, n, id, rank));
  float* win = calloc(2 * TB_COUNT, sizeof(float));
  float* src = malloc(TB_COUNT * sizeof(float));
  CK(win && src);
  ncclWindow_t w = NULL;
  CKOK(ncclCommWindowRegister(comm, win, 2 * TB_COUNT * sizeof(float), &w, 0));
  int next = (rank + 1) % n, prev = (rank + n - 1) % n, bad = 0;
  double t0 = mtNow();
  for (int r = 0; r < rounds && !bad; r++) {
    for (int i = 0; i < TB_COUNT; i++) src[i] = (float)((rank * 7 + r * 13 + i) % 1000003);
    CKOK(ncclPutSignal(src, TB_COUNT, ncclFloat, next, w, (size_t)(r % 2) * TB_COUNT * sizeof(float), 0, 0, 0,
                       comm, NULL));
    ncclWaitSignalDesc_t d = {1, prev, 0, 0};
    CKOK(ncclWaitSignal(1, &d, comm, NULL));
    const float* got = win + (size_t)(r % 2) * TB_COUNT;
    for (int i = 0; i < TB_COUNT; i++)
      if (got[i] != (float)((prev * 7 + r * 13 + i) % 1000003)) {
        printf("onesided rank %d FAIL: round %d element %d = %g\n", rank, r, i, got[i]);
        bad = 1;
        break;
      }
    CK(allReduceOk(comm, rank, n));
  }
  if (!bad) printf("onesided rank %d: %d rounds exact in %.1f s\n", rank, rounds, mtNow() - t0);
  CKOK(ncclCommWindowDeregister(comm, w));
  CKOK(ncclCommDestroy(comm));
  return bad;
}

int main(int argc, char** argv) {
  if (getenv("RANK") && getenv("WORLD_SIZE") && getenv("NCCL_COMM_ID")) {
    mtWatchdog(120);
    return testbedRank();
  }
  if (mpIsChild(argc, argv)) {
    struct mpChild c = mpChildStart(argv, 60);
    if (strcmp(c.scenario, "ring") == 0) ring(&c);
    else if (strcmp(c.scenario, "errors") == 0) errors(&c);
    else if (strcmp(c.scenario, "suspend") == 0) suspendResume(&c);
    else if (strcmp(c.scenario, "fresh") == 0) fresh(&c);
    else return 2;
    return 0;
  }
  if (!mtStart("onesided", 300)) return mtExitCode();
  const char* const shm[] = {"NCCL_BUFFSIZE=65536", NULL};
  const char* const net[] = {"NCCL_BUFFSIZE=65536", "NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", NULL};
  /* The resilient net (hot repair's layer: framing, acknowledgements, replay) over the one NIC. */
  const char* const resil[] = {"NCCL_BUFFSIZE=65536", "NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo",
                               "MEND_RESILIENCE=1", NULL};
  mpRun("onesided_ring_shm_2ranks", "ring", 2, shm, 60, 2, 0);
  mpRun("onesided_ring_shm_4ranks", "ring", 4, shm, 60, 4, 0);
  mpRun("onesided_ring_sockets_3ranks", "ring", 3, net, 60, 3, 0);
  mpRun("onesided_ring_resilient_net_3ranks", "ring", 3, resil, 60, 3, 0);
  mpRun("onesided_errors_shm", "errors", 2, shm, 60, 2, 0);
  mpRun("onesided_errors_sockets", "errors", 2, net, 60, 2, 0);
  mpRun("onesided_fresh_shm_3ranks", "fresh", 3, shm, 60, 3, 0);
  mpRun("onesided_fresh_sockets_3ranks", "fresh", 3, net, 60, 3, 0);
  mpRun("onesided_suspend_shm_3ranks", "suspend", 3, shm, 60, 3, 0);
  mpRun("onesided_suspend_sockets_2ranks", "suspend", 2, net, 60, 2, 0);
  return mtExitCode();
}
