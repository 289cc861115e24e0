/*
 * Tuning: which algorithm, how many channels, what chunk, for each collective call.
 *
 * Alpha-beta model per transport kind (constants measured on the reference machines, see
 * PERF notes in src/enqueue/README.md): a hop costs alpha microseconds, a channel moves data at
 * bwChannel GB/s and all channels together at most bwMax GB/s (the host engine is one thread per
 * rank: more channels add overlap, not memcpy bandwidth; net channels add sockets).
 *   ring AllReduce   2(n-1) hops, 2(n-1)/n x S bytes per rank
 *   tree AllReduce   2 x depth hops, 2 x S bytes through an inner node (up and down)
 *   AllGather / ReduceScatter  n-1 hops, (n-1)/n x S;   Broadcast / Reduce  n-1 hops, S
 * Every input is the same on every rank (rank count, comm-wide slowest transport, sizes,
 * parameters), so every rank makes the same choice.  A tuner plugin may rewrite the cost table.
 */
#include "enqueue/tuning.h"

#include <math.h>
#include <strings.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "enqueue/plan.h"
#include "graph/graph.h"
#include "misc/param.h"
#include "plugin/tuner_plugin.h"
#include "transport/transport.h"

struct kindCost {
  double alphaUs;   /* per hop */
  double bwChannel; /* GB/s one channel moves */
  double bwMax;     /* GB/s all channels of a rank move */
};
static const struct kindCost kindCosts[3] = {
  [MEND_TRANSPORT_P2P] = {.alphaUs = 1.0, .bwChannel = 5.0, .bwMax = 8.0},
  [MEND_TRANSPORT_SHM] = {.alphaUs = 3.0, .bwChannel = 3.0, .bwMax = 6.0},
  [MEND_TRANSPORT_NET] = {.alphaUs = 25.0, .bwChannel = 1.0, .bwMax = 2.5},
};

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

static void parseMasks(struct mendPlanner* pl) {
  const char* bad = NULL;
  if (mendTuneParse(mendParamAlgo(), 0, pl->algoMask, &bad) != ncclSuccess)
    WARN_ONCE("NCCL_ALGO=%s: unknown algorithm or function '%s' ignored", mendParamAlgo(), bad);
  if (mendTuneParse(mendParamProto(), 1, pl->protoMask, &bad) != ncclSuccess)
    WARN_ONCE("NCCL_PROTO=%s: unknown protocol or function '%s' ignored", mendParamProto(), bad);
  pl->masksParsed = 1;
}

/* ---- cost model ---- */

static int depthOf(int n) {
  int d = 0;
  while ((1 << d) < n + 1) d++;
  return d;
}

double mendTuneCostUs(const struct mendCostIn* in, int algo) {
  int n = in->nRanks, kind = in->kind < 0 || in->kind > 2 ? MEND_TRANSPORT_NET : in->kind;
  const struct kindCost* k = kindCosts + kind;
  double bwMax = (kind == MEND_TRANSPORT_NET && in->netGBs > 0) ? in->netGBs : k->bwMax;
  double bw = in->nChannels * k->bwChannel;
  if (bw > bwMax) bw = bwMax;
  double perUs = bw * 1e3; /* bytes per microsecond */
  double S = (double)in->nBytes;
  if (n <= 1) return S / (kindCosts[MEND_TRANSPORT_P2P].bwMax * 1e3);
  switch (in->func) {
  case MEND_FUNC_ALLREDUCE:
    if (algo == MEND_ALGO_RING) return 2.0 * (n - 1) * k->alphaUs + 2.0 * (n - 1) / n * S / perUs;
    if (algo == MEND_ALGO_TREE) return 2.0 * (depthOf(n) - 1) * k->alphaUs + 2.0 * S / perUs;
    return -1;
  case MEND_FUNC_ALLGATHER:
  case MEND_FUNC_REDUCESCATTER:
    return algo == MEND_ALGO_RING ? (n - 1) * k->alphaUs + (double)(n - 1) / n * S / perUs : -1;
  case MEND_FUNC_BROADCAST:
  case MEND_FUNC_REDUCE:
    return algo == MEND_ALGO_RING ? (n - 1) * k->alphaUs + S / perUs : -1;
  default:
    return algo == MEND_ALGO_P2P ? k->alphaUs + S / (k->bwChannel * 1e3) : -1;
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
                          struct mendChoice* ch) {
  if (!pl->masksParsed) parseMasks(pl);
  int func = op->func, kind = worstKind(comm, pl);
  struct mendCostIn in = {.func = func, .nBytes = nBytes, .nRanks = comm->nRanks, .kind = kind,
                          .nChannels = channelsFor(comm, nBytes, kind)};
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
  ch->proto = MEND_NCCL_PROTO_SIMPLE;
  ch->nChannels = nCh;
  in.nChannels = nCh;
  in.netGBs = netGBs(comm);
  ch->estUs = mendTuneCostUs(&in, ch->algo);
  int64_t forced = mendParamChunksize();
  size_t slot = (size_t)(mendParamBuffsize() > 0 ? mendParamBuffsize() : 4194304) / MEND_FIFO_SLOTS;
  ch->chunkBytes = forced > 0 ? (size_t)forced : mendTuneChunk(func, ch->algo, nBytes / (size_t)nCh, comm->nRanks, slot);
  INFO(NCCL_TUNING, "%s: %zu Bytes -> Algo %s proto Simple channels %d chunk %zu time %.2f us (ring %.2f, tree %.2f)%s",
       mendFuncName(func), nBytes, mendAlgoName(ch->algo), nCh, ch->chunkBytes, ch->estUs, cost[MEND_ALGO_RING],
       cost[MEND_ALGO_TREE], pl->tuner ? " [tuner]" : "");
  return ncclSuccess;
}

double mendTuneP2pUs(struct ncclComm* comm, struct mendPlanner* pl, size_t nBytes) {
  struct mendCostIn in = {.func = MEND_FUNC_SEND, .nBytes = nBytes, .nRanks = comm->nRanks,
                          .kind = worstKind(comm, pl), .nChannels = 1, .netGBs = netGBs(comm)};
  return mendTuneCostUs(&in, MEND_ALGO_P2P);
}
