// R2 AllReduce and its recursive form (src/enqueue/gen_r2.c, plan_r2.c, tuning_r2.c) and the
// per-call choice of an AllReduce schedule under a degraded plan view (mendTuneAllReduce, MEND_REPLAN):
//  - ProgramR2*: every rank's programs of a partial level, walked over a window as the executors
//    walk them, send on every connector exactly the slots its receiver takes, in order;
//  - R2Model*: the model against R2CCL's formulas (threshold N/(3N-2), Y*), recursive levels;
//  - R2Choice* (test_r2_choice.cc): what the choice picks for capacities around the threshold;
//  - EngineR2*: exact results on the loopback world under degraded views (one or two degraded
//    ranks, capacities 500/667/750), 2..16 ranks, every type and op, in and out of place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

extern "C" {
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "enqueue/tuning.h"
}

#include "loopback_world.h"
#include "view_util.h"
#include "narrow_float.h"

using mendtest::ScopedEnv;
using mendtest::World;
using mendtest::choose;
using mendtest::setCaps;

namespace {

// ---------------------------------------------------------------- walking programs

// Connector key: (sender, receiver); a message is its length in elements.
using Link = std::pair<int, int>;
using Traffic = std::map<Link, std::vector<uint64_t>>;

uint64_t divUp(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
uint64_t alignUp(uint64_t a, uint64_t b) { return divUp(a, b) * b; }

// Walk one work as the executors do (src/device/walk.h): per phase, loops over the window; each
// step's repetitions; zero-length segments skipped by both ends.
void walk(int me, const mendProgram* p, uint64_t count, uint64_t chunk, uint64_t align, Traffic& sent, Traffic& recvd) {
  for (int h = 0; h < p->nPhases && count > 0; h++) {
    const mendProgPhase& ph = p->phases[h];
    for (uint64_t base = 0; base < count;) {
      uint64_t left = count - base;
      uint64_t per = ph.layout == MEND_LAYOUT_CHUNKED ? alignUp(divUp(left, ph.loopSegs), align) : left;
      uint64_t eff = std::min(per, chunk);
      for (int s = ph.firstStep; s < ph.firstStep + ph.nSteps; s++) {
        const mendProgStep& st = p->steps[s];
        for (int k = 0; k < st.repeat; k++) {
          uint64_t seg = (st.seg + (uint64_t)k * st.segDelta) % ph.loopSegs;
          uint64_t start = seg * eff, len = start >= left ? 0 : std::min(eff, left - start);
          if (len == 0) continue;
          if (st.op & MEND_STEP_RECV) recvd[{p->peers[st.recvPeer].rank, me}].push_back(len);
          if (st.op & MEND_STEP_SEND) sent[{me, p->peers[st.sendPeer].rank}].push_back(len);
        }
      }
      base += eff * ph.loopSegs;
    }
  }
}

// Ranks 0..n-1 in a shuffled ring order; the outer ranks are those with outer[r] set.
struct LevelCase {
  int n;
  std::vector<int> ring;
  std::vector<bool> isOuter;
};

void levelLists(const LevelCase& c, std::vector<int>& inner, std::vector<int>& outer) {
  for (int r : c.ring) (c.isOuter[r] ? outer : inner).push_back(r);
}

void checkLevel(const LevelCase& c, uint64_t count, uint64_t chunk, uint64_t align) {
  std::vector<int> inner, outer;
  levelLists(c, inner, outer);
  Traffic sent, recvd;
  std::string ctx = "n=" + std::to_string(c.n) + " inner=" + std::to_string(inner.size()) +
                    " outer=" + std::to_string(outer.size()) + " count=" + std::to_string(count);
  for (int r = 0; r < c.n; r++) {
    mendProgram* progs[2] = {nullptr, nullptr};
    int np = 0;
    ASSERT_EQ(mendGenR2Level((int)inner.size(), inner.data(), (int)outer.size(), outer.data(), r, progs, &np),
              ncclSuccess) << ctx << " rank " << r;
    ASSERT_EQ(np, c.isOuter[r] ? 2 : 1) << ctx << " rank " << r;
    std::set<std::tuple<int, int>> conns;  // (peer, dir): the works of one rank must not share one
    for (int i = 0; i < np; i++) {
      EXPECT_EQ(mendProgValidate(progs[i]), ncclSuccess);
      for (int q = 0; q < progs[i]->nPeers; q++) {
        EXPECT_TRUE(conns.insert({progs[i]->peers[q].rank, progs[i]->peers[q].dir}).second || np == 1)
            << ctx << " rank " << r << ": its two works share a connector (they would run one after the other)";
      }
      // Inner ranks: two phases, ring then chain; outer: one phase each.
      EXPECT_EQ(progs[i]->nPhases, c.isOuter[r] ? 1 : 2) << ctx;
      walk(r, progs[i], count, chunk, align, sent, recvd);
      free(progs[i]);
    }
  }
  EXPECT_EQ(sent, recvd) << ctx << ": what each rank sends on a connector is what its receiver takes";
  // Every outer rank sends its input once and gets the result once: count elements each way.
  for (int r : outer) {
    uint64_t in = 0, out = 0;
    for (auto& kv : sent)
      if (kv.first.first == r) for (uint64_t l : kv.second) in += l;
    for (auto& kv : recvd)
      if (kv.first.second == r) for (uint64_t l : kv.second) out += l;
    bool first = r == outer.front();
    EXPECT_EQ(in, count) << ctx << " outer rank " << r << " sends its share once";
    EXPECT_EQ(out, first ? count : 2 * count) << ctx << " outer rank " << r
                                              << " receives the result (and, past the first, the sum so far)";
  }
}

}  // namespace

TEST(ProgramR2, LevelsMatchPairwise) {
  for (int n = 2; n <= 16; n++) {
    LevelCase c;
    c.n = n;
    for (int i = 0; i < n; i++) c.ring.push_back((2 * n - 1 - i + 3) % n);  // reversed and rotated
    // Outer sets: one rank, two adjacent, every other rank, as many as the fanout allows.
    std::vector<std::vector<int>> outers = {{n - 1}, {0, 1}, {}, {}};
    for (int r = 0; r < n; r += 2) outers[2].push_back(r);
    for (int r = 0; r < n && (int)outers[3].size() < n * MEND_R2_MAX_FANOUT / (MEND_R2_MAX_FANOUT + 1); r++)
      outers[3].push_back(r);
    for (auto& o : outers) {
      if (o.empty() || (int)o.size() >= n) continue;
      c.isOuter.assign(n, false);
      for (int r : o) c.isOuter[r] = true;
      for (uint64_t count : {0ull, 1ull, 5ull, 64ull, 1009ull, 4099ull})
        for (uint64_t chunk : {16ull, 64ull, 1000ull}) {
          checkLevel(c, count, chunk, 16);
          if (::testing::Test::HasFailure()) return;
        }
    }
  }
}

TEST(ProgramR2, RejectsLevelsItCannotSchedule) {
  int inner[1] = {0}, outer[5] = {1, 2, 3, 4, 5};
  mendProgram* progs[2];
  int np = -1;
  EXPECT_EQ(mendGenR2Level(1, inner, 5, outer, 0, progs, &np), ncclInternalError) << "5 outer ranks for 1 inner";
  EXPECT_EQ(np, 0);
  EXPECT_EQ(mendGenR2Level(1, inner, 0, outer, 0, progs, &np), ncclInternalError) << "no outer rank";
  EXPECT_EQ(mendGenR2Level(1, inner, 2, outer, 7, progs, &np), ncclInternalError) << "rank 7 in neither list";
  EXPECT_EQ(mendGenR2Level(1, inner, 2, outer, 1, progs, &np), ncclSuccess);
  EXPECT_EQ(np, 2);
  for (int i = 0; i < np; i++) free(progs[i]);
}

// ================================================================ the model

namespace {

mendR2ModelIn modelIn(const std::vector<int>& caps, double alphaUs = 0) {
  mendR2ModelIn in = {};
  in.nRanks = (int)caps.size();
  in.rankCap = caps.data();
  in.nBytes = 1e9;
  in.alphaUs = alphaUs;
  in.bytesPerUs = 1e3;
  return in;
}

double ringOnlyUs(const mendR2ModelIn& in) {
  mendR2Split s = {};
  s.nLevels = 1;
  s.lv[0].nMembers = in.nRanks;
  s.lv[0].rate = *std::min_element(in.rankCap, in.rankCap + in.nRanks);
  s.lv[0].share = 1;
  return mendR2CostUs(&in, &s);
}

// The paper's T(Y) for levels (k, rate) and shares, written out here: all rings at once, then all
// chains at once, each level in its own slice of bandwidth (S = 1e9 bytes at 1e3 bytes/us).
double paperT(const std::vector<std::pair<int, int>>& lv, const std::vector<double>& y) {
  double rings = 0, chains = 0;
  for (size_t l = 0; l < lv.size(); l++) {
    double k = lv[l].first, x = lv[l].second / 1000.0, t = y[l] * 1e6 / x;
    rings = std::max(rings, 2 * (k - 1) / k * t);
    if (l > 0) chains = std::max(chains, t);
  }
  return rings + chains;
}

}  // namespace

// One degraded rank of N (the paper's g = 1): the share of the partial ring is Y* and R2 beats the
// ring exactly when the lost fraction X exceeds N / (3N - 2) (R2CCL appendix A).
TEST(R2Model, OneDegradedRankFollowsThePaper) {
  for (int N : {2, 3, 4, 5, 8, 16}) {
    double thr = mendR2PaperThreshold(N);
    EXPECT_DOUBLE_EQ(thr, (double)N / (3 * N - 2));
    for (int cap = 25; cap < 1000; cap += 25) {
      std::vector<int> caps(N, 1000);
      caps[N / 2] = cap;
      mendR2ModelIn in = modelIn(caps);
      mendR2Split s;
      ASSERT_EQ(mendR2BestSplit(&in, 1, 1, &s), 1) << "N=" << N << " cap=" << cap;
      ASSERT_EQ(s.nLevels, 2);
      EXPECT_EQ(s.lv[1].minCap, 1000);
      EXPECT_EQ(s.lv[1].nMembers, N - 1);
      EXPECT_EQ(s.lv[0].rate, cap);
      EXPECT_EQ(s.lv[1].rate, 1000 - cap);
      double X = 1 - cap / 1000.0, g = 1, n = N;
      double yStar = X + X * (1 - X) / (X + (g * (n - 1) - 1) * n);  // the paper's closed form
      EXPECT_NEAR(s.lv[1].share, yStar, 1e-9) << "N=" << N << " X=" << X;
      EXPECT_NEAR(s.lv[0].share + s.lv[1].share, 1.0, 1e-12);
      double ring = ringOnlyUs(in);
      EXPECT_NEAR(ring, 2.0 * (N - 1) / N * 1e6 / (1 - X), 1e-6 * ring) << "the ring at the degraded rank's rate";
      if (std::fabs(X - thr) < 1e-9) continue;
      EXPECT_EQ(s.estUs < ring, X > thr) << "N=" << N << " X=" << X << " threshold " << thr << ": r2 " << s.estUs
                                         << " us, ring " << ring << " us";
    }
  }
}

// A degraded host of g = 2 ranks among N = 8 (n = 4 hosts): Y* as the paper writes it for g and n.
TEST(R2Model, DegradedHostOfTwoRanks) {
  for (int cap : {200, 333, 500, 667}) {
    std::vector<int> caps(8, 1000);
    caps[2] = caps[3] = cap;
    mendR2ModelIn in = modelIn(caps);
    mendR2Split s;
    ASSERT_EQ(mendR2BestSplit(&in, 1, 1, &s), 1);
    double X = 1 - cap / 1000.0, g = 2, n = 4;
    EXPECT_NEAR(s.lv[1].share, X + X * (1 - X) / (X + (g * (n - 1) - 1) * n), 1e-9) << "cap " << cap;
    EXPECT_EQ(s.lv[1].nMembers, 6);
  }
}

// Two degraded ranks with different capacities: the recursive split has three nested levels whose
// shares no other split beats, short of the plain ring (a grid over the shares, timed by the
// formula written out above).
TEST(R2Model, RecursiveLevelsAreOptimalForTheirThresholds) {
  for (auto caps : {std::vector<int>{500, 750, 1000, 1000, 1000, 1000, 1000, 1000},
                    std::vector<int>{1000, 850, 650, 1000}, std::vector<int>{700, 1000, 900, 1000, 1000, 1000, 1000}}) {
    mendR2ModelIn in = modelIn(caps);
    mendR2Split rec, r2;
    ASSERT_EQ(mendR2BestSplit(&in, 2, 3, &rec), 1);
    ASSERT_EQ(mendR2BestSplit(&in, 1, 1, &r2), 1);
    ASSERT_EQ(rec.nLevels, 3);
    std::vector<int> sorted = caps;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(rec.lv[0].rate, sorted[0]);
    EXPECT_EQ(rec.lv[1].minCap, sorted[1]);
    EXPECT_EQ(rec.lv[2].minCap, 1000);
    EXPECT_EQ(rec.lv[1].nMembers, (int)caps.size() - 1);
    EXPECT_EQ(rec.lv[2].nMembers, (int)caps.size() - 2);
    EXPECT_EQ(rec.lv[1].rate + rec.lv[0].rate, sorted[1]);
    std::vector<std::pair<int, int>> lv;
    for (int l = 0; l < 3; l++) lv.push_back({rec.lv[l].nMembers, rec.lv[l].rate});
    std::vector<double> y = {rec.lv[0].share, rec.lv[1].share, rec.lv[2].share};
    EXPECT_NEAR(y[0] + y[1] + y[2], 1.0, 1e-12);
    EXPECT_NEAR(rec.estUs, paperT(lv, y), 1e-6 * rec.estUs);
    double best = 1e300;
    for (double a = 0; a <= 1.0 + 1e-9; a += 0.005)
      for (double b = 0; a + b <= 1.0 + 1e-9; b += 0.005) best = std::min(best, paperT(lv, {a, b, 1 - a - b}));
    // The choice weighs the split against the plain ring (every share in level 0), so the two
    // together must be the optimum over all shares.
    double chosen = std::min(rec.estUs, ringOnlyUs(in));
    EXPECT_LE(chosen, best * (1 + 1e-9)) << "a grid point beats the model's shares";
    EXPECT_GE(chosen, best * (1 - 0.02)) << "the grid comes within 2%";
  }
}

// A chain fills its pipeline before its last chunk leaves: n - 1 chunk times at the level's rate
// more than its bytes alone (tuning_r2.c); without a chunk the model is the paper's.
TEST(R2Model, ChainFillsItsPipeline) {
  std::vector<int> caps = {500, 1000, 1000, 1000};
  mendR2ModelIn in = modelIn(caps);
  mendR2Split s;
  ASSERT_EQ(mendR2BestSplit(&in, 1, 1, &s), 1);
  ASSERT_EQ(s.nLevels, 2);
  double paper = mendR2CostUs(&in, &s), rate = s.lv[1].rate / 1000.0 * in.bytesPerUs;
  in.chunkBytes = 1 << 16;
  double filled = mendR2CostUs(&in, &s);
  EXPECT_NEAR(filled - paper, 3 * 65536.0 / rate, 1e-9 * filled);
  in.chunkBytes = 1e30;  // a chunk larger than the level's bytes is the whole share
  EXPECT_NEAR(mendR2CostUs(&in, &s) - paper, 3 * s.lv[1].share * in.nBytes / rate, 1e-9 * filled);
}

TEST(R2Model, NothingToSplitWhenAllRanksAreAlike) {
  for (int cap : {1000, 600}) {
    std::vector<int> caps(6, cap);
    mendR2ModelIn in = modelIn(caps);
    mendR2Split s;
    EXPECT_EQ(mendR2BestSplit(&in, 1, 3, &s), 0);
    EXPECT_EQ(s.nLevels, 1);
    EXPECT_DOUBLE_EQ(s.lv[0].share, 1.0);
  }
  // More outer ranks than MEND_R2_MAX_FANOUT per member: no level over the one fast rank.
  std::vector<int> caps(7, 500);
  caps[0] = 1000;
  mendR2ModelIn in = modelIn(caps);
  mendR2Split s;
  EXPECT_EQ(mendR2BestSplit(&in, 1, 1, &s), 0);
  caps.resize(5);
  in = modelIn(caps);
  EXPECT_EQ(mendR2BestSplit(&in, 1, 1, &s), 1) << "4 outer ranks for 1 member is within the fanout";
  EXPECT_DOUBLE_EQ(s.lv[1].share, 1.0) << "a one-rank level takes everything (b = 0: Y* = 1)";
}


// ================================================================ exact results on the loopback world

namespace {

// Element formats, from the types' definitions (independent of the library's conversions).
struct Fmt {
  int bytes;
  bool isFloat;
  int ebits, mbits, bias;
  bool e4m3;
};
const Fmt kFmts[ncclNumTypes] = {
    {1, false, 0, 0, 0, false}, {1, false, 0, 0, 0, false}, {4, false, 0, 0, 0, false}, {4, false, 0, 0, 0, false},
    {8, false, 0, 0, 0, false}, {8, false, 0, 0, 0, false}, {2, true, 5, 10, 15, false}, {4, true, 0, 0, 0, false},
    {8, true, 0, 0, 0, false},  {2, true, 8, 7, 127, false}, {1, true, 4, 3, 7, true},   {1, true, 5, 2, 15, false},
};

double decode(int t, const unsigned char* p) { return mendtest::decodeElem(t, p); }

// Exact encoding of a value the format holds (narrow formats by a table of every pattern).
void encode(int t, double x, unsigned char* p) {
  const Fmt& f = kFmts[t];
  if (!f.isFloat) {
    int64_t v = (int64_t)x;
    memcpy(p, &v, f.bytes);
    return;
  }
  if (t == ncclFloat32) { float v = (float)x; memcpy(p, &v, 4); return; }
  if (t == ncclFloat64) { memcpy(p, &x, 8); return; }
  static std::mutex mu;
  static std::map<int, std::unordered_map<double, uint32_t>> tables;
  std::lock_guard<std::mutex> lock(mu);
  auto& tab = tables[t];
  if (tab.empty()) {
    for (uint32_t v = (1u << (8 * f.bytes)) - 1;; v--) {  // descending: +0 wins over -0
      double d = mendtest::decodeNarrow(v, f.ebits, f.mbits, f.bias, f.e4m3);
      if (!std::isnan(d)) tab[d] = v;
      if (v == 0) break;
    }
  }
  auto it = tab.find(x);
  ASSERT_TRUE(it != tab.end()) << x << " is not a value of type " << t;
  memcpy(p, &it->second, f.bytes);
}

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS_HOST, OP_PMS_DEV, NUM_OPS };
const char* kOps[NUM_OPS] = {"sum", "prod", "max", "min", "avg", "premulsum-host", "premulsum-dev"};

// Inputs whose every partial result is exact in the type; fp8 gets at most two non-neutral inputs
// per element.
double input(int t, int op, int n, int r, size_t i) {
  bool fp8 = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
  if (op == OP_MAX || op == OP_MIN) return (double)((r * 5 + i * 3) % 7);
  if (op == OP_PROD) return fp8 ? (((i + r) % n) < 2 ? 1.0 + (double)(i % 2) : 1.0) : (((r * 3 + i) % 5 == 0) ? 2.0 : 1.0);
  if (fp8) return ((i + r) % n) < 2 ? 1.0 + (double)(i % 2) : 0.0;
  return (double)((r * 7 + i * 13 + 1) % 4);
}

double expected(int t, int op, int n, size_t i, double* tol) {
  *tol = 0;
  double acc = op == OP_PROD ? 1 : (op == OP_MAX ? -1e300 : (op == OP_MIN ? 1e300 : 0));
  for (int r = 0; r < n; r++) {
    double v = input(t, op, n, r, i);
    if (op == OP_PROD) acc *= v;
    else if (op == OP_MAX) acc = std::max(acc, v);
    else if (op == OP_MIN) acc = std::min(acc, v);
    else if (op == OP_PMS_HOST || op == OP_PMS_DEV) acc += 2 * v;
    else acc += v;
  }
  if (op != OP_AVG) return acc;
  if (!kFmts[t].isFloat) return std::trunc(acc / n);  // one division, toward zero
  double rel = kFmts[t].mbits ? std::ldexp(1.0, -kFmts[t].mbits) : 1e-6;
  *tol = (n + 2) * rel * std::max(1.0, acc / n);
  return acc / n;
}

// One rank's op handle (PreMulSum with scalar 2).
struct Op {
  ncclRedOp_t op = ncclSum;
  ncclComm_t comm;
  bool user = false;
  std::vector<unsigned char> scalar = std::vector<unsigned char>(8);
  Op(int k, int t, ncclComm_t c) : comm(c) {
    static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    if (k < OP_PMS_HOST) { op = builtin[k]; return; }
    encode(t, 2.0, scalar.data());
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, scalar.data(), (ncclDataType_t)t,
                                       k == OP_PMS_HOST ? ncclScalarHostImmediate : ncclScalarDevice, c),
              ncclSuccess);
    user = true;
  }
  ~Op() {
    if (user) {
      EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
    }
  }
};

// One AllReduce on every rank of w in one group, every element of every rank checked, and the
// bytes past each buffer untouched.
void runAllReduce(World& w, int t, int op, size_t count, bool inPlace, const std::string& what) {
  int n = w.n();
  size_t ts = kFmts[t].bytes, bytes = count * ts, guard = 64;
  std::string ctx = what + " n=" + std::to_string(n) + " type=" + std::to_string(t) + " op=" + kOps[op] +
                    " count=" + std::to_string(count) + (inPlace ? " in-place" : " out-of-place");
  std::vector<std::vector<unsigned char>> send(n, std::vector<unsigned char>(bytes + guard, 0xA5));
  std::vector<std::vector<unsigned char>> recv(n, std::vector<unsigned char>(bytes + guard, 0xA5));
  std::vector<std::unique_ptr<Op>> ops;
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < count; i++) encode(t, input(t, op, n, r, i), send[r].data() + i * ts);
    ops.emplace_back(new Op(op, t, w.comm(r)));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    unsigned char* dst = inPlace ? send[r].data() : recv[r].data();
    ASSERT_EQ(ncclAllReduce(send[r].data(), dst, count, (ncclDataType_t)t, ops[r]->op, w.comm(r), nullptr),
              ncclSuccess) << ctx;
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ctx;
  for (int r = 0; r < n; r++) {
    const unsigned char* got = inPlace ? send[r].data() : recv[r].data();
    for (size_t b = bytes; b < bytes + guard; b++) {
      ASSERT_EQ(send[r][b], 0xA5) << ctx << " rank " << r << ": written past the buffer";
      ASSERT_EQ(recv[r][b], 0xA5) << ctx << " rank " << r << ": written past the buffer";
    }
    for (size_t i = 0; i < count; i++) {
      double tol, want = expected(t, op, n, i, &tol), v = decode(t, got + i * ts);
      ASSERT_LE(std::fabs(v - want), tol) << ctx << " rank " << r << " element " << i << " = " << v << ", expected "
                                          << want;
    }
  }
}

// Works of an R2 plan at `rank` for an AllReduce of count int32: partial-level works have 2 phases
// (inner ranks) or are a lone receive of the result (outer ranks); 0 for a ring or tree plan.
int r2Works(World& w, int rank, size_t count) {
  static int32_t buf[1];
  mendOp op;
  memset(&op, 0, sizeof(op));
  op.func = MEND_FUNC_ALLREDUCE;
  op.comm = w.comm(rank);
  op.sendbuff = op.recvbuff = buf;
  op.count = count;
  op.type = ncclInt32;
  op.userOp = ncclSum;
  op.root = -1;
  op.opCount = 1u << 30;
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclInt32, w.n(), &op.redop), ncclSuccess);
  mendPlan* plan = nullptr;
  EXPECT_EQ(mendPlanBuild(w.comm(rank), &op, 1, &plan), ncclSuccess);
  if (plan == nullptr) return -1;
  int k = 0;
  for (int i = 0; i < plan->nWorks; i++) {
    const mendProgram* p = plan->works[i].prog;
    k += p->nPhases == 2 || (p->nSteps == 1 && p->steps[0].op == MEND_OP_RECV);
  }
  mendPlanFree(plan);
  return k;
}

void expectR2Planned(World& w, const std::string& what) {
  for (int r = 0; r < w.n(); r++) {
    EXPECT_GT(r2Works(w, r, 100000), 0) << what << ": rank " << r << " planned no R2 work";
  }
}

}  // namespace

// One degraded rank (capacities 500, 667, 750, at different places), MEND_REPLAN=r2: 2..16 ranks,
// every type and op, in and out of place, counts from 0 to several loops of several chunks.
TEST(EngineR2, OneDegradedRankEveryTypeAndOp) {
  ScopedEnv env("MEND_REPLAN", "r2");
  for (int n = 2; n <= 16; n++) {
    World w(n, 4);
    bool full = n <= 5 || n == 8 || n == 16;
    for (int cap : {500, 667, 750}) {
      std::vector<int> caps(n, 1000);
      caps[cap == 500 ? n - 1 : (cap == 667 ? 0 : n / 2)] = cap;
      setCaps(w, caps);
      std::string what = "r2 cap " + std::to_string(cap);
      expectR2Planned(w, what);
      for (int t = 0; t < ncclNumTypes; t++) {
        if (!full && t != ncclInt32 && t != ncclFloat16 && t != ncclUint8) continue;
        for (int op = 0; op < NUM_OPS; op++) {
          for (size_t count : {(size_t)0, (size_t)13, (size_t)1009, (size_t)4099}) {
            for (bool inPlace : {false, true}) {
              runAllReduce(w, t, op, count, inPlace, what);
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Two degraded ranks with different capacities, MEND_REPLAN=recursive: three levels (the global
// ring, the ranks >= 750, the healthy ranks) where the fanout allows it, 3..16 ranks.
TEST(EngineR2, TwoDegradedRanksRecursive) {
  ScopedEnv env("MEND_REPLAN", "recursive");
  for (int n = 3; n <= 16; n++) {
    World w(n, 4);
    std::vector<int> caps(n, 1000);
    caps[0] = 500;
    caps[n - 2] = 750;
    setCaps(w, caps);
    mendReplanChoice c = choose(w, 100000 * 4);
    ASSERT_EQ(c.replan, MEND_REPLAN_RECURSIVE) << "n=" << n;
    ASSERT_EQ(c.split.nLevels, 3) << "n=" << n;
    expectR2Planned(w, "recursive");
    bool full = n <= 4 || n == 7 || n == 16;
    for (int t = 0; t < ncclNumTypes; t++) {
      if (!full && t != ncclInt64 && t != ncclBfloat16 && t != ncclFloat32) continue;
      for (int op = 0; op < NUM_OPS; op++) {
        for (size_t count : {(size_t)1, (size_t)1009, (size_t)4099}) {
          for (bool inPlace : {false, true}) {
            runAllReduce(w, t, op, count, inPlace, "recursive 500/750");
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// Without MEND_REPLAN the model picks: R2 for a rank at a third of its bandwidth and a large
// message, the ring plan for a healthy view; results exact either way.
TEST(EngineR2, AutoPicksR2WhereTheModelSaysSo) {
  for (int n : {3, 6, 9}) {
    World w(n, 4);
    std::vector<int> caps(n, 1000);
    setCaps(w, caps);
    EXPECT_EQ(r2Works(w, 0, 1 << 20), 0) << "healthy: the ring/tree plan";
    caps[1] = 333;
    setCaps(w, caps);
    EXPECT_EQ(choose(w, 4 << 20).replan, MEND_REPLAN_R2);
    expectR2Planned(w, "auto");
    for (int t : {ncclInt32, ncclFloat64, ncclFloat8e4m3})
      for (int op : {OP_SUM, OP_AVG, OP_PMS_DEV}) {
        runAllReduce(w, t, op, 1 << 18, false, "auto");
        if (HasFailure()) return;
      }
  }
}

// Many loops of small chunks on 4 channels, both schedules, up to 16 ranks.
TEST(EngineR2, LargeCountsManyLoops) {
  ScopedEnv chunk("MEND_CHUNKSIZE", "320");
  for (const char* mode : {"r2", "recursive"}) {
    ScopedEnv env("MEND_REPLAN", mode);
    for (int n : {3, 8, 16}) {
      World w(n, 4, 16 * 1024);
      std::vector<int> caps(n, 1000);
      caps[n / 3] = 667;
      caps[n - 1] = 500;
      setCaps(w, caps);
      for (int t : {ncclInt32, ncclFloat64, ncclFloat16, ncclUint8})
        for (size_t count : {(size_t)65537, (size_t)100003}) {
          runAllReduce(w, t, OP_SUM, count, count % 2, mode);
          if (HasFailure()) return;
        }
    }
  }
}

// Fewer channels than levels: levels share channels (level i on channel i mod C), their works
// waiting for the lower levels' on the connectors they share; results stay exact.
TEST(EngineR2, FewerChannelsThanLevels) {
  for (int nCh : {1, 2}) {
    for (const char* mode : {"r2", "recursive"}) {
      ScopedEnv env("MEND_REPLAN", mode);
      for (int n : {2, 3, 5, 8}) {
        World w(n, nCh);
        std::vector<int> caps(n, 1000);
        caps[0] = 500;
        caps[n - 1] = n > 2 ? 750 : 1000;
        setCaps(w, caps);
        mendReplanChoice c = choose(w, 4099 * 8);
        EXPECT_LE(c.nChannels, nCh);
        for (int t : {ncclInt64, ncclFloat32, ncclBfloat16})
          for (int op : {OP_SUM, OP_AVG, OP_PMS_HOST, OP_MAX})
            for (size_t count : {(size_t)1009, (size_t)4099}) {
              runAllReduce(w, t, op, count, count == 1009, std::string(mode) + " channels " + std::to_string(nCh));
              if (HasFailure()) return;
            }
      }
    }
  }
}

// The partial level runs on the channels of the rail the slower rank lost (channel c uses NIC
// c mod rails, graph/channels.c), the global ring on the rails it kept: the global ring's hops to the
// slower rank then never share a rail with the partial ring.
TEST(PlanR2, PartialLevelOnTheLostRail) {
  ScopedEnv env("MEND_REPLAN", "r2");
  for (int lostNic : {0, 1}) {
    World w(4, 2);
    std::vector<int> caps = {500, 1000, 1000, 1000};
    std::vector<uint32_t> nics = {0x3u & ~(1u << lostNic), 0x3, 0x3, 0x3};
    setCaps(w, caps, nics);
    for (int r = 0; r < 4; r++) {
      static int32_t buf[1];
      mendOp op;
      memset(&op, 0, sizeof(op));
      op.func = MEND_FUNC_ALLREDUCE;
      op.comm = w.comm(r);
      op.sendbuff = op.recvbuff = buf;
      op.count = 1 << 20;
      op.type = ncclInt32;
      op.userOp = ncclSum;
      op.root = -1;
      op.opCount = 1u << 30;
      ASSERT_EQ(mendRedOpResolve(ncclSum, ncclInt32, 4, &op.redop), ncclSuccess);
      mendPlan* plan = nullptr;
      ASSERT_EQ(mendPlanBuild(w.comm(r), &op, 1, &plan), ncclSuccess);
      int partial = 0, global = 0;
      for (int i = 0; i < plan->nWorks; i++) {
        const mendWork& wk = plan->works[i];
        bool isGlobal = wk.prog->nPhases == 1 && wk.prog->nSteps == 5;  // the ring AllReduce
        EXPECT_EQ(wk.channel, isGlobal ? 1 - lostNic : lostNic) << "rank " << r << " work " << i;
        (isGlobal ? global : partial)++;
      }
      EXPECT_EQ(global, 1) << "rank " << r;
      EXPECT_EQ(partial, r == 0 ? 2 : 1) << "rank " << r;
      mendPlanFree(plan);
    }
  }
}
