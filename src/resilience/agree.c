/*
 * Agreement on a new plan view (agree.h): the coordinator's rounds and every rank's part.
 */
#include "resilience/agree.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/utils.h"

/* The coordinator's round. */
enum agreePhase {
  AGREE_IDLE = 0,    /* no round open: watching the registry's epoch */
  AGREE_PROPOSING,   /* PROPOSE sent: waiting for every REPLY */
  AGREE_COMMITTING   /* COMMIT sent: waiting for every ACK */
};

struct mendAgree {
  struct ncclComm* comm;     /* whose planner */
  int rank, nRanks;          /* ours */
  struct mendHealth* health; /* the registry (not owned) */
  struct mendAgreeNet net;   /* how messages leave */
  int64_t resendMs;          /* coordinator's re-send interval */
  float* lineGbps;           /* [nRanks * maxDevs] line rates from the registry (fixed after init) */
  int maxDevs;               /* devices per rank in lineGbps */
  pthread_mutex_t lock;      /* everything below */

  /* ---- coordinator ---- */
  int phase;                 /* enum agreePhase */
  uint32_t round;            /* last round opened */
  uint32_t seenEpoch;        /* registry epoch looked at last */
  int64_t changeMs;          /* when the change that opened the round was seen */
  uint64_t lastFromOp;       /* fromOp of the last round (rounds never go back) */
  uint64_t fromOp;           /* this round's */
  uint8_t* answered;         /* [nRanks]: REPLY (proposing) or ACK (committing) in */
  uint64_t* replyOp;         /* [nRanks]: their nextOp */
  int64_t* sentMs;           /* [nRanks]: last PROPOSE / COMMIT sent */
  int nAnswered;             /* count of answered */
  struct mendViewNic* agreed; /* [MEND_VIEW_MAX_HEALTH] the picture last committed */
  int nAgreed;               /* its entries */
  struct mendViewNic* pic;   /* [MEND_VIEW_MAX_HEALTH] this round's picture */
  int nPic;                  /* its entries */
  uint32_t picEpoch;         /* registry epoch it was taken at */

  /* ---- every rank ---- */
  uint32_t heldRound;        /* round whose PROPOSE we hold for (0: none) */
  uint64_t heldOp;           /* the nextOp we replied */
  uint32_t doneRound;        /* last round installed */
  uint32_t partRound;        /* round of the COMMIT parts being gathered (0: none) */
  uint64_t partFromOp;       /* their fromOp */
  int32_t partTotal;         /* their picture size */
  int64_t partAgeMs;         /* their ageMs */
  int64_t partFirstMs;       /* when the first part came (the change time is counted back from it) */
  int partHave;              /* entries gathered */
  uint8_t* partGot;          /* [MEND_VIEW_MAX_HEALTH] entry i gathered */
  struct mendViewNic* part;  /* [MEND_VIEW_MAX_HEALTH] the picture being gathered */
};

static void sendTo(struct mendAgree* a, int peer, const struct mendAgreeMsg* m) { a->net.send(a->net.ctx, peer, m); }

ncclResult_t mendAgreeCreate(struct ncclComm* comm, int rank, int nRanks, struct mendHealth* health,
                             const struct mendAgreeNet* net, int64_t resendMs, struct mendAgree** out) {
  MENDARGCHECK(comm && health && health->nics && net && net->send && out && nRanks >= 1 && rank >= 0 &&
                   rank < nRanks && health->nRanks == nRanks && resendMs > 0,
               ncclInvalidArgument, "agreement: bad arguments (rank %d of %d, registry of %d ranks, resend %lld ms)",
               rank, nRanks, health ? health->nRanks : -1, (long long)resendMs);
  struct mendAgree* a;
  MENDCHECK(MENDCALLOC(a, 1));
  a->comm = comm, a->rank = rank, a->nRanks = nRanks, a->health = health, a->net = *net, a->resendMs = resendMs;
  a->maxDevs = health->maxDevs;
  pthread_mutex_init(&a->lock, NULL);
  size_t nd = (size_t)nRanks * (size_t)a->maxDevs;
  ncclResult_t res = ncclSuccess;
  MENDCHECKGOTO(MENDCALLOC(a->lineGbps, nd), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->answered, nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->replyOp, nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->sentMs, nRanks), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->agreed, MEND_VIEW_MAX_HEALTH), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->pic, MEND_VIEW_MAX_HEALTH), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->part, MEND_VIEW_MAX_HEALTH), res, fail);
  MENDCHECKGOTO(MENDCALLOC(a->partGot, MEND_VIEW_MAX_HEALTH), res, fail);
  pthread_mutex_lock(&health->lock);
  for (size_t i = 0; i < nd; i++) a->lineGbps[i] = health->nics[i].lineGbps;
  pthread_mutex_unlock(&health->lock);
  *out = a;
  return ncclSuccess;
fail:
  mendAgreeFree(a);
  return res;
}

void mendAgreeFree(struct mendAgree* a) {
  if (a == NULL) return;
  pthread_mutex_destroy(&a->lock);
  free(a->lineGbps);
  free(a->answered);
  free(a->replyOp);
  free(a->sentMs);
  free(a->agreed);
  free(a->pic);
  free(a->part);
  free(a->partGot);
  free(a);
}

uint32_t mendAgreeRound(struct mendAgree* a) {
  pthread_mutex_lock(&a->lock);
  uint32_t r = a->doneRound;
  pthread_mutex_unlock(&a->lock);
  return r;
}

int mendAgreeBusy(struct mendAgree* a) {
  pthread_mutex_lock(&a->lock);
  int b = a->phase != AGREE_IDLE;
  pthread_mutex_unlock(&a->lock);
  return b;
}

/* ---------------------------------------------------------------- the picture */

/* The NICs the registry says are not up at line rate, sorted by (rank, dev); returns the count and
 * the registry's epoch in *epoch. */
static int takePicture(struct mendAgree* a, struct mendViewNic* out, uint32_t* epoch) {
  struct mendHealth* h = a->health;
  int n = 0, over = 0;
  pthread_mutex_lock(&h->lock);
  *epoch = h->epoch;
  for (int r = 0; r < h->nRanks; r++) {
    for (int d = 0; d < h->maxDevs; d++) {
      const struct mendHealthNic* nic = h->nics + (size_t)r * (size_t)h->maxDevs + (size_t)d;
      if (nic->lineGbps <= 0) continue; /* no such NIC */
      if (nic->state == MEND_NIC_UP && nic->gbps >= nic->lineGbps) continue;
      if (n == MEND_VIEW_MAX_HEALTH) {
        over++;
        continue;
      }
      out[n++] = (struct mendViewNic){ .rank = r, .dev = d, .state = nic->state, .gbps = nic->gbps };
    }
  }
  pthread_mutex_unlock(&h->lock);
  if (over)
    WARN_SPARSE(10000, "Agreement: %d NICs beyond the first %d not up at line rate are left out of the picture", over,
                MEND_VIEW_MAX_HEALTH);
  return n;
}

static int samePicture(const struct mendViewNic* x, int nx, const struct mendViewNic* y, int ny) {
  if (nx != ny) return 0;
  for (int i = 0; i < nx; i++) {
    if (x[i].rank != y[i].rank || x[i].dev != y[i].dev || x[i].state != y[i].state || x[i].gbps != y[i].gbps) return 0;
  }
  return 1;
}

/* Derive and install round `round`'s view from picture nics (lock held). */
static void install(struct mendAgree* a, uint32_t round, uint64_t fromOp, const struct mendViewNic* nics, int n,
                    int64_t changeMs) {
  struct mendViewHealth h = { .nRanks = a->nRanks, .maxDevs = a->maxDevs, .lineGbps = a->lineGbps, .nNics = n,
                              .nics = nics };
  /* A failure is the planner's to act on: it fails the ops from fromOp (never another plan). */
  (void)mendPlannerCommit(a->comm, round, fromOp, &h, changeMs);
  a->doneRound = round;
  a->heldRound = 0;
}

/* ---------------------------------------------------------------- coordinator */

static void sendPropose(struct mendAgree* a, int peer, int64_t now) {
  struct mendAgreeMsg m = { .kind = MEND_AGREE_PROPOSE, .round = a->round };
  sendTo(a, peer, &m);
  a->sentMs[peer] = now;
}

static void sendCommit(struct mendAgree* a, int peer, int64_t now) {
  struct mendAgreeMsg m = { .kind = MEND_AGREE_COMMIT, .round = a->round, .op = a->fromOp, .healthEpoch = a->picEpoch,
                            .nNics = a->nPic, .ageMs = now - a->changeMs };
  int first = 0;
  do { /* an empty picture is one part of no entries */
    m.first = first;
    m.count = a->nPic - first < MEND_AGREE_PART_NICS ? a->nPic - first : MEND_AGREE_PART_NICS;
    memset(m.nics, 0, sizeof(m.nics));
    memcpy(m.nics, a->pic + first, sizeof(m.nics[0]) * (size_t)m.count);
    sendTo(a, peer, &m);
    first += m.count;
  } while (first < a->nPic);
  a->sentMs[peer] = now;
}

/* Open a round when the registry moved to a picture not agreed yet (lock held, idle). */
static void maybeOpen(struct mendAgree* a, int64_t now) {
  uint32_t epoch = 0;
  int n = takePicture(a, a->pic, &epoch);
  if (epoch == a->seenEpoch) return;
  a->seenEpoch = epoch;
  if (samePicture(a->pic, n, a->agreed, a->nAgreed)) {
    INFO(MEND_RESIL, "Agreement: health epoch %u leaves the agreed picture as it is (%d NIC(s) not up at line "
         "rate): no new view", epoch, n);
    return;
  }
  a->round++;
  a->phase = AGREE_PROPOSING;
  a->changeMs = now;
  memset(a->answered, 0, (size_t)a->nRanks);
  a->nAnswered = 0;
  INFO(MEND_RESIL | NCCL_TUNING, "Agreement: round %u started (health epoch %u, %d NIC(s) not up at line rate)",
       a->round, epoch, n);
  for (int p = 0; p < a->nRanks; p++)
    if (p != a->rank) sendPropose(a, p, now);
}

/* The coordinator's own answer (lock held; tried again on the next tick when it fails). */
static void holdSelf(struct mendAgree* a) {
  uint64_t mine = 0;
  if (a->answered[a->rank] || mendPlannerHold(a->comm, a->round, &mine) != ncclSuccess) return;
  a->heldRound = a->round, a->heldOp = mine;
  a->replyOp[a->rank] = mine;
  a->answered[a->rank] = 1;
  a->nAnswered++;
}

/* Every reply in: choose fromOp and commit (lock held). */
static void commitRound(struct mendAgree* a, int64_t now) {
  uint64_t from = a->lastFromOp, lo = UINT64_MAX;
  for (int p = 0; p < a->nRanks; p++) {
    if (a->replyOp[p] > from) from = a->replyOp[p];
    if (a->replyOp[p] < lo) lo = a->replyOp[p];
  }
  a->fromOp = a->lastFromOp = from;
  a->nPic = takePicture(a, a->pic, &a->picEpoch);
  if (a->picEpoch > a->seenEpoch) a->seenEpoch = a->picEpoch;
  memcpy(a->agreed, a->pic, sizeof(a->pic[0]) * (size_t)a->nPic);
  a->nAgreed = a->nPic;
  INFO(MEND_RESIL | NCCL_TUNING, "Agreement: round %u: fromOp %llu chosen (ranks' next ops %llu..%llu), picture of "
       "%d NIC(s) at health epoch %u, %lld ms after the change", a->round, (unsigned long long)from,
       (unsigned long long)lo, (unsigned long long)from, a->nPic, a->picEpoch, (long long)(now - a->changeMs));
  a->phase = AGREE_COMMITTING;
  memset(a->answered, 0, (size_t)a->nRanks);
  a->nAnswered = 0;
  install(a, a->round, from, a->pic, a->nPic, a->changeMs);
  a->answered[a->rank] = 1;
  a->nAnswered = 1;
  for (int p = 0; p < a->nRanks; p++)
    if (p != a->rank) sendCommit(a, p, now);
}

/* Move the coordinator's round as far as it goes (lock held). */
static void advance(struct mendAgree* a, int64_t now) {
  for (;;) {
    if (a->phase == AGREE_IDLE) {
      maybeOpen(a, now);
      if (a->phase == AGREE_IDLE) return;
    }
    if (a->phase == AGREE_PROPOSING) {
      holdSelf(a);
      if (a->nAnswered < a->nRanks) return;
      commitRound(a, now);
    }
    if (a->phase == AGREE_COMMITTING) {
      if (a->nAnswered < a->nRanks) return;
      INFO(MEND_RESIL | NCCL_TUNING, "Agreement: round %u done: every rank installed view epoch %u from op %llu "
           "(%lld ms after the change)", a->round, a->round, (unsigned long long)a->fromOp,
           (long long)(now - a->changeMs));
      a->phase = AGREE_IDLE; /* a change that came meanwhile opens the next round at once */
    }
  }
}

void mendAgreeTick(struct mendAgree* a, int64_t nowMs) {
  if (a == NULL || a->rank != MEND_AGREE_COORDINATOR) return;
  pthread_mutex_lock(&a->lock);
  advance(a, nowMs);
  if (a->phase != AGREE_IDLE) {
    for (int p = 0; p < a->nRanks; p++) {
      if (p == a->rank || a->answered[p] || nowMs - a->sentMs[p] < a->resendMs) continue;
      INFO(MEND_RESIL, "Agreement: round %u: rank %d has not answered %s for %lld ms: sending it again", a->round, p,
           a->phase == AGREE_PROPOSING ? "PROPOSE" : "COMMIT", (long long)(nowMs - a->sentMs[p]));
      if (a->phase == AGREE_PROPOSING) sendPropose(a, p, nowMs);
      else sendCommit(a, p, nowMs);
    }
  }
  pthread_mutex_unlock(&a->lock);
}

/* REPLY or ACK from rank `from` (lock held). */
static void coordinatorMsg(struct mendAgree* a, int from, const struct mendAgreeMsg* m, int64_t now) {
  int want = a->phase == AGREE_PROPOSING ? MEND_AGREE_REPLY : a->phase == AGREE_COMMITTING ? MEND_AGREE_ACK : 0;
  if (m->round != a->round || (int)m->kind != want || a->answered[from]) return; /* stale or duplicate */
  a->answered[from] = 1;
  a->nAnswered++;
  if (m->kind == MEND_AGREE_REPLY) a->replyOp[from] = m->op;
  advance(a, now);
}

/* ---------------------------------------------------------------- every rank */

static void reply(struct mendAgree* a, int kind, uint32_t round, uint64_t op) {
  struct mendAgreeMsg r = { .kind = (uint32_t)kind, .round = round, .op = op };
  sendTo(a, MEND_AGREE_COORDINATOR, &r);
}

static void onPropose(struct mendAgree* a, const struct mendAgreeMsg* m) {
  if (m->round <= a->doneRound) return; /* late copy of a round already installed */
  if (m->round != a->heldRound) {
    uint64_t next;
    if (mendPlannerHold(a->comm, m->round, &next) != ncclSuccess) return; /* no answer: the coordinator asks again */
    a->heldRound = m->round, a->heldOp = next;
  }
  reply(a, MEND_AGREE_REPLY, m->round, a->heldOp); /* the same answer to every copy */
}

/* Is one COMMIT part well formed for us?  (sizes and picture entries within bounds) */
static int commitPartValid(struct mendAgree* a, int from, const struct mendAgreeMsg* m) {
  const char* why = NULL;
  if (m->nNics < 0 || m->nNics > MEND_VIEW_MAX_HEALTH) why = "picture size out of range";
  else if (m->count < 0 || m->count > MEND_AGREE_PART_NICS || m->first < 0 || m->first > m->nNics ||
           m->count > m->nNics - m->first || (m->count == 0 && m->nNics != 0))
    why = "part out of range";
  else if (m->op < a->heldOp) why = "fromOp before the op this rank said it had reached";
  else if (m->ageMs < 0) why = "negative age";
  for (int i = 0; why == NULL && i < m->count; i++) {
    const struct mendViewNic* n = m->nics + i;
    if (n->rank < 0 || n->rank >= a->nRanks || n->dev < 0 || n->dev >= a->maxDevs) why = "entry names no NIC";
    else if (n->state < MEND_NIC_UP || n->state > MEND_NIC_PROBING) why = "entry has an unknown state";
    else if (!isfinite(n->gbps) || n->gbps < 0) why = "entry has a bad bandwidth";
  }
  if (why == NULL && a->partRound == m->round && (a->partFromOp != m->op || a->partTotal != m->nNics))
    why = "disagrees with the round's other parts";
  if (why) {
    WARN_SPARSE(1000, "Agreement: rank %d: COMMIT of round %u from rank %d dropped: %s (fromOp %llu, part %d+%d of %d)",
                a->rank, m->round, from, why, (unsigned long long)m->op, m->first, m->count, m->nNics);
    return 0;
  }
  return 1;
}

/* The gathered picture is sorted by (rank, dev) without repeats. */
static int partSorted(const struct mendAgree* a) {
  for (int i = 1; i < a->partTotal; i++) {
    const struct mendViewNic *x = a->part + i - 1, *y = a->part + i;
    if (x->rank > y->rank || (x->rank == y->rank && x->dev >= y->dev)) return 0;
  }
  return 1;
}

static void onCommit(struct mendAgree* a, int from, const struct mendAgreeMsg* m, int64_t now) {
  if (m->round <= a->doneRound) {
    if (m->round == a->doneRound) reply(a, MEND_AGREE_ACK, m->round, 0); /* our ACK was lost */
    return;
  }
  if (m->round != a->heldRound) {
    WARN_SPARSE(1000, "Agreement: rank %d: COMMIT of round %u from rank %d without its PROPOSE (holding round %u): "
                "dropped", a->rank, m->round, from, a->heldRound);
    return;
  }
  if (!commitPartValid(a, from, m)) return;
  if (a->partRound != m->round) {
    a->partRound = m->round, a->partFromOp = m->op, a->partTotal = m->nNics, a->partAgeMs = m->ageMs;
    a->partFirstMs = now;
    a->partHave = 0;
    memset(a->partGot, 0, MEND_VIEW_MAX_HEALTH);
  }
  for (int i = 0; i < m->count; i++) {
    if (a->partGot[m->first + i]) continue; /* a copy */
    a->partGot[m->first + i] = 1;
    a->part[m->first + i] = m->nics[i];
    a->partHave++;
  }
  if (a->partHave < a->partTotal) return;
  if (!partSorted(a)) {
    WARN_SPARSE(1000, "Agreement: rank %d: the picture of round %u from rank %d is not sorted by (rank, device): "
                "dropped", a->rank, m->round, from);
    a->partRound = 0;
    return;
  }
  install(a, m->round, a->partFromOp, a->part, a->partTotal, a->partFirstMs - a->partAgeMs);
  a->partRound = 0;
  reply(a, MEND_AGREE_ACK, m->round, 0);
}

void mendAgreeOnMsg(struct mendAgree* a, int from, const struct mendAgreeMsg* m, int64_t nowMs) {
  if (a == NULL || m == NULL) return;
  int coordinator = a->rank == MEND_AGREE_COORDINATOR;
  int toCoordinator = m->kind == MEND_AGREE_REPLY || m->kind == MEND_AGREE_ACK;
  int fromCoordinator = m->kind == MEND_AGREE_PROPOSE || m->kind == MEND_AGREE_COMMIT;
  if (from < 0 || from >= a->nRanks || from == a->rank || m->round == 0 ||
      !(coordinator ? toCoordinator : fromCoordinator && from == MEND_AGREE_COORDINATOR)) {
    WARN_SPARSE(1000, "Agreement: rank %d: message kind %u round %u from rank %d dropped (not one this rank takes "
                "from that rank)", a->rank, m->kind, m->round, from);
    return;
  }
  pthread_mutex_lock(&a->lock);
  if (coordinator) coordinatorMsg(a, from, m, nowMs);
  else if (m->kind == MEND_AGREE_PROPOSE) onPropose(a, m);
  else onCommit(a, from, m, nowMs);
  pthread_mutex_unlock(&a->lock);
}
