// Re-planning (src/enqueue/replan.c, replan_rerank.c, the weighted split of plan.c): the split covers
// a count exactly once for any weights and is today's split for equal ones; failover chains rotate
// equally near NICs by channel; views derived from degraded pictures (one NIC of one host, two
// NICs, degraded rates, hosts on different rails) hash alike on every rank, move channels off
// failed NICs along their chains, weight channels so no NIC of the degraded rank carries more than
// its bandwidth share, and re-rank rings so neighbours share a rail; MEND_REPLAN=backup keeps
// today's plan; and every collective, type and op gives exact results in the loopback world under
// those views (references computed here, independently of Mend's reductions).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mend_internal.h"
#include "narrow_float.h"
extern "C" {
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "resilience/health.h"
}

#include "loopback_world.h"

using mendtest::ScopedEnv;
using mendtest::World;

namespace {

// ---------------------------------------------------------------- pictures and views

struct ViewPtr {
  mendPlanView* v = nullptr;
  ViewPtr() = default;
  ViewPtr(const ViewPtr&) = delete;
  ViewPtr(ViewPtr&& o) noexcept : v(o.v) { o.v = nullptr; }
  ~ViewPtr() { mendPlanViewFree(v); }
};

// Every rank has `rails` NICs at 100 Gb/s; `nics` lists the ones not up at line rate.
struct Picture {
  int nRanks, rails;
  std::vector<float> line;
  std::vector<mendViewNic> nics;
  Picture(int n, int r) : nRanks(n), rails(r), line((size_t)n * r, 100.0f) {}
  Picture& down(int rank, int dev) {
    nics.push_back({rank, dev, MEND_NIC_DOWN, 0.0f});
    return *this;
  }
  Picture& slow(int rank, int dev, float gbps) {
    nics.push_back({rank, dev, MEND_NIC_DEGRADED, gbps});
    return *this;
  }
  mendViewHealth health() {
    std::sort(nics.begin(), nics.end(),
              [](const mendViewNic& a, const mendViewNic& b) { return a.rank != b.rank ? a.rank < b.rank : a.dev < b.dev; });
    return mendViewHealth{nRanks, rails, line.data(), (int)nics.size(), nics.data()};
  }
  double gbps(int rank, int dev) const {
    for (auto& n : nics)
      if (n.rank == rank && n.dev == dev) return n.state == MEND_NIC_DOWN ? 0.0 : n.gbps;
    return 100.0;
  }
};

// Rank r's base view in world w: the loopback rings, rails (channel c on NIC c % rails), NICs in
// device order.
ViewPtr baseView(World& w, int r, int rails) {
  ViewPtr v;
  EXPECT_EQ(mendPlanViewFromChannels(w.comm(r), &v.v), ncclSuccess);
  v.v->nNics = rails;
  for (int d = 0; d < rails; d++) v.v->nicOrder[d] = d;
  for (int c = 0; c < v.v->nChannels; c++) v.v->ch[c].netDev = c % rails;
  EXPECT_EQ(mendPlanViewSeal(v.v), ncclSuccess);
  return v;
}

// Views of every rank derived from picture p (epoch 1, from op 0).
std::vector<ViewPtr> derive(World& w, Picture& p) {
  mendViewHealth h = p.health();
  std::vector<ViewPtr> out;
  for (int r = 0; r < w.n(); r++) {
    ViewPtr base = baseView(w, r, p.rails);
    ViewPtr v;
    EXPECT_EQ(mendReplanDerive(base.v, &h, 1, 0, &v.v), ncclSuccess) << "rank " << r;
    out.push_back(std::move(v));
  }
  return out;
}

// Per direction, the share of a rank's bytes on each of its NICs under view v (the ring model:
// every channel sends its weight once from each rank).
std::vector<double> nicShares(const mendPlanView* v, const mendViewHealth* h, int rank, int rails, bool tx) {
  std::vector<double> share(rails, 0.0);
  double total = 0;
  for (int c = 0; c < v->nChannels; c++) {
    int n = v->nRanks, i = 0;
    while (v->ch[c].ring[i] != rank) i++;
    int from = tx ? rank : v->ch[c].ring[(i + n - 1) % n], to = tx ? v->ch[c].ring[(i + 1) % n] : rank;
    int d = mendReplanHopNic(v, h, c, from, to);
    if (d >= 0) share[d] += v->ch[c].weight;
    total += v->ch[c].weight;
  }
  for (auto& s : share) s /= total;
  return share;
}

// The checks every derived view passes: one hash, valid linked rings, Balance's bound.
void checkViews(std::vector<ViewPtr>& views, Picture& p, const std::string& ctx, bool expectLinked = true) {
  mendViewHealth h = p.health();
  int n = (int)views.size();
  for (int r = 0; r < n; r++) {
    const mendPlanView* v = views[r].v;
    ASSERT_NE(v, nullptr) << ctx;
    EXPECT_EQ(v->hash, views[0].v->hash) << ctx << ": rank " << r << " derived another shared view";
    for (int c = 0; c < v->nChannels; c++) {
      EXPECT_EQ(0, memcmp(v->ch[c].ring, views[0].v->ch[c].ring, sizeof(int) * n)) << ctx;
      EXPECT_EQ(v->ch[c].ring[v->ch[c].ringIndex], r) << ctx;
      for (int i = 0; i < n && expectLinked; i++)
        EXPECT_GE(mendReplanHopNic(v, &h, c, v->ch[c].ring[i], v->ch[c].ring[(i + 1) % n]), -1)
            << ctx << ": channel " << c << " hop " << v->ch[c].ring[i] << " -> " << v->ch[c].ring[(i + 1) % n]
            << " shares no usable rail";
      int d = v->ch[c].netDev;
      ASSERT_GE(d, 0) << ctx;
      EXPECT_GT(p.gbps(r, d), 0.0) << ctx << ": rank " << r << " channel " << c << " left on a down NIC";
    }
  }
  // Balance: the busiest NIC anywhere (bytes over bandwidth) is no busier than the most degraded
  // rank's NICs would be with its bytes spread in proportion to their bandwidth, the surviving-
  // capacity bound (1 % for integer weights).
  double minTotal = 1e300;
  for (int r = 0; r < n; r++) {
    double sum = 0;
    for (int d = 0; d < p.rails; d++) sum += p.gbps(r, d);
    minTotal = std::min(minTotal, sum);
  }
  for (int r = 0; r < n && expectLinked; r++) {
    for (bool tx : {true, false}) {
      std::vector<double> s = nicShares(views[r].v, &h, r, p.rails, tx);
      for (int d = 0; d < p.rails; d++) {
        if (s[d] == 0) continue;
        EXPECT_LE(s[d] / p.gbps(r, d), 1.01 / minTotal)
            << ctx << ": rank " << r << " NIC " << d << (tx ? " tx" : " rx") << " carries " << s[d] << " at "
            << p.gbps(r, d) << " Gb/s; the bound is a share of " << p.gbps(r, d) / minTotal;
      }
    }
  }
}

// ---------------------------------------------------------------- element formats (independent)

struct Fmt {
  int bytes, ebits, mbits, bias;
  bool isFloat, e4m3;
};
const Fmt kFmts[ncclNumTypes] = {
    {1, 0, 0, 0, false, false}, {1, 0, 0, 0, false, false}, {4, 0, 0, 0, false, false}, {4, 0, 0, 0, false, false},
    {8, 0, 0, 0, false, false}, {8, 0, 0, 0, false, false}, {2, 5, 10, 15, true, false}, {4, 0, 23, 0, true, false},
    {8, 0, 52, 0, true, false}, {2, 8, 7, 127, true, false}, {1, 4, 3, 7, true, true},    {1, 5, 2, 15, true, false},
};

double decode(int t, const unsigned char* p) { return mendtest::decodeElem(t, p); }

// Small non-negative integers only (all the tests use), exact in every type.
void encode(int t, double x, unsigned char* p) {
  if (!kFmts[t].isFloat) {
    int64_t v = (int64_t)x;
    memcpy(p, &v, kFmts[t].bytes);
  } else if (t == ncclFloat32) {
    float v = (float)x;
    memcpy(p, &v, 4);
  } else if (t == ncclFloat64) {
    memcpy(p, &x, 8);
  } else {
    // The tests use values 0..12 only: their bit patterns, found once per type.
    static std::map<int, std::map<double, uint32_t>> tables;
    auto& tab = tables[t];
    if (tab.empty()) {
      const Fmt& f = kFmts[t];
      for (uint32_t bits = 0; bits < (1u << (8 * f.bytes)); bits++) {
        double d = mendtest::decodeNarrow(bits, f.ebits, f.mbits, f.bias, f.e4m3);
        if (d >= 0 && d <= 12 && d == std::floor(d) && !tab.count(d)) tab[d] = bits;
      }
    }
    auto it = tab.find(x);
    if (it == tab.end()) {
      ADD_FAILURE() << "value " << x << " not representable in type " << t;
      return;
    }
    memcpy(p, &it->second, kFmts[t].bytes);
  }
}

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS, NUM_OPS };

// Inputs whose every partial result is exact in every type: sums and products see at most one
// contribution above the neutral value per element.
double input(int op, int n, int r, size_t i) {
  if (op == OP_MAX || op == OP_MIN) return (double)((r * 5 + i * 3) % 7);
  bool hit = (r + i) % n == 0;
  if (op == OP_PROD) return hit ? 2.0 : 1.0;
  return hit ? 1.0 + (double)(i % 2) : 0.0;
}

double reference(int t, int op, int n, size_t i, double* tol) {
  *tol = 0;
  double acc = input(op, n, 0, i);
  for (int r = 1; r < n; r++) {
    double x = input(op, n, r, i);
    acc = op == OP_PROD ? acc * x : op == OP_MAX ? std::max(acc, x) : op == OP_MIN ? std::min(acc, x) : acc + x;
  }
  if (op == OP_PMS) return 2.0 * acc;
  if (op == OP_AVG) {
    if (!kFmts[t].isFloat) return std::trunc(acc / n);
    *tol = (n + 2) * std::ldexp(1.0, -kFmts[t].mbits) * std::max(1.0, acc / n);
    return acc / n;
  }
  return acc;
}

unsigned char pat(int r, size_t byte) { return (unsigned char)(r * 37 + byte * 11 + 5); }

// ---------------------------------------------------------------- running collectives

enum Coll { C_ALLREDUCE, C_REDUCESCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_GATHER, C_SCATTER, C_SENDRECV, NUM_COLLS };
const char* kCollNames[NUM_COLLS] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce",
                                     "AlltoAll",  "Gather",        "Scatter",   "SendRecv"};
bool reducing(int f) { return f == C_ALLREDUCE || f == C_REDUCESCATTER || f == C_REDUCE; }
size_t sendElems(int f, int n, size_t c) { return (f == C_REDUCESCATTER || f == C_ALLTOALL || f == C_SCATTER) ? n * c : c; }
size_t recvElems(int f, int n, size_t c) { return (f == C_ALLGATHER || f == C_ALLTOALL || f == C_GATHER) ? n * c : c; }

// Expected byte of a copying collective at rank r (-1: not written).
int expectByte(int f, int n, int r, int root, size_t count, size_t ts, size_t byte) {
  size_t bb = count * ts, b = bb ? byte / bb : 0, in = bb ? byte % bb : 0;
  switch (f) {
  case C_ALLGATHER: return pat((int)b, in);
  case C_BROADCAST: return pat(root, byte);
  case C_ALLTOALL: return pat((int)b, r * bb + in);
  case C_GATHER: return r == root ? pat((int)b, in) : -1;
  case C_SCATTER: return pat(root, r * bb + byte);
  case C_SENDRECV: return pat((r + n - 1) % n, byte);
  default: return -1;
  }
}

// One collective on every rank of w (out of place), checked on every rank.
void runColl(World& w, int f, int t, int op, size_t count, const std::string& where) {
  int n = w.n(), root = (int)(count % n);
  size_t ts = kFmts[t].bytes;
  std::string ctx = where + " " + kCollNames[f] + " type " + std::to_string(t) + " op " + std::to_string(op) +
                    " count " + std::to_string(count);
  std::vector<std::vector<unsigned char>> send(n), recv(n);
  std::vector<ncclRedOp_t> ops(n, ncclSum);
  static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (int r = 0; r < n; r++) {
    send[r].resize(sendElems(f, n, count) * ts + 1);
    recv[r].assign(recvElems(f, n, count) * ts + 1, 0xA5);
    for (size_t i = 0; i < sendElems(f, n, count); i++) {
      if (reducing(f)) encode(t, input(op, n, r, i), send[r].data() + i * ts);
      else for (size_t b = 0; b < ts; b++) send[r][i * ts + b] = pat(r, i * ts + b);
    }
    if (reducing(f) && op == OP_PMS) {
      unsigned char two[8];
      encode(t, 2.0, two);
      ASSERT_EQ(ncclRedOpCreatePreMulSum(&ops[r], two, (ncclDataType_t)t, ncclScalarHostImmediate, w.comm(r)), ncclSuccess);
    } else if (reducing(f)) {
      ops[r] = builtin[op];
    }
  }
  ncclDataType_t dt = (ncclDataType_t)t;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  std::vector<ncclResult_t> issued(n, ncclSuccess);
  for (int r = 0; r < n; r++) {
    void *s = send[r].data(), *d = recv[r].data();
    ncclComm_t c = w.comm(r);
    ncclResult_t res = ncclSuccess;
    switch (f) {
    case C_ALLREDUCE: res = ncclAllReduce(s, d, count, dt, ops[r], c, nullptr); break;
    case C_REDUCESCATTER: res = ncclReduceScatter(s, d, count, dt, ops[r], c, nullptr); break;
    case C_REDUCE: res = ncclReduce(s, d, count, dt, ops[r], root, c, nullptr); break;
    case C_ALLGATHER: res = ncclAllGather(s, d, count, dt, c, nullptr); break;
    case C_BROADCAST: res = ncclBroadcast(s, d, count, dt, root, c, nullptr); break;
    case C_ALLTOALL: res = ncclAlltoAll(s, d, count, dt, c, nullptr); break;
    case C_GATHER: res = ncclGather(s, d, count, dt, root, c, nullptr); break;
    case C_SCATTER: res = ncclScatter(s, d, count, dt, root, c, nullptr); break;
    case C_SENDRECV:
      res = ncclSend(s, count, dt, (r + 1) % n, c, nullptr);
      if (res == ncclSuccess) res = ncclRecv(d, count, dt, (r + n - 1) % n, c, nullptr);
      break;
    }
    issued[r] = res;
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ctx;  // the group is closed before any check returns
  for (int r = 0; r < n; r++) ASSERT_EQ(issued[r], ncclSuccess) << ctx << " rank " << r;
  for (int r = 0; r < n; r++) {
    if (reducing(f) && op == OP_PMS) {
      EXPECT_EQ(ncclRedOpDestroy(ops[r], w.comm(r)), ncclSuccess);
    }
    ASSERT_EQ(recv[r].back(), 0xA5) << ctx << " rank " << r << ": written past the end";
    if (reducing(f)) {
      if (f == C_REDUCE && r != root) continue;
      size_t base = f == C_REDUCESCATTER ? r * count : 0;
      for (size_t i = 0; i < count; i++) {
        double tol, want = reference(t, op, n, base + i, &tol), got = decode(t, recv[r].data() + i * ts);
        ASSERT_LE(std::fabs(got - want), tol) << ctx << " rank " << r << " element " << i << " = " << got << ", expected " << want;
      }
    } else {
      for (size_t i = 0; i < recvElems(f, n, count) * ts; i++) {
        int e = expectByte(f, n, r, root, count, ts, i);
        ASSERT_EQ(recv[r][i], (unsigned char)(e < 0 ? 0xA5 : e)) << ctx << " rank " << r << " byte " << i;
      }
    }
  }
}

// Install every rank's derived view (before any op: in force at once).
void install(World& w, std::vector<ViewPtr>& views) {
  for (int r = 0; r < w.n(); r++) {
    ASSERT_EQ(mendPlannerSetView(w.comm(r), views[r].v), ncclSuccess);
    views[r].v = nullptr;  // the planner owns it
  }
}

// Every collective under the views (with `algo` Tree only AllReduce, the others are Ring anyway):
// each type with one op (cycled), every op for int32 and half; counts that leave some channels'
// windows empty, split unevenly, or loop several times.  `few`: int32, half and fp8 only (16 ranks).
void runEverything(World& w, const char* algo, bool few, const std::string& where) {
  bool treeOnly = strcmp(algo, "tree") == 0;
  for (int f = 0; f < NUM_COLLS; f++) {
    if (treeOnly && f != C_ALLREDUCE) continue;
    for (int t = 0; t < ncclNumTypes; t++) {
      if (few && t != ncclInt32 && t != ncclFloat16 && t != ncclFloat8e5m2) continue;
      std::vector<int> opsToRun;
      if (!reducing(f)) opsToRun = {OP_SUM};
      else if (t == ncclInt32 || t == ncclFloat16) opsToRun = {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS};
      else opsToRun = {(t + f) % NUM_OPS};
      for (int op : opsToRun) {
        for (size_t count : {(size_t)13, (size_t)1009, (size_t)20011}) {
          if (count > 1009 && (t != ncclInt32 || op != OP_SUM)) continue;
          runColl(w, f, t, op, count, where);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

}  // namespace

// ================================================================ the weighted split

TEST(ReplanSplit, WindowsCoverTheCountOnceForRandomWeights) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 20000; iter++) {
    int n = 1 + (int)(rng() % MEND_VIEW_MAX_CHANNELS);
    int maxW = iter % 3 == 0 ? 3 : iter % 3 == 1 ? 1000 : MEND_VIEW_MAX_WEIGHT;
    std::vector<int> w(n);
    for (auto& x : w) x = 1 + (int)(rng() % (uint64_t)maxW);
    static const size_t aligns[] = {1, 2, 16, 64};
    size_t align = aligns[rng() % 4];
    size_t count = iter % 5 == 0 ? rng() % 8 : iter % 5 == 1 ? rng() % (1ull << 44) : rng() % 100000;
    std::vector<size_t> off(n), len(n);
    ASSERT_EQ(mendPlanSplit(w.data(), n, count, align, off.data(), len.data()), ncclSuccess);
    size_t at = 0, total = 0;
    uint64_t wsum = 0;
    for (int c = 0; c < n; c++) wsum += (uint64_t)w[c];
    for (int c = 0; c < n; c++) {
      ASSERT_EQ(off[c], at) << "window " << c << " does not start where the previous ended";
      bool last = at + len[c] == count;
      if (!last) {
        ASSERT_EQ(len[c] % align, 0u) << "window " << c;
      }
      // Never more than its share rounded up to the alignment.
      long double share = (long double)count * (long double)w[c] / (long double)wsum;
      ASSERT_LE((long double)len[c], share + align + 1) << "window " << c << " of " << n << " count " << count;
      at += len[c];
      total += len[c];
    }
    ASSERT_EQ(total, count) << "n " << n << " align " << align;
  }
}

TEST(ReplanSplit, EqualWeightsGiveTodaysEvenSplit) {
  for (int n = 1; n <= 16; n++) {
    for (int k : {1, 7, 1000}) {
      std::vector<int> w(n, k);
      for (size_t count : {(size_t)0, (size_t)1, (size_t)5, (size_t)63, (size_t)1000, (size_t)65537, (size_t)1 << 40}) {
        for (size_t align : {(size_t)1, (size_t)16}) {
          std::vector<size_t> off(n), len(n);
          ASSERT_EQ(mendPlanSplit(w.data(), n, count, align, off.data(), len.data()), ncclSuccess);
          size_t part = (count + n - 1) / n;
          part = (part + align - 1) / align * align;
          for (int c = 0; c < n; c++) {
            size_t o = std::min((size_t)c * part, count);
            ASSERT_EQ(off[c], o);
            ASSERT_EQ(len[c], std::min(part, count - o)) << "n " << n << " weight " << k << " count " << count;
          }
        }
      }
    }
  }
}

TEST(ReplanSplit, BadWeightsRefused) {
  int w[2] = {1, 0};
  size_t off[2], len[2];
  EXPECT_EQ(mendPlanSplit(w, 2, 100, 1, off, len), ncclInternalError);
  w[1] = MEND_VIEW_MAX_WEIGHT + 1;
  EXPECT_EQ(mendPlanSplit(w, 2, 100, 1, off, len), ncclInternalError);
  w[1] = 1;
  EXPECT_EQ(mendPlanSplit(w, 0, 100, 1, off, len), ncclInternalError);
}

// A weighted view splits an AllReduce by its weights: channel windows proportional to 3:1:2.
TEST(ReplanSplit, PlannerFollowsTheViewsWeights) {
  ScopedEnv algo("NCCL_ALGO", "Ring");
  World w(3, 3);
  ViewPtr v;
  ASSERT_EQ(mendPlanViewFromChannels(w.comm(0), &v.v), ncclSuccess);
  int weights[3] = {3, 1, 2};
  for (int c = 0; c < 3; c++) v.v->ch[c].weight = weights[c];
  ASSERT_EQ(mendPlanViewSeal(v.v), ncclSuccess);
  static int32_t buf[1];
  mendOp op;
  memset(&op, 0, sizeof(op));
  op.func = MEND_FUNC_ALLREDUCE;
  op.comm = w.comm(0);
  op.sendbuff = op.recvbuff = buf;
  op.count = 6 * 1024 * 1024;
  op.type = ncclInt32;
  op.root = -1;
  mendPlan* plan = nullptr;
  ASSERT_EQ(mendPlanBuildView(w.comm(0), v.v, &op, 1, &plan), ncclSuccess);
  ASSERT_EQ(plan->nWorks, 3);
  for (int i = 0; i < 3; i++) EXPECT_EQ(plan->works[i].args.count, (size_t)weights[plan->works[i].channel] * 1024 * 1024);
  mendPlanFree(plan);
}

// ================================================================ failover chains

TEST(ReplanChain, EquallyNearNicsRotateByChannel) {
  int chain[8];
  // 3 rails, NIC 1's channels (1, 4, 7): the first backup alternates between 2 and 0.
  ASSERT_EQ(mendGraphNicChain(1, 1, 3, nullptr, nullptr, chain), 3);
  EXPECT_EQ(std::vector<int>(chain, chain + 3), (std::vector<int>{1, 2, 0}));
  mendGraphNicChain(4, 1, 3, nullptr, nullptr, chain);
  EXPECT_EQ(std::vector<int>(chain, chain + 3), (std::vector<int>{1, 0, 2}));
  mendGraphNicChain(7, 1, 3, nullptr, nullptr, chain);
  EXPECT_EQ(std::vector<int>(chain, chain + 3), (std::vector<int>{1, 2, 0}));
  // 4 NICs, two PCIe/NUMA classes {0,1} near and {2,3} far: the nearer first, each class rotated.
  int order[4] = {0, 1, 2, 3}, dist[4] = {5, 5, 104, 104};
  ASSERT_EQ(mendGraphNicChain(1, 1, 4, order, dist, chain), 4);
  EXPECT_EQ(std::vector<int>(chain, chain + 4), (std::vector<int>{1, 0, 2, 3}));
  mendGraphNicChain(5, 1, 4, order, dist, chain);
  EXPECT_EQ(std::vector<int>(chain, chain + 4), (std::vector<int>{1, 0, 3, 2}));
  // Topology order wins over device order.
  int order2[4] = {3, 2, 1, 0}, dist2[4] = {9, 9, 1, 1};
  mendGraphNicChain(0, 0, 4, order2, dist2, chain);
  EXPECT_EQ(std::vector<int>(chain, chain + 4), (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(mendGraphNicChain(0, 0, 0, nullptr, nullptr, chain), 0);
}

// ================================================================ derived views

// One NIC of one host down, R = 2..4 rails, 2..16 ranks: one hash, channels moved along their
// chains, no NIC above its share.
TEST(ReplanDerive, OneNicOfOneHostDown) {
  for (int rails : {2, 3, 4}) {
    for (int n = 2; n <= 16; n++) {
      World w(n, rails);
      Picture p(n, rails);
      p.down(n / 2, 1);
      std::vector<ViewPtr> views = derive(w, p);
      std::string ctx = "rails " + std::to_string(rails) + " ranks " + std::to_string(n);
      checkViews(views, p, ctx);
      if (HasFailure()) return;
      const mendPlanView* deg = views[n / 2].v;
      EXPECT_EQ(deg->rankCap[n / 2], 1000 - 1000 / rails) << ctx;
      EXPECT_EQ(deg->rankNics[n / 2], ((1u << rails) - 1) & ~2u) << ctx;
      EXPECT_EQ(deg->ch[1].netDev, rails > 2 ? 2 : 0) << ctx << ": channel 1's chain starts after NIC 1";
      if (rails == 3) {
        // Channel 1 rides NIC 2 at the degraded rank: NIC 0 alone carries channel 0, so 0 weighs
        // as much as 1 and 2 together.
        EXPECT_EQ(deg->ch[0].weight, deg->ch[1].weight + deg->ch[2].weight) << ctx;
      }
    }
  }
}

// Six channels over 3 rails: NIC 1's two channels go one to NIC 2, one to NIC 0, so the weights
// stay even.
TEST(ReplanDerive, FailedNicsChannelsSpreadOverTheSurvivors) {
  World w(4, 6);
  Picture p(4, 3);
  p.down(2, 1);
  std::vector<ViewPtr> views = derive(w, p);
  checkViews(views, p, "6 channels");
  EXPECT_EQ(views[2].v->ch[1].netDev, 2);
  EXPECT_EQ(views[2].v->ch[4].netDev, 0);
  for (int c = 0; c < 6; c++) EXPECT_EQ(views[0].v->ch[c].weight, 1) << "channel " << c;
}

TEST(ReplanDerive, TwoNicsOfOneHostAndDegradedRates) {
  for (int n : {2, 3, 5, 8, 16}) {
    World w(n, 4);
    Picture p(n, 4);
    p.down(0, 1).down(0, 2);
    std::vector<ViewPtr> views = derive(w, p);
    checkViews(views, p, "two NICs down, ranks " + std::to_string(n));
    EXPECT_EQ(views[0].v->rankCap[0], 500);
    Picture q(n, 4);
    q.slow(n - 1, 3, 25.0f);
    std::vector<ViewPtr> slow = derive(w, q);
    checkViews(slow, q, "NIC 3 at 25 Gb/s, ranks " + std::to_string(n));
    EXPECT_EQ(slow[0].v->rankCap[n - 1], 813);
    EXPECT_LT(slow[0].v->ch[3].weight, slow[0].v->ch[0].weight) << "the slow rail's channel carries less";
    if (HasFailure()) return;
  }
}

// The modelled time of view v's schedule with weights w (all 1: the even split): the busiest NIC's
// load, per direction, over its bandwidth, per unit of data; computed here from the hops alone.
double modelTime(const mendPlanView* v, const mendViewHealth* h, const Picture& p, bool even) {
  int n = v->nRanks;
  std::map<std::pair<int, int>, double> tx, rx;
  double sum = 0;
  for (int c = 0; c < v->nChannels; c++) {
    double wc = even ? 1.0 : v->ch[c].weight;
    sum += wc;
    for (int i = 0; i < n; i++) {
      int a = v->ch[c].ring[i], b = v->ch[c].ring[(i + 1) % n], d = mendReplanHopNic(v, h, c, a, b);
      if (d < 0) continue;
      tx[{a, d}] += wc;
      rx[{b, d}] += wc;
    }
  }
  double top = 0;
  for (auto* m : {&tx, &rx})
    for (auto& e : *m) top = std::max(top, e.second / p.gbps(e.first.first, e.first.second));
  return top / sum;
}

// Failures scattered over many hosts, NICs down or slowed: Balance's weights never model slower than
// the even split's (none did in a search of 1,200 such patterns at 16 and 64 hosts), and they do
// better in at least a quarter of the patterns.
TEST(ReplanDerive, BalanceNeverModelsWorseThanTheEvenSplit) {
  const int n = 16, rails = 8;
  World w(n, rails);
  std::mt19937 rng(7);
  int better = 0, patterns = 0;
  for (int k = 1; k <= 10; k++) {
    for (int pat = 0; pat < 12; pat++) {
      Picture p(n, rails);
      std::vector<int> lost(n, 0);
      std::vector<int> all(n * rails);
      for (int i = 0; i < n * rails; i++) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      for (int i = 0, got = 0; i < n * rails && got < k; i++) {
        int r = all[i] / rails, d = all[i] % rails;
        if (lost[r] == rails - 1) continue; // every host keeps a NIC
        lost[r]++;
        if (rng() % 2) p.down(r, d);
        else p.slow(r, d, 10.0f + (float)(rng() % 80));
        got++;
      }
      mendViewHealth h = p.health();
      ViewPtr base = baseView(w, 0, rails), v;
      ASSERT_EQ(mendReplanDerive(base.v, &h, 1, 0, &v.v), ncclSuccess);
      double tw = modelTime(v.v, &h, p, false), te = modelTime(v.v, &h, p, true);
      EXPECT_LE(tw, te * 1.002) << k << " NICs lost, pattern " << pat << ": Balance models " << tw / te
                                << "x the even split";
      better += tw < te * 0.99;
      patterns++;
      if (HasFailure()) return;
    }
  }
  EXPECT_GE(better, patterns / 4) << "Balance beat the even split in only " << better << " of " << patterns;
}

// A healthy picture (fail-back) gives the base view's shared part back, with its epoch.
TEST(ReplanDerive, HealthyPictureKeepsTheBasePlan) {
  World w(4, 3);
  Picture p(4, 3);
  std::vector<ViewPtr> views = derive(w, p);
  for (int r = 0; r < 4; r++) {
    ViewPtr base = baseView(w, r, 3);
    for (int c = 0; c < 3; c++) {
      EXPECT_EQ(views[r].v->ch[c].weight, 1);
      EXPECT_EQ(views[r].v->ch[c].netDev, base.v->ch[c].netDev);
      EXPECT_EQ(0, memcmp(views[r].v->ch[c].ring, base.v->ch[c].ring, sizeof(int) * 4));
    }
  }
}

// Host 1 lost rail 0, host 2 lost rail 1 (2 rails): rings re-ranked so neighbours share a rail,
// the ranks with both rails bridging; trees derived from the new rings.
TEST(ReplanDerive, HostsOnDifferentRailsAreReRanked) {
  for (int n = 4; n <= 16; n++) {
    World w(n, 2);
    Picture p(n, 2);
    p.down(1, 0).down(2, 1);
    std::vector<ViewPtr> views = derive(w, p);
    std::string ctx = "ranks " + std::to_string(n);
    checkViews(views, p, ctx);
    mendViewHealth h = p.health();
    EXPECT_FALSE(mendReplanLinked(views[0].v, &h, 1, 2));
    for (int r = 0; r < n; r++) {
      for (int c = 0; c < 2; c++) {
        const mendViewChannel& ch = views[r].v->ch[c];
        // The tree's edges are linked too: the planner's double binary tree (depth 0) or a chain.
        if (ch.treeDepth == 0) {
          int up, down[2];
          mendTreeDoubleBinary(n, ch.ringIndex, c % 2, &up, down);
          if (up >= 0) {
            EXPECT_TRUE(mendReplanLinked(views[r].v, &h, r, ch.ring[up])) << ctx;
          }
        } else if (ch.treeUp >= 0) {
          EXPECT_TRUE(mendReplanLinked(views[r].v, &h, r, ch.treeUp)) << ctx;
        }
      }
    }
    if (HasFailure()) return;
  }
  // Several mismatched pairs at once: 3 hosts without rail 0, 3 without rail 1, bridges between.
  World w(12, 2);
  Picture p(12, 2);
  p.down(0, 0).down(1, 0).down(2, 0).down(3, 1).down(4, 1).down(5, 1);
  std::vector<ViewPtr> views = derive(w, p);
  checkViews(views, p, "12 ranks, 6 on one rail");
}

// Two hosts with disjoint rails: no ring exists, the base rings stay (with a WARN).
TEST(ReplanDerive, NoRingKeepsTheBaseRings) {
  World w(2, 2);
  Picture p(2, 2);
  p.down(0, 0).down(1, 1);
  std::vector<ViewPtr> views = derive(w, p);
  for (int r = 0; r < 2; r++) {
    ViewPtr base = baseView(w, r, 2);
    for (int c = 0; c < 2; c++) EXPECT_EQ(0, memcmp(views[r].v->ch[c].ring, base.v->ch[c].ring, sizeof(int) * 2));
  }
  EXPECT_EQ(views[0].v->hash, views[1].v->hash);
}

// MEND_REPLAN=backup: capacities, NICs moved to the nearest usable one, nothing else.
TEST(ReplanDerive, BackupOnlyKeepsTodaysPlan) {
  ScopedEnv mode("MEND_REPLAN", "backup");
  World w(6, 3);
  Picture p(6, 3);
  p.down(3, 1).down(1, 0).down(4, 1);
  std::vector<ViewPtr> views = derive(w, p);
  for (int r = 0; r < 6; r++) {
    ViewPtr base = baseView(w, r, 3);
    for (int c = 0; c < 3; c++) {
      EXPECT_EQ(views[r].v->ch[c].weight, 1);
      EXPECT_EQ(0, memcmp(views[r].v->ch[c].ring, base.v->ch[c].ring, sizeof(int) * 6));
    }
  }
  EXPECT_EQ(views[3].v->ch[1].netDev, 0) << "the first usable NIC of the topology order";
  EXPECT_EQ(views[3].v->rankCap[3], 667);
  // Backup-only is what Balance improves on: rank 3's NIC 0 carries 2 of its 3 equal channels,
  // above the surviving-capacity bound (half) that Balance meets (OneNicOfOneHostDown).
  int onNic0 = 0;
  for (int c = 0; c < 3; c++) onNic0 += views[3].v->ch[c].netDev == 0;
  EXPECT_EQ(onNic0, 2);
}

TEST(ReplanDerive, BadPictureRefused) {
  World w(2, 2);
  ViewPtr base = baseView(w, 0, 2);
  Picture p(3, 2);
  mendViewHealth h = p.health();
  ViewPtr v;
  EXPECT_EQ(mendReplanDerive(base.v, &h, 1, 0, &v.v), ncclInvalidArgument) << "3 ranks for a view of 2";
  EXPECT_EQ(mendReplanDerive(base.v, nullptr, 1, 0, &v.v), ncclInvalidArgument);
}

// ================================================================ exact results under derived views

// Balance's uneven splits: one NIC of the last rank down (3 rails), or two NICs of rank 0 down and
// one of another rank at half rate (4 rails).
TEST(ReplanEngine, EveryCollectiveUnderBalancedViews) {
  ScopedEnv chunk("MEND_CHUNKSIZE", "1024");
  ScopedEnv p2pBytes("MEND_P2P_CHANNEL_BYTES", "256");
  ScopedEnv p2pPeers("MEND_P2P_NCHANNELS_PER_PEER", "4");
  for (const char* algo : {"ring", "tree"}) {
    ScopedEnv env("NCCL_ALGO", algo);
    for (int n : {2, 3, 5, 16}) {
      for (int scenario = 0; scenario < 2; scenario++) {
        int rails = scenario == 0 ? 3 : 4;
        World w(n, rails, 16 * 1024, 600);
        Picture p(n, rails);
        if (scenario == 0) p.down(n - 1, 1);
        else p.down(0, 1).down(0, 2).slow(n / 2, 3, 50.0f);
        std::vector<ViewPtr> views = derive(w, p);
        ASSERT_NE(views[0].v->ch[0].weight, views[0].v->ch[1].weight) << "the test needs an uneven split";
        install(w, views);
        runEverything(w, algo, n > 8, std::string(algo) + " ranks " + std::to_string(n) + " scenario " + std::to_string(scenario));
        if (HasFailure()) return;
      }
    }
  }
}

// Re-ranked rings (rank 1 without rail 0, rank 2 without rail 1) and the trees derived from them.
TEST(ReplanEngine, EveryCollectiveUnderReRankedViews) {
  ScopedEnv p2pBytes("MEND_P2P_CHANNEL_BYTES", "256");
  for (const char* algo : {"ring", "tree"}) {
    ScopedEnv env("NCCL_ALGO", algo);
    for (int n : {4, 7, 16}) {
      World w(n, 2, 8 * 1024, 600);
      Picture p(n, 2);
      p.down(1, 0).down(2, 1);
      std::vector<ViewPtr> views = derive(w, p);
      ViewPtr base = baseView(w, 0, 2);
      ASSERT_NE(0, memcmp(views[0].v->ch[0].ring, base.v->ch[0].ring, sizeof(int) * n)) << "the test needs a re-ranked ring";
      install(w, views);
      runEverything(w, algo, n > 8, std::string(algo) + " re-ranked ranks " + std::to_string(n));
      if (HasFailure()) return;
    }
  }
}
