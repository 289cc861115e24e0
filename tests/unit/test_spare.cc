// SPARe's reordering controller (sim/spare) against brute force: every failed set of the small
// cyclic layouts, random layouts and failed sets with fixed seeds, the layout's one-shared-host
// property, and the errors of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../sim/spare/spare.h"

namespace {

using Stacks = std::vector<int>;
using Failed = std::vector<unsigned char>;

// Surviving hosts of every type, as a bit mask over groups (n <= 16).
std::vector<unsigned> aliveHosts(int n, int r, const Stacks& stk, const Failed& failed) {
  std::vector<unsigned> hosts(n, 0);
  for (int w = 0; w < n; w++)
    if (!failed[w])
      for (int t = 0; t < r; t++) hosts[stk[w * r + t]] |= 1u << w;
  return hosts;
}

// Fixed stacks: every type sits in some survivor's first s slots.
bool bruteFixed(int n, int r, const Stacks& stk, const Failed& failed, int s) {
  std::vector<bool> seen(n, false);
  for (int w = 0; w < n; w++)
    if (!failed[w])
      for (int t = 0; t < s; t++) seen[stk[w * r + t]] = true;
  return std::all_of(seen.begin(), seen.end(), [](bool b) { return b; });
}

// Free reordering, by Hall's condition over every subset of types: |E| <= s * |hosts of E|.
bool bruteFree(int n, int r, const Stacks& stk, const Failed& failed, int s) {
  std::vector<unsigned> hosts = aliveHosts(n, r, stk, failed);
  for (unsigned set = 1; set < (1u << n); set++) {
    unsigned cover = 0;
    int size = 0;
    for (int i = 0; i < n; i++)
      if (set >> i & 1) cover |= hosts[i], size++;
    if (size > s * __builtin_popcount(cover)) return false;
  }
  return true;
}

// Least moves to cover every type within s stacks (depth-first over types, with a bound): type i on
// slot (w, t) costs 0 when allowed[w*r+t] says it was there (or -1 for any type), 1 otherwise;
// onlyAt restricts type i to slots whose onlyAt entry is i (NULL: any slot of a host).
struct MoveSearch {
  int n, r, s;
  const Stacks* stk;
  const Stacks* onlyAt;
  const Failed* failed;
  std::vector<bool> used;
  int best;
  void go(int i, int cost) {
    if (cost >= best) return;
    if (i == n) {
      best = cost;
      return;
    }
    for (int w = 0; w < n; w++) {
      if ((*failed)[w]) continue;
      const int* row = &(*stk)[w * r];
      if (std::find(row, row + r, i) == row + r) continue;
      for (int t = 0; t < s; t++) {
        if (used[w * s + t] || (onlyAt != nullptr && (*onlyAt)[w * r + t] != i)) continue;
        used[w * s + t] = true;
        go(i + 1, cost + (row[t] != i));
        used[w * s + t] = false;
      }
    }
  }
};

int bruteMoves(int n, int r, const Stacks& stk, const Failed& failed, int s, const Stacks* onlyAt = nullptr) {
  MoveSearch m{n, r, s, &stk, onlyAt, &failed, std::vector<bool>(n * s, false), 1 << 30};
  m.go(0, 0);
  return m.best;
}

// Checks one controller call against brute force; stk is updated as the controller left it.
int checkControl(int n, int r, Stacks& stk, const Failed& failed, int& s, bool withMoves) {
  Stacks before = stk;
  int expect = 0;
  for (int d = s; d <= r && expect == 0; d++)
    if (bruteFree(n, r, before, failed, d)) expect = d;
  bool keep = bruteFixed(n, r, before, failed, s);
  int outcome = -1, moves = -1, s0 = s;
  EXPECT_EQ(mendSpareControl(n, r, stk.data(), failed.data(), &s, &outcome, &moves), ncclSuccess);
  if (keep) {
    EXPECT_EQ(outcome, MEND_SPARE_KEEP);
    EXPECT_EQ(stk, before);
    EXPECT_EQ(s, s0);
    return outcome;
  }
  if (expect == 0) {
    EXPECT_EQ(outcome, MEND_SPARE_WIPEOUT);
    return outcome;
  }
  EXPECT_EQ(outcome, MEND_SPARE_REORDER);
  if (outcome != MEND_SPARE_REORDER) return outcome;
  EXPECT_EQ(s, expect);
  EXPECT_TRUE(bruteFixed(n, r, stk, failed, s));
  for (int w = 0; w < n; w++) {  // every row a permutation of its old one; failed rows untouched
    std::vector<int> a(&before[w * r], &before[w * r] + r), b(&stk[w * r], &stk[w * r] + r);
    if (failed[w]) {
      EXPECT_EQ(a, b);
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b) << "group " << w;
  }
  if (withMoves) {
    EXPECT_EQ(moves, bruteMoves(n, r, before, failed, s));
    // the new stacks realise that count: an assignment within them costs exactly `moves`
    EXPECT_EQ(moves, bruteMoves(n, r, before, failed, s, &stk));
  }
  return outcome;
}

Stacks cyclic(int n, int r) {
  Stacks stk(n * r);
  EXPECT_EQ(mendSpareLayoutCyclic(n, r, nullptr, stk.data()), ncclSuccess);
  return stk;
}

}  // namespace

// Every failed set of every small cyclic layout, at every committed all-reduce stack (the fewest
// moves checked by exhaustive search up to N = 8).
TEST(Spare, EveryFailedSetOfSmallLayouts) {
  const int configs[][2] = {{3, 2}, {4, 2}, {5, 2}, {6, 2}, {7, 2}, {8, 2}, {7, 3}, {8, 3}, {9, 3}, {10, 3}};
  int count[3] = {0, 0, 0};
  for (auto& c : configs) {
    int n = c[0], r = c[1];
    Stacks stk0 = cyclic(n, r);
    for (unsigned set = 0; set < (1u << n); set++) {
      Failed failed(n);
      for (int w = 0; w < n; w++) failed[w] = set >> w & 1;
      for (int s0 = 1; s0 <= r; s0++) {
        Stacks stk = stk0;
        int s = s0;
        count[checkControl(n, r, stk, failed, s, n <= 8)]++;
        if (HasFailure()) FAIL() << "N=" << n << " r=" << r << " failed set " << set << " s=" << s0;
      }
    }
  }
  EXPECT_GT(count[MEND_SPARE_KEEP], 500);
  EXPECT_GT(count[MEND_SPARE_REORDER], 500);
  EXPECT_GT(count[MEND_SPARE_WIPEOUT], 500);
}

// The smallest layout of redundancy 4 (N = 13): 600 random failed sets, fixed seed.
TEST(Spare, RandomFailedSetsOfRedundancy4) {
  std::mt19937 rng(13);
  const int n = 13, r = 4;
  Stacks stk0 = cyclic(n, r);
  int count[3] = {0, 0, 0};
  for (int trial = 0; trial < 600; trial++) {
    Failed failed(n);
    int k = rng() % n;
    for (int w = 0; w < n; w++) failed[w] = 0;
    for (int j = 0; j < k; j++) failed[rng() % n] = 1;
    Stacks stk = stk0;
    int s = 1 + rng() % 2;
    count[checkControl(n, r, stk, failed, s, false)]++;
    if (HasFailure()) FAIL() << "trial " << trial;
  }
  EXPECT_GT(count[MEND_SPARE_REORDER], 50);
  EXPECT_GT(count[MEND_SPARE_WIPEOUT], 50);
}

// Random layouts (any r distinct types per group) and random failed sets, fixed seeds.
TEST(Spare, RandomLayoutsAgainstBruteForce) {
  std::mt19937 rng(20260516);
  int count[3] = {0, 0, 0};
  for (int trial = 0; trial < 400; trial++) {
    int n = 3 + rng() % 6, r = 1 + rng() % std::min(n, 4);
    Stacks stk(n * r);
    for (int w = 0; w < n; w++) {
      std::vector<int> types(n);
      for (int i = 0; i < n; i++) types[i] = i;
      std::shuffle(types.begin(), types.end(), rng);
      std::copy(types.begin(), types.begin() + r, &stk[w * r]);
    }
    Failed failed(n);
    for (int w = 0; w < n; w++) failed[w] = rng() % 3 == 0;
    int s = 1 + rng() % r;
    count[checkControl(n, r, stk, failed, s, true)]++;
    if (HasFailure()) FAIL() << "trial " << trial << " N=" << n << " r=" << r;
  }
  EXPECT_GT(count[MEND_SPARE_KEEP], 50);
  EXPECT_GT(count[MEND_SPARE_REORDER], 50);
  EXPECT_GT(count[MEND_SPARE_WIPEOUT], 20);
}

// A failure sequence carried through the controller until wipe-out, as SPARe runs it: the stacks it
// leaves are the next call's input (N=12, r=3, brute force at every step; 30 orders).
TEST(Spare, FailureSequencesUntilWipeout) {
  std::mt19937 rng(7);
  const int n = 12, r = 3;
  for (int trial = 0; trial < 30; trial++) {
    Stacks stk = cyclic(n, r);
    Failed failed(n, 0);
    std::vector<int> order(n);
    for (int i = 0; i < n; i++) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    int s = 1;
    for (int k = 0; k < n; k++) {
      failed[order[k]] = 1;
      int before = s;
      checkControl(n, r, stk, failed, s, false);
      ASSERT_FALSE(HasFailure()) << "trial " << trial << " failure " << k;
      EXPECT_GE(s, before);
      if (!bruteFree(n, r, stk, failed, r)) break;
    }
  }
}

// Two types share at most one host (Lemma B.2), from small layouts to the paper's sizes.
TEST(Spare, CyclicLayoutSharesAtMostOneHost) {
  const int configs[][2] = {{7, 3}, {31, 5}, {200, 12}, {600, 18}, {1000, 22}};
  for (auto& c : configs) {
    int n = c[0], r = c[1];
    Stacks stk(n * r);
    std::vector<int> ruler(r);
    ASSERT_EQ(mendSpareLayoutCyclic(n, r, ruler.data(), stk.data()), ncclSuccess) << n << " " << r;
    ASSERT_EQ(mendSpareCheck(n, r, stk.data(), nullptr), ncclSuccess);
    std::vector<std::vector<int>> hosts(n);
    for (int w = 0; w < n; w++)
      for (int t = 0; t < r; t++) hosts[stk[w * r + t]].push_back(w);
    for (int i = 0; i < n; i++) ASSERT_EQ((int)hosts[i].size(), r);
    std::vector<int> mark(n, -1);
    for (int i = 0; i < n; i++) {
      for (int w : hosts[i])
        for (int t = 0; t < r; t++) {
          int j = stk[w * r + t];
          if (j == i) continue;
          ASSERT_NE(mark[j], i) << "types " << i << " and " << j << " share two hosts, N=" << n;
          mark[j] = i;
        }
    }
  }
}

TEST(Spare, ReplicaLayoutIsBlocks) {
  Stacks stk(8 * 3);
  ASSERT_EQ(mendSpareLayoutReplica(8, 3, stk.data()), ncclSuccess);
  // blocks {0,1,2} and {3..7}: the last block's 5 groups hold 3 of its 5 types each, cyclically
  Stacks want = {0, 1, 2, 1, 2, 0, 2, 0, 1, 3, 4, 5, 4, 5, 6, 5, 6, 7, 6, 7, 3, 7, 3, 4};
  EXPECT_EQ(stk, want);
  ASSERT_EQ(mendSpareCheck(8, 3, stk.data(), nullptr), ncclSuccess);
  std::vector<int> hosts(8, 0);
  for (int x : stk) hosts[x]++;
  EXPECT_EQ(hosts, std::vector<int>(8, 3));
}

// Bad input: each refused with ncclInvalidArgument and a message naming the problem.
TEST(Spare, BadInputIsRefused) {
  Stacks stk = cyclic(7, 3), bad;
  Failed failed(7, 0);
  int s = 1, outcome = 0, moves = 0, ok = 0;
  auto refused = [](ncclResult_t res, const char* word) {
    EXPECT_EQ(res, ncclInvalidArgument);
    EXPECT_NE(std::string(mendSpareLastError()).find(word), std::string::npos) << mendSpareLastError();
  };
  refused(mendSpareLayoutCyclic(0, 1, nullptr, stk.data()), "N = 0");
  refused(mendSpareLayoutCyclic(7, 8, nullptr, stk.data()), "r = 8");
  refused(mendSpareLayoutCyclic(6, 3, nullptr, stk.data()), "r(r-1)+1");
  refused(mendSpareLayoutCyclic(7, 3, nullptr, nullptr), "NULL");
  bad = stk;
  bad[5] = 7;
  refused(mendSpareControl(7, 3, bad.data(), failed.data(), &s, &outcome, &moves), "type 7");
  bad = stk;
  bad[4] = -1;
  refused(mendSpareFixed(7, 3, bad.data(), failed.data(), 1, &ok), "type -1");
  bad = stk;
  bad[4] = bad[3];
  refused(mendSpareFree(7, 3, bad.data(), failed.data(), 1, &ok), "twice");
  failed[2] = 2;
  refused(mendSpareFixed(7, 3, stk.data(), failed.data(), 1, &ok), "failed[2]");
  failed[2] = 0;
  refused(mendSpareFixed(7, 3, stk.data(), failed.data(), 0, &ok), "stack 0");
  refused(mendSpareMinStack(7, 3, stk.data(), failed.data(), 4, &s), "stack 4");
  refused(mendSpareFixed(7, 3, stk.data(), nullptr, 1, &ok), "NULL");
  refused(mendSpareControl(7, 3, stk.data(), failed.data(), nullptr, &outcome, &moves), "NULL");
  // Reordering to a depth that cannot hold every type: refused, stacks untouched.
  Failed many = {1, 1, 1, 1, 0, 0, 0};
  Stacks copy = stk;
  refused(mendSpareReorder(7, 3, copy.data(), many.data(), 1, &moves), "cannot hold");
  EXPECT_EQ(copy, stk);
}
