// The per-call choice of an AllReduce schedule under a degraded plan view (mendTuneAllReduce,
// MEND_REPLAN): what it picks for capacities around R2CCL's threshold, where an R2 plan's bytes land
// on a degraded rank's NICs (the placement term), MEND_REPLAN forcing, and the same choice, logged,
// on every rank.  The R2 model and programs themselves: test_r2.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "enqueue/tuning.h"
}

#include "loopback_world.h"
#include "view_util.h"

using mendtest::ScopedEnv;
using mendtest::World;
using mendtest::choose;
using mendtest::kGiB;
using mendtest::setCaps;

// Around the paper's threshold: a rank that lost more than N/(3N-2) of its bandwidth gets R2 for
// large messages, one that lost less gets Balance; small messages stay on Balance (R2's chain adds
// n hops).  The estimates the log shows are the model's.
TEST(R2Choice, ThresholdOfThePaper) {
  for (int N : {2, 3, 4, 8}) {
    World w(N, 4);
    double thr = mendR2PaperThreshold(N);
    int above = (int)std::floor(1000 * (1 - thr)) - 20, below = (int)std::ceil(1000 * (1 - thr)) + 20;
    std::vector<int> caps(N, 1000);
    caps[N - 1] = above;
    setCaps(w, caps);
    mendReplanChoice c = choose(w, kGiB);
    EXPECT_EQ(c.replan, MEND_REPLAN_R2) << "N=" << N << " cap " << above;
    EXPECT_LT(c.costUs[MEND_REPLAN_R2], c.costUs[MEND_REPLAN_BALANCE]);
    EXPECT_DOUBLE_EQ(c.estUs, c.costUs[MEND_REPLAN_R2]);
    EXPECT_EQ(c.split.nLevels, 2);
    EXPECT_GE(c.nChannels, 2) << "the global and the partial ring on channels of their own";
    EXPECT_GT(c.costUs[MEND_REPLAN_BACKUP], 0);
    // 4 KiB is latency-bound: R2's chain adds n hops (at N = 2 its one-rank partial ring has none
    // to save, and R2 moves everything through the chain at the same latency as the ring).
    if (N > 2) {
      EXPECT_EQ(choose(w, 4096).replan, MEND_REPLAN_BALANCE) << "N=" << N;
    }
    caps[N - 1] = below;
    setCaps(w, caps);
    c = choose(w, kGiB);
    EXPECT_EQ(c.replan, MEND_REPLAN_BALANCE) << "N=" << N << " cap " << below;
    EXPECT_LT(c.costUs[MEND_REPLAN_BALANCE], c.costUs[MEND_REPLAN_R2]);
  }
}

TEST(R2Choice, HealthyViewIsLeftAlone) {
  World w(4, 4);
  setCaps(w, std::vector<int>(4, 1000));
  for (const char* mode : {"auto", "balance", "r2", "recursive"}) {
    ScopedEnv env("MEND_REPLAN", mode);
    mendReplanChoice c = choose(w, kGiB);
    EXPECT_EQ(c.replan, MEND_REPLAN_BALANCE) << mode << ": nothing to split";
  }
  ScopedEnv env("MEND_REPLAN", "backup");
  EXPECT_EQ(choose(w, kGiB).replan, MEND_REPLAN_BACKUP);
}

// Where an R2 plan's bytes land: a rank that lost rails 0, 3 and 4 of 8 has their channels on its
// next usable NICs (1 and 5), which carry global-ring channels too: NIC 5 takes 0.48 of the vector.
// The paper's slices say R2 (X = 0.375 > 16/46); the placement says Balance, as mend-sim does
// (sim/RESULTS.md).  A rank left with one NIC has everything on it: the placement adds nothing.
TEST(R2Choice, PlacementOnSurvivingNicsKeepsBalance) {
  World w(16, 8);
  std::vector<int> caps(16, 1000);
  std::vector<uint32_t> nics(16, 0xffu);
  caps[5] = 625;
  nics[5] = 0xffu & ~((1u << 0) | (1u << 3) | (1u << 4));
  setCaps(w, caps);
  mendReplanChoice slices = choose(w, kGiB);
  EXPECT_EQ(slices.replan, MEND_REPLAN_R2) << "without NIC masks: the paper's slices";
  setCaps(w, caps, nics);
  mendReplanChoice placed = choose(w, kGiB);
  EXPECT_EQ(placed.replan, MEND_REPLAN_BALANCE);
  EXPECT_GT(placed.costUs[MEND_REPLAN_R2], 1.2 * slices.costUs[MEND_REPLAN_R2]) << "NIC 5 carries 0.48 / 0.375";
  EXPECT_DOUBLE_EQ(placed.costUs[MEND_REPLAN_BALANCE], slices.costUs[MEND_REPLAN_BALANCE]);
  {
    ScopedEnv env("MEND_REPLAN", "r2");
    EXPECT_EQ(choose(w, kGiB).replan, MEND_REPLAN_R2) << "forcing still runs R2";
  }

  World w2(4, 2);
  setCaps(w2, {500, 1000, 1000, 1000});
  mendReplanChoice one = choose(w2, kGiB);
  setCaps(w2, {500, 1000, 1000, 1000}, {0x1u, 0x3u, 0x3u, 0x3u});
  mendReplanChoice onePlaced = choose(w2, kGiB);
  EXPECT_EQ(one.replan, MEND_REPLAN_R2);
  EXPECT_EQ(onePlaced.replan, MEND_REPLAN_R2);
  EXPECT_NEAR(onePlaced.costUs[MEND_REPLAN_R2], one.costUs[MEND_REPLAN_R2], 1e-9 * one.costUs[MEND_REPLAN_R2]);
}

// Two degraded ranks outside a partial level chain their inputs to it (gen_r2.c): the second takes
// the first's sum as well as the result, two shares in on its one rail.  4 ranks on 2 rails, ranks 0
// and 1 each left with a different one (the 4x2 testbed after rails lost on both hosts, where R2 ran
// 1.76x Balance's time): the placement prices R2 above Balance and the choice keeps Balance.  With
// one degraded rank its one share stands and R2 is still chosen (the test above).
TEST(R2Choice, ChainedOuterRanksTakeTwoShares) {
  World w(4, 2);
  setCaps(w, {500, 500, 1000, 1000}, {0x2u, 0x1u, 0x3u, 0x3u});
  mendReplanChoice c = choose(w, kGiB);
  EXPECT_EQ(c.replan, MEND_REPLAN_BALANCE);
  EXPECT_GT(c.costUs[MEND_REPLAN_R2], 1.1 * c.costUs[MEND_REPLAN_BALANCE]);
  // Where the bytes land, by hand: level 0 (4 ranks, 1 channel) and level 1 (2 members, 1 channel)
  // on rank 0's one NIC: 2 x 3/4 x y0 + 2 x y1 of the vector, over half the rank's rate.
  {
    ScopedEnv env("MEND_REPLAN", "r2");
    mendReplanChoice r2 = choose(w, kGiB);
    ASSERT_EQ(r2.replan, MEND_REPLAN_R2);
    ASSERT_EQ(r2.split.nLevels, 2);
    int caps[4] = {500, 500, 1000, 1000};
    uint32_t nics[4] = {0x2u, 0x1u, 0x3u, 0x3u};
    double y0 = r2.split.lv[0].share, y1 = r2.split.lv[1].share;
    double placed = mendR2PlacedUs(4, caps, nics, &r2, 1e6, 1.0);
    EXPECT_NEAR(placed, (1.5 * y0 + 2 * y1) * 1e6 * 2, 0.02 * placed) << "y0 " << y0 << " y1 " << y1;
  }
}

// MEND_REPLAN forces a schedule wherever it applies; what cannot apply falls back (r2 for recursive
// without two capacities, Balance for r2 without any); an unknown value is auto.
TEST(R2Choice, MendReplanForces) {
  World w(6, 4);
  std::vector<int> one(6, 1000), two(6, 1000);
  one[2] = 750;  // X = 0.25: auto keeps Balance
  two[1] = 500;
  two[4] = 750;
  struct Case {
    const char* mode;
    const std::vector<int>* caps;
    int want;
    int levels;
  } cases[] = {
      {"auto", &one, MEND_REPLAN_BALANCE, 0},    {"bogus", &one, MEND_REPLAN_BALANCE, 0},
      {"r2", &one, MEND_REPLAN_R2, 2},           {"R2", &one, MEND_REPLAN_R2, 2},
      {"recursive", &one, MEND_REPLAN_R2, 2},    {"backup", &one, MEND_REPLAN_BACKUP, 0},
      {"balance", &one, MEND_REPLAN_BALANCE, 0}, {"recursive", &two, MEND_REPLAN_RECURSIVE, 3},
      {"r2", &two, MEND_REPLAN_R2, 2},           {"auto", &two, MEND_REPLAN_R2, 2},
  };
  for (const Case& k : cases) {
    ScopedEnv env("MEND_REPLAN", k.mode);
    if (strcmp(k.mode, "bogus") == 0) {
      EXPECT_EQ(mendReplanParam(), MEND_REPLAN_AUTO) << "an unknown value is auto";
    } else {
      EXPECT_STRCASEEQ(mendReplanName(mendReplanParam()), k.mode);
    }
    setCaps(w, *k.caps);
    mendReplanChoice c = choose(w, kGiB);
    EXPECT_EQ(c.replan, k.want) << "MEND_REPLAN=" << k.mode;
    if (k.levels) {
      EXPECT_EQ(c.split.nLevels, k.levels) << "MEND_REPLAN=" << k.mode;
      EXPECT_GE(c.nChannels, std::min(k.levels, 4));
    }
  }
}

// Every rank computes the same choice (its inputs are shared), and the TUNING log shows it.
TEST(R2Choice, AlikeOnEveryRankAndLogged) {
  char dir[] = "/tmp/mend-r2-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/log";
  {
    ScopedEnv level("NCCL_DEBUG", "INFO");
    ScopedEnv sub("NCCL_DEBUG_SUBSYS", "TUNING");
    ScopedEnv file("NCCL_DEBUG_FILE", path.c_str());
    ncclResetDebugInit();
    {
      World w(5, 4);
      std::vector<int> caps = {1000, 333, 1000, 1000, 1000};
      setCaps(w, caps);
      mendReplanChoice c0 = choose(w, kGiB);
      for (int r = 1; r < 5; r++) {
        mendPlanner* pl = nullptr;
        const mendPlanView* view = nullptr;
        mendReplanChoice c;
        ASSERT_EQ(mendPlannerGet(w.comm(r), &pl), ncclSuccess);
        ASSERT_EQ(mendPlannerViewAt(w.comm(r), 1u << 30, &view), ncclSuccess);
        ASSERT_EQ(mendTuneAllReduce(w.comm(r), pl, view, kGiB, &c), ncclSuccess);
        EXPECT_EQ(c.replan, c0.replan) << "rank " << r;
        EXPECT_EQ(c.nChannels, c0.nChannels);
        EXPECT_EQ(memcmp(&c.split, &c0.split, sizeof(c.split)), 0) << "rank " << r << " splits otherwise";
      }
    }
    ncclResetDebugInit();
  }
  std::ifstream in(path);
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("AllReduce: 1073741824 Bytes -> replan r2 [all: 5 ranks, share "), std::string::npos) << log;
  EXPECT_NE(log.find(" at 333 permille; cap>=1000: 4 ranks, share "), std::string::npos) << log;
  EXPECT_NE(log.find("(backup "), std::string::npos) << "every candidate's estimate is shown";
  std::string cmd = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(cmd.c_str()), 0);
}
