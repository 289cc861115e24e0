/*
 * Operation signatures (struct mendOpSig, engine.h): the first slot of a work on each connector
 * carries its operation, so ranks that disagree on the operation (function, datatype, reduction,
 * root, count, or collective order) fail with ncclInvalidUsage and a WARN naming both calls instead
 * of hanging or mixing data.
 *
 * Framing (the same on p2p, shm and net: the signature is bytes in a slot, so the Net carries it
 * like data and the resilient net's replay rules are unchanged):
 *   - the data fits with the signature behind it (aligned to 8 bytes):  one slot of
 *     mendOpSigFramed(bytes) bytes, [data | pad | signature];
 *   - otherwise (a full first slot): a slot of MEND_OPSIG_BYTES holding only the signature, then
 *     the data slot as usual.
 * In both cases the signature is the posted slot's last MEND_OPSIG_BYTES, so a receiver reads the
 * sender's signature whatever framing it expected.  Later slots of the work carry data only: large
 * messages pay one small slot per connector per operation, small ones 32 bytes.
 * The helpers below are MEND_HD: the host engine and the CUDA kernel (both builds) share them.
 */
#ifndef MEND_DEVICE_OPSIG_H_
#define MEND_DEVICE_OPSIG_H_

#include <stddef.h>
#include <stdint.h>

#include "device/engine.h"

#define MEND_FUNC_SENDRECV_SIG 5 /* enum mendFunc's MEND_FUNC_SENDRECV (enqueue/gen.h), the func of send/recv */

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a first slot carrying `bytes` of data and the signature behind them; 0 when they do not
 * fit in a slot (the signature then goes alone, in a slot of its own, before the data). */
MEND_HD uint64_t mendOpSigFramed(uint64_t bytes, uint64_t slotBytes) {
  uint64_t f = (bytes + 7) / 8 * 8 + MEND_OPSIG_BYTES;
  return f <= slotBytes ? f : 0;
}

/* The signature as four 64-bit words (how executors move and compare it). */
union mendOpSigWords {
  struct mendOpSig s;               /* the fields */
  uint64_t w[MEND_OPSIG_BYTES / 8]; /* the words */
};

/* The two signatures name the same operation.  A send and its receive compare bytes only: their
 * collective counts (when they were called) may differ, as sends are not ordered against collectives. */
MEND_HD int mendOpSigSame(const struct mendOpSig* a, const struct mendOpSig* b) {
  if (a->magic != b->magic || a->func != b->func || a->count != b->count) return 0;
  if (a->func == MEND_FUNC_SENDRECV_SIG) return 1;
  return a->type == b->type && a->redKind == b->redKind && a->root == b->root && a->opCount == b->opCount &&
         a->reserved == b->reserved && a->zero == b->zero;
}

/* Where a posted slot of `got` bytes keeps its signature (its last MEND_OPSIG_BYTES), or -1 when it
 * cannot hold one (too short, longer than a slot, or not 8-byte aligned: never read such memory). */
MEND_HD int64_t mendOpSigOffset(uint64_t got, uint64_t slotBytes) {
  if (got < MEND_OPSIG_BYTES || got > slotBytes || got % 8 != 0) return -1;
  return (int64_t)(got - MEND_OPSIG_BYTES);
}

struct mendOp;
struct ncclComm;

/* Sign the works of one operation (the planner, once per op). */
void mendOpSigFill(struct mendWork* works, int nWorks, const struct mendOp* op);
/* "AllReduce opCount 3 float sum count 1024" (or what a slot without a signature held). */
void mendOpSigFormat(const struct mendOpSig* s, char* buf, size_t size);
/* A first slot from `peer` whose signature (`theirs`, NULL when the slot held none) differs from
 * `mine`: WARN naming both calls, mark comm's asynchronous error; returns ncclInvalidUsage. */
ncclResult_t mendOpSigMismatch(struct ncclComm* comm, int channel, int peer, const struct mendOpSig* mine,
                               const struct mendOpSig* theirs, uint64_t gotBytes);

#ifdef __cplusplus
}
#endif

#endif
