// Plan reuse (src/enqueue/plan_cache.c): the same single operation gets the kept plan back; a change
// of any field of its signature (function, count, type, reduction, root, buffers) plans anew; a new
// plan view drops every kept plan; MEND_PLAN_CACHE=0 plans every call; a kept plan is lent to one
// run at a time; with a tuner plugin every call plans (the plugin is asked each time); AllReduces
// that reuse plans over a loopback world give exact results.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "mend_internal.h"
extern "C" {
#include "device/reduce.h"
#include "enqueue/plan.h"
#include "enqueue/plan_cache.h"
#include "enqueue/planview.h"
}

#include "loopback_world.h"

namespace {

int32_t g_a[64], g_b[64];

mendOp opOf(ncclComm_t comm, int func, size_t count, ncclDataType_t type, ncclRedOp_t red, int root,
            const void* send, void* recv, uint64_t opCount) {
  mendOp op;
  memset(&op, 0, sizeof(op));
  op.func = func;
  op.comm = comm;
  op.sendbuff = send;
  op.recvbuff = recv;
  op.count = count;
  op.type = type;
  op.userOp = red;
  EXPECT_EQ(mendRedOpResolve(red, type, comm->nRanks, &op.redop), ncclSuccess);
  op.root = root;
  op.opCount = opCount;
  return op;
}

mendOp baseOp(ncclComm_t comm, uint64_t opCount) {
  return opOf(comm, MEND_FUNC_ALLREDUCE, 16, ncclInt32, ncclSum, -1, g_a, g_b, opCount);
}

mendPlanCacheStats statsOf(ncclComm_t comm) {
  mendPlanCacheStats st;
  mendPlanCacheGetStats(comm, &st);
  return st;
}

// Plans op, releases it, and returns the plan pointer (still owned by the cache when kept).
mendPlan* planOnce(ncclComm_t comm, const mendOp& op) {
  mendPlan* p = nullptr;
  EXPECT_EQ(mendPlanCacheBuild(comm, &op, &p), ncclSuccess);
  EXPECT_NE(p, nullptr);
  mendPlanCacheRelease(comm, p, 1);
  return p;
}

}  // namespace

TEST(PlanCache, SameSignatureReusesThePlan) {
  World w(2);
  ncclComm_t c = w.comm(0);
  mendPlan* first = planOnce(c, baseOp(c, 0));
  mendPlan* second = planOnce(c, baseOp(c, 1));
  EXPECT_EQ(first, second);
  mendPlanCacheStats st = statsOf(c);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.entries, 1);
  mendPlan* p = nullptr;
  mendOp seventh = baseOp(c, 7);
  ASSERT_EQ(mendPlanCacheBuild(c, &seventh, &p), ncclSuccess);
  ASSERT_GT(p->nWorks, 0);
  EXPECT_EQ(p->works[0].args.sig.opCount, 7u) << "a reused plan carries this call's collective count";
  mendPlanCacheRelease(c, p, 1);
}

TEST(PlanCache, EachSignatureFieldMisses) {
  World w(2);
  ncclComm_t c = w.comm(0);
  int32_t other[64];
  mendOp base = baseOp(c, 0);
  mendPlan* kept = planOnce(c, base);
  std::vector<mendOp> variants = {
      opOf(c, MEND_FUNC_BROADCAST, 16, ncclInt32, ncclSum, 0, g_a, g_b, 1),  // function
      opOf(c, MEND_FUNC_ALLREDUCE, 32, ncclInt32, ncclSum, -1, g_a, g_b, 2),  // count
      opOf(c, MEND_FUNC_ALLREDUCE, 16, ncclFloat, ncclSum, -1, g_a, g_b, 3),  // type
      opOf(c, MEND_FUNC_ALLREDUCE, 16, ncclInt32, ncclMax, -1, g_a, g_b, 4),  // reduction
      opOf(c, MEND_FUNC_BROADCAST, 16, ncclInt32, ncclSum, 1, g_a, g_b, 5),  // root (vs the broadcast above)
      opOf(c, MEND_FUNC_ALLREDUCE, 16, ncclInt32, ncclSum, -1, other, g_b, 6),  // send buffer
      opOf(c, MEND_FUNC_ALLREDUCE, 16, ncclInt32, ncclSum, -1, g_a, other, 7),  // receive buffer
  };
  uint64_t misses = statsOf(c).misses;
  for (size_t i = 0; i < variants.size(); i++) {
    mendPlan* p = planOnce(c, variants[i]);
    EXPECT_NE(p, kept) << "variant " << i;
    EXPECT_EQ(statsOf(c).misses, misses + i + 1) << "variant " << i << " must plan anew";
  }
  EXPECT_EQ(statsOf(c).hits, 0u);
  base.opCount = 8;
  EXPECT_EQ(planOnce(c, base), kept) << "the first plan is still kept";
  EXPECT_EQ(statsOf(c).hits, 1u);
  // The same PreMulSum op with another scalar is another plan.
  mendOp s1 = base, s2 = base;
  s1.redop.kind = s2.redop.kind = MEND_RED_PREMULSUM;
  s1.redop.scalar = 2;
  s2.redop.scalar = 3;
  mendPlan* p1 = planOnce(c, s1);
  EXPECT_NE(planOnce(c, s2), p1);
}

TEST(PlanCache, NewViewEpochDropsKeptPlans) {
  World w(2);
  ncclComm_t c = w.comm(0);
  mendPlan* first = planOnce(c, baseOp(c, 0));
  EXPECT_EQ(planOnce(c, baseOp(c, 1)), first);
  const mendPlanView* now = nullptr;
  ASSERT_EQ(mendPlannerViewAt(c, 1, &now), ncclSuccess);
  mendPlanView* next = nullptr;
  ASSERT_EQ(mendPlanViewCopy(now, now->epoch + 1, 3, &next), ncclSuccess);
  ASSERT_EQ(mendPlanViewSeal(next), ncclSuccess);
  ASSERT_EQ(mendPlannerSetView(c, next), ncclSuccess);
  planOnce(c, baseOp(c, 2));  // still epoch 0: a hit
  EXPECT_EQ(statsOf(c).hits, 2u);
  EXPECT_EQ(statsOf(c).invalidations, 0u);
  planOnce(c, baseOp(c, 3));  // epoch 1 from op 3
  mendPlanCacheStats st = statsOf(c);
  EXPECT_EQ(st.hits, 2u) << "a plan of the old view must not run under the new one";
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.invalidations, 1u);
  EXPECT_EQ(st.entries, 1);
  planOnce(c, baseOp(c, 4));
  EXPECT_EQ(statsOf(c).hits, 3u) << "the new view's plan is kept in turn";
}

TEST(PlanCache, ZeroEntriesPlansEveryCall) {
  ScopedEnv off("MEND_PLAN_CACHE", "0");
  World w(2);
  ncclComm_t c = w.comm(0);
  for (uint64_t i = 0; i < 3; i++) planOnce(c, baseOp(c, i));
  mendPlanCacheStats st = statsOf(c);
  EXPECT_EQ(st.hits, 0u);
  EXPECT_EQ(st.entries, 0);
}

TEST(PlanCache, LentPlanIsNotLentTwiceAndFailedRunDropsIt) {
  ScopedEnv two("MEND_PLAN_CACHE", "2");
  World w(2);
  ncclComm_t c = w.comm(0);
  mendOp op = baseOp(c, 0);
  mendPlan *a = nullptr, *b = nullptr;
  ASSERT_EQ(mendPlanCacheBuild(c, &op, &a), ncclSuccess);
  ASSERT_EQ(mendPlanCacheBuild(c, &op, &b), ncclSuccess);
  EXPECT_NE(a, b) << "a plan in use is not handed out again";
  mendPlanCacheRelease(c, a, 1);
  mendPlanCacheRelease(c, b, 0);  // a failed run: dropped
  EXPECT_EQ(statsOf(c).entries, 1);
  EXPECT_EQ(planOnce(c, op), a);
  // Bounded: more signatures than entries evict the least recently used.
  for (size_t n = 1; n <= 4; n++) planOnce(c, opOf(c, MEND_FUNC_ALLREDUCE, n, ncclInt32, ncclSum, -1, g_a, g_b, 9 + n));
  EXPECT_EQ(statsOf(c).entries, 2);
}

TEST(PlanCache, ReusedPlansGiveExactResults) {
  World w(2);
  const size_t n = 1000;
  std::vector<std::vector<int32_t>> in(2, std::vector<int32_t>(n)), out(2, std::vector<int32_t>(n));
  for (int it = 0; it < 5; it++) {
    for (int r = 0; r < 2; r++)
      for (size_t i = 0; i < n; i++) in[r][i] = (int32_t)(i * (r + 1) + it * 7);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 2; r++)
      ASSERT_EQ(ncclAllReduce(in[r].data(), out[r].data(), n, ncclInt32, ncclSum, w.comm(r), nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < 2; r++)
      for (size_t i = 0; i < n; i++) ASSERT_EQ(out[r][i], (int32_t)(i * 3 + it * 14)) << "iteration " << it;
  }
  EXPECT_EQ(statsOf(w.comm(0)).hits, 4u);
  EXPECT_EQ(statsOf(w.comm(1)).hits, 4u);
}

TEST(PlanCache, TunerPluginIsAskedEveryCall) {
  const char* b = getenv("MEND_BUILDDIR");
  std::string lib = std::string(b ? b : "build") + "/lib/libnccl-tuner-example.so";
  if (access(lib.c_str(), R_OK) != 0) GTEST_SKIP() << lib << " not built";
  ScopedEnv tuner("NCCL_TUNER_PLUGIN", lib.c_str());
  World w(2);
  ncclComm_t c = w.comm(0);
  for (uint64_t i = 0; i < 3; i++) planOnce(c, baseOp(c, i));
  ASSERT_NE(c->planner->tuner, nullptr) << "the example tuner was not loaded";
  mendPlanCacheStats st = statsOf(c);
  EXPECT_EQ(st.hits, 0u);
  EXPECT_EQ(st.entries, 0);
}
