/*
 * Fault localization: when a path from our NIC X to rank B's NIC Y fails, whose fault is it?
 *   - our link state says X is down: our NIC (admin down) or its link (no carrier);
 *   - else, with a third host, three-point probing: an auxiliary rank C on another host probes X and
 *     Y over the same rails while we probe Y again:
 *         C reaches X, not Y  -> B's NIC Y (or its cable/port)
 *         C reaches Y, not X  -> our NIC X's cable or switch port (our link state says up)
 *         C reaches both      -> the path between X and Y only
 *         C reaches neither   -> both, or the rail switch
 *   - with two hosts only: "B's NIC or the link" (nobody else can tell them apart).
 * The verdict is logged once, reported as a `localize` event, and the NIC(s) found at fault are
 * marked down in every rank's health registry (a broadcast).
 */
#include "resilience/resil_priv.h"

#include <stdio.h>
#include <string.h>

#include "misc/param.h"
#include "misc/utils.h"
#include "resilience/detect.h"

#define LOC_REPEAT_MS 2000  /* one localization per local NIC per fault (many connections see it) */

/* Mark a NIC in the registry and tell every rank (any lock state: the registry and the out queue have
 * their own locks). */
static void decide(struct mendResil* r, int rank, int dev, int state, const char* verdict) {
  struct mendHealthUpdate u = { .rank = rank, .dev = dev, .state = state, .reporter = r->rank };
  snprintf(u.verdict, sizeof(u.verdict), "%s", verdict);
  mendHealthDecide(&r->health, &u);
  char extra[40];
  snprintf(extra, sizeof(extra), "epoch=%u by=localize", u.epoch);
  mendResilEvent("health", r->rank, rank, dev, -1, mendNicStateName(state), extra);
  struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_HEALTH, .u.health = u };
  for (int p = 0; p < r->nRanks; p++)
    if (p != r->rank) mendResilQueue(r, p, &m);
}

static void verdictEvent(struct mendResil* r, int localDev, int peer, int remoteDev, const char* code, const char* text) {
  WARN_SPARSE(1000, "NET/Resilient: rank %d: fault localized: %s (our device %d, rank %d device %d)", r->rank, text,
              localDev, peer, remoteDev);
  char extra[96];
  snprintf(extra, sizeof(extra), "verdict=%s remote_dev=%d", code, remoteDev);
  mendResilEvent("localize", r->rank, peer, localDev, -1, code, extra);
}

/* A rank on a host that is neither ours nor the peer's, with both devices' rails; -1 if none. */
static int pickHelper(struct mendResil* r, int localDev, int peer, int remoteDev) {
  uint64_t mine = r->peerHost[r->rank], theirs = r->peerHost[peer];
  for (int k = 1; k < r->nRanks; k++) {
    int c = (r->rank + k) % r->nRanks;
    if (r->peerHost[c] == mine || r->peerHost[c] == theirs) continue;
    if (localDev < r->peerNDevs[c] && remoteDev < r->peerNDevs[c]) return c;
  }
  return -1;
}

static void conclude(struct mendResil* r, int slot);

static int newSlot(struct mendResil* r) {
  for (int i = 0; i < RESIL_MAX_LOCS; i++)
    if (!r->locs[i].used) {
      memset(r->locs + i, 0, sizeof(r->locs[i]));
      r->locs[i].used = 1;
      r->locs[i].startMs = mendTimeMs();
      return i;
    }
  return -1;
}

void mendResilLocalize(struct mendResil* r, int localDev, int peer, int remoteDev, int why) {
  if (localDev < 0 || localDev >= r->nDevs) return;
  int64_t now = mendTimeMs();
  pthread_mutex_lock(&r->lock);
  int fresh = now - r->lastLocMs[localDev] >= LOC_REPEAT_MS;
  if (fresh) r->lastLocMs[localDev] = now;
  pthread_mutex_unlock(&r->lock);
  if (!fresh || why == MEND_RNET_KILL_PEER || why == MEND_RNET_KILL_TEST || why == MEND_RNET_KILL_SWITCH) return;
  struct resilDev* dev = r->devs + localDev;
  if (atomic_load(&dev->linkUp) == 0 || why == MEND_RNET_KILL_LINK) {
    const char* code = !dev->adminUp ? "local_nic" : "local_link";
    verdictEvent(r, localDev, peer, remoteDev, code, !dev->adminUp ? "our NIC is down" : "our NIC lost its link (cable or switch port)");
    decide(r, r->rank, localDev, MEND_NIC_DOWN, !dev->adminUp ? "local NIC down" : "local link down");
    return;
  }
  if (peer < 0 || peer >= r->nRanks) return;
  pthread_mutex_lock(&r->lock);
  int slot = newSlot(r);
  if (slot >= 0) {
    struct resilLocSlot* s = r->locs + slot;
    s->mine = 1;
    s->localDev = localDev, s->peer = peer, s->remoteDev = remoteDev;
    s->helper = pickHelper(r, localDev, peer, remoteDev);
    s->selfOk = -1;
    s->loc = (struct resilLoc){ .id = r->nextLocId++, .n = 2, .rank = { r->rank, peer }, .dev = { localDev, remoteDev },
                                .ok = { -1, -1 } };
    const union mendSocketAddr* dst = mendResilPeerProbe(r, peer, remoteDev);
    if (dst) {
      struct resilProbe pr = { .purpose = RESIL_PROBE_LOC, .localDev = localDev, .dst = *dst, .loc = slot, .which = 2 };
      mendResilProbeAdd(r, &pr);
      s->pending++;
    }
    if (s->helper >= 0) {
      struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_LOC_REQ, .u.loc = s->loc };
      m.u.loc.id = slot;  /* the answer names our slot */
      s->pending++;
      mendResilQueue(r, s->helper, &m);
    }
    if (s->pending == 0) conclude(r, slot);
  }
  pthread_mutex_unlock(&r->lock);
  mendResilWake(r);
}

/* Our localization has all its answers (or ran out of time): the verdict (lock held). */
static void conclude(struct mendResil* r, int slot) {
  struct resilLocSlot s = r->locs[slot];
  r->locs[slot].used = 0;
  int okX = s.loc.ok[0], okY = s.loc.ok[1];
  if (s.selfOk == 1) {
    verdictEvent(r, s.localDev, s.peer, s.remoteDev, "transient", "the path answers probes again (transient)");
  } else if (s.helper < 0 || okX < 0 || okY < 0) {
    verdictEvent(r, s.localDev, s.peer, s.remoteDev, "remote_or_link",
                 "the remote NIC or the link (no third host could tell them apart)");
    decide(r, s.peer, s.remoteDev, MEND_NIC_DOWN, "unreachable (remote NIC or link)");
  } else if (okX && !okY) {
    verdictEvent(r, s.localDev, s.peer, s.remoteDev, "remote_nic", "the remote NIC (or its cable/port): a third host cannot reach it either");
    decide(r, s.peer, s.remoteDev, MEND_NIC_DOWN, "remote NIC unreachable");
  } else if (!okX && okY) {
    verdictEvent(r, s.localDev, s.peer, s.remoteDev, "local_port", "our NIC's cable or switch port: a third host cannot reach it");
    decide(r, r->rank, s.localDev, MEND_NIC_DOWN, "local NIC unreachable");
  } else if (okX && okY) {
    verdictEvent(r, s.localDev, s.peer, s.remoteDev, "link", "the path between the two NICs (both answer a third host)");
  } else {
    verdictEvent(r, s.localDev, s.peer, s.remoteDev, "both", "both NICs unreachable from a third host (rail switch?)");
    decide(r, r->rank, s.localDev, MEND_NIC_DOWN, "unreachable with its peer (rail?)");
    decide(r, s.peer, s.remoteDev, MEND_NIC_DOWN, "unreachable with its peer (rail?)");
  }
}

void mendResilLocProbeDone(struct mendResil* r, int slot, int which, int ok) {
  if (slot < 0 || slot >= RESIL_MAX_LOCS || !r->locs[slot].used) return;
  struct resilLocSlot* s = r->locs + slot;
  if (which == 2) s->selfOk = ok;
  else if (which >= 0 && which < 2) s->loc.ok[which] = ok;
  if (--s->pending > 0) return;
  if (s->mine) {
    conclude(r, slot);
    return;
  }
  struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_LOC_RESP, .u.loc = s->loc };
  s->used = 0;
  mendResilQueue(r, s->asker, &m);
}

/* Answer a request: probe each target from our NIC on the same rail. */
static void answer(struct mendResil* r, int from, const struct resilLoc* req) {
  pthread_mutex_lock(&r->lock);
  int slot = newSlot(r);
  if (slot < 0) {
    struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_LOC_RESP, .u.loc = *req };
    m.u.loc.ok[0] = m.u.loc.ok[1] = -1;
    mendResilQueue(r, from, &m);
    pthread_mutex_unlock(&r->lock);
    return;
  }
  struct resilLocSlot* s = r->locs + slot;
  s->asker = from;
  s->loc = *req;
  for (int i = 0; i < 2 && i < req->n; i++) {
    s->loc.ok[i] = -1;
    const union mendSocketAddr* dst = mendResilPeerProbe(r, req->rank[i], req->dev[i]);
    int ld = req->dev[i];
    if (!dst || ld < 0 || ld >= r->nDevs || !r->devs[ld].hasAddr) continue;
    struct resilProbe pr = { .purpose = RESIL_PROBE_LOC, .localDev = ld, .dst = *dst, .loc = slot, .which = i };
    mendResilProbeAdd(r, &pr);
    s->pending++;
  }
  if (s->pending == 0) {
    s->pending = 1;
    mendResilLocProbeDone(r, slot, -1, 0);  /* nothing to probe: answer at once */
  }
  pthread_mutex_unlock(&r->lock);
  mendResilWake(r);
}

void mendResilLocMsg(struct mendResil* r, int from, const struct resilMsg* m) {
  if (m->type == RESIL_MSG_LOC_REQ) {
    answer(r, from, &m->u.loc);
    return;
  }
  int slot = m->u.loc.id;
  pthread_mutex_lock(&r->lock);
  if (slot >= 0 && slot < RESIL_MAX_LOCS && r->locs[slot].used && r->locs[slot].mine && r->locs[slot].helper == from) {
    struct resilLocSlot* s = r->locs + slot;
    s->loc.ok[0] = m->u.loc.ok[0];
    s->loc.ok[1] = m->u.loc.ok[1];
    if (--s->pending <= 0) conclude(r, slot);
  }
  pthread_mutex_unlock(&r->lock);
}

void mendResilLocExpire(struct mendResil* r) {
  int64_t bound = 2 * mendParamProbeTimeout() + 1000, now = mendTimeMs();
  for (int i = 0; i < RESIL_MAX_LOCS; i++) {
    struct resilLocSlot* s = r->locs + i;
    if (!s->used || now - s->startMs < bound) continue;
    if (s->mine) {
      conclude(r, i);  /* with what we have: missing answers read as "cannot tell" */
    } else {
      s->pending = 1;
      mendResilLocProbeDone(r, i, -1, 0);
    }
  }
}
