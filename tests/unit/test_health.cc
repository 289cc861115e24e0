// The health registry: epochs order changes, equal epochs are broken by the reporter's rank so every
// rank converges on the same view whatever order broadcasts arrive in; bad shapes are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "resilience/health.h"
}

namespace {

mendHealthUpdate U(int rank, int dev, int state, uint32_t epoch, int reporter) {
  mendHealthUpdate u = {};
  u.rank = rank, u.dev = dev, u.state = state, u.epoch = epoch, u.reporter = reporter;
  return u;
}

TEST(Health, StartsUpWithLineRates) {
  std::vector<int> mbps = {100000, 200000, 100000, 0};
  mendHealth h = {};
  ASSERT_EQ(mendHealthInit(&h, 2, 2, mbps.data()), ncclSuccess);
  EXPECT_EQ(mendHealthState(&h, 1, 1), MEND_NIC_UP);
  EXPECT_FLOAT_EQ(h.nics[1].gbps, 200.0f);
  EXPECT_EQ(mendHealthEpoch(&h), 0u);
  EXPECT_EQ(mendHealthState(&h, 5, 0), MEND_NIC_UP) << "out of range reads as up";
  mendHealthFree(&h);
}

TEST(Health, DecideBumpsTheEpochAndNewerWins) {
  mendHealth h = {};
  ASSERT_EQ(mendHealthInit(&h, 4, 2, nullptr), ncclSuccess);
  mendHealthUpdate d = U(2, 1, MEND_NIC_DOWN, 0, 0);
  mendHealthDecide(&h, &d);
  EXPECT_EQ(d.epoch, 1u);
  EXPECT_EQ(mendHealthState(&h, 2, 1), MEND_NIC_DOWN);
  EXPECT_FLOAT_EQ(h.nics[2 * 2 + 1].gbps, 0.0f);
  mendHealthUpdate old = U(2, 1, MEND_NIC_UP, 0, 3);
  EXPECT_EQ(mendHealthApply(&h, &old), 0) << "older is ignored";
  EXPECT_EQ(mendHealthState(&h, 2, 1), MEND_NIC_DOWN);
  mendHealthUpdate up = U(2, 1, MEND_NIC_PROBING, 5, 2);
  EXPECT_EQ(mendHealthApply(&h, &up), 1);
  EXPECT_EQ(mendHealthState(&h, 2, 1), MEND_NIC_PROBING);
  EXPECT_EQ(mendHealthEpoch(&h), 5u);
  mendHealthUpdate bad = U(9, 0, MEND_NIC_DOWN, 9, 0);
  EXPECT_EQ(mendHealthApply(&h, &bad), 0) << "a rank out of range changes nothing";
  mendHealthFree(&h);
}

TEST(Health, EveryArrivalOrderConvergesOnTheSameView) {
  // Two ranks decide about the same NIC in the same epoch, a third change is newer: whatever the order
  // the broadcasts arrive in, every registry ends with the newest, and for the tie the higher reporter.
  std::vector<mendHealthUpdate> ups = {U(0, 0, MEND_NIC_DOWN, 3, 1), U(0, 0, MEND_NIC_DEGRADED, 3, 4),
                                       U(1, 1, MEND_NIC_DOWN, 2, 0), U(1, 1, MEND_NIC_UP, 6, 3)};
  std::vector<int> order = {0, 1, 2, 3};
  do {
    mendHealth h = {};
    ASSERT_EQ(mendHealthInit(&h, 2, 2, nullptr), ncclSuccess);
    for (int i : order) mendHealthApply(&h, &ups[i]);
    EXPECT_EQ(mendHealthState(&h, 0, 0), MEND_NIC_DEGRADED);
    EXPECT_EQ(mendHealthState(&h, 1, 1), MEND_NIC_UP);
    EXPECT_EQ(mendHealthEpoch(&h), 6u);
    mendHealthFree(&h);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(Health, BadShapeIsRefused) {
  mendHealth h = {};
  EXPECT_EQ(mendHealthInit(&h, 0, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(mendHealthInit(&h, 2, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(mendHealthInit(nullptr, 2, 2, nullptr), ncclInvalidArgument);
  EXPECT_STREQ(mendNicStateName(MEND_NIC_DOWN), "down");
  EXPECT_STREQ(mendNicStateName(42), "unknown");
}

}  // namespace
