/*
 * The cost model's one-host constants measured by the library itself (MEND_CALIB_AUTO), and the
 * pair measurement `mend-info --calibrate` shares.
 *
 * With MEND_CALIB_AUTO=1 (off by default: src/enqueue/README.md says why) and without MEND_CALIB_FILE,
 * rank 0 of a host-mode communicator measures, once per process and before
 * its init's allgather (every rank then plans with rank 0's values, init_peers.c), with two ranks of
 * a communicator of its own in two threads (mendCommInitInner):
 *   hop         half the best round trip of an 8-byte ping-pong, the two threads on two CPUs;
 *   stream      16 MiB messages one way, as `mend-info --calibrate` streams them, on the default
 *               channels per peer: bw channel and bw max (that tool found them equal for shm);
 *   hand-off    the same ping-pong with both threads on one CPU (ranks that outnumber CPUs);
 *   reduce      the host's float sum on 4 MiB buffers.
 * The two ranks of one process move their slots through Mend's p2p connectors, whose engine, FIFOs
 * and copies are the shm transport's; only the mapping differs (measured on the reference machine:
 * p2p 0.251 us and 17.96 GB/s a channel, shm 0.253 us and 18.74, `mend-info --calibrate`).  So the
 * values stand for both kinds; the net kind keeps its built-in values (loopback is not a NIC).  A
 * measurement that cannot run (fewer than 2 usable CPUs, p2p and shm disabled, an init that fails)
 * keeps the built-in values and says why once.
 */
#include "enqueue/calib.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "checks.h"
#include "comm.h"
#include "device/reduce.h"
#include "init.h"
#include "misc/param.h"
#include "transport/transport.h"

/* The strong symbols behind the public API (api.h): the library's own calls do not go through a
 * profiler's interposed ncclX. */
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

#define PINGS 50   /* round trips per batch */
#define BATCHES 8  /* batches after a warm-up one; the best counts */

static double nowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static ncclResult_t xfer(ncclComm_t comm, int send, void* buf, size_t bytes) {
  return send ? pncclSend(buf, bytes, ncclChar, 1 - comm->rank, comm, NULL)
              : pncclRecv(buf, bytes, ncclChar, 1 - comm->rank, comm, NULL);
}

/* `reps` messages of `bytes` from rank 0 to rank 1 after one unmeasured; GB/s to rank 1's last byte
 * (rank 1 answers with 8 bytes). */
static ncclResult_t stream(ncclComm_t comm, char* buf, size_t bytes, int reps, double* gbs) {
  int rank = comm->rank;
  double t0 = 0;
  for (int i = 0; i < reps + 1; i++) {
    if (i == 1) t0 = nowUs();
    MENDCHECK(xfer(comm, rank == 0, buf, bytes));
  }
  MENDCHECK(xfer(comm, rank == 1, buf, 8));
  *gbs = (double)bytes * reps / (nowUs() - t0) / 1e3;
  return ncclSuccess;
}

ncclResult_t mendCalibPairRun(ncclComm_t comm, size_t streamBytes, int streamReps, struct mendCalibPair* out) {
  memset(out, 0, sizeof(*out));
  MENDARGCHECK(comm != NULL && comm->nRanks == 2, ncclInvalidArgument, "calibration: a pair of ranks is needed");
  int rank = comm->rank;
  size_t big = streamBytes > 8 ? streamBytes : 8;
  char* buf = malloc(big);
  if (buf == NULL) return ncclSystemError;
  memset(buf, rank, big);
  ncclResult_t res = ncclSuccess;
  double best = 1e30;
  for (int b = 0; b < BATCHES + 1 && res == ncclSuccess; b++) { /* batch 0 warms up */
    double t0 = nowUs();
    for (int i = 0; i < PINGS && res == ncclSuccess; i++) {
      res = xfer(comm, rank == 0, buf, 8);
      if (res == ncclSuccess) res = xfer(comm, rank == 1, buf, 8);
    }
    double rtt = (nowUs() - t0) / PINGS;
    if (b > 0 && rtt < best) best = rtt;
  }
  out->alphaUs = best / 2;
  if (res == ncclSuccess && streamReps > 0) res = stream(comm, buf, streamBytes, streamReps, &out->gbs);
  free(buf);
  out->ok = res == ncclSuccess;
  return res;
}

/* ---- at init ---- */

struct pairThread {
  ncclComm_t comm;
  ncclComm_t peer;           /* the other rank's: aborted when this one fails, so it never waits for us */
  int cpu;                   /* pin to this CPU */
  int streams;               /* 1: the streams too (else the ping-pong only) */
  int pinned;                /* the thread runs on cpu only */
  struct mendCalibPair out;  /* rank 0's is the measurement */
  ncclResult_t res;
};

/* Runs whether or not the pin took (the peer waits for every message): an unpinned run is measured
 * and then thrown away. */
static void* pairThreadRun(void* p) {
  struct pairThread* t = p;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(t->cpu, &one);
  t->pinned = sched_setaffinity(0, sizeof(one), &one) == 0; /* this thread only */
  t->res = mendCalibPairRun(t->comm, 16u << 20, t->streams ? 4 : 0, &t->out);
  if (t->res != ncclSuccess) {
    mendCommSetAbortFlag(t->comm, 1);
    mendCommSetAbortFlag(t->peer, 1);
  }
  return NULL;
}

/* A pair of inner ranks on CPUs a and b (a == b: one CPU); rank 0's numbers in *out. */
static ncclResult_t measurePair(int a, int b, int streams, struct mendCalibPair* out) {
  ncclComm_t comms[2] = {NULL, NULL};
  MENDCHECK(mendCommInitInner(comms, 2));
  struct pairThread t[2] = {{.comm = comms[0], .peer = comms[1], .cpu = a, .streams = streams},
                            {.comm = comms[1], .peer = comms[0], .cpu = b, .streams = streams}};
  pthread_t th[2];
  int started = 0;
  ncclResult_t res = ncclSuccess;
  for (; started < 2; started++) {
    if (pthread_create(&th[started], NULL, pairThreadRun, &t[started]) != 0) {
      res = ncclSystemError;
      break;
    }
  }
  if (started < 2) mendCommSetAbortFlag(comms[0], 1); /* the started one stops waiting for its peer */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2 && res == ncclSuccess; i++) res = t[i].res;
  int healthy = res == ncclSuccess; /* both ranks ran every call: an orderly destroy */
  if (res == ncclSuccess && !(t[0].pinned && t[1].pinned)) {
    INFO(NCCL_INIT | NCCL_TUNING, "Calibration at init: cannot place its threads on CPUs %d and %d", a, b);
    res = ncclSystemError;
  }
  *out = t[0].out;
  for (int i = 0; i < 2; i++) {
    if (healthy) pncclCommDestroy(comms[i]);
    else pncclCommAbort(comms[i]); /* a failed pair leaves nothing waiting behind */
  }
  return res;
}

/* Two CPUs this process may run on: the first two of its affinity, else of the online ones.
 * -1 when there are not two. */
static int twoCpus(int* a, int* b) {
  cpu_set_t set;
  int n = 0, got[2];
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
      if (CPU_ISSET(c, &set)) got[n++] = c;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 2 && online >= 2) { /* a rank bound to one CPU may still place a thread on another */
    got[0] = n == 1 ? got[0] : 0;
    got[1] = got[0] == 0 ? 1 : 0;
    n = 2;
  }
  if (n < 2) return -1;
  *a = got[0];
  *b = got[1];
  return 0;
}

/* Float sum GB/s of output on 4 MiB buffers, for `us` microseconds. */
double mendCalibReduceGBs(double us) {
  const size_t bytes = 4u << 20, n = bytes / sizeof(float);
  float *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
  double gbs = 0;
  struct mendRedOp op;
  if (a && b && d && mendRedOpResolve(ncclSum, ncclFloat32, 2, &op) == ncclSuccess) {
    for (size_t i = 0; i < n; i++) a[i] = b[i] = 0.5f + (float)(i & 1023) / 1024.0f;
    mendReduce(&op, d, a, b, n, 0);
    double t0 = nowUs(), t1;
    long it = 0;
    do {
      mendReduce(&op, d, a, b, n, 0);
      it++;
      t1 = nowUs();
    } while (t1 - t0 < us);
    gbs = (double)bytes * (double)it / (t1 - t0) / 1e3;
  }
  free(a);
  free(b);
  free(d);
  return gbs;
}

/* Why the measurement cannot run here, or NULL. */
static const char* cannotMeasure(int* a, int* b) {
  if (mendParamP2pDisable() && mendParamShmDisable()) return "p2p and shm are disabled (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE)";
  if (mendParamForceTransport() && strcmp(mendParamForceTransport(), "net") == 0) return "MEND_FORCE_TRANSPORT=net";
  if (twoCpus(a, b) != 0) return "fewer than 2 CPUs";
  return NULL;
}

static struct mendCalib measured;
static int measuredState; /* 0: not tried, 1: measured, -1: could not */
static pthread_mutex_t measureLock = PTHREAD_MUTEX_INITIALIZER;

/* Once per process: the measurement, or -1 (the built-in values stay). */
static int measureOnce(void) {
  pthread_mutex_lock(&measureLock);
  if (measuredState == 0) {
    int a = 0, b = 1;
    const char* why = cannotMeasure(&a, &b);
    struct mendCalibPair hop, crowded;
    double t0 = nowUs();
    ncclResult_t res = why ? ncclInvalidUsage : measurePair(a, b, 1, &hop);
    if (!why && res != ncclSuccess) why = "its two ranks could not run it (see above)";
    if (!why && measurePair(a, a, 0, &crowded) != ncclSuccess) why = "the hand-off pair failed (see above)";
    if (why) {
      INFO(NCCL_INIT | NCCL_TUNING, "Calibration at init: not measured (%s); the built-in constants stay", why);
      measuredState = -1;
    } else {
      mendCalibDefaults(&measured);
      double red = mendCalibReduceGBs(2e4);
      for (int k = MEND_TRANSPORT_P2P; k <= MEND_TRANSPORT_SHM; k++) {
        measured.kind[k].alphaUs = hop.alphaUs;
        measured.kind[k].bwMax = hop.gbs;
        measured.kind[k].bwChannel = hop.gbs;
      }
      measured.handoffUs = crowded.alphaUs;
      if (red > 0) measured.reduceGBs = red;
      measured.fromFile = MEND_CALIB_MEASURED;
      char err[160];
      if (mendCalibCheck(&measured, err, sizeof(err)) != 0) {
        INFO(NCCL_INIT | NCCL_TUNING, "Calibration at init: a value is out of range (%s); the built-in constants stay",
             err);
        measuredState = -1;
      } else {
        INFO(NCCL_INIT | NCCL_TUNING, "Calibration at init (CPUs %d and %d, %.0f ms): hop %.3f us, stream %.2f GB/s, "
             "hand-off %.2f us, reduce %.2f GB/s", a, b, (nowUs() - t0) / 1e3, hop.alphaUs, hop.gbs, crowded.alphaUs,
             measured.reduceGBs);
        measuredState = 1;
      }
    }
  }
  int state = measuredState;
  pthread_mutex_unlock(&measureLock);
  return state;
}

#define CALIB_TAG 0x434c4200 /* bootstrap tag of rank 0's measured constants ("CLB") */

ncclResult_t mendCalibMeasureCrowded(struct ncclComm* comm) {
  if (!comm->calibBuiltIn || !comm->hostMode || comm->calibInner || comm->nRanks < 2 || comm->cpuCrowd <= 1.0)
    return ncclSuccess;
  struct mendCalib c = *comm->calib;
  if (comm->rank == 0) {
    if (mendParamCalibAuto() && measureOnce() == 1) c = measured;
    for (int r = 1; r < comm->nRanks; r++) MENDCHECK(mendBootstrapSend(comm->bootstrap, r, CALIB_TAG, &c, sizeof(c)));
  } else {
    MENDCHECK(mendBootstrapRecv(comm->bootstrap, 0, CALIB_TAG, &c, sizeof(c)));
    if (c.fromFile != MEND_CALIB_MEASURED) return ncclSuccess; /* rank 0 did not measure: built-in values stay */
    char err[160]; /* values from the network: checked as a file's are */
    if (mendCalibCheck(&c, err, sizeof(err)) != 0) {
      WARN("Init: rank 0's measured cost-model constants are not valid (%s); the built-in ones stay", err);
      return ncclSuccess;
    }
  }
  if (c.fromFile == MEND_CALIB_MEASURED) *comm->calib = c;
  return ncclSuccess;
}
