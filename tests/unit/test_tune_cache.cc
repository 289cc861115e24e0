// The per-call AllReduce choice kept per planner (src/enqueue/tuning_cache.c) and the per-view
// summary of capacities it reads:
//  - TuneCache.CachedChoiceEqualsUncached: over many sizes, every MEND_REPLAN mode and several
//    degraded views, the kept choice (first call and reuse) equals MEND_TUNE_CACHE=0's, field by field;
//  - TuneCache.SplitFromSummaryEqualsSort: the R2 split search on the summary equals the search on
//    the sorted capacities (a reference written here) for random capacities, many distinct values;
//  - TuneCache.NewViewInvalidates, Bounded, SummaryOncePerView: a new view empties the table, the
//    table never exceeds MEND_TUNE_CACHE, the ranks are walked once per view.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

extern "C" {
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "enqueue/tuning.h"
#include "enqueue/tuning_cache.h"
}

#include "loopback_world.h"
#include "view_util.h"

using mendtest::ScopedEnv;
using mendtest::World;
using mendtest::choose;
using mendtest::kGiB;
using mendtest::setCaps;

namespace {

mendPlanner* planner(World& w) {
  mendPlanner* pl = nullptr;
  EXPECT_EQ(mendPlannerGet(w.comm(0), &pl), ncclSuccess);
  return pl;
}

mendTuneCacheStats stats(World& w) {
  mendTuneCacheStats st;
  mendTuneCacheGetStats(planner(w), &st);
  return st;
}

// Field by field (doubles compared exactly: the same inputs must give the same bits).
void expectSame(const mendReplanChoice& a, const mendReplanChoice& b, const std::string& what) {
  EXPECT_EQ(a.replan, b.replan) << what;
  EXPECT_EQ(a.nChannels, b.nChannels) << what;
  EXPECT_EQ(a.chunkBytes, b.chunkBytes) << what;
  EXPECT_EQ(a.estUs, b.estUs) << what;
  for (int r = 0; r < MEND_NREPLANS; r++) EXPECT_EQ(a.costUs[r], b.costUs[r]) << what << " cost " << r;
  EXPECT_EQ(a.split.nLevels, b.split.nLevels) << what;
  EXPECT_EQ(a.split.estUs, b.split.estUs) << what;
  for (int l = 0; l < a.split.nLevels && l < MEND_R2_MAX_LEVELS; l++) {
    EXPECT_EQ(a.split.lv[l].minCap, b.split.lv[l].minCap) << what << " level " << l;
    EXPECT_EQ(a.split.lv[l].nMembers, b.split.lv[l].nMembers) << what << " level " << l;
    EXPECT_EQ(a.split.lv[l].rate, b.split.lv[l].rate) << what << " level " << l;
    EXPECT_EQ(a.split.lv[l].share, b.split.lv[l].share) << what << " level " << l;
  }
}

std::vector<size_t> sizes() {
  std::vector<size_t> s = {0, 1, 7, 8, 1000, 4096, 65535, 65536, 1 << 20, 3 << 20, 123456789};
  for (int p = 4; p <= 34; p += 3) s.push_back((size_t)1 << p);
  return s;
}

}  // namespace

TEST(TuneCache, CachedChoiceEqualsUncached) {
  const int N = 8;
  World w(N, 4);
  std::vector<std::vector<int>> views = {
      {1000, 1000, 1000, 333, 1000, 1000, 1000, 1000},  // one degraded rank: R2 for large sizes
      {1000, 500, 1000, 1000, 750, 1000, 1000, 1000},   // two levels: recursive applies
      {900, 800, 700, 600, 500, 400, 300, 1000},        // many distinct capacities
      {1000, 0, 1000, 1000, 1000, 1000, 1000, 1000},    // a rank without a usable NIC
      {750, 750, 1000, 1000, 1000, 1000, 1000, 1000},   // a degraded host of two ranks
  };
  std::vector<uint32_t> nics = {0xf, 0x3, 0xf, 0x1, 0xf, 0x7, 0xf, 0xf};
  for (size_t v = 0; v < views.size(); v++) {
    setCaps(w, views[v], v % 2 ? nics : std::vector<uint32_t>{});
    for (const char* mode : {"auto", "backup", "balance", "r2", "recursive"}) {
      ScopedEnv replan("MEND_REPLAN", mode);
      for (size_t bytes : sizes()) {
        std::string what = "view " + std::to_string(v) + " " + mode + " " + std::to_string(bytes) + " B";
        mendReplanChoice first = choose(w, bytes), again = choose(w, bytes), fresh;
        {
          ScopedEnv off("MEND_TUNE_CACHE", "0");
          fresh = choose(w, bytes);
        }
        expectSame(first, fresh, what + " (first call)");
        expectSame(again, fresh, what + " (kept)");
      }
    }
  }
  mendTuneCacheStats st = stats(w);
  EXPECT_GT(st.hits, 0u);
  EXPECT_EQ(st.summaries, views.size()) << "the ranks are summarised once per view";
}

namespace {

// The split search as it was before summaries: sort every rank's capacity, pick candidates, count
// members by walking the ranks.  Here only to check the summary against.
int referenceSplit(const std::vector<int>& rankCap, int minPartial, int maxPartial, mendR2Split* out) {
  mendR2ModelIn in = {};
  in.nRanks = (int)rankCap.size();
  in.rankCap = rankCap.data();
  in.nBytes = 1e9;
  in.alphaUs = 2;
  in.bytesPerUs = 1e3;
  std::vector<int> caps;
  for (int c : rankCap) caps.push_back(c < 1 ? 1 : c);
  std::sort(caps.begin(), caps.end());
  std::vector<int> distinct;
  for (size_t i = 1; i < caps.size(); i++)
    if (caps[i] != caps[i - 1]) distinct.push_back(caps[i]);
  std::vector<int> cand;
  if (distinct.size() <= MEND_R2_MAX_CANDIDATES) {
    cand = distinct;
  } else {
    std::vector<bool> taken(distinct.size());
    for (int n = 0; n < MEND_R2_MAX_CANDIDATES; n++) {
      int best = -1, bestStep = -1;
      for (size_t i = 0; i < distinct.size(); i++) {
        int step = distinct[i] - (i ? distinct[i - 1] : caps[0]);
        if (!taken[i] && step > bestStep) best = (int)i, bestStep = step;
      }
      taken[best] = true;
    }
    for (size_t i = 0; i < distinct.size(); i++)
      if (taken[i]) cand.push_back(distinct[i]);
  }
  // Members per candidate by walking the ranks, then the summary the library would make from them.
  mendR2Caps sum;
  memset(&sum, 0, sizeof(sum));
  std::vector<int> capv = {caps[0]}, atLeast = {in.nRanks};
  for (int c : cand) {
    int k = 0;
    for (int r : caps) k += r >= c;
    capv.push_back(c);
    atLeast.push_back(k);
  }
  sum.nRanks = in.nRanks;
  sum.nDistinct = (int)capv.size();
  sum.cap = capv.data();
  sum.atLeast = atLeast.data();
  return mendR2BestSplitCaps(&in, &sum, minPartial, maxPartial, out);
}

}  // namespace

TEST(TuneCache, SplitFromSummaryEqualsSort) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 300; trial++) {
    int n = 2 + (int)(rng() % 200), kinds = 1 + (int)(rng() % 20);
    std::vector<int> pool;
    for (int k = 0; k < kinds; k++) pool.push_back((int)(rng() % 1002) - 1);  // -1..1000
    std::vector<int> caps;
    for (int r = 0; r < n; r++) caps.push_back(rng() % 3 ? 1000 : pool[rng() % pool.size()]);
    mendR2ModelIn in = {};
    in.nRanks = n;
    in.rankCap = caps.data();
    in.nBytes = 1e9;
    in.alphaUs = 2;
    in.bytesPerUs = 1e3;
    for (int minP : {1, 2}) {
      int maxP = minP == 1 ? 1 : MEND_R2_MAX_LEVELS - 1;
      mendR2Split got, want;
      int g = mendR2BestSplit(&in, minP, maxP, &got), r = referenceSplit(caps, minP, maxP, &want);
      ASSERT_EQ(g, r) << "trial " << trial;
      ASSERT_EQ(memcmp(&got, &want, sizeof(got)), 0) << "trial " << trial << " minPartial " << minP;
    }
  }
}

TEST(TuneCache, NewViewInvalidates) {
  World w(6, 4);
  setCaps(w, {1000, 1000, 300, 1000, 1000, 1000});
  EXPECT_EQ(choose(w, kGiB).replan, MEND_REPLAN_R2);
  choose(w, 4096);
  mendTuneCacheStats st = stats(w);
  EXPECT_EQ(st.entries, 2);
  EXPECT_EQ(st.invalidations, 0u);
  setCaps(w, {1000, 1000, 950, 1000, 1000, 1000});  // X = 0.05: below the paper's threshold
  mendReplanChoice c = choose(w, kGiB);
  EXPECT_EQ(c.replan, MEND_REPLAN_BALANCE) << "the kept R2 choice of the old view must not be reused";
  st = stats(w);
  EXPECT_EQ(st.invalidations, 1u);
  EXPECT_EQ(st.entries, 1);
  ScopedEnv off("MEND_TUNE_CACHE", "0");
  expectSame(c, choose(w, kGiB), "after the new view");
}

TEST(TuneCache, Bounded) {
  World w(4, 2);
  setCaps(w, {1000, 400, 1000, 1000});
  std::vector<mendReplanChoice> first;
  for (size_t i = 0; i < 200; i++) first.push_back(choose(w, 4096 + 4096 * i));
  mendTuneCacheStats st = stats(w);
  EXPECT_EQ(st.capacity, 32) << "MEND_TUNE_CACHE's default";
  EXPECT_EQ(st.entries, 32);
  EXPECT_EQ(st.hits, 0u);
  // The newest 32 are kept (oldest out first), the rest computed again: all equal the first answers.
  for (size_t i = 168; i < 200; i++) expectSame(choose(w, 4096 + 4096 * i), first[i], "size " + std::to_string(i));
  EXPECT_EQ(stats(w).hits, 32u);
  for (size_t i = 0; i < 168; i++) expectSame(choose(w, 4096 + 4096 * i), first[i], "size " + std::to_string(i));
  EXPECT_EQ(stats(w).hits, 32u) << "the older sizes were dropped";
  EXPECT_EQ(stats(w).entries, 32);
  {
    ScopedEnv small("MEND_TUNE_CACHE", "4");
    for (size_t i = 0; i < 20; i++) choose(w, 8 + i);
    EXPECT_EQ(stats(w).entries, 4);
  }
  {
    ScopedEnv big("MEND_TUNE_CACHE", "100000");
    EXPECT_EQ(stats(w).capacity, MEND_TUNE_CACHE_MAX) << "clamped (with a WARN)";
    for (size_t i = 0; i < 300; i++) choose(w, 16 + i);
    EXPECT_EQ(stats(w).entries, MEND_TUNE_CACHE_MAX);
  }
}

TEST(TuneCache, SummaryOncePerView) {
  World w(5, 2);
  setCaps(w, std::vector<int>(5, 1000));
  for (int i = 0; i < 10; i++) EXPECT_EQ(choose(w, 1 << 20).replan, MEND_REPLAN_BALANCE);
  EXPECT_EQ(stats(w).summaries, 1u);
  EXPECT_EQ(stats(w).entries, 0) << "a healthy view has nothing to keep";
  setCaps(w, {1000, 1000, 1000, 1000, 500});
  for (int i = 0; i < 100; i++) choose(w, 1 << (i % 30));
  mendTuneCacheStats st = stats(w);
  EXPECT_EQ(st.summaries, 2u);
  EXPECT_EQ(st.misses, 30u);
  EXPECT_EQ(st.hits, 70u);
}
