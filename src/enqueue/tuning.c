/*
 * Tuning: which algorithm, how many channels, what chunk, for each collective call.
 *
 * Alpha-beta model per transport kind (constants from calib.c: built in from the reference
 * machine, or measured by `mend-info --calibrate` and read through MEND_CALIB_FILE; the TUNING log
 * prints them): a hop costs alpha microseconds, a channel moves data at
 * bwChannel GB/s and all channels together at most bwMax GB/s (the host engine is one thread per
 * rank: more channels add overlap, not memcpy bandwidth; net channels add sockets).
 *   ring AllReduce   2(n-1) hops, 2(n-1)/n x S bytes per rank
 *   tree AllReduce   2 x depth hops, 2 x S bytes through an inner node (up and down)
 *   AllGather / ReduceScatter  n-1 hops, (n-1)/n x S;   Broadcast / Reduce  n-1 hops, S
 * Every input is the same on every rank (rank count, comm-wide slowest transport, sizes,
 * parameters), so every rank makes the same choice.  A tuner plugin may rewrite the cost table.
 *
 * AllReduce under a degraded plan view (some rank's capacity below 1000 permille) first goes
 * through mendTuneAllReduce: the model's times of backup (the ring/tree plan with the slowest
 * rank's busiest NIC carrying its lost NICs' channels, evenly split), Balance (the ring/tree plan at
 * the slowest rank's capacity: the weights spread its traffic over its usable NICs), R2 and
 * recursive R2 (tuning_r2.c); a tree's backup and Balance are priced host by host (treeSchedules).
 * The least wins unless MEND_REPLAN forces one.  Backup and Balance then plan as any collective
 * (mendTuneColl, where the tuner plugin is asked, given the algorithm they were priced for); R2
 * plans are built by plan_r2.c.
 */
#include "enqueue/tuning.h"
#include "enqueue/calib.h"
#include "enqueue/tuning_cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "graph/graph.h"
#include "misc/param.h"
#include "plugin/tuner_plugin.h"
#include "transport/transport.h"

/* The communicator's constants (rank 0's, agreed at init); the process's for one without them. */
static const struct mendCalib* calibOf(const struct ncclComm* comm) {
  return comm && comm->calib ? comm->calib : mendCalibGet();
}

/* The constants a cost query names; the process's when it names none (tests, offline planning). */
static const struct mendCalib* calibIn(const struct mendCostIn* in) {
  return in->calib ? in->calib : mendCalibGet();
}

/* The constants of a transport kind (calib.c: built in, or measured by mend-info --calibrate). */
static const struct mendKindCost* kindCost(const struct mendCalib* c, int kind) {
  return c->kind + (kind < 0 || kind >= MEND_CALIB_KINDS ? MEND_TRANSPORT_NET : kind);
}

static const char* algoNames[MEND_NCCL_NUM_ALGOS] = {"Tree", "Ring", "CollNetDirect", "CollNetChain",
                                                     "NVLS", "NVLSTree", "PAT"};
static const char* protoNames[MEND_NCCL_NUM_PROTOS] = {"LL", "LL128", "Simple"};
static const char* funcNames[MEND_NFUNCS] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce",
                                            "SendRecv", "Send", "Recv", "AlltoAll", "Scatter", "Gather"};

const char* mendFuncName(int func) { return func >= 0 && func < MEND_NFUNCS ? funcNames[func] : "Unknown"; }
const char* mendTuneAlgoName(int a) { return a >= 0 && a < MEND_NCCL_NUM_ALGOS ? algoNames[a] : "Unknown"; }
const char* mendTuneProtoName(int p) { return p >= 0 && p < MEND_NCCL_NUM_PROTOS ? protoNames[p] : "Unknown"; }

/* ---- NCCL_ALGO / NCCL_PROTO ---- */

static int lookup(const char* tok, size_t len, const char* const* names, int n) {
  for (int i = 0; i < n; i++) {
    if (strlen(names[i]) == len && strncasecmp(tok, names[i], len) == 0) return i;
  }
  return -1;
}

static char badTok[64];
static void setBad(const char** bad, const char* tok, size_t len) {
  if (len >= sizeof(badTok)) len = sizeof(badTok) - 1;
  memcpy(badTok, tok, len);
  badTok[len] = '\0';
  if (bad) *bad = badTok;
}

/* One comma list, optionally starting with ^, into a mask. */
static int parseList(const char* s, size_t len, const char* const* names, int n, uint32_t* mask, const char** bad) {
  int excl = len > 0 && s[0] == '^', err = 0;
  uint32_t m = 0;
  size_t i = excl ? 1 : 0;
  while (i < len) {
    size_t j = i;
    while (j < len && s[j] != ',') j++;
    size_t a = i, b = j;
    while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
    if (b > a) {
      int k = lookup(s + a, b - a, names, n);
      if (k < 0) { setBad(bad, s + a, b - a); err = 1; }
      else m |= 1u << k;
    }
    i = j + 1;
  }
  uint32_t all = (1u << n) - 1;
  *mask = excl ? (all & ~m) : m;
  return err;
}

ncclResult_t mendTuneParse(const char* str, int kind, uint32_t masks[MEND_NFUNCS], const char** bad) {
  const char* const* names = kind ? protoNames : algoNames;
  int n = kind ? MEND_NCCL_NUM_PROTOS : MEND_NCCL_NUM_ALGOS, err = 0;
  for (int f = 0; f < MEND_NFUNCS; f++) masks[f] = (1u << n) - 1;
  if (str == NULL) return ncclSuccess;
  const char* p = str;
  while (*p) {
    const char* end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char* colon = memchr(p, ':', len);
    uint32_t m;
    if (colon) {
      int f = lookup(p, (size_t)(colon - p), funcNames, MEND_NFUNCS);
      if (f < 0) { setBad(bad, p, (size_t)(colon - p)); err = 1; }
      err |= parseList(colon + 1, len - (size_t)(colon + 1 - p), names, n, &m, bad);
      if (f >= 0) masks[f] = m;
    } else if (len > 0) {
      err |= parseList(p, len, names, n, &m, bad);
      for (int f = 0; f < MEND_NFUNCS; f++) masks[f] = m;
    }
    p += len + (end ? 1 : 0);
  }
  return err ? ncclInvalidArgument : ncclSuccess;
}

static void parseMasks(const struct ncclComm* comm, struct mendPlanner* pl) {
  const char* bad = NULL;
  if (mendTuneParse(mendParamAlgo(), 0, pl->algoMask, &bad) != ncclSuccess)
    WARN_ONCE("NCCL_ALGO=%s: unknown algorithm or function '%s' ignored", mendParamAlgo(), bad);
  if (mendTuneParse(mendParamProto(), 1, pl->protoMask, &bad) != ncclSuccess)
    WARN_ONCE("NCCL_PROTO=%s: unknown protocol or function '%s' ignored", mendParamProto(), bad);
  pl->masksParsed = 1;
  char line[512];
  mendCalibDescribe(calibOf(comm), line, sizeof(line));
  INFO(NCCL_TUNING, "%s", line);
}

/* ---- cost model ---- */

static int depthOf(int n) {
  int d = 0;
  while ((1 << d) < n + 1) d++;
  return d;
}

/* How much longer than its pooled-bandwidth time (2 S over every NIC) a tree AllReduce takes on its
 * busiest NIC.  A channel uses tree c mod 2 (graph/channels.c) and NIC c mod nRails, and its reduce
 * (up) and broadcast (down) phases run one after the other (gen_tree.c): up, a host receives from
 * its children and sends to its parent; down, the reverse.  A NIC carrying a channels of the tree
 * its host is inner in (two children and a parent) and b of the other tree (where it is a leaf) is
 * busy max(2a, a + b) in each phase where the pooled time assumes a + b: with an even NIC count all
 * of a NIC's channels are in one tree and the factor is 2.  1 when nothing piles up (one NIC, fewer
 * than 4 hosts: no host with two children and a parent, a NIC with as many channels of each tree). */
static double treeNicFactor(const struct mendCostIn* in) {
  int hosts = in->nNodes > 0 ? in->nNodes : in->nRanks, R = in->nRails, nCh = in->nChannels;
  if (R < 2 || nCh < 1 || hosts < 4) return 1.0;
  double worst = 1.0;
  for (int d = 0; d < R && d < nCh; d++) {
    int t[2] = {0, 0};
    for (int c = d; c < nCh; c += R) t[c % 2]++;
    for (int inner = 0; inner < 2; inner++) {
      double a = t[inner], b = t[1 - inner];
      worst = fmax(worst, fmax(2 * a, a + b) / (a + b));
    }
  }
  return worst;
}

/* A tree's pipeline fill between hosts: each phase passes a chunk through depth - 1 levels, and a
 * level's step is two chunks on a NIC (from or to two children) at the channel's share of the rate
 * (mend-sim at 128, 256 and 1,024 servers x 8 NICs, 256 MiB: tree 6.04 / 6.14 / 6.33 ms, the model
 * 5.44 / 5.45 / 5.46 without the fill, 6.03 / 6.12 / 6.30 with it). */
static double treeFillUs(const struct mendCostIn* in, double perUs) {
  int nCh = in->nChannels > 0 ? in->nChannels : 1;
  if (in->kind != MEND_TRANSPORT_NET || in->slotBytes == 0 || in->nBytes == 0 || perUs <= 0) return 0;
  size_t perCh = in->nBytes / (size_t)nCh;
  double chunk = (double)mendTuneChunk(MEND_FUNC_ALLREDUCE, MEND_ALGO_TREE, perCh, in->nRanks, in->slotBytes);
  if (chunk > (double)perCh) chunk = (double)perCh;
  return 2.0 * (depthOf(in->nRanks) - 1) * 2.0 * chunk / (perUs / nCh);
}

/* Ranks per CPU on the most crowded host, 1 when no host is crowded. */
static double crowdOf(const struct mendCostIn* in) { return in->cpuCrowd > 1.0 ? in->cpuCrowd : 1.0; }

/* The reduction part of an AllReduce's estimate (host CPU time, not wire time). */
static double reduceUs(const struct mendCostIn* in, int algo) {
  double S = (double)in->nBytes, n = in->nRanks, perUs = calibIn(in)->reduceGBs * 1e3 / crowdOf(in);
  if (in->func != MEND_FUNC_ALLREDUCE || n <= 1) return 0;
  return (algo == MEND_ALGO_TREE ? S : (n - 1) / n * S) / perUs;
}

/* Steps of a ring or tree AllReduce that run one after another on a crowded host, where no two
 * steps overlap: a pipeline pays a hand-off per chunk, not only to fill (ring: 2(n - 1) per round of
 * n chunks; tree: 2(depth - 1) to fill and 2 per further chunk).  8 ranks on 2 CPUs, 1 MiB: tree
 * 660-860 us against ring's 515, where counting only the fill made the tree look cheaper. */
static double crowdedSteps(const struct mendCostIn* in, int algo) {
  int n = in->nRanks, nCh = in->nChannels > 0 ? in->nChannels : 1;
  size_t perCh = in->nBytes / (size_t)nCh;
  double chunks = 1;
  if (in->slotBytes > 0 && perCh > 0) {
    size_t chunk = mendTuneChunk(MEND_FUNC_ALLREDUCE, algo, perCh, n, in->slotBytes);
    if (algo == MEND_ALGO_RING) chunk *= (size_t)n;
    chunks = ceil((double)perCh / (double)chunk);
  }
  if (algo == MEND_ALGO_RING) return 2.0 * (n - 1) * chunks;
  return 2.0 * (depthOf(n) - 1) + 2.0 * (chunks - 1);
}

/* A crowded host's turn: a step that waits for a peer waits for the c ranks sharing its CPU to run. */
static double turnUs(double crowd, double handoffUs) { return crowd > 1.0 ? crowd * handoffUs : 0.0; }

/* Recursive-doubling AllReduce: log2(P) rounds of the whole vector among the first P ranks, and past
 * a power of two a fold (the n - P extra ranks hand their input to a partner, then take the result
 * back).  Only the ranks at work share the CPUs: P of n in the rounds, 2(n - P) in the fold, so a
 * crowded host's crowd is scaled by those shares (6 ranks on 2 CPUs, 16-128 KiB: 71-126 us against
 * the tree's 153-204, where charging every hop the whole crowd of 3 made the model take the tree). */
static double rdAllReduceUs(const struct mendCostIn* in, double a, double handoffUs, double bwPerUs,
                            double redPerUs) {
  int n = in->nRanks, p = 1, rounds = 0;
  while (p * 2 <= n) p *= 2, rounds++;
  double S = (double)in->nBytes, crowd = crowdOf(in);
  double share[2] = {(double)p / n, 2.0 * (n - p) / n}; /* rounds, fold */
  double hops[2] = {rounds, p < n ? 2 : 0}, us = 0;
  for (int i = 0; i < 2; i++) {
    double c = crowd * share[i] > 1.0 ? crowd * share[i] : 1.0;
    if (hops[i] > 0) us += hops[i] * (a + turnUs(c, handoffUs) + S * c / bwPerUs + S * c / redPerUs);
  }
  return us;
}

/* A ring hop's latency.  Between hosts a ring keeps each host's ranks together (graph/channels.c), so
 * of its n hops only nNodes cross the network and the others are a host's shared memory: 64 servers
 * x 8 GPUs on mend-sim, 256 MiB: the ring 2.8 ms against the tree's 6.0, where pricing its 1,022
 * steps at the network's latency made the model pick the tree. */
static double ringHopUs(const struct mendCostIn* in, const struct mendCalib* cal, double netUs) {
  int n = in->nRanks, h = in->nNodes;
  if (in->kind != MEND_TRANSPORT_NET || h <= 1 || h >= n) return netUs;
  double shmUs = kindCost(cal, MEND_TRANSPORT_SHM)->alphaUs;
  return (h * netUs + (n - h) * (shmUs < netUs ? shmUs : netUs)) / n;
}

double mendTuneCostUs(const struct mendCostIn* in, int algo) {
  int n = in->nRanks, kind = in->kind < 0 || in->kind > 2 ? MEND_TRANSPORT_NET : in->kind;
  const struct mendCalib* cal = calibIn(in);
  const struct mendKindCost* k = kindCost(cal, kind);
  double bwMax = (kind == MEND_TRANSPORT_NET && in->netGBs > 0) ? in->netGBs : k->bwMax;
  double bw = in->nChannels * k->bwChannel;
  if (bw > bwMax) bw = bwMax;
  /* Ranks that outnumber their host's CPUs share them: a rank's copies and reductions get 1/crowd of
   * a CPU, and a step waits for turns of the crowd's ranks (a turn: crowd x the measured hand-off,
   * `mend-info --calibrate`), no two steps overlapping (crowdedSteps): a recursive-doubling hop one
   * turn (partners send at once), a ring step 1.5 (each waits on its predecessor's; an AllReduce
   * ring's partly overlap its bytes, below), a tree step two (an inner rank waits on, or feeds, two
   * children).  Fitted on 2 CPUs: 4, 6 and 8 ranks, AllReduce and AllGather, 16 KiB-1 MiB, every
   * algorithm forced (`benchmarks/crowd_choice.py`; `src/enqueue/README.md`, "Crowded hosts"). */
  double crowd = crowdOf(in);
  double turn = turnUs(crowd, cal->handoffUs), hand = 1.5 * turn;
  double alpha = k->alphaUs + turn;
  double perUs = bw * 1e3 / crowd; /* bytes per microsecond */
  double redUs = cal->reduceGBs * 1e3 / crowd; /* bytes a rank reduces per microsecond */
  double S = (double)in->nBytes, a = k->alphaUs, aRing = ringHopUs(in, cal, a), ringAlpha = aRing + hand;
  if (n <= 1) return S / (kindCost(cal, MEND_TRANSPORT_P2P)->bwMax * 1e3);
  /* Reductions run on the rank's CPU beside the transfers: their bytes at the reduce rate add up. */
  switch (in->func) {
  case MEND_FUNC_ALLREDUCE:
    /* Crowded, a ring's turns and its bytes partly overlap: while a rank waits, the other c - 1 of its
     * CPU may copy and reduce, so the larger of the two counts and 1/(c - 1) of the smaller (all of it
     * at 2 per CPU, where the other rank is mostly in the same wait).  Fitted as the turns above:
     * 8 ranks, 512 KiB, the ring ran 408-426 us against recursive doubling's 765-877, where their sum
     * priced the ring above it. */
    if (algo == MEND_ALGO_RING) {
      double turns = hand * crowdedSteps(in, algo), bytes = 2.0 * (n - 1) / n * S / perUs + (n - 1.0) / n * S / redUs;
      return 2.0 * (n - 1) * aRing + fmax(turns, bytes) + fmin(turns, bytes) / fmax(1.0, crowd - 1.0);
    }
    if (algo == MEND_ALGO_TREE) {
      double f = kind == MEND_TRANSPORT_NET ? treeNicFactor(in) : 1.0;
      return 2.0 * (depthOf(n) - 1) * a + 2.0 * turn * crowdedSteps(in, algo) + 2.0 * f * S / perUs +
             treeFillUs(in, perUs) + S / redUs;
    }
    if (algo == MEND_ALGO_RD)
      return mendRdSupported(n) ? rdAllReduceUs(in, a, cal->handoffUs, bw * 1e3, cal->reduceGBs * 1e3) : -1;
    return -1;
  case MEND_FUNC_ALLGATHER:
    /* Recursive doubling (Bruck's order where n is not a power of two) sends the ring's bytes in
     * ceil(log2 n) steps, but a block it forwards is read back from the output (the ring forwards a
     * slot as it receives it): (n - 1 - steps) / n of S once more.  4 ranks on 2 CPUs: 1.9-2.4x the
     * ring's speed at 16-64 KiB, 0.7-0.9x at 1-4 MiB.  A pairwise round costs a hop; a round of
     * Bruck's waits on a partner that waited on its own in the round before, as a ring step does, and
     * is charged as one (5-7 ranks on 2 CPUs, 9 rounds: Bruck's order 1.0-1.3x the ring's speed up to
     * 256 KiB, slower from 512 KiB-1 MiB, where a hop's price put the crossing past 1 MiB).  One host
     * only: between hosts its later rounds would send half of every rank's blocks over the network,
     * where the ring crosses once. */
    if (algo == MEND_ALGO_RD) {
      if (kind == MEND_TRANSPORT_NET || !mendRdAllGatherSupported(n)) return -1;
      int hops = 0;
      for (int p = 1; p < n; p <<= 1) hops++;
      double hop = (n & (n - 1)) == 0 ? alpha : ringAlpha;
      return hops * hop + (n - 1.0) / n * S / perUs + (double)(n - 1 - hops) / n * S / perUs;
    }
    return algo == MEND_ALGO_RING ? (n - 1) * ringAlpha + (double)(n - 1) / n * S / perUs : -1;
  case MEND_FUNC_REDUCESCATTER:
    /* One hop (gen_rd.c): a rank waits for its peers once, not n - 1 times round the ring.  The same
     * bytes cross, but the ring forwards each partial as it reduces it (one pass) where the one-hop
     * schedule copies n - 2 more blocks into FIFOs on their own: half a transfer each (a transfer is a
     * copy in and a copy out).  4 ranks on 2 CPUs: one hop 2.4x the ring's speed at 64 KiB, 0.75-0.8x
     * at 4-16 MiB (the model: 15 of the ring's 11 block passes).  One host only, as AllGather's. */
    if (algo == MEND_ALGO_RD)
      return kind == MEND_TRANSPORT_NET || !mendRdReduceScatterSupported(n)
                 ? -1
                 : alpha + (double)(n - 1) / n * S * (1 / perUs + 1 / redUs) + (double)(n - 2) / n * S / (2 * perUs);
    return algo == MEND_ALGO_RING ? (n - 1) * ringAlpha + (double)(n - 1) / n * S * (1 / perUs + 1 / redUs) : -1;
  case MEND_FUNC_BROADCAST:
    return algo == MEND_ALGO_RING ? (n - 1) * ringAlpha + S / perUs : -1;
  case MEND_FUNC_REDUCE:
    return algo == MEND_ALGO_RING ? (n - 1) * ringAlpha + S / perUs + S / redUs : -1;
  default:
    return algo == MEND_ALGO_P2P ? alpha + S / (k->bwChannel * 1e3) : -1;
  }
}

int mendTuneChannels(size_t nBytes, int kind) {
  /* Enough data per channel that its per-step overhead stays small; net channels are sockets
   * running in parallel, so they pay off sooner. */
  size_t perChannel = kind == MEND_TRANSPORT_NET ? (128u << 10) : (512u << 10);
  size_t k = nBytes / perChannel;
  return k < 1 ? 1 : (k > MEND_MAXCHANNELS ? MEND_MAXCHANNELS : (int)k);
}

size_t mendTuneChunk(int func, int algo, size_t bytesPerChannel, int nRanks, size_t slotBytes) {
  size_t chunk = slotBytes;
  /* Chains and trees pipeline one segment per loop: cut the data in >= 8 pieces so the chain fills
   * quickly, but keep chunks >= 64 KiB so the per-step cost stays small. */
  int chain = func == MEND_FUNC_BROADCAST || func == MEND_FUNC_REDUCE || algo == MEND_ALGO_TREE;
  if (chain && nRanks > 2) {
    size_t want = bytesPerChannel / 8;
    if (want < (64u << 10)) want = 64u << 10;
    if (want < chunk) chunk = want;
  }
  return chunk;
}

/* ---- per-call choice ---- */

/* Slowest transport from this rank to any peer.  Transports are picked by (same process, same
 * host) classes, so "some peer outside my class" holds for all ranks or none: comm-wide. */
static int worstKind(struct ncclComm* comm, struct mendPlanner* pl) {
  if (pl->worstKind < 0) {
    int k = MEND_TRANSPORT_P2P;
    for (int p = 0; p < comm->nRanks; p++) {
      if (p == comm->rank) continue;
      int pk = pl->connOps->kindOf(comm, p);
      if (pk > k) k = pk;
    }
    pl->worstKind = k;
  }
  return pl->worstKind;
}

/* NIC line rate in GB/s (estimates only: it is this host's NIC, not necessarily every rank's). */
static double netGBs(struct ncclComm* comm) {
  if (comm->topo == NULL || comm->nChannels < 1) return 0;
  int dev = comm->channels[0].netDev;
  if (dev < 0 || dev >= comm->topo->nNics || comm->topo->nics[dev].speed <= 0) return 0;
  return comm->topo->nics[dev].speed / 8000.0;
}

static int channelsFor(struct ncclComm* comm, size_t nBytes, int kind) {
  int nCh = mendTuneChannels(nBytes, kind);
  int64_t minC = mendParamMinNchannels(), maxC = mendParamMaxNchannels();
  if (minC > 0 && nCh < minC) nCh = (int)minC;
  if (maxC > 0 && nCh > maxC) nCh = (int)maxC;
  if (nCh > comm->nChannels) nCh = comm->nChannels;
  return nCh < 1 ? 1 : nCh;
}

/* Let a tuner plugin rewrite the cost table; returns the cheapest runnable algorithm. */
static int askTuner(struct ncclComm* comm, struct mendPlanner* pl, int func, size_t nBytes, double cost[2],
                    int* nCh) {
  if (!pl->tunerTried) {
    pl->tunerTried = 1;
    if (mendTunerOpen(comm->commHash, comm->nRanks, comm->nNodes, &pl->tuner) != ncclSuccess) pl->tuner = NULL;
  }
  int best = cost[MEND_ALGO_RING] >= 0 && (cost[MEND_ALGO_TREE] < 0 || cost[MEND_ALGO_RING] <= cost[MEND_ALGO_TREE])
                 ? MEND_ALGO_RING : MEND_ALGO_TREE;
  if (pl->tuner == NULL) return best;
  float table[MEND_TUNER_NALGOS][MEND_TUNER_NPROTOS];
  for (int a = 0; a < MEND_TUNER_NALGOS; a++)
    for (int p = 0; p < MEND_TUNER_NPROTOS; p++) table[a][p] = -1.0f;
  for (int a = 0; a < 2; a++) table[a][MEND_NCCL_PROTO_SIMPLE] = (float)cost[a];
  int tunerCh = 0;
  if (mendTunerGetCollInfo(pl->tuner, func, nBytes, table, &tunerCh) != ncclSuccess) return best;
  float t = table[MEND_NCCL_ALGO_TREE][MEND_NCCL_PROTO_SIMPLE], r = table[MEND_NCCL_ALGO_RING][MEND_NCCL_PROTO_SIMPLE];
  if (cost[MEND_ALGO_TREE] >= 0 && t >= 0 && (r < 0 || cost[MEND_ALGO_RING] < 0 || t < r)) best = MEND_ALGO_TREE;
  else if (cost[MEND_ALGO_RING] >= 0 && r >= 0) best = MEND_ALGO_RING;
  if (tunerCh > 0) *nCh = tunerCh < comm->nChannels ? tunerCh : comm->nChannels;
  return best;
}

ncclResult_t mendTuneColl(struct ncclComm* comm, struct mendPlanner* pl, const struct mendOp* op, size_t nBytes,
                          int algoHint, struct mendChoice* ch) {
  if (!pl->masksParsed) parseMasks(comm, pl);
  int func = op->func, kind = worstKind(comm, pl);
  size_t slot = (size_t)(mendParamBuffsize() > 0 ? mendParamBuffsize() : 4194304) / MEND_FIFO_SLOTS;
  struct mendCostIn in = {.func = func, .nBytes = nBytes, .nRanks = comm->nRanks, .kind = kind,
                          .nChannels = channelsFor(comm, nBytes, kind), .calib = calibOf(comm),
                          .nRails = comm->nRails, .nNodes = comm->nNodes, .slotBytes = slot,
                          .cpuCrowd = comm->cpuCrowd};
  uint32_t algos = pl->algoMask[func], protos = pl->protoMask[func];
  double cost[2];
  for (int a = 0; a < 2; a++) cost[a] = (algos & (1u << a)) ? mendTuneCostUs(&in, a) : -1;
  if (cost[MEND_ALGO_RING] < 0 && cost[MEND_ALGO_TREE] < 0) {
    INFO(NCCL_TUNING | NCCL_ENV, "NCCL_ALGO=%s allows no algorithm Mend has for %s; using Ring",
         mendParamAlgo() ? mendParamAlgo() : "", mendFuncName(func));
    cost[MEND_ALGO_RING] = mendTuneCostUs(&in, MEND_ALGO_RING);
  }
  if (!(protos & (1u << MEND_NCCL_PROTO_SIMPLE)))
    WARN_ONCE("NCCL_PROTO=%s excludes Simple, the only protocol Mend runs; using Simple", mendParamProto());
  else if (protos & ((1u << MEND_NCCL_PROTO_LL) | (1u << MEND_NCCL_PROTO_LL128)) && mendParamProto())
    INFO_ONCE(NCCL_TUNING | NCCL_ENV, "NCCL_PROTO=%s: LL and LL128 are not implemented; Simple is used",
              mendParamProto());
  int nCh = in.nChannels;
  ch->algo = askTuner(comm, pl, func, nBytes, cost, &nCh);
  if (pl->tuner == NULL && (algoHint == MEND_ALGO_RING || algoHint == MEND_ALGO_TREE) && cost[algoHint] >= 0)
    ch->algo = algoHint;
  /* Recursive doubling (AllReduce; AllGather on one host; ReduceScatter's one hop on one host) is Mend's own: considered when NCCL_ALGO
   * leaves the choice to Mend and no tuner plugin decides (a plugin's table has no cell for it);
   * MEND_RD=1 forces it where it applies, 0 rules it out. */
  int64_t rdMode = mendParamRd();
  int rdOk = (func == MEND_FUNC_ALLREDUCE || func == MEND_FUNC_ALLGATHER || func == MEND_FUNC_REDUCESCATTER) &&
             pl->tuner == NULL && rdMode != 0 &&
             (rdMode == 1 || mendParamAlgo() == NULL);
  double rd = rdOk ? mendTuneCostUs(&in, MEND_ALGO_RD) : -1;
  if (rd >= 0 && (rdMode == 1 || rd < cost[ch->algo])) ch->algo = MEND_ALGO_RD;
  ch->proto = MEND_NCCL_PROTO_SIMPLE;
  ch->nChannels = nCh;
  in.nChannels = nCh;
  in.netGBs = netGBs(comm);
  ch->estUs = mendTuneCostUs(&in, ch->algo);
  int64_t forced = mendParamChunksize();
  ch->chunkBytes = forced > 0 ? (size_t)forced : mendTuneChunk(func, ch->algo, nBytes / (size_t)nCh, comm->nRanks, slot);
  INFO(NCCL_TUNING,
       "%s: %zu Bytes -> Algo %s proto Simple channels %d chunk %zu time %.2f us (ring %.2f, tree %.2f, rd %.2f)%s",
       mendFuncName(func), nBytes, mendAlgoName(ch->algo), nCh, ch->chunkBytes, ch->estUs, cost[MEND_ALGO_RING],
       cost[MEND_ALGO_TREE], rd, pl->tuner ? " [tuner]" : "");
  return ncclSuccess;
}

double mendTuneP2pUs(struct ncclComm* comm, struct mendPlanner* pl, size_t nBytes) {
  struct mendCostIn in = {.func = MEND_FUNC_SEND, .nBytes = nBytes, .nRanks = comm->nRanks,
                          .kind = worstKind(comm, pl), .nChannels = 1, .netGBs = netGBs(comm),
                          .calib = calibOf(comm), .nRails = comm->nRails, .nNodes = comm->nNodes,
                          .cpuCrowd = comm->cpuCrowd};
  return mendTuneCostUs(&in, MEND_ALGO_P2P);
}

/* ---- AllReduce under a degraded plan view: backup, Balance, R2 or recursive R2 ---- */

static const char* replanNames[MEND_NREPLANS] = {"auto", "backup", "balance", "r2", "recursive"};

const char* mendReplanName(int r) { return r >= 0 && r < MEND_NREPLANS ? replanNames[r] : "unknown"; }

int mendReplanParam(void) {
  const char* s = mendParamReplan();
  if (s == NULL || *s == '\0') return MEND_REPLAN_AUTO;
  for (int r = 0; r < MEND_NREPLANS; r++) {
    if (strcasecmp(s, replanNames[r]) == 0) return r;
  }
  WARN_ONCE("MEND_REPLAN=%s is not one of auto, backup, balance, r2, recursive; using auto", s);
  return MEND_REPLAN_AUTO;
}

static void logChoice(const struct mendReplanChoice* c, size_t nBytes, int forced) {
  char lv[256] = "";
  size_t at = 0;
  for (int l = 0; c->replan >= MEND_REPLAN_R2 && l < c->split.nLevels && at < sizeof(lv); l++) {
    const struct mendR2Level* v = c->split.lv + l;
    char who[32] = "all";
    if (l) snprintf(who, sizeof(who), "cap>=%d", v->minCap);
    at += (size_t)snprintf(lv + at, sizeof(lv) - at, "%s%s: %d ranks, share %.3f at %d permille", l ? "; " : " [", who,
                           v->nMembers, v->share, v->rate);
  }
  if (at && at < sizeof(lv))
    snprintf(lv + at, sizeof(lv) - at, "] channels %d chunk %zu", c->nChannels, c->chunkBytes);
  INFO(NCCL_TUNING, "AllReduce: %zu Bytes -> replan %s%s time %.2f us (backup %.2f, balance %.2f, r2 %.2f, recursive %.2f)%s",
       nBytes, mendReplanName(c->replan), lv, c->estUs, c->costUs[MEND_REPLAN_BACKUP], c->costUs[MEND_REPLAN_BALANCE],
       c->costUs[MEND_REPLAN_R2], c->costUs[MEND_REPLAN_RECURSIVE], forced ? " [MEND_REPLAN]" : "");
}

/* The chunk of an R2 plan's chains over nCh channels: small enough to keep them pipelined (as for
 * trees), at most a FIFO slot. */
static size_t r2Chunk(size_t nBytes, int nCh) {
  int64_t forced = mendParamChunksize();
  size_t slot = (size_t)(mendParamBuffsize() > 0 ? mendParamBuffsize() : 4194304) / MEND_FIFO_SLOTS;
  size_t chunk = nBytes / (size_t)(nCh > 0 ? nCh : 1) / 8;
  if (chunk < (64u << 10)) chunk = 64u << 10;
  return forced > 0 ? (size_t)forced : (chunk < slot ? chunk : slot);
}

/* Channels and chunk of an R2 plan: at least one channel per level with data where the
 * communicator has them. */
static void r2Shape(struct ncclComm* comm, size_t nBytes, int nCh, struct mendReplanChoice* c) {
  int levels = 0;
  for (int l = 0; l < c->split.nLevels; l++) levels += c->split.lv[l].share > 0;
  int64_t maxC = mendParamMaxNchannels();
  int want = levels < comm->nChannels ? levels : comm->nChannels;
  if (maxC > 0 && want > maxC) want = (int)maxC;
  c->nChannels = nCh > want ? nCh : want;
  c->chunkBytes = r2Chunk(nBytes, c->nChannels);
}

/* A split's time at least what its busiest NIC needs where the layout puts its bytes. */
static void placeSplit(struct ncclComm* comm, const struct mendTuneViewSum* sum, size_t nBytes, int nCh,
                       double bytesPerUs, struct mendR2Split* s) {
  struct mendReplanChoice c = {.replan = MEND_REPLAN_R2, .split = *s};
  r2Shape(comm, nBytes, nCh, &c);
  double placed = mendR2PlacedUs(sum->nRanks, sum->rankCap, sum->rankNics, &c, (double)nBytes, bytesPerUs);
  if (placed > s->estUs) s->estUs = placed;
}

/* ---- a tree AllReduce under a degraded view: each host's busiest NIC per schedule ---- */

/* What the host-level tree estimate needs: per host and tree its children and whether it has a
 * parent, its usable NICs and each usable NIC's share of line rate. */
struct treeHosts {
  int nHosts, rails;
  unsigned char* kids;  /* [2][nHosts] children in tree t */
  unsigned char* up;    /* [2][nHosts] 1 when it has a parent in tree t */
  uint32_t* nics;       /* [nHosts] usable NICs (the intersection over the host's ranks) */
  double* nicCap;       /* [nHosts] line-rate share of each usable NIC (rankCap spread over them) */
};

static void treeHostsFree(struct treeHosts* t) {
  free(t->kids);
  free(t->up);
  free(t->nics);
  free(t->nicCap);
}

static int treeHostsInit(const struct ncclComm* comm, const struct mendTuneViewSum* sum, struct treeHosts* t) {
  int H = comm->nNodes, R = comm->nRails;
  memset(t, 0, sizeof(*t));
  if (H < 4 || R < 2 || R > 32 || comm->rankToNode == NULL || sum->nRanks != comm->nRanks) return 0;
  int* parent = malloc(sizeof(int) * (size_t)H);
  int(*child)[2] = malloc(sizeof(int[2]) * (size_t)H);
  int* cap = malloc(sizeof(int) * (size_t)H);
  *t = (struct treeHosts){.nHosts = H, .rails = R, .kids = malloc(2 * (size_t)H), .up = malloc(2 * (size_t)H),
                          .nics = malloc(sizeof(uint32_t) * (size_t)H), .nicCap = malloc(sizeof(double) * (size_t)H)};
  int ok = parent && child && cap && t->kids && t->up && t->nics && t->nicCap;
  for (int tr = 0; ok && tr < 2; tr++) {
    mendGraphBtree(H, tr, parent, child);
    for (int h = 0; h < H; h++) {
      t->kids[tr * H + h] = (unsigned char)((child[h][0] >= 0) + (child[h][1] >= 0));
      t->up[tr * H + h] = parent[h] >= 0;
    }
  }
  uint32_t all = R >= 32 ? ~0u : (1u << R) - 1;
  for (int h = 0; ok && h < H; h++) t->nics[h] = all, cap[h] = 1000;
  for (int r = 0; ok && r < comm->nRanks; r++) {
    int h = comm->rankToNode[r];
    if (h < 0 || h >= H) ok = 0;
    else if (sum->rankNics[r] != ~0u) t->nics[h] &= sum->rankNics[r], cap[h] = cap[h] < sum->rankCap[r] ? cap[h] : sum->rankCap[r];
  }
  for (int h = 0; ok && h < H; h++) {
    int usable = __builtin_popcount(t->nics[h]);
    t->nicCap[h] = usable ? cap[h] / 1000.0 * R / usable : 0;
  }
  free(parent);
  free(child);
  free(cap);
  if (!ok) treeHostsFree(t);
  return ok;
}

/* A tree AllReduce's time on its busiest NICs, relative to a NIC at line rate moving the whole
 * vector once: channel c carries weight w[c] of the data (w NULL: even) in tree c mod 2 over NIC
 * c mod rails, or where the view moves it (mendReplanPlacedNic); `healthy`: every NIC usable at
 * line rate.  A channel's reduce (up) and broadcast (down) phases run one after the other
 * (gen_tree.c), so each phase's time is its own busiest NIC direction: up, a host receives from its
 * children and sends to its parent; down, the reverse. */
static double treeBusiest(const struct treeHosts* t, const int* w, int nCh, int healthy) {
  double total = 0, phase[2] = {0, 0};
  for (int c = 0; c < nCh; c++) total += w ? w[c] : 1;
  for (int h = 0; h < t->nHosts && total > 0; h++) {
    if (!healthy && t->nicCap[h] <= 0) continue; /* no usable NIC: nothing the schedule can change */
    double load[2][2][32] = {{{0}}}; /* [phase][0 receive, 1 send][NIC] */
    for (int c = 0; c < nCh; c++) {
      int d = healthy ? c % t->rails : mendReplanPlacedNic(c, t->rails, t->nics[h]), tr = (c % 2) * t->nHosts + h;
      double share = (w ? w[c] : 1) / total;
      load[0][0][d] += share * t->kids[tr], load[0][1][d] += share * t->up[tr];
      load[1][0][d] += share * t->up[tr], load[1][1][d] += share * t->kids[tr];
    }
    double cap = healthy ? 1.0 : t->nicCap[h];
    for (int ph = 0; ph < 2; ph++)
      for (int dir = 0; dir < 2; dir++)
        for (int d = 0; d < t->rails; d++) phase[ph] = fmax(phase[ph], load[ph][dir][d] / cap);
  }
  return phase[0] + phase[1];
}

/* Backup's and Balance's tree estimates: the healthy tree's bandwidth term scaled by how much
 * longer its busiest NICs take.  Balance's weights are made for rings (replan.c): a lost NIC's
 * channels are all of one tree when the NIC count is even, so the weights move data to the other
 * channels and every host's busiest NIC carries more, while backup's moved channel adds to a NIC
 * whose busiest phase and direction it often leaves unchanged (a host inner in one tree is a leaf
 * in the other).  0 when the hosts cannot be priced (fewer than 4 hosts, one NIC). */
static int treeSchedules(const struct ncclComm* comm, const struct mendTuneViewSum* sum,
                         const struct mendPlanView* view, int nCh, double* balF, double* bakF) {
  struct treeHosts t;
  if (view == NULL || nCh < 1 || nCh > view->nChannels || !treeHostsInit(comm, sum, &t)) return 0;
  int w[MEND_VIEW_MAX_CHANNELS];
  for (int c = 0; c < nCh; c++) w[c] = view->ch[c].weight;
  double healthy = treeBusiest(&t, NULL, nCh, 1);
  *balF = treeBusiest(&t, w, nCh, 0) / healthy;
  *bakF = treeBusiest(&t, NULL, nCh, 0) / healthy;
  treeHostsFree(&t);
  return healthy > 0;
}

/* The choice for the inputs of `key` under a view summarised as `sum` (the uncached path). */
static void chooseAllReduce(struct ncclComm* comm, const struct mendTuneViewSum* sum, const struct mendPlanView* view,
                            const struct mendTuneKey* key, struct mendReplanChoice* c) {
  int n = key->nRanks, kind = key->kind, nCh = key->nChannels, forced = key->forced;
  size_t nBytes = key->nBytes;
  struct mendCostIn in = {.func = MEND_FUNC_ALLREDUCE, .nBytes = nBytes, .nRanks = n, .kind = kind, .nChannels = nCh,
                          .calib = calibOf(comm), .nRails = comm->nRails, .nNodes = comm->nNodes,
                          .slotBytes = key->slotBytes, .cpuCrowd = comm->cpuCrowd};
  struct mendCostIn in0 = in;
  in0.nBytes = 0;
  double balF = 1 / sum->cmin, bakF = 1 / sum->bmin, treeBalF = 0, treeBakF = 0;
  int treePriced = kind == MEND_TRANSPORT_NET && (key->algos >> MEND_ALGO_TREE & 1) &&
                   treeSchedules(comm, sum, view, nCh, &treeBalF, &treeBakF);
  int algo[MEND_NREPLANS] = {-1, -1, -1, -1, -1};
  double best[2] = {-1, -1}; /* per schedule: the algorithm's time with its reduction, as mendTuneColl */
  for (int a = 0; a < 2; a++) {
    if (!(key->algos & (1u << a))) continue;
    /* R2's model (tuning_r2.c) has no reduction term: leave it out of the estimates, so the
     * schedules compare like with like (and it does not scale with a NIC's capacity); the
     * algorithm of a schedule is picked with it (a tree reduces all S, a ring (n-1)/n S). */
    double red = reduceUs(&in, a), full = mendTuneCostUs(&in, a) - red, lat = mendTuneCostUs(&in0, a);
    int tree = a == MEND_ALGO_TREE && treePriced;
    double t[2] = {lat + (full - lat) * (tree ? treeBakF : bakF), lat + (full - lat) * (tree ? treeBalF : balF)};
    for (int i = 0; i < 2; i++) {
      if (best[i] >= 0 && t[i] + red >= best[i]) continue;
      best[i] = t[i] + red;
      c->costUs[MEND_REPLAN_BACKUP + i] = t[i];
      algo[MEND_REPLAN_BACKUP + i] = a;
    }
  }
  /* R2 levels are rings: only where Ring is allowed.  The NIC line rate stays out (it is this
   * host's, and the choice must be every rank's). */
  const struct mendKindCost* k = kindCost(calibOf(comm), kind);
  double bw = nCh * k->bwChannel < k->bwMax ? nCh * k->bwChannel : k->bwMax;
  struct mendR2ModelIn m = {.nRanks = n, .rankCap = sum->rankCap, .nBytes = (double)nBytes, .alphaUs = k->alphaUs,
                            .bytesPerUs = bw * 1e3, .chunkBytes = (double)r2Chunk(nBytes, nCh)};
  struct mendR2Split r2, rec;
  int ringOk = (key->algos >> MEND_ALGO_RING) & 1;
  int r2Ok = ringOk && mendR2BestSplitCaps(&m, &sum->caps, 1, 1, &r2);
  int recOk = ringOk && mendR2BestSplitCaps(&m, &sum->caps, 2, MEND_R2_MAX_LEVELS - 1, &rec);
  if (r2Ok) placeSplit(comm, sum, nBytes, nCh, m.bytesPerUs, &r2);
  if (recOk) placeSplit(comm, sum, nBytes, nCh, m.bytesPerUs, &rec);
  if (r2Ok) c->costUs[MEND_REPLAN_R2] = r2.estUs;
  if (recOk) c->costUs[MEND_REPLAN_RECURSIVE] = rec.estUs;
  int pick = forced;
  if (forced == MEND_REPLAN_AUTO) {
    pick = MEND_REPLAN_BALANCE;
    double bak = c->costUs[MEND_REPLAN_BACKUP];
    if (bak >= 0 && bak < c->costUs[pick]) pick = MEND_REPLAN_BACKUP;
    if (r2Ok && r2.estUs < c->costUs[pick]) pick = MEND_REPLAN_R2;
    if (recOk && rec.estUs < c->costUs[pick]) pick = MEND_REPLAN_RECURSIVE;
  } else if ((forced == MEND_REPLAN_RECURSIVE && !recOk) || (forced == MEND_REPLAN_R2 && !r2Ok)) {
    pick = r2Ok ? MEND_REPLAN_R2 : MEND_REPLAN_BALANCE;
    INFO_ONCE(NCCL_TUNING | NCCL_ENV, "MEND_REPLAN=%s: the plan view has no capacities it applies to; using %s",
              mendReplanName(forced), mendReplanName(pick));
  }
  c->replan = pick;
  c->estUs = c->costUs[pick];
  if (treePriced && pick <= MEND_REPLAN_BALANCE) c->algo = algo[pick];
  if (pick == MEND_REPLAN_R2) c->split = r2;
  if (pick == MEND_REPLAN_RECURSIVE) c->split = rec;
  if (pick >= MEND_REPLAN_R2) r2Shape(comm, nBytes, nCh, c);
}

/* Every input of the choice besides the view (tuning_cache.h). */
static void keyOf(struct ncclComm* comm, struct mendPlanner* pl, size_t nBytes, int forced, struct mendTuneKey* key) {
  memset(key, 0, sizeof(*key));
  key->nBytes = nBytes;
  key->forced = forced;
  key->nRanks = comm->nRanks;
  key->kind = worstKind(comm, pl);
  key->nChannels = channelsFor(comm, nBytes, key->kind);
  key->commChannels = comm->nChannels;
  key->algos = pl->algoMask[MEND_FUNC_ALLREDUCE] & ((1u << MEND_ALGO_RING) | (1u << MEND_ALGO_TREE));
  if (key->algos == 0) key->algos = 1u << MEND_ALGO_RING;
  key->maxChannels = mendParamMaxNchannels();
  key->chunkParam = mendParamChunksize();
  key->slotBytes = (size_t)(mendParamBuffsize() > 0 ? mendParamBuffsize() : 4194304) / MEND_FIFO_SLOTS;
}

ncclResult_t mendTuneAllReduce(struct ncclComm* comm, struct mendPlanner* pl, const struct mendPlanView* view,
                               size_t nBytes, struct mendReplanChoice* c) {
  memset(c, 0, sizeof(*c));
  for (int r = 0; r < MEND_NREPLANS; r++) c->costUs[r] = -1;
  c->algo = -1;
  int forced = mendReplanParam(), n = comm->nRanks;
  c->replan = forced == MEND_REPLAN_BACKUP ? MEND_REPLAN_BACKUP : MEND_REPLAN_BALANCE;
  if (n <= 1 || view == NULL || view->nRanks != n || view->rankCap == NULL || view->rankNics == NULL)
    return ncclSuccess;
  struct mendTuneViewSum fresh;
  const struct mendTuneViewSum* sum;
  memset(&fresh, 0, sizeof(fresh));
  MENDCHECK(mendTuneCacheView(pl, view, &fresh, &sum));
  if (!sum->degraded && forced <= MEND_REPLAN_BALANCE) {
    mendTuneViewSumFree(&fresh);
    return ncclSuccess;
  }
  if (!pl->masksParsed) parseMasks(comm, pl);
  struct mendTuneKey key;
  keyOf(comm, pl, nBytes, forced, &key);
  if (!mendTuneCacheFind(pl, &key, c)) {
    chooseAllReduce(comm, sum, view, &key, c);
    mendTuneCacheAdd(pl, &key, c);
  }
  mendTuneViewSumFree(&fresh);
  logChoice(c, nBytes, forced != MEND_REPLAN_AUTO);
  return ncclSuccess;
}
