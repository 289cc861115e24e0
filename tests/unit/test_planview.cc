// The plan view (src/enqueue/planview.h): the graph's builder snapshots rings, trees and NICs; the
// NIC of a new connection avoids NICs that are down, walking the topology's order; a fake topology
// orders NICs by PCIe/NUMA distance; views are versions (a pending view takes over at its op); two
// views give different programs, and every rank of a world computes one hash per op (also in the
// TRACE log of NCCL_DEBUG_SUBSYS=TUNING).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <regex.h>
#include <set>
#include <string>
#include <vector>

#include "mend_internal.h"
extern "C" {
#include "enqueue/plan.h"
#include "enqueue/planview.h"
}

#include "loopback_world.h"

using mendtest::ScopedEnv;
using mendtest::World;

namespace {

struct ViewPtr {
  mendPlanView* v = nullptr;
  ~ViewPtr() { mendPlanViewFree(v); }
};

// An int32 sum AllReduce op of `count` elements on comm (planning only: buffers are not touched).
mendOp allReduceOp(ncclComm_t comm, size_t count, uint64_t opCount) {
  static int32_t buf[1];
  mendOp op;
  memset(&op, 0, sizeof(op));
  op.func = MEND_FUNC_ALLREDUCE;
  op.comm = comm;
  op.sendbuff = buf;
  op.recvbuff = buf;
  op.count = count;
  op.type = ncclInt32;
  op.userOp = ncclSum;
  op.root = -1;
  op.opCount = opCount;
  return op;
}

// The bytes of every program of a plan, in work order.
std::string programsOf(const mendPlan* plan) {
  std::string s;
  for (int i = 0; i < plan->nWorks; i++) s.append((const char*)plan->works[i].prog, plan->works[i].prog->bytes);
  return s;
}

}  // namespace

TEST(PlanView, SnapshotOfChannelsOnEveryRank) {
  World w(4, 3);
  uint64_t hash0 = 0;
  for (int r = 0; r < 4; r++) {
    ViewPtr v;
    ASSERT_EQ(mendPlanViewFromChannels(w.comm(r), &v.v), ncclSuccess);
    EXPECT_EQ(v.v->epoch, 0u);
    EXPECT_EQ(v.v->nChannels, 3);
    for (int c = 0; c < 3; c++) {
      EXPECT_EQ(0, memcmp(v.v->ch[c].ring, w.comm(r)->channels[c].ring.userRanks, sizeof(int) * 4));
      EXPECT_EQ(v.v->ch[c].ring[v.v->ch[c].ringIndex], r);
      EXPECT_EQ(v.v->ch[c].weight, 1);
    }
    if (r == 0) hash0 = v.v->hash;
    EXPECT_EQ(v.v->hash, hash0) << "rank " << r << ": the shared part of the view hashes alike everywhere";
  }
}

TEST(PlanView, SealRejectsABrokenRing) {
  ViewPtr v;
  ASSERT_EQ(mendPlanViewCreate(3, 1, 1, &v.v), ncclSuccess);
  int ring[3] = {0, 1, 1};
  memcpy(v.v->ch[0].ring, ring, sizeof(ring));
  v.v->ch[0].ringIndex = 1;
  EXPECT_EQ(mendPlanViewSeal(v.v), ncclInternalError) << "rank 1 twice, rank 2 missing";
  v.v->ch[0].ring[2] = 2;
  EXPECT_EQ(mendPlanViewSeal(v.v), ncclSuccess);
  v.v->ch[0].weight = 0;
  EXPECT_EQ(mendPlanViewSeal(v.v), ncclInternalError) << "a channel must carry something";
}

// The NIC of a new connection: the channel's when usable at both ends, else the nearest usable one.
TEST(PlanView, ConnectionNicAvoidsDownNics) {
  ViewPtr v;
  ASSERT_EQ(mendPlanViewCreate(2, 0, 2, &v.v), ncclSuccess);
  v.v->nNics = 3;
  int order[3] = {2, 0, 1};  // topology: NIC 2 nearest, then 0, then 1
  memcpy(v.v->nicOrder, order, sizeof(order));
  v.v->ch[0].netDev = 0;
  v.v->ch[1].netDev = 1;
  const uint32_t all = 0x7;
  EXPECT_EQ(mendPlanViewConnDev(v.v, 0, all, all), 0);
  EXPECT_EQ(mendPlanViewConnDev(v.v, 1, all, all), 1);
  EXPECT_EQ(mendPlanViewConnDev(v.v, 0, all & ~1u, all), 2) << "ours down: the nearest healthy NIC";
  EXPECT_EQ(mendPlanViewConnDev(v.v, 0, all, all & ~1u), 2) << "the peer's down: the same";
  EXPECT_EQ(mendPlanViewConnDev(v.v, 0, all & ~1u, all & ~4u), 1) << "2 down at the peer: next in order";
  // None usable at both ends (rails lost on both hosts): one usable here, where the receiver listens
  // and a sender without that rail sets up through a bridge (src/resilience/rnet_relay.c).
  EXPECT_EQ(mendPlanViewConnDev(v.v, 1, 0x1, 0x6), 0) << "none usable at both ends: one of ours";
  EXPECT_EQ(mendPlanViewConnDev(v.v, 1, 0x6, 0x1), 1) << "the channel's when it is ours";
  EXPECT_EQ(mendPlanViewConnDev(v.v, 1, 0x0, 0x6), 1) << "none of ours: the channel's";
  EXPECT_EQ(mendPlanViewConnDev(v.v, 5, all, all), -1) << "no such channel";
  v.v->ch[0].netDev = -1;
  EXPECT_EQ(mendPlanViewConnDev(v.v, 0, all, all), -1) << "a channel without a NIC";
}

// A fake topology: NICs on our NUMA node and close on PCIe come first, unknown places in the middle.
TEST(PlanView, FailoverOrderFromTopology) {
  mendTopo topo;
  memset(&topo, 0, sizeof(topo));
  topo.nNics = 5;
  int dist[5] = {104, 3, MEND_TOPO_DIST_UNKNOWN, 5, 3};  // other node, near, veth, near, near (tie with 1)
  for (int d = 0; d < 5; d++) {
    topo.nics[d].dev = d;
    topo.nics[d].dist = dist[d];
  }
  mendTopoSortNics(&topo);
  int want[5] = {1, 4, 3, 2, 0};
  for (int i = 0; i < 5; i++) EXPECT_EQ(topo.nicOrder[i], want[i]) << "position " << i;
}

TEST(PlanView, PendingViewTakesOverAtItsOp) {
  World w(2);
  ncclComm_t c = w.comm(0);
  const mendPlanView* now = nullptr;
  ASSERT_EQ(mendPlannerViewAt(c, 0, &now), ncclSuccess);
  ASSERT_NE(now, nullptr);
  EXPECT_EQ(now->epoch, 0u);
  mendPlanView* next = nullptr;
  ASSERT_EQ(mendPlanViewCopy(now, 1, 5, &next), ncclSuccess);
  ASSERT_EQ(mendPlanViewSeal(next), ncclSuccess);
  uint64_t h1 = next->hash;
  EXPECT_NE(h1, now->hash) << "another epoch is another view";
  ASSERT_EQ(mendPlannerSetView(c, next), ncclSuccess);
  ASSERT_EQ(mendPlannerViewAt(c, 4, &now), ncclSuccess);
  EXPECT_EQ(now->epoch, 0u) << "op 4 still runs under epoch 0";
  ASSERT_EQ(mendPlannerViewAt(c, 5, &now), ncclSuccess);
  EXPECT_EQ(now->epoch, 1u);
  EXPECT_EQ(now->hash, h1);
  ASSERT_EQ(mendPlannerViewAt(c, 3, &now), ncclSuccess);
  EXPECT_EQ(now->epoch, 1u) << "a view in force is never given back";
}

// Two views with different epochs (the second re-ranks a ring) give different programs; the same
// view gives the same programs.
TEST(PlanView, DifferentViewsGiveDifferentPrograms) {
  ScopedEnv algo("NCCL_ALGO", "Ring");
  World w(4, 2);
  ncclComm_t c = w.comm(1);
  ViewPtr a, b;
  ASSERT_EQ(mendPlanViewFromChannels(c, &a.v), ncclSuccess);
  ASSERT_EQ(mendPlanViewCopy(a.v, 1, 0, &b.v), ncclSuccess);
  for (int ch = 0; ch < 2; ch++) {  // reverse every ring
    int* ring = b.v->ch[ch].ring;
    for (int i = 0, j = 3; i < j; i++, j--) std::swap(ring[i], ring[j]);
    b.v->ch[ch].ringIndex = 3 - b.v->ch[ch].ringIndex;
  }
  ASSERT_EQ(mendPlanViewSeal(b.v), ncclSuccess);
  EXPECT_NE(a.v->hash, b.v->hash);
  mendOp op = allReduceOp(c, 1 << 16, 0);
  mendPlan *pa = nullptr, *pa2 = nullptr, *pb = nullptr;
  ASSERT_EQ(mendPlanBuildView(c, a.v, &op, 1, &pa), ncclSuccess);
  ASSERT_EQ(mendPlanBuildView(c, a.v, &op, 1, &pa2), ncclSuccess);
  ASSERT_EQ(mendPlanBuildView(c, b.v, &op, 1, &pb), ncclSuccess);
  ASSERT_GT(pa->nWorks, 0);
  EXPECT_EQ(programsOf(pa), programsOf(pa2));
  EXPECT_NE(programsOf(pa), programsOf(pb)) << "a re-ranked ring is a different program";
  mendPlanFree(pa);
  mendPlanFree(pa2);
  mendPlanFree(pb);
}

// Every rank logs, per op, the hash of the plan view it planned under; the ranks agree op by op.
TEST(PlanView, EveryRankLogsTheSameHashPerOp) {
  char dir[] = "/tmp/mend-planview-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/log";
  const int n = 4, nOps = 3;
  {
    ScopedEnv level("NCCL_DEBUG", "TRACE");
    ScopedEnv sub("NCCL_DEBUG_SUBSYS", "TUNING");
    ScopedEnv file("NCCL_DEBUG_FILE", path.c_str());
    ncclResetDebugInit();
    {
      World w(n);
      std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(1000, 1));
      for (int k = 0; k < nOps; k++) {
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < n; r++)
          ASSERT_EQ(ncclAllReduce(buf[r].data(), buf[r].data(), 1000, ncclInt32, ncclSum, w.comm(r), nullptr),
                    ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
      }
      for (int r = 0; r < n; r++) EXPECT_EQ(buf[r][0], n * n * n) << "rank " << r;
    }
    ncclResetDebugInit();  // closes the file
  }
  std::ifstream in(path);
  std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  regex_t re;
  ASSERT_EQ(regcomp(&re, "AllReduce: opCount ([0-9]+) rank ([0-9]+) plan view epoch ([0-9]+) hash ([0-9a-f]+)",
                    REG_EXTENDED),
            0);
  std::map<std::string, std::set<std::string>> hashes;  // opCount -> hashes seen
  std::set<std::string> ranks;
  regmatch_t m[5];
  for (const char* p = log.c_str(); regexec(&re, p, 5, m, 0) == 0; p += m[0].rm_eo) {
    auto g = [&](int i) { return std::string(p + m[i].rm_so, (size_t)(m[i].rm_eo - m[i].rm_so)); };
    hashes[g(1)].insert(g(4));
    ranks.insert(g(1) + "/" + g(2));
  }
  regfree(&re);
  EXPECT_EQ(hashes.size(), (size_t)nOps) << log;
  EXPECT_EQ(ranks.size(), (size_t)(n * nOps)) << "one line per rank and op";
  std::set<std::string> all;
  for (auto& kv : hashes) {
    EXPECT_EQ(kv.second.size(), 1u) << "op " << kv.first << ": ranks planned under different views";
    all.insert(kv.second.begin(), kv.second.end());
  }
  EXPECT_EQ(all.size(), (size_t)nOps) << "the hash names the op too";
  std::string cmd = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(cmd.c_str()), 0);
}
