/*
 * Channels: how many, and each one's ring, tree and NIC.  Pure functions of the allgathered shape
 * (hosts, local ranks) so every rank computes the same answer alone.
 */
#include "graph/graph.h"

#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"

/* Device mode: a channel is a CTA, and one CTA moves a small part of a GPU's memory bandwidth, so
 * a GPU needs many; ranks sharing one GPU share its SMs (their CTAs must all be resident at once,
 * since they wait on each other): 64 CTAs per GPU split among them, 2 to 32 each (on an H100, 32
 * CTAs per rank moved 1.4x the bytes of 16 at 2 ranks, benchmarks/RESULTS.md). */
int mendGraphDeviceChannels(int ranksOnGpu) {
  int n = ranksOnGpu > 0 ? 64 / ranksOnGpu : 32;
  return n < 2 ? 2 : n > 32 ? 32 : n;
}

static int chooseN(int base, int nNodes, int nNics, int minCTAs, int maxCTAs) {
  /* One host: two channels keep two rings in flight (both directions).  Across hosts every NIC
   * needs at least one channel or it carries nothing. */
  int n = base;
  if (nNodes > 1 && nNics > n) n = nNics;
  if (minCTAs > 0 && n < minCTAs) n = minCTAs;
  if (maxCTAs > 0 && n > maxCTAs) n = maxCTAs;
  int64_t envMin = mendParamMinNchannels(), envMax = mendParamMaxNchannels();
  if (envMin > 0 && n < envMin) n = (int)(envMin < MEND_MAXCHANNELS ? envMin : MEND_MAXCHANNELS);
  if (envMax > 0 && n > envMax) n = (int)envMax;
  if (n < 1) n = 1;
  if (n > MEND_MAXCHANNELS) n = MEND_MAXCHANNELS;
  return n;
}

int mendGraphChooseNChannels(int nNodes, int nNics, int minCTAs, int maxCTAs) {
  return chooseN(2, nNodes, nNics, minCTAs, maxCTAs);
}

/* Ranks of this communicator on my GPU (same host, same PCI address). */
static int ranksOnMyGpu(struct ncclComm* comm) {
  const struct mendPeerInfo* me = comm->peerInfo + comm->rank;
  int n = 0;
  for (int r = 0; r < comm->nRanks; r++)
    n += comm->peerInfo[r].hostHash == me->hostHash && comm->peerInfo[r].busId == me->busId;
  return n;
}

/* Ranks host by host, local ranks in order: inter-host hops are nNodes per ring, the fewest. */
static ncclResult_t hostOrder(const struct mendGraphShape* s, int* order) {
  int* offset = calloc((size_t)s->nNodes + 1, sizeof(int));
  if (!offset) { WARN("graph: out of memory for %d hosts", s->nNodes); return ncclSystemError; }
  ncclResult_t res = ncclSuccess;
  for (int r = 0; r < s->nRanks; r++) {
    int node = s->rankToNode[r];
    if (node < 0 || node >= s->nNodes) {
      WARN("graph: rank %d has host index %d, outside [0,%d)", r, node, s->nNodes);
      res = ncclInternalError;
      goto free_offset;
    }
    offset[node + 1]++;
  }
  for (int h = 0; h < s->nNodes; h++) offset[h + 1] += offset[h];
  for (int i = 0; i < s->nRanks; i++) order[i] = -1;
  for (int r = 0; r < s->nRanks; r++) {
    int node = s->rankToNode[r], local = s->rankToLocalRank[r];
    int slot = offset[node] + local;
    if (local < 0 || slot >= offset[node + 1] || order[slot] != -1) {
      WARN("graph: rank %d has local rank %d, not a position among the %d ranks of host %d", r, local,
           offset[node + 1] - offset[node], node);
      res = ncclInternalError;
      goto free_offset;
    }
    order[slot] = r;
  }
free_offset:
  free(offset);
  return res;
}

ncclResult_t mendGraphRing(const struct mendGraphShape* shape, int channel, int* userRanks) {
  MENDCHECK(hostOrder(shape, userRanks));
  if (channel % 2 == 1) {
    /* Backwards: every link carries traffic in both directions across a pair of channels. */
    for (int i = 0, j = shape->nRanks - 1; i < j; i++, j--) {
      int t = userRanks[i];
      userRanks[i] = userRanks[j];
      userRanks[j] = t;
    }
  }
  return ncclSuccess;
}

/* Tree 0 over positions 0..n-1: 0 is the root with one child (the largest power of two below n);
 * a position p >= 1 with lowest set bit b has children p - b/2 and the largest p + k (k = b/2,
 * b/4, ...) that exists.  Leaves are the odd positions. */
static void btree0(int n, int* parent, int (*child)[2]) {
  for (int p = 0; p < n; p++) parent[p] = child[p][0] = child[p][1] = -1;
  if (n <= 1) return;
  int top = 1;
  while (top * 2 <= n - 1) top *= 2;
  child[0][0] = top;
  parent[top] = 0;
  for (int p = 1; p < n; p++) {
    int b = p & -p;
    if (b == 1) continue;
    child[p][0] = p - b / 2;
    parent[p - b / 2] = p;
    for (int k = b / 2; k >= 1; k /= 2) {
      if (p + k < n) {
        child[p][1] = p + k;
        parent[p + k] = p;
        break;
      }
    }
  }
}

void mendGraphBtree(int n, int which, int* parent, int (*child)[2]) {
  btree0(n, parent, child);
  if (which == 0 || n <= 1) return;
  /* Tree 1 relabels tree 0 so its leaves (odd positions) become inner nodes: mirror when n is
   * even, shift by one when n is odd. */
  int* p0 = malloc(sizeof(int) * (size_t)n);
  int(*c0)[2] = malloc(sizeof(int[2]) * (size_t)n);
  if (!p0 || !c0) { free(p0); free(c0); return; } /* keep tree 0: still a valid tree */
  memcpy(p0, parent, sizeof(int) * (size_t)n);
  memcpy(c0, child, sizeof(int[2]) * (size_t)n);
#define RELABEL(x) ((x) < 0 ? -1 : (n % 2 == 0 ? n - 1 - (x) : ((x) + 1) % n))
  for (int p = 0; p < n; p++) {
    int q = RELABEL(p);
    parent[q] = RELABEL(p0[p]);
    child[q][0] = RELABEL(c0[p][0]);
    child[q][1] = RELABEL(c0[p][1]);
  }
#undef RELABEL
  free(p0);
  free(c0);
}

ncclResult_t mendGraphTree(const struct mendGraphShape* s, int channel, int* parent,
                           int (*down)[MEND_MAX_TREE_ARITY], int* depth) {
  ncclResult_t res = ncclSuccess;
  int* order = malloc(sizeof(int) * (size_t)s->nRanks);
  int* first = malloc(sizeof(int) * ((size_t)s->nNodes + 1));
  int* hp = malloc(sizeof(int) * (size_t)s->nNodes);
  int(*hc)[2] = malloc(sizeof(int[2]) * (size_t)s->nNodes);
  if (!order || !first || !hp || !hc) {
    WARN("graph: out of memory building a tree of %d ranks", s->nRanks);
    res = ncclSystemError;
    goto free_all;
  }
  MENDCHECKGOTO(hostOrder(s, order), res, free_all);
  for (int h = 0; h <= s->nNodes; h++) first[h] = 0;
  for (int r = 0; r < s->nRanks; r++) first[s->rankToNode[r] + 1]++;
  for (int h = 0; h < s->nNodes; h++) first[h + 1] += first[h];
  mendGraphBtree(s->nNodes, channel % 2, hp, hc);
  for (int r = 0; r < s->nRanks; r++) {
    parent[r] = -1;
    for (int k = 0; k < MEND_MAX_TREE_ARITY; k++) down[r][k] = -1;
  }
  for (int h = 0; h < s->nNodes; h++) {
    /* A chain inside the host; its head joins the tree over hosts. */
    int head = order[first[h]], n = first[h + 1] - first[h], nd = 0;
    if (hp[h] >= 0) parent[head] = order[first[hp[h]]];
    for (int k = 0; k < 2; k++)
      if (hc[h][k] >= 0) down[head][nd++] = order[first[hc[h][k]]];
    for (int i = 0; i < n; i++) {
      int r = order[first[h] + i];
      if (i > 0) parent[r] = order[first[h] + i - 1];
      if (i + 1 < n) down[r][r == head ? nd : 0] = order[first[h] + i + 1];
    }
  }
  int maxDepth = 0;
  for (int r = 0; r < s->nRanks; r++) {
    int d = 1;
    for (int x = r; parent[x] >= 0 && d <= s->nRanks; x = parent[x]) d++;
    if (d > maxDepth) maxDepth = d;
  }
  *depth = maxDepth;
free_all:
  free(order);
  free(first);
  free(hp);
  free(hc);
  return res;
}

int mendGraphNetDev(int channel, int nNics, const int* nicOrder, int crossNic) {
  if (nNics <= 0) return -1;
  /* Rails: NIC i of one host reaches NIC i of the other through rail switch i, so both ends of a
   * channel must pick the same index; only crossNic=1 lets each rank walk its own nearest-first list. */
  if (crossNic == 1 && nicOrder) return nicOrder[channel % nNics];
  return channel % nNics;
}

static void logChannel(struct ncclComm* comm, const struct mendChannel* ch) {
  const struct mendTree* t = &ch->tree;
  INFO(NCCL_GRAPH, "Channel %02d/%02d: ring %d -> %d -> %d, tree %d -> %d -> %d/%d/%d (depth %d), NIC %d",
       ch->id, comm->nChannels, ch->ring.prev, comm->rank, ch->ring.next, t->up, comm->rank, t->down[0],
       t->down[1], t->down[2], t->depth, ch->netDev);
}

/* Our ring position, prev and next on one channel. */
static ncclResult_t fillRing(struct ncclComm* comm, struct mendChannel* ch) {
  struct mendRing* ring = &ch->ring;
  ring->index = -1;
  for (int i = 0; i < comm->nRanks; i++)
    if (ring->userRanks[i] == comm->rank) ring->index = i;
  if (ring->index < 0) {
    WARN("graph: rank %d missing from the ring of channel %d", comm->rank, ch->id);
    return ncclInternalError;
  }
  ring->prev = ring->userRanks[(ring->index + comm->nRanks - 1) % comm->nRanks];
  ring->next = ring->userRanks[(ring->index + 1) % comm->nRanks];
  return ncclSuccess;
}

ncclResult_t mendGraphSetup(struct ncclComm* comm, int nNicsMax) {
  ncclResult_t res = ncclSuccess;
  struct mendTopo* topo = comm->topo;
  int nNics = topo ? topo->nNics : 0, crossNic = topo ? topo->crossNic : 0;
  struct mendGraphShape shape = { .nRanks = comm->nRanks, .nNodes = comm->nNodes,
                                  .rankToNode = comm->rankToNode, .rankToLocalRank = comm->rankToLocalRank };
  int base = comm->hostMode ? 2 : mendGraphDeviceChannels(ranksOnMyGpu(comm));
  comm->nChannels = chooseN(base, comm->nNodes, nNicsMax, comm->config.minCTAs, comm->config.maxCTAs);
  comm->nRails = comm->nNodes > 1 && nNicsMax > 0 ? nNicsMax : 0;
  int n = comm->nRanks;
  int* ranks = malloc(sizeof(int) * (size_t)n * (size_t)comm->nChannels);
  int* parent = malloc(sizeof(int) * (size_t)n * 2);
  int(*down)[MEND_MAX_TREE_ARITY] = malloc(sizeof(int[MEND_MAX_TREE_ARITY]) * (size_t)n * 2);
  if (!ranks || !parent || !down) {
    WARN("graph: out of memory for %d channels of %d ranks", comm->nChannels, n);
    free(ranks);
    res = ncclSystemError;
    goto free_temps;
  }
  int depth[2];
  for (int t = 0; t < 2; t++) MENDCHECKGOTO(mendGraphTree(&shape, t, parent + t * n, down + t * n, depth + t), res, fail_ranks);
  for (int c = 0; c < comm->nChannels; c++) {
    struct mendChannel* ch = comm->channels + c;
    ch->id = c;
    ch->ring.userRanks = ranks + (size_t)c * n;
    MENDCHECKGOTO(mendGraphRing(&shape, c, ch->ring.userRanks), res, fail_ranks);
    MENDCHECKGOTO(fillRing(comm, ch), res, fail_ranks);
    int t = c % 2;
    ch->tree.up = parent[t * n + comm->rank];
    for (int k = 0; k < MEND_MAX_TREE_ARITY; k++) ch->tree.down[k] = down[t * n + comm->rank][k];
    ch->tree.depth = depth[t];
    ch->netDev = mendGraphNetDev(c, nNics, topo ? topo->nicOrder : NULL, crossNic);
    logChannel(comm, ch);
  }
  INFO(NCCL_GRAPH | NCCL_INIT, "%d channels over %d host(s), %d NIC(s) here (%s)", comm->nChannels, comm->nNodes,
       nNics, crossNic == 1 ? "crossing NICs allowed" : "rails: channel c uses NIC c % nNics on both ends");
  goto free_temps;
fail_ranks:
  free(ranks);
  for (int c = 0; c < MEND_MAXCHANNELS; c++) comm->channels[c].ring.userRanks = NULL;
free_temps:
  free(parent);
  free(down);
  return res;
}

void mendGraphFree(struct ncclComm* comm) {
  /* All channels' orders share one block that starts at channel 0. */
  free(comm->channels[0].ring.userRanks);
  for (int c = 0; c < MEND_MAXCHANNELS; c++) comm->channels[c].ring.userRanks = NULL;
}
