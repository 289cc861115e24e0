// Which rank of a shared CPU moves, and where (transport/spread.c, mendSpreadChoose): the lowest rank
// on a CPU stays, each other moves to a CPU of its own mask that no rank published, the k-th mover to
// the k-th such CPU after its own; no free CPU, a one-CPU mask or no sharing: nobody moves.
#include <gtest/gtest.h>

#include <vector>

#include "device/engine.h"
#include "mend_internal.h"

namespace {
cpu_set_t maskOf(std::initializer_list<int> cpus) {
  cpu_set_t m;
  CPU_ZERO(&m);
  for (int c : cpus) CPU_SET(c, &m);
  return m;
}
int choose(int myCpu, int myRank, std::initializer_list<int> mask, std::vector<int> peerCpu, std::vector<int> peerRank) {
  cpu_set_t m = maskOf(mask);
  return mendSpreadChoose(myCpu, myRank, &m, peerCpu.data(), peerRank.data(), (int)peerCpu.size());
}
}  // namespace

TEST(Spread, LowestRankStaysHigherMoves) {
  EXPECT_EQ(choose(0, 1, {0, 1}, {0}, {0}), 1) << "rank 1 shares CPU 0 with rank 0: it moves to CPU 1";
  EXPECT_EQ(choose(0, 0, {0, 1}, {0}, {1}), -1) << "rank 0 is the lowest on CPU 0: it stays";
  EXPECT_EQ(choose(1, 1, {0, 1}, {0}, {0}), -1) << "not shared: stays";
  EXPECT_EQ(choose(3, 5, {0, 1, 2, 3}, {3, 0}, {2, 4}), 1) << "the first CPU after its own no rank published (0 is taken)";
}

TEST(Spread, NowhereToGo) {
  EXPECT_EQ(choose(0, 1, {0}, {0}, {0}), -1) << "bound to one CPU";
  EXPECT_EQ(choose(0, 2, {0, 1}, {0, 1}, {0, 1}), -1) << "the other CPU is published by rank 1";
  EXPECT_EQ(choose(2, 1, {0, 1, 2}, {2, 0, 1}, {0, 3, 4}), -1) << "every CPU of the mask taken";
  EXPECT_EQ(choose(0, 1, {0, 1}, {}, {}), -1) << "no peer published";
}

TEST(Spread, SeveralMoversPickDifferentCpus) {
  // Ranks 0, 1 and 2 on CPU 4 of 0..7; rank 6 on CPU 5: rank 1 takes the first free CPU after 4 (6),
  // rank 2 the second (7); rank 0 stays.
  std::vector<int> cpu = {4, 4, 4, 5}, rank = {0, 1, 2, 6};
  auto others = [&](int me) {
    std::vector<int> c, r;
    for (size_t i = 0; i < cpu.size(); i++)
      if (rank[i] != me) c.push_back(cpu[i]), r.push_back(rank[i]);
    return std::make_pair(c, r);
  };
  auto o0 = others(0), o1 = others(1), o2 = others(2);
  EXPECT_EQ(choose(4, 0, {0, 1, 2, 3, 4, 5, 6, 7}, o0.first, o0.second), -1);
  EXPECT_EQ(choose(4, 1, {0, 1, 2, 3, 4, 5, 6, 7}, o1.first, o1.second), 6);
  EXPECT_EQ(choose(4, 2, {0, 1, 2, 3, 4, 5, 6, 7}, o2.first, o2.second), 7);
  // Only one free CPU: both movers go there (the second finds the first there and moves on later).
  EXPECT_EQ(choose(4, 2, {4, 5, 6}, o2.first, o2.second), 6);
}

// Oversubscribed, a rank yields while it waits (MEND_SPIN_OVERSUB_US) unless other programs' threads
// take its CPU (device/host_engine.c, mendLoadWatch*): a yield over 1 ms is another program's
// scheduler slice; 4 of them within 100 ms make the thread "loaded" (the short spin,
// MEND_SPIN_LOADED_US) for 5 s.  A thread starts loaded for 250 ms, so a short job on a busy host
// never yields its CPUs away.
namespace {
const uint64_t kMs = 1000000;
// A fresh watch, first looked at 1 s, past its probation: returns the time it is clear at.
uint64_t clearWatch() {
  mendLoadWatchReset();
  mendLoadWatchLoaded(1000 * kMs);
  return 1300 * kMs;
}
}  // namespace

TEST(LoadWatch, StartsLoadedThenClears) {
  mendLoadWatchReset();
  const uint64_t ms = 1000000, t0 = 1000 * ms;
  EXPECT_TRUE(mendLoadWatchLoaded(t0)) << "the first look starts the 250 ms probation";
  EXPECT_TRUE(mendLoadWatchLoaded(t0 + 249 * ms));
  EXPECT_FALSE(mendLoadWatchLoaded(t0 + 251 * ms)) << "no long yields: clear";
  for (int i = 0; i < 1000; i++) mendLoadWatchYield(t0 + 300 * ms + i * 10000, 20000);  // 20 us yields: ranks
  EXPECT_FALSE(mendLoadWatchLoaded(t0 + 400 * ms)) << "short yields are the crowd's own hand-offs";
}

TEST(LoadWatch, BurstOfLongYieldsLoadsForFiveSeconds) {
  const uint64_t ms = kMs;
  uint64_t t = clearWatch();
  ASSERT_FALSE(mendLoadWatchLoaded(t));
  for (int i = 0; i < 3; i++, t += 20 * ms) mendLoadWatchYield(t, 2 * ms);
  EXPECT_FALSE(mendLoadWatchLoaded(t)) << "3 long yields within 100 ms: not yet";
  mendLoadWatchYield(t, 2 * ms);
  EXPECT_TRUE(mendLoadWatchLoaded(t + 3 * ms)) << "the 4th within 100 ms";
  EXPECT_TRUE(mendLoadWatchLoaded(t + 4900 * ms));
  EXPECT_FALSE(mendLoadWatchLoaded(t + 5100 * ms)) << "held 5 s from the last burst";
}

TEST(LoadWatch, ScatteredLongYieldsDoNotLoad) {
  const uint64_t ms = kMs;
  uint64_t t = clearWatch();
  for (int i = 0; i < 40; i++, t += 40 * ms) {  // one long yield every 40 ms: 3 in any 100 ms at most
    mendLoadWatchYield(t, 1500000);
    EXPECT_FALSE(mendLoadWatchLoaded(t + 2 * ms)) << "long yield " << i;
  }
  mendLoadWatchYield(t, 999999);
  mendLoadWatchYield(t + ms, 999999);
  EXPECT_FALSE(mendLoadWatchLoaded(t + 2 * ms)) << "under 1 ms is not another program's slice";
}
