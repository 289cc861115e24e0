/*
 * Recursive doubling AllReduce, for small counts (AllGather at the end): log2(P) exchange rounds
 * instead of the ring's 2(n-1) hops (P: the largest power of two <= n).  Positions 0..n-1 (the
 * channel's ring order maps them to ranks); in round k position q exchanges its whole partial with
 * q ^ 2^k and reduces.
 * With n not a power of two, position P + e first folds its input into position e (one hop before
 * the rounds) and gets the result back from it (one hop after).
 *
 *  extra (q >= P):     send own input to q - P | recv the result
 *  folding (q < n-P):  recvReduceCopy from q + P | rounds | send the result to q + P
 *  each round k:       send partial to q ^ 2^k | recvReduceCopy from q ^ 2^k (the last one: post-op)
 *
 * Every rank reduces the same operands in mirrored order (a op b on one side, b op a on the other):
 * the operations are commutative, so all ranks hold the same bits (a NaN's payload aside when both
 * operands are NaNs, which IEEE leaves open).  One segment per loop: the whole chunk goes each round.
 */
#include "enqueue/gen.h"

#include <stdlib.h>

#include "checks.h"
#include "transport/fifo.h"
#include "transport/transport.h"

#define COLL MEND_CONN_COLL
#define PRE MEND_STEP_PREOP
#define POST MEND_STEP_POSTOP

int mendRdSupported(int nRanks) {
  int p = 1, rounds = 0;
  while (p * 2 <= nRanks) p *= 2, rounds++;
  /* Every round names two connectors, the fold two more: they must fit the peer table. */
  int peers = 2 * rounds + (p < nRanks ? 2 : 0);
  return nRanks >= 2 && peers <= MEND_PROG_MAX_PEERS && 2 * rounds + 2 <= MEND_PROG_MAX_STEPS;
}

/* The rounds of position q among the first p positions; `src` holds the partial they start from
 * (SEND: this rank's own input, not yet pre-multiplied). */
static void rounds(struct mendProgram* prog, const int* ranks, int q, int p, int src) {
  for (int bit = 1; bit < p; bit <<= 1) {
    int partner = ranks[q ^ bit], first = src == MEND_BUF_SEND, last = bit * 2 >= p;
    mendProgAddStep(prog, MEND_OP_SEND, first ? PRE : 0, -1, partner, COLL, src, MEND_BUF_NONE, 0, 1, 0);
    mendProgAddStep(prog, MEND_OP_RECV_REDUCE_COPY, (first ? PRE : 0) | (last ? POST : 0), partner, -1, COLL, src,
                    MEND_BUF_RECV, 0, 1, 0);
    src = MEND_BUF_RECV;
  }
}

ncclResult_t mendGenRdAllReduce(int n, const int* ranks, int q, struct mendProgram** prog) {
  if (n == 1) return mendGenCopy(PRE | POST, prog);
  if (!mendRdSupported(n)) {
    WARN("Recursive doubling: %d ranks need more connectors than a program holds", n);
    return ncclInternalError;
  }
  int p = 1;
  while (p * 2 <= n) p *= 2;
  struct mendProgram* prog0;
  MENDCHECK(mendProgAlloc(MEND_ALGO_RD, 0, &prog0));
  mendProgAddPhase(prog0, MEND_LAYOUT_CHUNKED, 1);
  if (q >= p) { /* extra: hand the input to q - p, take the result back */
    int host = ranks[q - p];
    mendProgAddStep(prog0, MEND_OP_SEND, PRE, -1, host, COLL, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
    mendProgAddStep(prog0, MEND_OP_RECV, 0, host, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, 0, 1, 0);
  } else if (q < n - p) { /* folding: the extra's input first, then the rounds, then the result back */
    int extra = ranks[q + p];
    mendProgAddStep(prog0, MEND_OP_RECV_REDUCE_COPY, PRE, extra, -1, COLL, MEND_BUF_SEND, MEND_BUF_RECV, 0, 1, 0);
    rounds(prog0, ranks, q, p, MEND_BUF_RECV);
    mendProgAddStep(prog0, MEND_OP_SEND, 0, -1, extra, COLL, MEND_BUF_RECV, MEND_BUF_NONE, 0, 1, 0);
  } else {
    rounds(prog0, ranks, q, p, MEND_BUF_SEND);
  }
  ncclResult_t res = mendProgValidate(prog0);
  if (res != ncclSuccess) {
    free(prog0);
    return res;
  }
  *prog = prog0;
  return ncclSuccess;
}

/* AllGather (blocked: segment = position, block = ranks[position]).
 *
 * n a power of two (recursive doubling): before the round of `bit`, position q holds the blocks of
 * its group of `bit` positions (q with its low bits cleared); it sends them to q ^ bit and receives
 * that position's group, so the group doubles.
 *
 * Any other n (Bruck's dissemination order, ceil(log2 n) rounds): before the round of distance d,
 * position q holds the d blocks q, q+1, ..., q+d-1 (mod n); it sends the first min(d, n - d) of them
 * to q - d and receives as many from q + d, which are the blocks q+d, ... (mod n) it lacks.  The
 * blocks land in place in the output (a run that passes position n - 1 wraps, as a step's segments
 * do), so no rotation is needed at the end.  Partners differ per round and per direction: 2 rounds
 * of connectors each.
 *
 * Round 0 copies the own block from the send buffer as it sends it.  A round's sends all go before
 * its receives: every position sends first, so a round may post up to n/2 slots on one connector
 * (its FIFO holds MEND_FIFO_SLOTS), and an op's first slot on a connector may take one more (its
 * signature alone, when the data fills the slot): they must fit, or the partners wait for room
 * (16 ranks, 1009 bytes a block, hung).  So 2-15 ranks. */
static int agRounds(int nRanks) {
  int rounds = 0;
  for (int p = 1; p < nRanks; p <<= 1) rounds++;
  return rounds;
}

int mendRdAllGatherSupported(int nRanks) {
  if (nRanks < 2) return 0;
  int rounds = agRounds(nRanks), lastDist = 1 << (rounds - 1), most = nRanks - lastDist;
  if (most < lastDist / 2) most = lastDist / 2; /* the round before the last sends lastDist / 2 */
  return 2 * rounds <= MEND_PROG_MAX_PEERS && 2 * rounds <= MEND_PROG_MAX_STEPS && most + 1 <= MEND_FIFO_SLOTS;
}

static void agPowerOfTwo(struct mendProgram* p, int n, const int* ranks, int q) {
  for (int bit = 1; bit < n; bit <<= 1) {
    int partner = ranks[q ^ bit], mine = q & ~(bit - 1), theirs = mine ^ bit;
    if (bit == 1) mendProgAddStep(p, MEND_OP_COPY_SEND, 0, -1, partner, COLL, MEND_BUF_SEND, MEND_BUF_RECV, q, 1, 0);
    else mendProgAddStep(p, MEND_OP_SEND, 0, -1, partner, COLL, MEND_BUF_RECV, MEND_BUF_NONE, mine, bit, 1);
    mendProgAddStep(p, MEND_OP_RECV, 0, partner, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, theirs, bit, 1);
  }
}

static void agBruck(struct mendProgram* p, int n, const int* ranks, int q) {
  for (int d = 1; d < n; d <<= 1) {
    int count = d < n - d ? d : n - d, to = ranks[(q - d + n) % n], from = ranks[(q + d) % n];
    if (d == 1) mendProgAddStep(p, MEND_OP_COPY_SEND, 0, -1, to, COLL, MEND_BUF_SEND, MEND_BUF_RECV, q, 1, 0);
    else mendProgAddStep(p, MEND_OP_SEND, 0, -1, to, COLL, MEND_BUF_RECV, MEND_BUF_NONE, q, count, 1);
    mendProgAddStep(p, MEND_OP_RECV, 0, from, -1, COLL, MEND_BUF_NONE, MEND_BUF_RECV, q + d, count, 1);
  }
}

ncclResult_t mendGenRdAllGather(int n, const int* ranks, int q, struct mendProgram** prog) {
  if (n == 1) return mendGenCopy(0, prog);
  if (!mendRdAllGatherSupported(n)) {
    WARN("Recursive doubling AllGather: %d ranks (2-15: its last round and connectors must fit a program "
         "and a FIFO)", n);
    return ncclInternalError;
  }
  struct mendProgram* p;
  MENDCHECK(mendProgAlloc(MEND_ALGO_RD, (uint32_t)n, &p));
  for (int i = 0; i < n; i++) p->segMap[i] = ranks[i];
  mendProgAddPhase(p, MEND_LAYOUT_BLOCKED, (uint32_t)n);
  if ((n & (n - 1)) == 0) agPowerOfTwo(p, n, ranks, q);
  else agBruck(p, n, ranks, q);
  ncclResult_t res = mendProgValidate(p);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *prog = p;
  return ncclSuccess;
}

/* ReduceScatter (blocked: segment = position, block = ranks[position]).  Position q sends the block
 * of q + d to q + d for d = 1..n-1 (its own input, pre-multiplied), then takes the one of q - d from
 * q - d in the same order (each sender's d-th send is to q: the order the data comes in) and reduces
 * it into its output: the first with its own block of the input, the rest with the partial there. */
int mendRdReduceScatterSupported(int nRanks) {
  return nRanks >= 2 && 2 * (nRanks - 1) <= MEND_PROG_MAX_PEERS && 2 * (nRanks - 1) <= MEND_PROG_MAX_STEPS;
}

ncclResult_t mendGenRdReduceScatter(int n, const int* ranks, int q, struct mendProgram** prog) {
  if (n == 1) return mendGenCopy(PRE | POST, prog);
  if (!mendRdReduceScatterSupported(n)) {
    WARN("One-hop ReduceScatter: %d ranks need more connectors than a program holds", n);
    return ncclInternalError;
  }
  struct mendProgram* p;
  MENDCHECK(mendProgAlloc(MEND_ALGO_RD, (uint32_t)n, &p));
  for (int i = 0; i < n; i++) p->segMap[i] = ranks[i];
  mendProgAddPhase(p, MEND_LAYOUT_BLOCKED, (uint32_t)n);
  for (int d = 1; d < n; d++) {
    int to = (q + d) % n;
    mendProgAddStep(p, MEND_OP_SEND, PRE, -1, ranks[to], COLL, MEND_BUF_SEND, MEND_BUF_NONE, to, 1, 0);
  }
  for (int d = 1; d < n; d++) {
    int from = (q - d + n) % n, first = d == 1, last = d == n - 1;
    mendProgAddStep(p, MEND_OP_RECV_REDUCE_COPY, (first ? PRE : 0) | (last ? POST : 0), ranks[from], -1, COLL,
                    first ? MEND_BUF_SEND : MEND_BUF_RECV, MEND_BUF_RECV, q, 1, 0);
  }
  ncclResult_t res = mendProgValidate(p);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *prog = p;
  return ncclSuccess;
}
