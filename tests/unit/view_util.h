// Unit-test helper: every rank of a loopback world plans under a degraded plan view from its next op.
#ifndef MEND_TESTS_UNIT_VIEW_UTIL_H_
#define MEND_TESTS_UNIT_VIEW_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "enqueue/plan.h"
#include "enqueue/planview.h"
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

}  // namespace mendtest

#endif
