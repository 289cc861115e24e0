// Unit-test helpers: every rank of a loopback world plans under a degraded plan view from its next op;
// the AllReduce schedule rank 0 chooses under it.
#ifndef MEND_TESTS_UNIT_VIEW_UTIL_H_
#define MEND_TESTS_UNIT_VIEW_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "enqueue/tuning.h"
#include "loopback_world.h"

namespace mendtest {

// Every rank of w plans under a view with these capacities (and usable-NIC masks) from the next op on;
// each call is a new epoch.
inline void setCaps(World& w, const std::vector<int>& caps, const std::vector<uint32_t>& nics = {}) {
  static uint32_t epoch = 100;
  epoch++;
  for (int r = 0; r < w.n(); r++) {
    mendPlanView *base = nullptr, *v = nullptr;
    ASSERT_EQ(mendPlanViewFromChannels(w.comm(r), &base), ncclSuccess);
    ASSERT_EQ(mendPlanViewCopy(base, epoch, 0, &v), ncclSuccess);
    mendPlanViewFree(base);
    memcpy(v->rankCap, caps.data(), sizeof(int) * caps.size());
    if (!nics.empty()) memcpy(v->rankNics, nics.data(), sizeof(uint32_t) * nics.size());
    ASSERT_EQ(mendPlanViewSeal(v), ncclSuccess);
    ASSERT_EQ(mendPlannerSetView(w.comm(r), v), ncclSuccess);
  }
}

const size_t kGiB = (size_t)1 << 30;

// The choice rank 0 of w makes for an AllReduce of `bytes` under its view in force.
inline mendReplanChoice choose(World& w, size_t bytes) {
  mendPlanner* pl = nullptr;
  const mendPlanView* view = nullptr;
  mendReplanChoice c;
  memset(&c, 0xff, sizeof(c));
  EXPECT_EQ(mendPlannerGet(w.comm(0), &pl), ncclSuccess);
  EXPECT_EQ(mendPlannerViewAt(w.comm(0), 1u << 30, &view), ncclSuccess);
  EXPECT_EQ(mendTuneAllReduce(w.comm(0), pl, view, bytes, &c), ncclSuccess);
  return c;
}

}  // namespace mendtest

#endif
