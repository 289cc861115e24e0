/*
 * Fuzz target: the plan-view agreement (resilience/agree.c) fed messages from other ranks, as the
 * resilience service hands them over (mendAgreeOnMsg), mixed with the messages the protocol itself
 * sends and with health changes that make the coordinator open rounds.  agree.c is linked as it is;
 * the planner under it is a fake (below) that checks what the agreement gives it: a round is
 * installed at most once and in increasing order, from an op not before the one this rank held
 * at, with a picture of at most MEND_VIEW_MAX_HEALTH NICs of the communicator, sorted by (rank, dev)
 * without repeats, each in a known state with a finite, non-negative bandwidth.
 *
 * Input: the shape (two bytes: ranks, devices), then records until the input ends: a byte saying
 * what happens (a fuzzed message to the coordinator or to a member, a health change at the
 * coordinator, time passing, or the protocol's own queued messages delivered), and for a message
 * its sender byte and sizeof(struct mendAgreeMsg) bytes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "resilience/agree.h"

#define FUZZ_QUEUE 64  /* messages the fake network holds */

/* The fake planner of one rank: what it was told. */
struct ncclComm {
  uint32_t heldRound;  /* round held for (0: none) */
  uint64_t heldOp;     /* the nextOp it answered */
  uint32_t lastRound;  /* last round committed */
  uint64_t nextOp;     /* ops planned so far (grows as time passes) */
};

ncclResult_t mendPlannerHold(struct ncclComm* comm, uint32_t round, uint64_t* nextOp) {
  comm->heldRound = round;
  comm->heldOp = comm->nextOp;
  *nextOp = comm->nextOp;
  return ncclSuccess;
}

ncclResult_t mendPlannerCommit(struct ncclComm* comm, uint32_t round, uint64_t fromOp, const struct mendViewHealth* h,
                               int64_t changeMs) {
  if (round <= comm->lastRound || fromOp < comm->heldOp) abort();  /* twice, backwards, or before our hold */
  if (h->nNics < 0 || h->nNics > MEND_VIEW_MAX_HEALTH || (h->nNics > 0 && h->nics == NULL)) abort();
  for (int i = 0; i < h->nNics; i++) {
    const struct mendViewNic* n = &h->nics[i];
    if (n->rank < 0 || n->rank >= h->nRanks || n->dev < 0 || n->dev >= h->maxDevs) abort();
    if (n->state < MEND_NIC_UP || n->state > MEND_NIC_PROBING || !isfinite(n->gbps) || n->gbps < 0) abort();
    if (i > 0 && (h->nics[i - 1].rank > n->rank || (h->nics[i - 1].rank == n->rank && h->nics[i - 1].dev >= n->dev)))
      abort();  /* not sorted, or a NIC twice */
  }
  comm->lastRound = round;
  comm->heldRound = 0;
  return ncclSuccess;
}

/* The fake network: messages the agreements sent, delivered when the input says so. */
struct queued {
  int from, to;               /* ranks */
  struct mendAgreeMsg m;      /* the message */
};
struct net {
  struct queued q[FUZZ_QUEUE];  /* in order */
  int n;                        /* used */
};
struct sender {
  struct net* net;  /* shared */
  int rank;         /* who sends */
};

static void sendMsg(void* ctx, int peer, const struct mendAgreeMsg* m) {
  struct sender* s = ctx;
  if (s->net->n == FUZZ_QUEUE) return;  /* lost: the protocol re-sends */
  s->net->q[s->net->n++] = (struct queued){.from = s->rank, .to = peer, .m = *m};
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  int nRanks = 2 + fuzzByte(&in) % 7, maxDevs = 1 + fuzzByte(&in) % 4;
  int line[9 * 4];
  for (int i = 0; i < nRanks * maxDevs; i++) line[i] = 100000;
  /* The coordinator (rank 0) and one member (rank 1), each with its registry and planner. */
  struct mendHealth health[2];
  struct ncclComm comm[2];
  struct mendAgree* ag[2] = {NULL, NULL};
  struct net net = {.n = 0};
  struct sender snd[2] = {{&net, 0}, {&net, 1}};
  memset(health, 0, sizeof(health));
  memset(comm, 0, sizeof(comm));
  for (int r = 0; r < 2; r++) {
    if (mendHealthInit(&health[r], nRanks, maxDevs, line) != ncclSuccess) abort();
    struct mendAgreeNet an = {.send = sendMsg, .ctx = &snd[r]};
    if (mendAgreeCreate(&comm[r], r, nRanks, &health[r], &an, 10, &ag[r]) != ncclSuccess) abort();
  }
  int64_t now = 1000;
  for (int steps = 0; steps < 256; steps++) {
    const uint8_t* what = fuzzTake(&in, 1);
    if (what == NULL) break;
    switch (*what % 5) {
      case 0:
      case 1: { /* a fuzzed message to rank (*what % 5): from the byte that follows */
        int to = *what % 5, from = fuzzByte(&in) % (nRanks + 1) - 1;
        const uint8_t* raw = fuzzTake(&in, sizeof(struct mendAgreeMsg));
        if (raw == NULL) break;
        struct mendAgreeMsg m;
        memcpy(&m, raw, sizeof(m));
        mendAgreeOnMsg(ag[to], from, &m, now);
        break;
      }
      case 2: { /* a health change at the coordinator (as if decided or broadcast) */
        struct mendHealthUpdate u = {.rank = fuzzByte(&in) % nRanks, .dev = fuzzByte(&in) % maxDevs,
                                     .state = fuzzByte(&in) % 4, .reporter = 0};
        mendHealthDecide(&health[0], &u);
        break;
      }
      case 3: /* time passes: the planners move on, the coordinator opens rounds and re-sends */
        now += 1 + (*what >> 3);
        comm[0].nextOp += *what >> 5;
        comm[1].nextOp += *what >> 5;
        mendAgreeTick(ag[0], now);
        mendAgreeTick(ag[1], now);
        break;
      case 4: { /* the protocol's own messages arrive (only those between the two ranks here) */
        struct net arrived = net;
        net.n = 0;
        for (int i = 0; i < arrived.n; i++)
          if (arrived.q[i].to < 2) mendAgreeOnMsg(ag[arrived.q[i].to], arrived.q[i].from, &arrived.q[i].m, now);
        break;
      }
    }
  }
  for (int r = 0; r < 2; r++) {
    mendAgreeFree(ag[r]);
    mendHealthFree(&health[r]);
  }
  return 0;
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  /* 2 ranks, 2 devices: rank 1's device 1 goes down, the round runs to its end over the fake net. */
  fuzzPutByte(&b, 0);
  fuzzPutByte(&b, 1);
  const uint8_t change[] = {2, 1, 1, MEND_NIC_DOWN};
  fuzzPut(&b, change, sizeof(change));
  for (int i = 0; i < 6; i++) {
    fuzzPutByte(&b, 3);  /* tick */
    fuzzPutByte(&b, 4);  /* deliver */
  }
  fuzzSeedWrite(s, b.data, b.len);
  /* A member given a COMMIT part by hand after a PROPOSE. */
  b.len = 0;
  fuzzPutByte(&b, 1);
  fuzzPutByte(&b, 1);
  struct mendAgreeMsg m = {.kind = MEND_AGREE_PROPOSE, .round = 1};
  fuzzPutByte(&b, 1);
  fuzzPutByte(&b, 1);  /* from rank 0 */
  fuzzPut(&b, &m, sizeof(m));
  m = (struct mendAgreeMsg){.kind = MEND_AGREE_COMMIT, .round = 1, .op = 0, .nNics = 2, .first = 0, .count = 2};
  m.nics[0] = (struct mendViewNic){.rank = 0, .dev = 0, .state = MEND_NIC_DEGRADED, .gbps = 40};
  m.nics[1] = (struct mendViewNic){.rank = 2, .dev = 0, .state = MEND_NIC_DOWN};
  fuzzPutByte(&b, 1);
  fuzzPutByte(&b, 1);
  fuzzPut(&b, &m, sizeof(m));
  fuzzSeedWrite(s, b.data, b.len);
  /* The coordinator given a REPLY and an ACK by hand. */
  b.len = 0;
  fuzzPutByte(&b, 2);
  fuzzPutByte(&b, 0);
  fuzzPut(&b, change, sizeof(change));
  fuzzPutByte(&b, 3);
  m = (struct mendAgreeMsg){.kind = MEND_AGREE_REPLY, .round = 1, .op = 5};
  for (int from = 2; from <= 3; from++) {
    fuzzPutByte(&b, 0);
    fuzzPutByte(&b, (uint8_t)from);
    fuzzPut(&b, &m, sizeof(m));
  }
  m.kind = MEND_AGREE_ACK;
  fuzzPutByte(&b, 0);
  fuzzPutByte(&b, 2);
  fuzzPut(&b, &m, sizeof(m));
  fuzzSeedWrite(s, b.data, b.len);
}

FUZZ_SEEDS
