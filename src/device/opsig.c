/*
 * Operation signatures on the host: made by the planner for each op, printed when two ranks
 * disagree (opsig.h has the framing the executors share).
 */
#include "device/opsig.h"

#include <stdio.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"

_Static_assert(MEND_FUNC_SENDRECV_SIG == MEND_FUNC_SENDRECV, "opsig.h names MEND_FUNC_SENDRECV's value");

void mendOpSigFill(struct mendWork* works, int nWorks, const struct mendOp* op) {
  struct mendOpSig s = {.magic = MEND_OPSIG_MAGIC, .root = -1, .redKind = 0xff};
  int p2p = op->func == MEND_FUNC_SEND || op->func == MEND_FUNC_RECV;
  int reduces = op->func == MEND_FUNC_ALLREDUCE || op->func == MEND_FUNC_REDUCE || op->func == MEND_FUNC_REDUCESCATTER;
  int rooted = op->func == MEND_FUNC_BROADCAST || op->func == MEND_FUNC_REDUCE || op->func == MEND_FUNC_GATHER ||
               op->func == MEND_FUNC_SCATTER;
  s.func = (uint8_t)(p2p ? MEND_FUNC_SENDRECV : op->func);
  /* A send and its receive agree on bytes (NCCL moves bytes; the datatypes may differ) and are not
   * ordered against collectives, so neither the type nor the collective count is compared. */
  s.type = p2p ? 0xff : (uint8_t)op->type;
  s.count = p2p ? op->count * mendTypeSize(op->type) : op->count;
  s.opCount = op->opCount; /* send/recv: the collective count when called (compared by sigScan only) */
  if (reduces) s.redKind = op->redop.kind; /* the kind: user ops' handles are local to a rank */
  if (rooted) s.root = op->root;
  for (int i = 0; i < nWorks; i++) works[i].args.sig = s;
}

void mendOpSigFormat(const struct mendOpSig* s, char* buf, size_t size) {
  if (s == NULL || s->magic != MEND_OPSIG_MAGIC) {
    snprintf(buf, size, "an operation with no signature");
    return;
  }
  if (s->func == MEND_FUNC_SENDRECV) {
    snprintf(buf, size, "Send/Recv of %llu bytes", (unsigned long long)s->count);
    return;
  }
  int n = snprintf(buf, size, "%s opCount %llu %s", mendFuncName(s->func), (unsigned long long)s->opCount,
                   mendTypeName((ncclDataType_t)s->type));
  if (n > 0 && (size_t)n < size && s->redKind != 0xff)
    n += snprintf(buf + n, size - (size_t)n, " %s", mendRedKindName(s->redKind));
  if (n > 0 && (size_t)n < size && s->root >= 0) n += snprintf(buf + n, size - (size_t)n, " root %d", (int)s->root);
  if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, " count %llu", (unsigned long long)s->count);
}

ncclResult_t mendOpSigMismatch(struct ncclComm* comm, int channel, int peer, const struct mendOpSig* mine,
                               const struct mendOpSig* theirs, uint64_t gotBytes) {
  char a[160], b[160];
  mendOpSigFormat(mine, a, sizeof a);
  mendOpSigFormat(theirs, b, sizeof b);
  if (theirs && theirs->magic == MEND_OPSIG_MAGIC)
    WARN("Collective mismatch on channel %d: rank %d %s vs rank %d %s: every rank must call the same "
         "operations in the same order", channel, comm->rank, a, peer, b);
  else
    WARN("Collective mismatch on channel %d: rank %d %s vs rank %d %s (a %llu-byte slot where the first slot of "
         "an operation was expected): every rank must call the same operations in the same order", channel,
         comm->rank, a, peer, b, (unsigned long long)gotBytes);
  mendCommSetAsyncError(comm, ncclInvalidUsage);
  return ncclInvalidUsage;
}
