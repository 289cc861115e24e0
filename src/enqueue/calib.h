/*
 * The cost model's constants (calib.c): per transport kind the cost of one hop and the bandwidths,
 * and the host's reduction rate.  Built-in values unless MEND_CALIB_FILE names a file written by
 * `mend-info --calibrate`, which measures them on the machine.  Read once per process; every rank
 * must read the same values (the same file on every host) so that every rank makes the same choice.
 */
#ifndef MEND_ENQUEUE_CALIB_H_
#define MEND_ENQUEUE_CALIB_H_

#include <stddef.h>
#include <stdio.h>

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
  int fromFile;                               /* 1: read from MEND_CALIB_FILE, 0: built in, MEND_CALIB_RANK0 */
};
#define MEND_CALIB_RANK0 2 /* a communicator's constants: rank 0's, which differ from this process's */

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

#ifdef __cplusplus
}
#endif

#endif
