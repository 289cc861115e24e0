/*
 * The cost model's constants (calib.c): per transport kind the cost of one hop and the bandwidths,
 * and the host's reduction rate.  MEND_CALIB_FILE names a file written by `mend-info --calibrate`,
 * which measures them on the machine; without one and with MEND_CALIB_AUTO=1, rank 0 of a host-mode
 * communicator measures the one-host ones at init (calib_measure.c); else built-in values.  Every rank plans
 * with rank 0's (they travel in the init allgather), so that every rank makes the same choice.
 */
#ifndef MEND_ENQUEUE_CALIB_H_
#define MEND_ENQUEUE_CALIB_H_

#include <stddef.h>
#include <stdio.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_CALIB_KINDS 3 /* enum mendTransportKind: p2p, shm, net */

struct mendKindCost {
  double alphaUs;   /* one hop: a slot posted by one rank and consumed by the next, microseconds */
  double bwChannel; /* GB/s one channel moves */
  double bwMax;     /* GB/s all channels of a rank move together */
};

struct mendCalib {
  struct mendKindCost kind[MEND_CALIB_KINDS]; /* indexed by enum mendTransportKind */
  double reduceGBs;                           /* host float sum, GB/s of output (dst = a + b) */
  double handoffUs;                           /* one hop between two ranks that share one CPU (shm), us */
  int fromFile;                               /* 1: read from MEND_CALIB_FILE, 0: built in, MEND_CALIB_RANK0,
                                               * MEND_CALIB_MEASURED */
};
#define MEND_CALIB_RANK0 2 /* a communicator's constants: rank 0's, which differ from this process's */
#define MEND_CALIB_MEASURED 3 /* measured at init by rank 0's process (calib_measure.c) */

/* The built-in constants (the reference machine's, src/enqueue/README.md). */
void mendCalibDefaults(struct mendCalib* c);
/* Parse the text of a calibration file into *c (which holds the values keys not in the text keep).
 * Lines: `# comment`, blank, or `key value` with key one of p2p|shm|net . alpha_us|bw_channel_gbs|
 * bw_max_gbs, reduce_gbs or handoff_us.  Returns 0, or -1 with err naming the line and what is wrong (unknown
 * key, a value that is not a finite number in range, bwMax below bwChannel); *c is then unchanged. */
int mendCalibParse(const char* text, struct mendCalib* c, char* err, size_t errLen);
/* Write c in the format mendCalibParse reads. */
void mendCalibWrite(FILE* f, const struct mendCalib* c);
/* The built-in constants, then the file at path over them (NULL or "": none).  0 when the file was
 * used (or none was named); -1 when it could not be read or parsed: WARNs, and *c holds the built-in
 * constants. */
int mendCalibLoad(const char* path, struct mendCalib* c);
/* The constants the planner uses: MEND_CALIB_FILE's (once, at the first call; a file that cannot be
 * read or parsed WARNs and the built-in values are used) or the built-in ones. */
const struct mendCalib* mendCalibGet(void);
/* 0 when every value is finite and in the range a calibration file allows (and bw_max >= bw_channel);
 * -1 with err naming the first that is not.  For constants that came over the network. */
int mendCalibCheck(const struct mendCalib* c, char* err, size_t errLen);
/* 1 when a and b hold the same constants (where they came from aside). */
int mendCalibEqual(const struct mendCalib* a, const struct mendCalib* b);
/* One line for NCCL_DEBUG_SUBSYS=TUNING: where the constants came from and every value. */
void mendCalibDescribe(const struct mendCalib* c, char* buf, size_t len);

/* calib_measure.c */
struct ncclComm;
/* What one pair of ranks measured (rank 0's numbers; rank 1 runs the same calls). */
struct mendCalibPair {
  double alphaUs; /* one hop: half the best round trip of an 8-byte ping-pong, us */
  double gbs;     /* a stream of streamBytes messages, GB/s (0: not run) */
  int ok;         /* every call succeeded */
};
/* Both ranks of a 2-rank communicator call it, each from its own thread or process: the ping-pong,
 * then streamReps messages of streamBytes from rank 0 to rank 1 (0: none). */
ncclResult_t mendCalibPairRun(struct ncclComm* comm, size_t streamBytes, int streamReps, struct mendCalibPair* out);
/* Host float sum, GB/s of output on 4 MiB buffers, timed for `us` microseconds. */
double mendCalibReduceGBs(double us);
/* After the init exchange and the host layout (every rank calls it): when a host of a host-mode
 * communicator is crowded (comm->cpuCrowd > 1) and rank 0 offered the built-in constants (no
 * MEND_CALIB_FILE), rank 0's process measures the one-host constants (MEND_CALIB_AUTO, once per
 * process, in two threads of its own: calib_measure.c) and sends every rank what to plan with. */
ncclResult_t mendCalibMeasureCrowded(struct ncclComm* comm);

#ifdef __cplusplus
}
#endif

#endif
