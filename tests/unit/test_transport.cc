// Graph shapes (rings, trees, channel -> NIC) for many (nRanks, nNodes) layouts, and connectors
// between ranks of one process: p2p, and net over loopback with ranks posing as separate hosts.
// Multi-process cases (shm, net, aborts, leaks) are in test_transport_proc.cc.
#include <gtest/gtest.h>

#include <signal.h>

#include <array>
#include <thread>

#include "transport_harness.h"

namespace {

struct Layout {
  int nRanks, nNodes;
  std::vector<int> node, local;
};

// Host of each rank: blocked, round-robin, or a scrambled assignment; every host gets a rank.
Layout makeLayout(int nRanks, int nNodes, int kind) {
  Layout l{nRanks, nNodes, std::vector<int>(nRanks), std::vector<int>(nRanks)};
  for (int r = 0; r < nRanks; r++) {
    if (kind == 0) l.node[r] = (int)((int64_t)r * nNodes / nRanks);
    else if (kind == 1) l.node[r] = r % nNodes;
    else l.node[r] = r < nNodes ? r : (int)((r * 7919u + 13) % nNodes);
  }
  // Hosts are numbered by first rank (as init does): renumber.
  std::vector<int> remap(nNodes, -1), count(nNodes, 0);
  int next = 0;
  for (int r = 0; r < nRanks; r++) {
    if (remap[l.node[r]] < 0) remap[l.node[r]] = next++;
    l.node[r] = remap[l.node[r]];
    l.local[r] = count[l.node[r]]++;
  }
  return l;
}

std::vector<Layout> allLayouts() {
  std::vector<Layout> out;
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 100})
    for (int h : {1, 2, 3, 4, 5, 8, 16, 33})
      if (h <= n)
        for (int k = 0; k < 3; k++) out.push_back(makeLayout(n, h, k));
  return out;
}

mendGraphShape shapeOf(const Layout& l) { return {l.nRanks, l.nNodes, l.node.data(), l.local.data()}; }

TEST(GraphRing, EveryRingIsAPermutationGroupedByHost) {
  for (const Layout& l : allLayouts()) {
    mendGraphShape s = shapeOf(l);
    std::vector<int> r0(l.nRanks), r1(l.nRanks);
    ASSERT_EQ(mendGraphRing(&s, 0, r0.data()), ncclSuccess);
    ASSERT_EQ(mendGraphRing(&s, 1, r1.data()), ncclSuccess);
    std::vector<int> seen(l.nRanks, 0);
    int hostChanges = 0;
    for (int i = 0; i < l.nRanks; i++) {
      ASSERT_GE(r0[i], 0);
      ASSERT_LT(r0[i], l.nRanks);
      seen[r0[i]]++;
      hostChanges += l.node[r0[i]] != l.node[r0[(i + 1) % l.nRanks]];
      EXPECT_EQ(r1[i], r0[l.nRanks - 1 - i]) << "odd channels run the ring backwards";
      if (i > 0 && l.node[r0[i]] == l.node[r0[i - 1]]) {
        EXPECT_EQ(l.local[r0[i]], l.local[r0[i - 1]] + 1);
      }
    }
    for (int r = 0; r < l.nRanks; r++) ASSERT_EQ(seen[r], 1) << "rank " << r << " in a ring of " << l.nRanks;
    EXPECT_EQ(hostChanges, l.nNodes > 1 ? l.nNodes : 0) << l.nRanks << " ranks on " << l.nNodes << " hosts";
  }
}

TEST(GraphRing, RejectsInconsistentShapes) {
  Layout l = makeLayout(4, 2, 0);
  l.local[1] = 5;  // not a position among its host's ranks
  mendGraphShape s = shapeOf(l);
  std::vector<int> ring(4);
  EXPECT_EQ(mendGraphRing(&s, 0, ring.data()), ncclInternalError);
  l = makeLayout(4, 2, 0);
  l.node[3] = 7;  // no such host
  s = shapeOf(l);
  EXPECT_EQ(mendGraphRing(&s, 0, ring.data()), ncclInternalError);
}

// A valid tree: one root; every other rank has one parent that lists it; everyone reaches the root.
void checkTree(const Layout& l, int channel) {
  mendGraphShape s = shapeOf(l);
  std::vector<int> parent(l.nRanks);
  std::vector<std::array<int, MEND_MAX_TREE_ARITY>> down(l.nRanks);
  int depth = 0;
  ASSERT_EQ(mendGraphTree(&s, channel, parent.data(), (int(*)[MEND_MAX_TREE_ARITY])down.data(), &depth), ncclSuccess);
  int roots = 0, maxDepth = 0, interHostEdges = 0;
  for (int r = 0; r < l.nRanks; r++) {
    if (parent[r] < 0) { roots++; continue; }
    ASSERT_LT(parent[r], l.nRanks);
    int listed = 0;
    for (int c : down[parent[r]]) listed += c == r;
    ASSERT_EQ(listed, 1) << "rank " << r << "'s parent " << parent[r] << " does not list it (channel " << channel << ")";
    interHostEdges += l.node[parent[r]] != l.node[r];
  }
  for (int r = 0; r < l.nRanks; r++) {
    for (int c : down[r]) {
      if (c < 0) continue;
      ASSERT_EQ(parent[c], r) << "child " << c << " of " << r << " has another parent";
    }
    int d = 1;
    for (int x = r; parent[x] >= 0; x = parent[x]) ASSERT_LE(++d, l.nRanks) << "cycle through rank " << r;
    maxDepth = std::max(maxDepth, d);
  }
  EXPECT_EQ(roots, 1);
  EXPECT_EQ(depth, maxDepth);
  EXPECT_EQ(interHostEdges, l.nNodes - 1) << "hosts joined by a tree of nNodes-1 edges";
}

TEST(GraphTree, EveryTreeIsValid) {
  for (const Layout& l : allLayouts())
    for (int c = 0; c < 4; c++) checkTree(l, c);
}

TEST(GraphTree, DoubleBinaryTreeSharesTheInnerWork) {
  for (int n = 1; n <= 200; n++) {
    std::vector<int> p0(n), p1(n);
    std::vector<std::array<int, 2>> c0(n), c1(n);
    mendGraphBtree(n, 0, p0.data(), (int(*)[2])c0.data());
    mendGraphBtree(n, 1, p1.data(), (int(*)[2])c1.data());
    int innerBoth = 0, roots0 = 0, roots1 = 0;
    for (int r = 0; r < n; r++) {
      roots0 += p0[r] < 0;
      roots1 += p1[r] < 0;
      for (int k = 0; k < 2; k++) {
        if (c0[r][k] >= 0) {
          ASSERT_EQ(p0[c0[r][k]], r);
        }
        if (c1[r][k] >= 0) {
          ASSERT_EQ(p1[c1[r][k]], r);
        }
      }
      bool inner0 = c0[r][0] >= 0 || c0[r][1] >= 0, inner1 = c1[r][0] >= 0 || c1[r][1] >= 0;
      innerBoth += inner0 && inner1;
    }
    ASSERT_EQ(roots0, 1);
    ASSERT_EQ(roots1, 1);
    // A node that forwards in both trees carries double load: only a couple of them may exist.
    EXPECT_LE(innerBoth, 2) << "n=" << n;
  }
}

TEST(GraphNetDev, RailsUseTheSameNicIndexOnBothEnds) {
  int orderA[4] = {2, 0, 3, 1}, orderB[4] = {1, 3, 0, 2};
  for (int nNics = 1; nNics <= 4; nNics++) {
    std::vector<int> perNic(nNics, 0);
    for (int c = 0; c < 16; c++) {
      int a = mendGraphNetDev(c, nNics, orderA, 0), b = mendGraphNetDev(c, nNics, orderB, 0);
      EXPECT_EQ(a, b) << "channel " << c << " would cross rails";
      EXPECT_EQ(a, c % nNics);
      EXPECT_EQ(mendGraphNetDev(c, nNics, orderA, 2), a) << "auto (2) keeps rails";
      perNic[a]++;
    }
    for (int n : perNic) EXPECT_LE(abs(n - 16 / nNics), 1) << "every NIC gets its share";
    if (nNics == 4) {
      for (int c = 0; c < 8; c++) EXPECT_EQ(mendGraphNetDev(c, 4, orderA, 1), orderA[c % 4]) << "crossing: nearest first";
    }
  }
  EXPECT_EQ(mendGraphNetDev(3, 0, nullptr, 0), -1);
}

TEST(GraphChannels, CountFollowsHostsNicsAndLimits) {
  tt::setEnv("NCCL_MIN_NCHANNELS", nullptr);
  tt::setEnv("NCCL_MAX_NCHANNELS", nullptr);
  EXPECT_EQ(mendGraphChooseNChannels(1, 0, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT), 2);
  EXPECT_EQ(mendGraphChooseNChannels(1, 4, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT), 2);
  EXPECT_EQ(mendGraphChooseNChannels(2, 1, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT), 2);
  EXPECT_EQ(mendGraphChooseNChannels(2, 4, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT), 4);
  EXPECT_EQ(mendGraphChooseNChannels(2, 4, 6, NCCL_CONFIG_UNDEF_INT), 6);
  EXPECT_EQ(mendGraphChooseNChannels(2, 4, 1, 3), 3);
  EXPECT_EQ(mendGraphChooseNChannels(1, 0, 200, NCCL_CONFIG_UNDEF_INT), MEND_MAXCHANNELS);
  tt::setEnv("NCCL_MIN_NCHANNELS", "5");
  EXPECT_EQ(mendGraphChooseNChannels(1, 0, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT), 5);
  tt::setEnv("NCCL_MAX_NCHANNELS", "1");
  EXPECT_EQ(mendGraphChooseNChannels(2, 4, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT), 1);
  tt::setEnv("NCCL_MIN_NCHANNELS", nullptr);
  tt::setEnv("NCCL_MAX_NCHANNELS", nullptr);
}

// ---- connectors between ranks of this process ----

class TransportThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"MEND_FORCE_TRANSPORT", "NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE", "NCCL_BUFFSIZE", "NCCL_NET"})
      tt::setEnv(v, nullptr);
    tt::setEnv("NCCL_SOCKET_IFNAME", "lo");
    alarm(240);  // a hang ends the run (SIGALRM) instead of blocking the suite
  }
  void TearDown() override {
    alarm(0);
    tt::setEnv("NCCL_BUFFSIZE", nullptr);
  }
  // nRanks comms in threads; net: MEND_FORCE_TRANSPORT=net (peers talk through the proxy and the Net).
  std::vector<ncclComm*> makeComms(int nRanks, bool net) {
    tt::setEnv("MEND_FORCE_TRANSPORT", net ? "net" : nullptr);
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<ncclComm*> comms(nRanks, nullptr);
    std::vector<ncclResult_t> res(nRanks, ncclInternalError);
    std::vector<std::thread> th;
    for (int r = 0; r < nRanks; r++)
      th.emplace_back([&, r] { res[r] = tt::makeComm(r, nRanks, id, &comms[r]); });
    for (auto& t : th) t.join();
    for (int r = 0; r < nRanks; r++) EXPECT_EQ(res[r], ncclSuccess) << "rank " << r;
    tt::setEnv("MEND_FORCE_TRANSPORT", nullptr);
    return comms;
  }
  void freeComms(std::vector<ncclComm*>& comms) {
    std::vector<std::thread> th;
    for (ncclComm* c : comms) th.emplace_back([c] { tt::freeComm(c); });
    for (auto& t : th) t.join();
  }
  // Rank 0 connects its send side of channel 0 to rank 1's receive side (both calls at once).
  void connectOneWay(std::vector<ncclComm*>& comms) {
    mendConnReq r0 = {1, 0, MEND_SEND, 0}, r1 = {0, 0, MEND_RECV, 0};
    ncclResult_t a = ncclInternalError, b = ncclInternalError;
    std::thread t0([&] { a = mendTransportConnect(comms[0], 1, &r0); });
    b = mendTransportConnect(comms[1], 1, &r1);
    t0.join();
    ASSERT_EQ(a, ncclSuccess);
    ASSERT_EQ(b, ncclSuccess);
  }
  // Ranks 0 and 1 connect both ways (0->1 on channel 0, 1->0 on channel 1), listing requests in
  // different orders, then stream n messages each way at once.
  void pingBothWays(std::vector<ncclComm*>& comms, int connIndex, uint64_t n, int wantKind) {
    mendConnReq r0[2] = {{1, 0, MEND_SEND, connIndex}, {1, 1, MEND_RECV, connIndex}};
    mendConnReq r1[2] = {{0, 1, MEND_SEND, connIndex}, {0, 0, MEND_RECV, connIndex}};
    ncclResult_t a = ncclInternalError, b = ncclInternalError;
    std::thread t0([&] { a = mendTransportConnect(comms[0], 2, r0); });
    std::thread t1([&] { b = mendTransportConnect(comms[1], 2, r1); });
    t0.join();
    t1.join();
    ASSERT_EQ(a, ncclSuccess);
    ASSERT_EQ(b, ncclSuccess);
    EXPECT_EQ(mendTransportKindOf(comms[0], 1), wantKind);
    mendConnector* s0 = mendTransportGetConn(comms[0], 0, 1, MEND_SEND, connIndex);
    mendConnector* v1 = mendTransportGetConn(comms[1], 0, 0, MEND_RECV, connIndex);
    mendConnector* s1 = mendTransportGetConn(comms[1], 1, 0, MEND_SEND, connIndex);
    mendConnector* v0 = mendTransportGetConn(comms[0], 1, 1, MEND_RECV, connIndex);
    ASSERT_TRUE(s0 && v1 && s1 && v0);
    EXPECT_EQ(s0->kind, wantKind);
    EXPECT_EQ(mendTransportGetConn(comms[0], 0, 1, MEND_RECV, connIndex == 0 ? 1 : 0), nullptr);
    std::string e[4];
    std::thread p0([&] { e[0] = tt::produce(comms[0], s0, n, false); });
    std::thread c1([&] { e[1] = tt::consume(comms[1], v1, n, false); });
    std::thread p1([&] { e[2] = tt::produce(comms[1], s1, n, false); });
    std::thread c0([&] { e[3] = tt::consume(comms[0], v0, n, false); });
    p0.join(); c1.join(); p1.join(); c0.join();
    for (auto& s : e) EXPECT_EQ(s, "");
    // Connecting again is a no-op that keeps the same connectors.
    std::thread t2([&] { a = mendTransportConnect(comms[0], 2, r0); });
    std::thread t3([&] { b = mendTransportConnect(comms[1], 2, r1); });
    t2.join();
    t3.join();
    EXPECT_EQ(a, ncclSuccess);
    EXPECT_EQ(b, ncclSuccess);
    EXPECT_EQ(mendTransportGetConn(comms[0], 0, 1, MEND_SEND, connIndex), s0);
  }
};

TEST_F(TransportThreads, P2pStreamsCheckedSlotsBothWays) {
  tt::setEnv("NCCL_BUFFSIZE", "65536");
  auto comms = makeComms(2, false);
  ASSERT_EQ(comms[0]->nChannels, 2);
  EXPECT_EQ(comms[0]->channels[0].ring.next, 1);
  pingBothWays(comms, MEND_CONN_COLL, 10000, MEND_TRANSPORT_P2P);
  pingBothWays(comms, MEND_CONN_P2P, 1000, MEND_TRANSPORT_P2P);
  freeComms(comms);
}

TEST_F(TransportThreads, NetStreamsCheckedSlotsAndCountsBytes) {
  tt::setEnv("NCCL_BUFFSIZE", "65536");
  auto comms = makeComms(2, true);
  pingBothWays(comms, MEND_CONN_COLL, 10000, MEND_TRANSPORT_NET);
  uint64_t want = 0;
  for (uint64_t i = 0; i < 10000; i++) want += tt::msgSize(i, 65536 / MEND_FIFO_SLOTS);
  uint64_t tx = 0, rx = 0, tx1 = 0, rx1 = 0;
  int dev = comms[0]->channels[0].netDev;
  ASSERT_EQ(mendTransportNicBytes(comms[0], dev, &tx, &rx), ncclSuccess);
  ASSERT_EQ(mendTransportNicBytes(comms[1], dev, &tx1, &rx1), ncclSuccess);
  EXPECT_EQ(tx, want);
  EXPECT_EQ(rx, want);
  EXPECT_EQ(tx1, want);
  EXPECT_EQ(mendTransportConnBytes(mendTransportGetConn(comms[0], 0, 1, MEND_SEND, 0)), want);
  EXPECT_EQ(mendTransportNicBytes(comms[0], 99, &tx, &rx), ncclInvalidArgument);
  freeComms(comms);
}

TEST_F(TransportThreads, SelfConnectionOnOneRank) {
  auto comms = makeComms(1, false);
  ASSERT_EQ(comms[0]->channels[0].ring.next, 0);
  mendConnReq reqs[2] = {{0, 0, MEND_SEND, 0}, {0, 0, MEND_RECV, 0}};
  ASSERT_EQ(mendTransportConnect(comms[0], 2, reqs), ncclSuccess);
  mendConnector* s = mendTransportGetConn(comms[0], 0, 0, MEND_SEND, 0);
  mendConnector* r = mendTransportGetConn(comms[0], 0, 0, MEND_RECV, 0);
  ASSERT_TRUE(s && r);
  std::string e1, e2;
  std::thread p([&] { e1 = tt::produce(comms[0], s, 500, false); });
  e2 = tt::consume(comms[0], r, 500, false);
  p.join();
  EXPECT_EQ(e1, "");
  EXPECT_EQ(e2, "");
  freeComms(comms);
}

TEST_F(TransportThreads, BadRequestsAreRejected) {
  auto comms = makeComms(1, false);
  mendConnReq bad[] = {{5, 0, MEND_SEND, 0}, {0, 99, MEND_SEND, 0}, {0, 0, 7, 0}, {0, 0, MEND_SEND, MEND_NCONN_INDEX},
                      {-1, 0, MEND_RECV, 0}};
  for (auto& r : bad) EXPECT_EQ(mendTransportConnect(comms[0], 1, &r), ncclInvalidArgument);
  EXPECT_EQ(mendTransportConnect(comms[0], -1, bad), ncclInvalidArgument);
  EXPECT_EQ(mendTransportConnect(comms[0], 1, nullptr), ncclInvalidArgument);
  EXPECT_EQ(mendTransportConnect(nullptr, 0, nullptr), ncclInvalidArgument);
  mendConnReq twice[2] = {{0, 0, MEND_SEND, 0}, {0, 0, MEND_SEND, 0}};
  EXPECT_EQ(mendTransportConnect(comms[0], 2, twice), ncclInvalidUsage);
  EXPECT_EQ(mendTransportGetConn(comms[0], 0, 3, MEND_SEND, 0), nullptr);
  EXPECT_EQ(mendTransportKindOf(comms[0], 0), MEND_TRANSPORT_P2P);
  freeComms(comms);
  tt::setEnv("MEND_FORCE_TRANSPORT", "carrier-pigeon");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm* c = nullptr;
  EXPECT_EQ(tt::makeComm(0, 1, id, &c), ncclInvalidUsage);
  tt::setEnv("MEND_FORCE_TRANSPORT", nullptr);
}

TEST_F(TransportThreads, AbortEndsAConsumerWaitAndFreeIsPrompt) {
  tt::setEnv("NCCL_BUFFSIZE", "65536");
  auto comms = makeComms(2, true);
  ASSERT_NO_FATAL_FAILURE(connectOneWay(comms));
  mendConnector* rc = mendTransportGetConn(comms[1], 0, 0, MEND_RECV, 0);
  std::string err;
  double returned = 0;
  std::thread consumer([&] { err = tt::consume(comms[1], rc, 1, false); returned = tt::now(); });
  usleep(200000);
  double t = tt::now();
  tt::abortComm(comms[1]);
  consumer.join();
  EXPECT_NE(err, "") << "the wait must end without data";
  EXPECT_LT(returned - t, 0.5) << "a waiting consumer must see the abort at once";
  t = tt::now();
  tt::freeComm(comms[1]);  // peer still alive and connected: must not wait for it
  EXPECT_LT(tt::now() - t, 2.0);
  tt::abortComm(comms[0]);
  tt::freeComm(comms[0]);
}

// Throughput of one connector between two ranks (full 512 KiB slots, one copy in, one copy out).
double streamGBs(ncclComm* a, ncclComm* b, mendConnector* s, mendConnector* r, uint64_t n) {
  std::vector<char> src(s->slotBytes, 1), dst(r->slotBytes);
  std::string e1, e2;
  double t = tt::now();
  std::thread p([&] { e1 = tt::produce(a, s, n, true, src.data()); });
  e2 = tt::consume(b, r, n, true, dst.data());
  p.join();
  double dt = tt::now() - t;
  EXPECT_EQ(e1, "");
  EXPECT_EQ(e2, "");
  return n * (double)s->slotBytes / dt / 1e9;
}

TEST_F(TransportThreads, ThroughputP2pAndNet) {
  for (bool net : {false, true}) {
    auto comms = makeComms(2, net);
    ASSERT_NO_FATAL_FAILURE(connectOneWay(comms));
    mendConnector* s = mendTransportGetConn(comms[0], 0, 1, MEND_SEND, 0);
    mendConnector* r = mendTransportGetConn(comms[1], 0, 0, MEND_RECV, 0);
    uint64_t n = net ? 2048 : 4096;  // 1 GiB / 2 GiB
    double gbs = streamGBs(comms[0], comms[1], s, r, n);
    printf("[ perf     ] %s connector, %zu-byte slots: %.2f GB/s\n", net ? "net (socket, lo)" : "p2p", s->slotBytes, gbs);
    EXPECT_GT(gbs, 0.05);
    freeComms(comms);
  }
}

}  // namespace
