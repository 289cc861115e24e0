// The tuner: NCCL_ALGO / NCCL_PROTO syntax, the alpha-beta cost model, the per-call choice of
// algorithm, channels and chunk (NCCL_MIN/MAX_NCHANNELS, NCCL_BUFFSIZE), its TUNING log lines, and
// ncclGroupSimulateEnd.  Choices are exercised on the loopback world, and calls made under unusual
// settings are still checked for correct results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "enqueue/calib.h"
#include "enqueue/gen.h"
#include "enqueue/plan.h"
#include "enqueue/tuning.h"
#include "misc/param.h"
}

#include "loopback_world.h"

namespace {

// An int64 AllReduce on every rank of w in one group, checked against the exact sum.
void allReduceChecked(World& w, size_t count, bool inPlace) {
  int n = w.n();
  std::vector<std::vector<int64_t>> in(n, std::vector<int64_t>(count)), out(n, std::vector<int64_t>(count, -1));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) in[r][i] = (int64_t)(r + 1) * (int64_t)(i % 1000 + 1);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    int64_t* dst = inPlace ? in[r].data() : out[r].data();
    ASSERT_EQ(ncclAllReduce(in[r].data(), dst, count, ncclInt64, ncclSum, w.comm(r), nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    const std::vector<int64_t>& got = inPlace ? in[r] : out[r];
    for (size_t i = 0; i < count; i++)
      ASSERT_EQ(got[i], (int64_t)n * (n + 1) / 2 * (int64_t)(i % 1000 + 1)) << "rank " << r << " element " << i;
  }
}

// A byte AllGather on every rank of w, checked block by block.
void allGatherChecked(World& w, size_t count) {
  int n = w.n();
  std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(count)), out(n);
  for (int r = 0; r < n; r++) {
    out[r].assign(count * n, 0);
    for (size_t i = 0; i < count; i++) in[r][i] = (unsigned char)(r * 31 + i * 7);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(ncclAllGather(in[r].data(), out[r].data(), count, ncclInt8, w.comm(r), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++)
    for (int q = 0; q < n; q++) ASSERT_EQ(0, memcmp(out[r].data() + q * count, in[q].data(), count)) << r << "<-" << q;
}

}  // namespace

TEST(TuningParse, AlgoAndProtoSyntax) {
  uint32_t m[MEND_NFUNCS];
  const char* bad = nullptr;
  const uint32_t T = 1u << MEND_NCCL_ALGO_TREE, R = 1u << MEND_NCCL_ALGO_RING, ALL = (1u << 7) - 1;
  ASSERT_EQ(mendTuneParse(nullptr, 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], ALL);
  ASSERT_EQ(mendTuneParse("Ring", 0, m, &bad), ncclSuccess);
  for (int f = 0; f < MEND_NFUNCS; f++) EXPECT_EQ(m[f], R);
  ASSERT_EQ(mendTuneParse("tree,RING", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLGATHER], T | R);
  ASSERT_EQ(mendTuneParse("^tree", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], ALL & ~T);
  ASSERT_EQ(mendTuneParse("ring;allreduce:tree", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], T);
  EXPECT_EQ(m[MEND_FUNC_BROADCAST], R);
  ASSERT_EQ(mendTuneParse("allreduce:^ring;allgather:ring,nvls", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], ALL & ~R);
  EXPECT_EQ(m[MEND_FUNC_ALLGATHER], R | (1u << 4));
  EXPECT_EQ(m[MEND_FUNC_REDUCE], ALL);
  EXPECT_EQ(mendTuneParse("ring,bogus", 0, m, &bad), ncclInvalidArgument);
  EXPECT_STREQ(bad, "bogus");
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], R) << "the valid part still applies";
  EXPECT_EQ(mendTuneParse("allredux:tree", 0, m, &bad), ncclInvalidArgument);
  EXPECT_STREQ(bad, "allredux");
  ASSERT_EQ(mendTuneParse("LL,LL128", 1, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], 3u);
  ASSERT_EQ(mendTuneParse("^simple", 1, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], 3u);
  ASSERT_EQ(mendTuneParse("simple;allreduce:ll", 1, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], 1u);
  EXPECT_EQ(m[MEND_FUNC_ALLGATHER], 4u);
}

TEST(TuningModel, TreeForSmallRingForLarge) {
  for (int kind = 0; kind < 3; kind++) {
    mendCostIn in = {MEND_FUNC_ALLREDUCE, 8, 16, kind, 1, 0};
    EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&in, MEND_ALGO_RING)) << "kind " << kind;
    in.nBytes = (size_t)1 << 30;
    EXPECT_GT(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&in, MEND_ALGO_RING)) << "kind " << kind;
    double prev = 0;
    for (size_t b = 1; b < ((size_t)1 << 32); b *= 4) {
      in.nBytes = b;
      double c = mendTuneCostUs(&in, MEND_ALGO_RING);
      EXPECT_GE(c, prev);
      prev = c;
    }
    in.func = MEND_FUNC_ALLGATHER;
    EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_TREE), 0) << "no tree AllGather";
  }
  EXPECT_EQ(mendTuneChannels(1024, 0), 1);
  EXPECT_GT(mendTuneChannels((size_t)64 << 20, 0), 1);
  EXPECT_LE(mendTuneChunk(MEND_FUNC_ALLREDUCE, MEND_ALGO_RING, (size_t)1 << 30, 8, 524288), 524288u);
}

namespace {
// The constants measured at init on this machine's 2 CPUs with ranks that outnumber them (shm
// latency, bandwidth per channel and at most, reduction rate, hand-off), which the crowded-host tests
// below price with.
mendCalib crowdedCalib() {
  mendCalib c;
  mendCalibDefaults(&c);
  c.kind[1] = {0.25, 15.0, 15.0};  // shm
  c.reduceGBs = 29;
  c.handoffUs = 4.22;
  return c;
}
}  // namespace

// Ranks that outnumber their host's CPUs (cpuCrowd > 1) pay a hand-off per dependent step and share
// a CPU's copies and reductions.  Measured on 2 CPUs (mend-run, no binding, forced algorithms, medians
// of 5 rounds, crowdedCalib's constants as measured at init there): 4 ranks, 128 KiB, recursive doubling
// 46 us against the ring's 53; 4 MiB favours the ring; 6 ranks, 16-128 KiB, recursive doubling 71-126
// us against the tree's 153-204 and the ring's 179-200; 8 ranks, 64 KiB, recursive doubling 134-140 us
// against the ring's 275; 512 KiB, the ring 408-426 us against recursive doubling's 765-877; 1 MiB, the
// ring 541-571 us against the tree's 773-781.
TEST(TuningModel, CrowdedHostChargesHandOffs) {
  mendCalib c = crowdedCalib();
  mendCostIn in = {MEND_FUNC_ALLREDUCE, 128 << 10, 4, 1 /* shm */, 1, 0, &c};
  in.slotBytes = 524288;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RING), mendTuneCostUs(&in, MEND_ALGO_RD)) << "one rank per CPU";
  in.cpuCrowd = 2;
  double ring = mendTuneCostUs(&in, MEND_ALGO_RING), rd = mendTuneCostUs(&in, MEND_ALGO_RD);
  EXPECT_LT(rd, ring) << "two ranks per CPU: the ring's 6 steps cost hand-offs";
  in.cpuCrowd = 0.5;  // fewer ranks than CPUs: nothing charged
  double roomy = mendTuneCostUs(&in, MEND_ALGO_RING);
  in.cpuCrowd = 0;
  EXPECT_NEAR(roomy, mendTuneCostUs(&in, MEND_ALGO_RING), 1e-9);
  in.cpuCrowd = 2;
  in.nBytes = 4 << 20;
  in.nChannels = 2;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RING), mendTuneCostUs(&in, MEND_ALGO_RD)) << "large: the ring";
  in.nRanks = 6;
  in.cpuCrowd = 3;
  in.nChannels = 1;
  for (size_t bytes : {(size_t)16 << 10, (size_t)128 << 10}) {
    in.nBytes = bytes;
    rd = mendTuneCostUs(&in, MEND_ALGO_RD);
    EXPECT_LT(rd, mendTuneCostUs(&in, MEND_ALGO_TREE)) << bytes << " B, 6 ranks: only 4 ranks work in the rounds";
    EXPECT_LT(rd, mendTuneCostUs(&in, MEND_ALGO_RING)) << bytes << " B, 6 ranks";
  }
  in.nRanks = 8;
  in.cpuCrowd = 4;
  in.nBytes = 64 << 10;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << "8 ranks, 64 KiB";
  in.nBytes = 512 << 10;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RING), mendTuneCostUs(&in, MEND_ALGO_RD))
      << "8 ranks, 512 KiB: the ring's turns overlap its bytes";
  in.nBytes = 1 << 20;
  in.nChannels = 2;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RING), mendTuneCostUs(&in, MEND_ALGO_TREE))
      << "the tree's pipeline pays a hand-off per chunk";
}

// AllGather past a power of two runs in Bruck's order, whose rounds are charged as ring steps.  Measured
// on 2 CPUs (mend-run, no binding, 9 rounds of each forced, crowdedCalib's constants): 5, 6 and 7
// ranks, 16-256 KiB, Bruck's order 61-124 us against the ring's 70-143; 1 MiB, the ring 187-277 us
// against 273-363; at 3 ranks the two are the same hops and bytes (the ring is kept).
TEST(TuningModel, AllGatherBruckWhereItWins) {
  mendCalib c = crowdedCalib();
  mendCostIn in = {MEND_FUNC_ALLGATHER, 64 << 10, 6, 1 /* shm */, 1, 0, &c};
  in.slotBytes = 524288;
  for (int n : {5, 6, 7}) {
    in.nRanks = n;
    in.cpuCrowd = n / 2.0;
    in.nChannels = 1;
    for (size_t bytes : {(size_t)16 << 10, (size_t)256 << 10}) {
      in.nBytes = bytes;
      EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << n << " ranks, " << bytes;
    }
    for (size_t bytes : {(size_t)1 << 20, (size_t)4 << 20}) {
      in.nBytes = bytes;
      in.nChannels = bytes > (1u << 20) ? 2 : 1;
      EXPECT_GT(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << n << " ranks, " << bytes;
    }
  }
  in.nRanks = 3;
  in.cpuCrowd = 1.5;
  in.nChannels = 1;
  in.nBytes = 16 << 10;
  EXPECT_GE(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << "3 ranks: the ring is kept";
  in.nRanks = 16;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), 0) << "16 ranks: the last round overfills a FIFO";
  in.nRanks = 6;
  in.kind = 2;  // net
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), 0) << "between hosts: the ring";
}

// A channel uses tree c mod 2 and NIC c mod nRails: with an even NIC count each NIC carries one
// tree's channels, and a host inner in that tree receives from 2 children in the reduce phase and
// sends to 2 in the broadcast phase, one after the other, where the pooled model has 1 each way
// (mend-sim, 128 servers x 8 NICs at 200 Gbit/s, 256 MiB: the tree took 6.04 ms, the ring 4.07 ms,
// while the model without NICs rated them alike and picked the tree).
TEST(TuningModel, TreeChargedForItsBusiestNic) {
  const int MEND_TRANSPORT_SHM = 1, MEND_TRANSPORT_NET = 2;  // enum mendTransportKind (C-only header)
  mendCostIn in = {MEND_FUNC_ALLREDUCE, (size_t)1 << 28, 128, MEND_TRANSPORT_NET, 8, 0};
  double pooled = mendTuneCostUs(&in, MEND_ALGO_TREE), lat = 0;
  in.nBytes = 0;
  lat = mendTuneCostUs(&in, MEND_ALGO_TREE);
  in.nBytes = (size_t)1 << 28;
  double redUs = (double)in.nBytes / (mendCalibGet()->reduceGBs * 1e3);
  in.nRails = 8;
  double railed = mendTuneCostUs(&in, MEND_ALGO_TREE);
  EXPECT_NEAR(railed - lat - redUs, 2.0 * (pooled - lat - redUs), 1e-6 * pooled)
      << "one channel per NIC: 2 children up, then 2 down, where the pooled time has 1 each way";
  EXPECT_GT(railed, mendTuneCostUs(&in, MEND_ALGO_RING)) << "the ring wins at 256 MiB over 128 hosts";
  in.nRails = 2;
  EXPECT_NEAR(mendTuneCostUs(&in, MEND_ALGO_TREE), railed, 1e-9 * railed) << "2 NICs: channels 0,2,4,6 all tree 0";
  for (int rails : {0, 1, 3}) {  // no NICs known, one NIC, or 3 NICs each with both trees (6 channels)
    in.nRails = rails;
    in.nChannels = rails == 3 ? 6 : 8;
    mendCostIn pool = in;
    pool.nRails = 0;
    EXPECT_DOUBLE_EQ(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&pool, MEND_ALGO_TREE)) << rails << " NICs";
  }
  in.nRails = 8;
  in.nChannels = 8;
  in.nNodes = 3;  // 3 hosts: no host has two children and a parent
  mendCostIn pool = in;
  pool.nRails = 0;
  EXPECT_DOUBLE_EQ(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&pool, MEND_ALGO_TREE));
  in.kind = pool.kind = MEND_TRANSPORT_SHM;
  in.nNodes = pool.nNodes = 128;
  EXPECT_DOUBLE_EQ(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&pool, MEND_ALGO_TREE)) << "NICs only for net";
}

// A tree fills its pipeline level by level: each phase passes a chunk through depth - 1 levels, two
// chunks a level (mend-sim, 128 / 256 / 1,024 servers x 8 NICs, 256 MiB: the tree took 6.04 / 6.14 /
// 6.33 ms; the model said 5.44-5.46 without the fill, 6.03 / 6.12 / 6.30 with it).
TEST(TuningModel, TreeFillsItsPipeline) {
  const int MEND_TRANSPORT_SHM = 1, MEND_TRANSPORT_NET = 2;  // enum mendTransportKind (C-only header)
  auto fill = [](int n, int kind, size_t bytes) {
    mendCostIn in = {MEND_FUNC_ALLREDUCE, bytes, n, kind, 8, 0};
    in.nRails = 8;
    in.nNodes = n;
    double without = mendTuneCostUs(&in, MEND_ALGO_TREE);
    in.slotBytes = 524288;
    return mendTuneCostUs(&in, MEND_ALGO_TREE) - without;
  };
  const size_t big = (size_t)1 << 28;
  EXPECT_GT(fill(128, MEND_TRANSPORT_NET, big), 0.0);
  EXPECT_NEAR(fill(1024, MEND_TRANSPORT_NET, big) / fill(128, MEND_TRANSPORT_NET, big), 10.0 / 7.0, 1e-9)
      << "depth 11 against 8";
  EXPECT_NEAR(fill(128, MEND_TRANSPORT_NET, (size_t)8 * 65536) / fill(128, MEND_TRANSPORT_NET, big), 1.0 / 8, 1e-9)
      << "64 KiB a channel: one chunk of 64 KiB instead of 512 KiB";
  EXPECT_EQ(fill(128, MEND_TRANSPORT_SHM, big), 0.0) << "between hosts only";
  EXPECT_EQ(fill(128, MEND_TRANSPORT_NET, 0), 0.0);
}

// A ring between hosts keeps each host's ranks together: only one hop in n / nNodes crosses the
// network, the others pay shared memory's latency.  64 hosts x 8 ranks: the ring's latency term
// falls from 2 x 511 network hops to 2 x 511 hops at the mix; one rank per host (or one host) keeps
// the network's for every hop.
TEST(TuningModel, RingPaysTheNetworkOnlyBetweenHosts) {
  const int MEND_TRANSPORT_NET = 2;  // enum mendTransportKind (C-only header)
  mendCostIn in = {MEND_FUNC_ALLREDUCE, 8, 512, MEND_TRANSPORT_NET, 1, 0};
  in.nNodes = 512;
  double perRank = mendTuneCostUs(&in, MEND_ALGO_RING);
  in.nNodes = 64;
  double perHost = mendTuneCostUs(&in, MEND_ALGO_RING);
  const mendCalib* c = mendCalibGet();
  double net = c->kind[MEND_TRANSPORT_NET].alphaUs, shm = c->kind[1].alphaUs;
  EXPECT_NEAR(perRank - perHost, 2.0 * 511 * (net - (64 * net + 448 * shm) / 512), 1e-6 * perRank);
  double tree64 = mendTuneCostUs(&in, MEND_ALGO_TREE);
  in.nNodes = 512;
  EXPECT_DOUBLE_EQ(mendTuneCostUs(&in, MEND_ALGO_TREE), tree64) << "a tree's latency is not the ring's";
  in.func = MEND_FUNC_ALLGATHER;
  in.nNodes = 512;
  double agRank = mendTuneCostUs(&in, MEND_ALGO_RING);
  in.nNodes = 64;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RING), agRank);
}

// ReduceScatter in one hop (gen_rd.c): a rank waits for its peers once instead of n - 1 times, but
// copies n - 2 more blocks than the ring, which forwards each partial as it reduces it.  Measured on
// 2 CPUs, 4 ranks (MEND_RD=1 against 0, float sum): 64 KiB 24.8 against 59.2 us, 4 MiB 853-930 against
// 602-781 us, 16 MiB 3576-3707 against 2711-2743 us.  One host, at most 5 ranks (its connectors).
TEST(TuningModel, ReduceScatterOneHopWhereItWins) {
  mendCalib c;
  mendCalibDefaults(&c);
  c.kind[1] = {0.24, 18.7, 18.7};  // shm, as measured at init there
  c.reduceGBs = 33;
  c.handoffUs = 3.85;
  mendCostIn in = {MEND_FUNC_REDUCESCATTER, 64 << 10, 4, 1 /* shm */, 1, 0, &c};
  in.slotBytes = 524288;
  in.cpuCrowd = 2;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << "64 KiB, crowded";
  in.nBytes = 16 << 20;
  in.nChannels = 2;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RING), mendTuneCostUs(&in, MEND_ALGO_RD)) << "16 MiB: the ring";
  in.nBytes = 8;
  in.nChannels = 1;
  in.nRanks = 2;
  EXPECT_LE(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << "2 ranks: the same exchange";
  in.nRanks = 6;
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), 0) << "6 ranks: 10 connectors do not fit a program";
  in.nRanks = 4;
  in.kind = 2; /* net */
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), 0) << "between hosts: the ring";
  // The planner takes it for small counts on one host, the ring for large ones.
  for (int n : {3, 4, 5}) {
    World w(n);
    mendOp op = {};
    op.func = MEND_FUNC_REDUCESCATTER;
    op.comm = w.comm(0);
    op.type = ncclFloat;
    op.root = -1;
    ASSERT_EQ(mendRedOpResolve(ncclSum, ncclFloat, n, &op.redop), ncclSuccess);
    mendPlanner* pl;
    ASSERT_EQ(mendPlannerGet(w.comm(0), &pl), ncclSuccess);
    for (size_t bytes : {(size_t)8 * n, (size_t)256 << 20}) {
      op.count = bytes / 4 / n;
      mendChoice ch;
      ASSERT_EQ(mendTuneColl(w.comm(0), pl, &op, bytes, -1, &ch), ncclSuccess);
      EXPECT_EQ(ch.algo, bytes < 4096 ? MEND_ALGO_RD : MEND_ALGO_RING) << n << " ranks, " << bytes << " bytes";
    }
  }
}

// The choice follows NCCL_ALGO (also per function) and the cost model otherwise.
TEST(TuningChoice, FollowsEnvAndModel) {
  struct Case { const char* env; size_t bytes; int n; int want; };
  const Case cases[] = {
      {"ring", 8, 16, MEND_ALGO_RING},          {"tree", (size_t)64 << 20, 16, MEND_ALGO_TREE},
      {"ring;allreduce:tree", 8, 8, MEND_ALGO_TREE}, {"^tree", 8, 16, MEND_ALGO_RING},
      {nullptr, 8, 17, MEND_ALGO_TREE},          {nullptr, (size_t)256 << 20, 16, MEND_ALGO_RING},
      {nullptr, 8, 16, MEND_ALGO_RD},            {"tree", 8, 16, MEND_ALGO_TREE},
      {nullptr, 8, 8, MEND_ALGO_RD},             {nullptr, (size_t)256 << 20, 8, MEND_ALGO_RING},
      {"nvls", 8, 4, MEND_ALGO_RING},           {"allgather:tree", 8, 16, MEND_ALGO_TREE},
  };
  for (const Case& c : cases) {
    ScopedEnv env("NCCL_ALGO", c.env);
    World w(c.n);
    mendOp op = {};
    op.func = MEND_FUNC_ALLREDUCE;
    op.comm = w.comm(0);
    op.count = c.bytes / 4;
    op.type = ncclFloat;
    op.root = -1;
    ASSERT_EQ(mendRedOpResolve(ncclSum, ncclFloat, c.n, &op.redop), ncclSuccess);
    mendPlanner* pl;
    ASSERT_EQ(mendPlannerGet(w.comm(0), &pl), ncclSuccess);
    mendChoice ch;
    ASSERT_EQ(mendTuneColl(w.comm(0), pl, &op, c.bytes, -1, &ch), ncclSuccess);
    EXPECT_EQ(ch.algo, c.want) << (c.env ? c.env : "(unset)") << " bytes " << c.bytes;
    EXPECT_EQ(ch.proto, MEND_NCCL_PROTO_SIMPLE);
    EXPECT_GT(ch.estUs, 0);
    op.func = MEND_FUNC_ALLGATHER;
    ASSERT_EQ(mendTuneColl(w.comm(0), pl, &op, c.bytes, -1, &ch), ncclSuccess);
    // One host: recursive doubling for small gathers where it fits and NCCL_ALGO leaves the choice to
    // Mend (it reads forwarded blocks back, so large gathers stay on the ring); else the ring.
    bool small = c.bytes <= 65536;
    int wantAg = c.env == nullptr && mendRdAllGatherSupported(c.n) && small ? MEND_ALGO_RD : MEND_ALGO_RING;
    EXPECT_EQ(ch.algo, wantAg) << "AllGather, " << (c.env ? c.env : "(unset)") << ", " << c.n << " ranks";
  }
}

namespace {
mendChoice choose(ncclComm_t comm, int func, size_t bytes) {
  mendOp op = {};
  op.func = func;
  op.comm = comm;
  op.count = bytes / 4;
  op.type = ncclFloat;
  op.root = func == MEND_FUNC_BROADCAST || func == MEND_FUNC_REDUCE ? 0 : -1;
  int n = 0;
  EXPECT_EQ(ncclCommCount(comm, &n), ncclSuccess);
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclFloat, n, &op.redop), ncclSuccess);
  mendPlanner* pl = nullptr;
  EXPECT_EQ(mendPlannerGet(comm, &pl), ncclSuccess);
  mendChoice ch = {};
  EXPECT_EQ(mendTuneColl(comm, pl, &op, bytes, -1, &ch), ncclSuccess);
  return ch;
}
}  // namespace

// NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS bound the channels a call uses (within the channels the
// communicator has); NCCL_BUFFSIZE sets the FIFO slot, which caps the chunk.  Results stay right.
TEST(TuningChoice, ChannelLimitsAndBuffsize) {
  World w(4, 8, 64 * 1024);
  const size_t big = (size_t)64 << 20, small = 64;
  EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, big).nChannels, 8) << "large calls use every channel";
  EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, small).nChannels, 1);
  EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, big).chunkBytes, (size_t)4194304 / 8) << "default NCCL_BUFFSIZE";
  {
    ScopedEnv maxCh("NCCL_MAX_NCHANNELS", "2");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, big).nChannels, 2);
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLGATHER, big).nChannels, 2);
  }
  {
    ScopedEnv minCh("NCCL_MIN_NCHANNELS", "5");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, small).nChannels, 5);
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_BROADCAST, small).nChannels, 5);
  }
  {
    ScopedEnv minCh("NCCL_MIN_NCHANNELS", "32");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, small).nChannels, 8) << "capped by the channels that exist";
  }
  {
    ScopedEnv buff("NCCL_BUFFSIZE", "65536");
    mendChoice ch = choose(w.comm(0), MEND_FUNC_ALLREDUCE, big);
    EXPECT_EQ(ch.chunkBytes, (size_t)65536 / 8);
    ScopedEnv algo("NCCL_ALGO", "ring");
    ScopedEnv maxCh("NCCL_MAX_NCHANNELS", "1");
    for (bool inPlace : {false, true}) allReduceChecked(w, 70001, inPlace);
  }
}

// NCCL_DEBUG_SUBSYS=TUNING shows the cost model's choice for every collective, and only then.
TEST(TuningLog, ChoiceShownWithTuningSubsys) {
  char dir[] = "/tmp/mend-tuning-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/log";
  auto runAndRead = [&](const char* subsys) {
    ScopedEnv level("NCCL_DEBUG", "INFO");
    ScopedEnv sub("NCCL_DEBUG_SUBSYS", subsys);
    ScopedEnv file("NCCL_DEBUG_FILE", path.c_str());
    ncclResetDebugInit();
    {
      World w(3);
      allReduceChecked(w, 1000, false);
      allGatherChecked(w, 5000);
    }
    ncclResetDebugInit();  // closes the file
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::string tuning = runAndRead("TUNING");
  EXPECT_NE(tuning.find("NCCL INFO AllReduce: 8000 Bytes -> Algo "), std::string::npos) << tuning;
  EXPECT_NE(tuning.find("NCCL INFO AllGather: 15000 Bytes -> Algo Ring proto Simple channels "), std::string::npos)
      << tuning;
  EXPECT_NE(tuning.find("(ring "), std::string::npos) << "both candidates' costs are shown";
  EXPECT_NE(tuning.find(", rd "), std::string::npos) << "recursive doubling's cost is shown";
  EXPECT_NE(tuning.find("NCCL INFO Cost model constants (built in): p2p alpha "), std::string::npos) << tuning;
  EXPECT_EQ(tuning.find("opCount"), std::string::npos) << "no COLL lines at TUNING";
  std::string coll = runAndRead("COLL");
  EXPECT_EQ(coll.find("-> Algo"), std::string::npos) << coll;
  EXPECT_NE(coll.find("AllReduce: opCount"), std::string::npos) << coll;
  std::string cmd = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(cmd.c_str()), 0);
}

TEST(TuningSimulate, GroupSimulateEnd) {
  World w(8);
  std::vector<float> small(16), big((size_t)8 << 20);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  float est[2];
  for (int k = 0; k < 2; k++) {
    std::vector<float>& b = k ? big : small;
    info.estimatedTime = NCCL_UNDEF_FLOAT;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 8; r++)
      ASSERT_EQ(ncclAllReduce(b.data(), b.data(), b.size(), ncclFloat, ncclSum, w.comm(r), nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
    est[k] = info.estimatedTime;
    EXPECT_GT(est[k], 0.0f);
  }
  EXPECT_GT(est[1], est[0] * 10);
  std::fill(big.begin(), big.end(), 3.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(big.data(), big.data(), 1, ncclFloat, ncclSum, w.comm(0), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
  EXPECT_EQ(big[0], 3.0f) << "simulation runs nothing";
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupSimulateEnd(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupSimulateEnd(&info), ncclInvalidUsage) << "not in a group";
}

// Recursive doubling: the model picks it for small AllReduces at 2, 4, 8, 16 ranks (log2 rounds beat
// the tree's 2(depth-1) hops and the ring's 2(n-1)), never for large ones; MEND_RD=0 rules it out,
// MEND_RD=1 forces it, NCCL_ALGO set leaves it out; results stay exact under every setting.
TEST(TuningChoice, RecursiveDoubling) {
  {
    World w3(3);  // 1 round + 2 fold hops against the tree's 2 hops
    EXPECT_EQ(choose(w3.comm(0), MEND_FUNC_ALLREDUCE, 8).algo, MEND_ALGO_TREE);
  }
  for (int n : {2, 4, 8, 16}) {
    World w(n);
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, 8).algo, MEND_ALGO_RD) << "n=" << n;
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, (size_t)64 << 20).algo, MEND_ALGO_RING) << "n=" << n;
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_BROADCAST, 8).algo, MEND_ALGO_RING) << "AllReduce only";
    for (int kind = 0; kind < 3; kind++) {
      mendCostIn in = {MEND_FUNC_ALLREDUCE, 8, n, kind, 1, 0};
      EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_RING)) << n;
      EXPECT_LE(mendTuneCostUs(&in, MEND_ALGO_RD), mendTuneCostUs(&in, MEND_ALGO_TREE)) << n;
    }
    allReduceChecked(w, 13, false);
  }
  World w(4);
  {
    ScopedEnv off("MEND_RD", "0");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, 8).algo, MEND_ALGO_TREE);
  }
  {
    ScopedEnv on("MEND_RD", "1");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, (size_t)64 << 20).algo, MEND_ALGO_RD);
    allReduceChecked(w, 70001, true);
  }
  {
    ScopedEnv algo("NCCL_ALGO", "ring,tree");
    EXPECT_NE(choose(w.comm(0), MEND_FUNC_ALLREDUCE, 8).algo, MEND_ALGO_RD) << "NCCL_ALGO set: NCCL's names rule";
  }
  World big(17);
  EXPECT_EQ(choose(big.comm(0), MEND_FUNC_ALLREDUCE, 8).algo, MEND_ALGO_TREE) << "17 ranks: no program fits";
  mendCostIn in = {MEND_FUNC_ALLREDUCE, 8, 17, 1, 1, 0};
  EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_RD), 0);
}

// Calibration files: every key read, comments and blank lines skipped, anything else refused with the
// line and the reason, leaving the values as they were; what mendCalibWrite writes reads back.
TEST(TuningCalib, ParseWriteAndRefuse) {
  mendCalib c, d;
  mendCalibDefaults(&c);
  char err[256] = "";
  const char* good = "# measured\n\nshm.alpha_us 1.5\nshm.bw_channel_gbs 4\nshm.bw_max_gbs 7.25\n"
                     "net.alpha_us 40 # loopback\np2p.bw_max_gbs 9\nreduce_gbs 12\nhandoff_us 2.5\n";
  ASSERT_EQ(mendCalibParse(good, &c, err, sizeof err), 0) << err;
  EXPECT_EQ(c.kind[1].alphaUs, 1.5);
  EXPECT_EQ(c.kind[1].bwChannel, 4.0);
  EXPECT_EQ(c.kind[1].bwMax, 7.25);
  EXPECT_EQ(c.kind[2].alphaUs, 40.0);
  EXPECT_EQ(c.kind[0].bwMax, 9.0);
  EXPECT_EQ(c.kind[0].alphaUs, 1.0) << "keys not in the file keep their values";
  EXPECT_EQ(c.reduceGBs, 12.0);
  EXPECT_EQ(c.handoffUs, 2.5);
  struct Bad { const char* text; const char* why; };
  const Bad bads[] = {
      {"shm.alpha 3\n", "line 1: unknown key 'shm.alpha'"},     {"ib.alpha_us 3\n", "unknown key"},
      {"\nshm.alpha_us\n", "line 2: shm.alpha_us needs one number"}, {"shm.alpha_us abc\n", "got 'abc'"},
      {"shm.alpha_us 3x\n", "got '3x'"},                        {"shm.alpha_us -1\n", "needs one number"},
      {"shm.alpha_us nan\n", "needs one number"},               {"shm.alpha_us inf\n", "needs one number"},
      {"shm.alpha_us 1e300\n", "needs one number"},             {"reduce_gbs 0\n", "needs one number"},
      {"shm.alpha_us 1 2\n", "needs one number"},               {"net.bw_max_gbs 0.5\n", "below net.bw_channel_gbs"},
      {"handoff_us 0\n", "handoff_us needs one number"},
  };
  for (const Bad& b : bads) {
    d = c;
    err[0] = '\0';
    EXPECT_EQ(mendCalibParse(b.text, &d, err, sizeof err), -1) << b.text;
    EXPECT_NE(std::string(err).find(b.why), std::string::npos) << b.text << ": " << err;
    EXPECT_EQ(memcmp(&d, &c, sizeof c), 0) << "refused text changes nothing: " << b.text;
  }
  char buf[1024];
  FILE* f = fmemopen(buf, sizeof buf, "w");
  ASSERT_NE(f, nullptr);
  mendCalibWrite(f, &c);
  fclose(f);
  mendCalibDefaults(&d);
  ASSERT_EQ(mendCalibParse(buf, &d, err, sizeof err), 0) << err;
  for (int k = 0; k < MEND_CALIB_KINDS; k++) {
    EXPECT_NEAR(d.kind[k].alphaUs, c.kind[k].alphaUs, 1e-3);
    EXPECT_NEAR(d.kind[k].bwMax, c.kind[k].bwMax, 1e-3);
  }
  EXPECT_NEAR(d.handoffUs, 2.5, 1e-3);
  char line[512];
  mendCalibDescribe(&c, line, sizeof line);
  EXPECT_NE(std::string(line).find("shm alpha 1.50 us bw 4.00/7.25 GB/s"), std::string::npos) << line;
  EXPECT_NE(std::string(line).find("hand-off 2.50 us"), std::string::npos) << line;
}

namespace {
// In a process that has not planned yet: exit 0 when the model runs on the file's constants.  The
// re-executed process made its own `dir` (it ran the test body up to here): it removes it.
void modelReadsFile(const std::string& dir, const std::string& path) {
  setenv("MEND_CALIB_FILE", path.c_str(), 1);
  mendParamResetCache();
  mendCostIn in = {MEND_FUNC_ALLREDUCE, 1000000, 2, 1, 1, 0};
  // 2 hops of 50 us, 2 x 1/2 x 1 MB at 1 GB/s, 1/2 x 1 MB reduced at 1 GB/s
  double ring = mendTuneCostUs(&in, MEND_ALGO_RING);
  int ok = mendCalibGet()->fromFile && std::fabs(ring - (100 + 1000 + 500)) < 1e-6;
  std::string cmd = "rm -rf " + dir;
  exit(system(cmd.c_str()) == 0 && ok ? 0 : 1);
}
}  // namespace

// MEND_CALIB_FILE: a missing or bad file WARNs and keeps the built-in constants; a good one is used,
// and the cost model reads it (checked in a fresh process: the library reads the file once).
TEST(TuningCalib, FileLoadAndModel) {
  char dir[] = "/tmp/mend-calib-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string good = std::string(dir) + "/good", bad = std::string(dir) + "/bad";
  FILE* f = fopen(good.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("shm.alpha_us 50\nshm.bw_channel_gbs 1\nshm.bw_max_gbs 1\nreduce_gbs 1\n", f);
  fclose(f);
  f = fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("shm.alpha_us 50\nshm.alpha_us oops\n", f);
  fclose(f);
  mendCalib c, builtIn;
  mendCalibDefaults(&builtIn);
  EXPECT_EQ(mendCalibLoad((std::string(dir) + "/none").c_str(), &c), -1);
  EXPECT_EQ(memcmp(&c, &builtIn, sizeof c), 0);
  EXPECT_EQ(mendCalibLoad(bad.c_str(), &c), -1);
  EXPECT_EQ(memcmp(&c, &builtIn, sizeof c), 0) << "a bad file is not half-applied";
  EXPECT_EQ(mendCalibLoad(nullptr, &c), 0);
  EXPECT_EQ(c.fromFile, 0);
  ASSERT_EQ(mendCalibLoad(good.c_str(), &c), 0);
  EXPECT_EQ(c.fromFile, 1);
  EXPECT_EQ(c.kind[1].alphaUs, 50.0);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a re-executed process reads the file afresh
  EXPECT_EXIT(modelReadsFile(dir, good), ::testing::ExitedWithCode(0), "");
  std::string cmd = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(cmd.c_str()), 0);
}

// Constants that came over the network (rank 0's at init) are checked value by value; equality
// ignores where they came from.
TEST(TuningCalib, CheckAndEqual) {
  mendCalib c, d;
  char err[160];
  mendCalibDefaults(&c);
  EXPECT_EQ(mendCalibCheck(&c, err, sizeof err), 0) << err;
  d = c;
  d.fromFile = 1;
  EXPECT_TRUE(mendCalibEqual(&c, &d));
  d.kind[2].alphaUs += 1;
  EXPECT_FALSE(mendCalibEqual(&c, &d));
  struct Bad { void (*spoil)(mendCalib*); const char* names; } bad[] = {
    {[](mendCalib* x) { x->reduceGBs = NAN; }, "reduce_gbs"},
    {[](mendCalib* x) { x->handoffUs = -1; }, "handoff_us"},
    {[](mendCalib* x) { x->reduceGBs = -1; }, "reduce_gbs"},
    {[](mendCalib* x) { x->kind[0].alphaUs = 1e7; }, "p2p.alpha_us"},
    {[](mendCalib* x) { x->kind[1].bwChannel = INFINITY; }, "shm.bw_channel_gbs"},
    {[](mendCalib* x) { x->kind[2].bwMax = 0; }, "net.bw_max_gbs"},
    {[](mendCalib* x) { x->kind[2].bwMax = 0.5; x->kind[2].bwChannel = 1; }, "net.bw_max_gbs 0.5 is below"},
  };
  for (const Bad& b : bad) {
    d = c;
    b.spoil(&d);
    EXPECT_EQ(mendCalibCheck(&d, err, sizeof err), -1) << b.names;
    EXPECT_NE(std::string(err).find(b.names), std::string::npos) << err;
  }
}
