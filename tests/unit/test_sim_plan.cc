// The planner without communicators (src/enqueue/plan_offline.c) against the real one: for small
// clusters, healthy and degraded, every rank's plan from mendOfflinePlan must equal, byte for byte
// (programs, channels, windows, chunks), the plan a communicator of that rank builds at run time:
// graph set-up, the graph's view, mendReplanDerive for that rank, mendPlanBuildView.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "loopback_world.h"
#include "mend_internal.h"

extern "C" {
#include "device/reduce.h"
#include "enqueue/plan.h"
#include "enqueue/plan_offline.h"
#include "resilience/health.h"
}

namespace {

struct Cluster {
  int servers, gpus, nics;
  std::vector<mendOfflineFault> faults;
  int minCh = 0;
};

int g_gpus = 1;  // ranks per server of the cluster the reference is planning
int refKind(ncclComm* comm, int peer) {
  return peer / g_gpus == comm->rank / g_gpus ? MEND_TRANSPORT_SHM : MEND_TRANSPORT_NET;
}
ncclResult_t refConnect(ncclComm*, int, const mendConnReq*) { return ncclInvalidUsage; }
mendConnector* refGet(ncclComm*, int, int, int, int) { return nullptr; }
const mendConnOps refOps = {refConnect, refGet, refKind};

// What one rank plans at run time, built the way init and re-planning build it.
struct Reference {
  std::vector<int> node, local;
  std::vector<float> line;
  std::vector<mendViewNic> pictured;
  mendTopo topo{};
  mendViewHealth h{};

  explicit Reference(const Cluster& c) {
    int n = c.servers * c.gpus;
    for (int r = 0; r < n; r++) node.push_back(r / c.gpus), local.push_back(r % c.gpus);
    line.assign((size_t)n * c.nics, 10.0f);
    for (auto& f : c.faults)
      for (int g = 0; g < c.gpus; g++)
        pictured.push_back({f.server * c.gpus + g, f.nic, f.gbps > 0 ? MEND_NIC_DEGRADED : MEND_NIC_DOWN, f.gbps});
    std::sort(pictured.begin(), pictured.end(),
              [](const mendViewNic& a, const mendViewNic& b) { return a.rank != b.rank ? a.rank < b.rank : a.dev < b.dev; });
    h = {n, c.nics, line.data(), (int)pictured.size(), pictured.data()};
    topo.nNics = c.nics;
    topo.numaNode = -1;
    for (int d = 0; d < c.nics; d++) {
      topo.nics[d].dev = d;
      topo.nics[d].numaNode = -1;
      topo.nics[d].speed = 10000;
      topo.nicOrder[d] = d;
    }
  }

  mendPlan* plan(ncclComm* comm, const Cluster& c, const mendOp& op) {
    comm->nNodes = c.servers;
    comm->node = comm->rank / c.gpus;
    comm->localRank = comm->rank % c.gpus;
    comm->nLocalRanks = c.gpus;
    comm->rankToNode = node.data();
    comm->rankToLocalRank = local.data();
    comm->topo = &topo;
    comm->config.minCTAs = c.minCh;
    EXPECT_EQ(mendGraphSetup(comm, c.nics), ncclSuccess);
    mendPlanView *base = nullptr, *v = nullptr;
    EXPECT_EQ(mendGraphPlanView(comm, &base), ncclSuccess);
    EXPECT_EQ(mendReplanDerive(base, &h, 0, 0, &v), ncclSuccess);
    g_gpus = c.gpus;
    EXPECT_EQ(mendPlannerAttach(comm, &refOps), ncclSuccess);
    mendOp one = op;
    one.comm = comm;
    mendPlan* p = nullptr;
    EXPECT_EQ(mendPlanBuildView(comm, v, &one, 1, &p), ncclSuccess);
    mendPlanViewFree(base);
    mendPlanViewFree(v);
    mendGraphFree(comm);
    comm->topo = nullptr;
    comm->rankToNode = comm->rankToLocalRank = nullptr;
    return p;
  }
};

std::string dumpPlan(const mendPlan* p) {
  std::string s;
  char buf[4096];
  for (int i = 0; i < p->nWorks; i++) {
    const mendWork* w = p->works + i;
    snprintf(buf, sizeof(buf), "work %d channel %d offset %zu count %zu chunk %zu align %u\n", i, w->channel,
             w->args.offset, w->args.count, w->args.chunkElems, w->args.alignElems);
    s += buf;
    mendProgDump(w->prog, buf, sizeof(buf));
    s += buf;
  }
  return s;
}

void expectSamePlans(const Cluster& c, const mendOp& op, const char* what) {
  mendOfflineTopo t{};
  t.nServers = c.servers;
  t.gpusPerServer = c.gpus;
  t.nicsPerServer = c.nics;
  t.lineGbps = 10.0f;
  t.minChannels = c.minCh;
  t.nFaults = (int)c.faults.size();
  std::copy(c.faults.begin(), c.faults.end(), t.faults);
  mendOffline* o = nullptr;
  ASSERT_EQ(mendOfflineCreate(&t, &o), ncclSuccess);
  int n = c.servers * c.gpus;
  Reference ref(c);
  World w(n, 2);
  for (int r = 0; r < n; r++) {
    mendPlan* off = nullptr;
    ASSERT_EQ(mendOfflinePlan(o, r, &op, &off), ncclSuccess);
    mendPlan* real = ref.plan(w.comm(r), c, op);
    ASSERT_NE(real, nullptr);
    ASSERT_EQ(off->nWorks, real->nWorks) << what << " rank " << r;
    EXPECT_EQ(dumpPlan(off), dumpPlan(real)) << what << " rank " << r;
    for (int i = 0; i < off->nWorks; i++) {
      ASSERT_EQ(off->works[i].prog->bytes, real->works[i].prog->bytes) << what << " rank " << r << " work " << i;
      EXPECT_EQ(memcmp(off->works[i].prog, real->works[i].prog, off->works[i].prog->bytes), 0)
          << what << " rank " << r << " work " << i;
    }
    EXPECT_DOUBLE_EQ(off->estUs, real->estUs) << what << " rank " << r;
    mendPlanFree(off);
    mendPlanFree(real);
  }
  mendOfflineFree(o);
}

mendOp makeOp(int func, size_t count, int root) {
  mendOp op{};
  op.func = func;
  op.count = count;
  op.type = ncclFloat;
  op.userOp = ncclSum;
  op.root = root;
  op.sendbuff = (const void*)((uintptr_t)1 << 44);  // never touched: the offline planner's placeholders
  op.recvbuff = (void*)((uintptr_t)1 << 45);
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclFloat, 2, &op.redop), ncclSuccess);
  return op;
}

std::vector<Cluster> clusters() {
  return {
      {1, 2, 0, {}},
      {2, 1, 2, {}},
      {2, 2, 2, {}},
      {2, 2, 2, {{1, 0, 0.0f}}},
      {3, 1, 3, {{0, 2, 0.0f}}},
      {3, 3, 3, {{1, 1, 5.0f}}},
      {2, 1, 2, {{0, 0, 0.0f}, {1, 1, 0.0f}}},           // no common rail: re-ranked (chain trees)
      {4, 1, 2, {{0, 0, 0.0f}, {2, 1, 0.0f}}},           // mismatched ranks, rings still linked
      {4, 1, 2, {{0, 0, 0.0f}, {1, 1, 0.0f}}},           // re-ranked around a bridge
      {3, 1, 2, {{0, 0, 0.0f}, {1, 1, 0.0f}}},           // no linked ring: chain trees
      {4, 4, 4, {{0, 1, 0.0f}, {3, 2, 2.5f}, {3, 3, 0.0f}}},
      {8, 2, 2, {{5, 1, 0.0f}}, 4},
      {16, 1, 8, {{2, 0, 0.0f}, {2, 1, 0.0f}, {2, 2, 0.0f}, {2, 3, 0.0f}, {9, 7, 0.0f}}},
  };
}

}  // namespace

TEST(SimPlan, OfflinePlansEqualTheRealPlanner) {
  const struct {
    int func;
    size_t count;
    int root;
  } ops[] = {{MEND_FUNC_ALLREDUCE, 1000, -1},        {MEND_FUNC_ALLREDUCE, 1 << 20, -1},
             {MEND_FUNC_ALLREDUCE, 37 << 20, -1},    {MEND_FUNC_ALLGATHER, 300000, -1},
             {MEND_FUNC_REDUCESCATTER, 300000, -1},  {MEND_FUNC_BROADCAST, 1 << 20, 1},
             {MEND_FUNC_REDUCE, 1 << 20, 0},         {MEND_FUNC_ALLTOALL, 70000, -1}};
  for (const char* replan : {"auto", "backup", "r2", "recursive"}) {
    ScopedEnv env("MEND_REPLAN", replan);
    for (const Cluster& c : clusters()) {
      for (const auto& o : ops) {
        std::string what = std::string(replan) + " " + std::to_string(c.servers) + "x" + std::to_string(c.gpus) +
                           " nics " + std::to_string(c.nics) + " faults " + std::to_string(c.faults.size()) +
                           " func " + std::to_string(o.func) + " count " + std::to_string(o.count);
        expectSamePlans(c, makeOp(o.func, o.count, o.root), what.c_str());
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(SimPlan, BadTopologiesAreRefused) {
  mendOfflineTopo t{};
  mendOffline* o = nullptr;
  EXPECT_EQ(mendOfflineCreate(nullptr, &o), ncclInvalidArgument);
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);  // no servers
  t = {2, 2, 2, 0.0f};
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);  // NICs without a rate
  t.lineGbps = 100.0f;
  t.nFaults = 1;
  t.faults[0] = {2, 0, 0.0f};
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);  // no server 2
  t.faults[0] = {1, 2, 0.0f};
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);  // no NIC 2
  t.faults[0] = {1, 1, 150.0f};
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);  // above the line rate
  t.nFaults = 2;
  t.faults[0] = t.faults[1] = {1, 1, 0.0f};
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);  // twice
  t.nFaults = 1;
  t.maxChannels = 65;
  EXPECT_EQ(mendOfflineCreate(&t, &o), ncclInvalidArgument);
  t.maxChannels = 0;
  ASSERT_EQ(mendOfflineCreate(&t, &o), ncclSuccess);
  mendOp op = makeOp(MEND_FUNC_ALLREDUCE, 100, -1);
  mendPlan* p = nullptr;
  EXPECT_EQ(mendOfflinePlan(o, 4, &op, &p), ncclInvalidArgument);
  EXPECT_EQ(mendOfflinePlan(o, -1, &op, &p), ncclInvalidArgument);
  op.func = MEND_FUNC_SENDRECV;
  EXPECT_EQ(mendOfflinePlan(o, 0, &op, &p), ncclInvalidArgument);
  mendOfflineFree(o);
}

// A tree AllReduce under one lost NIC of one host: Balance's weights (made for rings) move data off
// the lost NIC's channels, all of one tree with 8 NICs, onto the others, so every host inner in a
// tree carries more; backup adds the moved channel to a NIC whose busiest phase and direction it
// leaves as they were (a host inner in one tree is a leaf in the other).  mend-sim at 1,024 servers x
// 8 NICs: backup x1.016, Balance x1.124 of healthy.  With trees the choice is backup, planned with
// the tree and the even split; with rings it stays Balance and its weights.
TEST(SimPlan, TreeUnderALostNicTakesBackup) {
  mendOfflineTopo t{};
  t.nServers = 64;
  t.gpusPerServer = 1;
  t.nicsPerServer = 8;
  t.lineGbps = 200.0f;
  t.nFaults = 1;
  t.faults[0] = {37, 4, 0.0f};
  const size_t bytes = (size_t)256 << 20;
  for (bool tree : {true, false}) {
    ScopedEnv env("NCCL_ALGO", tree ? "tree" : "ring");
    mendOffline* o = nullptr;
    ASSERT_EQ(mendOfflineCreate(&t, &o), ncclSuccess);
    mendReplanChoice c{};
    ASSERT_EQ(mendOfflineChoice(o, bytes, &c), ncclSuccess);
    EXPECT_EQ(c.replan, tree ? MEND_REPLAN_BACKUP : MEND_REPLAN_BALANCE) << (tree ? "tree" : "ring");
    EXPECT_EQ(c.algo, tree ? MEND_ALGO_TREE : -1);
    if (tree) {
      EXPECT_GT(c.costUs[MEND_REPLAN_BALANCE], 1.1 * c.costUs[MEND_REPLAN_BACKUP]) << "8/7 on inner hosts";
    }
    mendOp op = makeOp(MEND_FUNC_ALLREDUCE, bytes / 4, -1);
    mendPlan* p = nullptr;
    ASSERT_EQ(mendOfflinePlan(o, 0, &op, &p), ncclSuccess);
    ASSERT_GT(p->nWorks, 1);
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < p->nWorks; i++) {
      EXPECT_EQ(p->works[i].prog->algo, tree ? MEND_ALGO_TREE : MEND_ALGO_RING);
      lo = std::min(lo, p->works[i].args.count);
      hi = std::max(hi, p->works[i].args.count);
    }
    if (tree) {
      EXPECT_LE(hi - lo, 64u) << "backup: the even split";
    } else {
      EXPECT_GT(hi, lo + lo / 16) << "Balance: the lost NIC's channels lighter";
    }
    mendPlanFree(p);
    mendOfflineFree(o);
  }
}

// The kind-by-kind mismatch test agrees with every pair, on pictures with and without mismatches.
TEST(SimPlan, MismatchByKindsEqualsAllPairs) {
  for (int seed = 1; seed <= 200; seed++) {
    unsigned s = (unsigned)seed * 2654435761u;
    auto rnd = [&s](int m) { s = s * 1103515245u + 12345u; return (int)((s >> 16) % (unsigned)m); };
    int n = 2 + rnd(12), nics = 1 + rnd(4);
    mendPlanView* v = nullptr;
    ASSERT_EQ(mendPlanViewCreate(n, 0, 1, &v), ncclSuccess);
    std::vector<float> line((size_t)n * nics, 1.0f);
    for (int r = 0; r < n; r++) {
      v->rankNics[r] = (1u << nics) - 1;
      if (rnd(3) == 0) v->rankNics[r] &= ~(1u << rnd(nics));
      if (rnd(4) == 0) v->rankNics[r] &= ~(1u << rnd(nics));
      if (rnd(8) == 0) line[(size_t)r * nics + nics - 1] = 0;  // a rank with fewer NICs
    }
    mendViewHealth h{n, nics, line.data(), 0, nullptr};
    int pairs = 0;
    for (int x = 0; x < n && !pairs; x++)
      for (int y = x + 1; y < n && !pairs; y++) pairs = !mendReplanLinked(v, &h, x, y);
    EXPECT_EQ(mendReplanMismatch(v, &h), pairs) << "seed " << seed;
    mendPlanViewFree(v);
  }
}
