// The bootstrap (src/bootstrap*.c): rendezvous of 1..16 ranks in threads, allgather, barrier, tagged
// ordered messages, unexpected-message buffering, RecvAny, child networks (split, shrink around a
// dead rank), scalable init with several roots, NCCL_COMM_ID (IPv4 and IPv6), rendezvous errors,
// and abort/close behaviour with time bounds.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap_util.h"
#include "mend_internal.h"
#include "unit_util.h"

namespace {

using mendtest::checkAllGather;
using mendtest::closeComm;
using mendtest::closeRanks;
using mendtest::freePort;
using mendtest::initRanks;
using mendtest::newComm;
using mendtest::nowMs;
using mendtest::runRanks;
using mendtest::setEnv;

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setEnv("NCCL_COMM_ID", nullptr);
    setEnv("MEND_BOOTSTRAP_TIMEOUT", nullptr);
    setEnv("MEND_OOB_IFNAME", "lo");  // loopback only
    alarm(120);                        // SIGALRM ends the run: a hang is a failure
  }
  void TearDown() override {
    alarm(0);
    setEnv("NCCL_SOCKET_IFNAME", nullptr);
    setEnv("NCCL_COMM_ID", nullptr);
    setEnv("MEND_BOOTSTRAP_TIMEOUT", nullptr);
    setEnv("MEND_OOB_IFNAME", nullptr);
  }
  // Init n ranks on one id, run body(rank, comm) on each, close all.
  void WithRanks(int n, const std::function<void(int, ncclComm*)>& body) {
    ncclUniqueId id;
    ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
    std::vector<ncclComm*> comms(n);
    initRanks(comms, 1, &id, body);
    closeRanks(comms);
  }
};

TEST_F(BootstrapTest, InitAllGatherBarrier) {
  for (int n : {1, 2, 3, 5, 8, 16}) {
    SCOPED_TRACE(n);
    WithRanks(n, [](int r, ncclComm* c) {
      checkAllGather(c);
      checkAllGather(c);  // back to back: messages of the two rounds must not mix
      EXPECT_EQ(mendBootstrapBarrier(c->bootstrap, 7), ncclSuccess);
      EXPECT_EQ(mendBootstrapBarrier(c->bootstrap, 7), ncclSuccess);
    });
  }
}

TEST_F(BootstrapTest, TaggedOrdering) {
  WithRanks(2, [](int r, ncclComm* c) {
    struct mendBootstrap* bs = c->bootstrap;
    if (r == 0) {
      ASSERT_EQ(mendBootstrapSend(bs, 1, 1, "a1", 3), ncclSuccess);
      ASSERT_EQ(mendBootstrapSend(bs, 1, 1, "a2", 3), ncclSuccess);
      ASSERT_EQ(mendBootstrapSend(bs, 1, 2, "b1", 3), ncclSuccess);
      ASSERT_EQ(mendBootstrapSend(bs, 1, 1, "a3", 3), ncclSuccess);
      ASSERT_EQ(mendBootstrapSend(bs, 1, 3, nullptr, 0), ncclSuccess);  // empty message
    } else {
      char buf[3];
      ASSERT_EQ(mendBootstrapRecv(bs, 0, 3, nullptr, 0), ncclSuccess);  // the last one first
      ASSERT_EQ(mendBootstrapRecv(bs, 0, 2, buf, 3), ncclSuccess);
      EXPECT_STREQ(buf, "b1");
      for (const char* want : {"a1", "a2", "a3"}) {
        ASSERT_EQ(mendBootstrapRecv(bs, 0, 1, buf, 3), ncclSuccess);
        EXPECT_STREQ(buf, want);
      }
    }
  });
}

TEST_F(BootstrapTest, UnexpectedMessagesAreBuffered) {
  const int kMsgs = 200;
  WithRanks(2, [&](int r, ncclComm* c) {
    struct mendBootstrap* bs = c->bootstrap;
    if (r == 0) {
      // A send never waits for the receive: all of these complete while rank 1 sleeps.
      double t0 = nowMs();
      for (int i = 0; i < kMsgs; i++) {
        std::vector<int> v((i * 37) % 4096 + 1, i);
        ASSERT_EQ(mendBootstrapSend(bs, 1, 5, v.data(), v.size() * sizeof(int)), ncclSuccess);
      }
      EXPECT_LT(nowMs() - t0, 250.0);
    } else {
      usleep(300 * 1000);
      for (int i = 0; i < kMsgs; i++) {
        std::vector<int> v((i * 37) % 4096 + 1, -1);
        ASSERT_EQ(mendBootstrapRecv(bs, 0, 5, v.data(), v.size() * sizeof(int)), ncclSuccess);
        for (int x : v) ASSERT_EQ(x, i);
      }
      int self = 42, got = 0;
      ASSERT_EQ(mendBootstrapSend(bs, 1, 6, &self, sizeof(self)), ncclSuccess);  // to ourselves
      ASSERT_EQ(mendBootstrapRecv(bs, 1, 6, &got, sizeof(got)), ncclSuccess);
      EXPECT_EQ(got, 42);
    }
  });
}

TEST_F(BootstrapTest, SizeMismatchAndBadArgs) {
  WithRanks(2, [](int r, ncclComm* c) {
    struct mendBootstrap* bs = c->bootstrap;
    if (r == 0) {
      uint64_t v = 1;
      ASSERT_EQ(mendBootstrapSend(bs, 1, 1, &v, sizeof(v)), ncclSuccess);
      EXPECT_EQ(mendBootstrapSend(bs, 2, 1, &v, sizeof(v)), ncclInvalidArgument);
      EXPECT_EQ(mendBootstrapSend(bs, -1, 1, &v, sizeof(v)), ncclInvalidArgument);
      EXPECT_EQ(mendBootstrapSend(bs, 1, 1, nullptr, 4), ncclInvalidArgument);
      EXPECT_EQ(mendBootstrapSend(nullptr, 1, 1, &v, sizeof(v)), ncclInvalidArgument);
    } else {
      uint32_t w;
      EXPECT_EQ(mendBootstrapRecv(bs, 0, 1, &w, sizeof(w)), ncclInternalError);
      EXPECT_EQ(mendBootstrapRecv(bs, 5, 1, &w, sizeof(w)), ncclInvalidArgument);
    }
    EXPECT_EQ(mendBootstrapBarrier(bs, 1), ncclSuccess);
  });
}

TEST_F(BootstrapTest, RecvAny) {
  WithRanks(4, [](int r, ncclComm* c) {
    struct mendBootstrap* bs = c->bootstrap;
    if (r != 0) {
      ASSERT_EQ(mendBootstrapSend(bs, 0, 9, &r, sizeof(r)), ncclSuccess);
    } else {
      std::set<int> from;
      for (int i = 0; i < 3; i++) {
        int peer = -1, v = -1;
        ASSERT_EQ(mendBootstrapRecvAny(bs, 9, &peer, &v, sizeof(v), 10000), ncclSuccess);
        EXPECT_EQ(v, peer);
        from.insert(peer);
      }
      EXPECT_EQ(from, (std::set<int>{1, 2, 3}));
      int peer, v;
      double t0 = nowMs();
      EXPECT_EQ(mendBootstrapRecvAny(bs, 9, &peer, &v, sizeof(v), 50), ncclInProgress);
      double dt = nowMs() - t0;
      EXPECT_GE(dt, 45.0);
      EXPECT_LT(dt, 500.0);
    }
    EXPECT_EQ(mendBootstrapBarrier(bs, 2), ncclSuccess);
  });
}

TEST_F(BootstrapTest, SplitByParity) {
  const int n = 6;
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm*> parents(n), children(n);
  initRanks(parents, 1, &id, [&](int r, ncclComm* parent) {
    std::vector<int> members;
    for (int p = r % 2; p < n; p += 2) members.push_back(p);
    children[r] = newComm(r / 2, (int)members.size());
    ASSERT_EQ(mendBootstrapSplit(parent, children[r], members.data()), ncclSuccess);
    std::vector<int> all(members.size(), -1);
    all[r / 2] = r;
    ASSERT_EQ(mendBootstrapAllGather(children[r]->bootstrap, all.data(), sizeof(int)), ncclSuccess);
    EXPECT_EQ(all, members);
    // The parent still works alongside its children.
    checkAllGather(parent);
  });
  runRanks(n, [&](int r) {
    closeComm(children[r]);
    closeComm(parents[r]);
  });
}

TEST_F(BootstrapTest, ShrinkAroundDeadRank) {
  const int n = 4, dead = 2;
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm*> parents(n), children(n);
  // Every pair has connections after an allgather, including to the rank that dies.
  initRanks(parents, 1, &id, [](int, ncclComm* c) { checkAllGather(c); });
  closeComm(parents[dead], /*abort=*/true);  // its sockets close without BYE, as if the process died
  std::vector<int> members = {0, 1, 3};
  runRanks(n, [&](int r) {
    if (r == dead) return;
    int me = r < dead ? r : r - 1;
    children[r] = newComm(me, 3);
    double t0 = nowMs();
    ASSERT_EQ(mendBootstrapSplit(parents[r], children[r], members.data()), ncclSuccess);
    EXPECT_LT(nowMs() - t0, 2000.0);
    std::vector<int> all(3, -1);
    all[me] = r;
    ASSERT_EQ(mendBootstrapAllGather(children[r]->bootstrap, all.data(), sizeof(int)), ncclSuccess);
    EXPECT_EQ(all, members);
  });
  // The ring neighbours of the dead rank had connections with it: they see it lost (not closed).
  for (int r : {1, 3}) {
    int state = MEND_BS_LINK_OPEN;
    for (int i = 0; i < 100 && state == MEND_BS_LINK_OPEN; i++, usleep(10000))
      state = mendBootstrapPeerState(parents[r]->bootstrap, dead);
    EXPECT_EQ(state, MEND_BS_LINK_LOST) << "rank " << r;
  }
  runRanks(n, [&](int r) {
    if (r == dead) return;
    closeComm(children[r]);
    closeComm(parents[r]);
  });
}

TEST_F(BootstrapTest, ScalableTwoRoots) {
  for (int n : {2, 7, 12}) {
    SCOPED_TRACE(n);
    ncclUniqueId ids[2];
    ASSERT_EQ(mendBootstrapGetUniqueId(&ids[0]), ncclSuccess);
    ASSERT_EQ(mendBootstrapGetUniqueId(&ids[1]), ncclSuccess);
    std::vector<ncclComm*> comms(n);
    initRanks(comms, 2, ids, [](int, ncclComm* c) { checkAllGather(c); });
    closeRanks(comms);
  }
}

TEST_F(BootstrapTest, CommIdIpv4) {
  int port = freePort("127.0.0.1");
  ASSERT_GT(port, 0);
  setEnv("NCCL_COMM_ID", ("127.0.0.1:" + std::to_string(port)).c_str());
  ncclUniqueId a, b;
  ASSERT_EQ(mendBootstrapGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(mendBootstrapGetUniqueId(&b), ncclSuccess);
  EXPECT_EQ(memcmp(&a, &b, sizeof(a)), 0) << "every rank must derive the same id";
  const int n = 3;
  std::vector<ncclComm*> comms(n);
  runRanks(n, [&](int r) {
    if (r != 0) usleep(50 * 1000 * r);  // others may come before or after rank 0 starts the root
    comms[r] = newComm(r, n);
    ASSERT_EQ(mendBootstrapInit(comms[r], 1, r == 2 ? &b : &a), ncclSuccess);
    checkAllGather(comms[r]);
  });
  closeRanks(comms);
  // The same NCCL_COMM_ID serves a second communicator once the first rendezvous is over.
  initRanks(comms, 1, &a, [](int, ncclComm* c) { checkAllGather(c); });
  closeRanks(comms);
}

TEST_F(BootstrapTest, CommIdIpv6) {
  int port = freePort("[::1]");
  if (port <= 0) GTEST_SKIP() << "no IPv6 loopback";
  setEnv("MEND_OOB_IFNAME", nullptr);  // ranks pick the interface on the root's subnet: lo (::1/128)
  setEnv("NCCL_COMM_ID", ("[::1]:" + std::to_string(port)).c_str());
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  const int n = 2;
  std::vector<ncclComm*> comms(n);
  initRanks(comms, 1, &id, [](int, ncclComm* c) {
    EXPECT_EQ(c->bootstrap->listenAddr.sa.sa_family, AF_INET6);
    checkAllGather(c);
  });
  closeRanks(comms);
}

// Where the bootstrap listens: MEND_OOB_IFNAME, else the interface on the subnet of the root's
// address, else NCCL_SOCKET_IFNAME rules (prefix list, ^ exclude, = exact).
TEST_F(BootstrapTest, OobInterfaceChoice) {
  auto boundTo = [](const union mendSocketAddr* near) -> std::string {
    int fd = -1;
    union mendSocketAddr a;
    if (mendBsListenOnOobIface(near, &fd, &a) != ncclSuccess) return "error";
    mendSocketClose(fd);
    char buf[MEND_SOCKET_NAME_MAXLEN];
    std::string s = mendSocketAddrStr(&a, buf);
    return s.substr(0, s.rfind(':'));
  };
  struct mendIface others[4];
  int nOthers = mendFindInterfaces("^lo", others, 4);  // a non-loopback interface, when the machine has one
  union mendSocketAddr lo, nowhere;
  ASSERT_EQ(mendSocketParseAddr("127.0.0.1:1", &lo), ncclSuccess);
  ASSERT_EQ(mendSocketParseAddr("203.0.113.77:1", &nowhere), ncclSuccess);  // TEST-NET-3: no local subnet
  char buf[MEND_SOCKET_NAME_MAXLEN];
  std::string otherIp;
  if (nOthers > 0) {
    otherIp = mendSocketAddrStr(&others[0].addr, buf);
    otherIp = otherIp.substr(0, otherIp.rfind(':'));
  }
  // 1. MEND_OOB_IFNAME wins over the root's subnet and over NCCL_SOCKET_IFNAME.
  setEnv("MEND_OOB_IFNAME", "lo");
  setEnv("NCCL_SOCKET_IFNAME", nOthers > 0 ? others[0].name : "^lo");
  EXPECT_EQ(boundTo(nOthers > 0 ? &others[0].addr : &nowhere), "127.0.0.1");
  setEnv("MEND_OOB_IFNAME", "=no_such_iface0");
  EXPECT_EQ(boundTo(&lo), "error");
  // 2. Without it, the interface whose subnet holds the root's address, whatever NCCL_SOCKET_IFNAME says.
  setEnv("MEND_OOB_IFNAME", nullptr);
  if (nOthers > 0) {
    setEnv("NCCL_SOCKET_IFNAME", "=lo");
    EXPECT_EQ(boundTo(&others[0].addr), otherIp);
    setEnv("NCCL_SOCKET_IFNAME", std::string("=").append(others[0].name).c_str());
    EXPECT_EQ(boundTo(&lo), "127.0.0.1");
  }
  // 3. No subnet holds it (or no root address at all): NCCL_SOCKET_IFNAME rules.
  setEnv("NCCL_SOCKET_IFNAME", "=lo");
  EXPECT_EQ(boundTo(&nowhere), "127.0.0.1");
  EXPECT_EQ(boundTo(nullptr), "127.0.0.1");
  setEnv("NCCL_SOCKET_IFNAME", "l");  // prefix
  EXPECT_EQ(boundTo(nullptr), "127.0.0.1");
  setEnv("NCCL_SOCKET_IFNAME", "=l");  // exact: no interface is called "l"
  EXPECT_EQ(boundTo(nullptr), "error");
  if (nOthers > 0) {
    setEnv("NCCL_SOCKET_IFNAME", "^lo");
    std::string got = boundTo(nullptr);
    EXPECT_NE(got, "127.0.0.1");
    EXPECT_NE(got, "error");
  }
  // The root of ncclGetUniqueId listens by the same rules: its address sits after the 8-byte magic.
  setEnv("NCCL_SOCKET_IFNAME", "=lo");
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  union mendSocketAddr root;
  memcpy(&root, id.internal + sizeof(uint64_t), sizeof(root));
  EXPECT_EQ(std::string(mendSocketAddrStr(&root, buf)).substr(0, 10), "127.0.0.1:");
  setEnv("NCCL_SOCKET_IFNAME", nullptr);
}

TEST_F(BootstrapTest, NranksMismatch) {
  setEnv("MEND_BOOTSTRAP_TIMEOUT", "1500");
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  ncclResult_t res[2];
  runRanks(2, [&](int r) {
    if (r == 1) usleep(100 * 1000);  // rank 0 defines nranks = 2
    ncclComm* c = newComm(r, r == 0 ? 2 : 3);
    double t0 = nowMs();
    res[r] = mendBootstrapInit(c, 1, &id);
    if (r == 1) {
      EXPECT_LT(nowMs() - t0, 1000.0) << "the mismatch is reported at once";
    }
    closeComm(c, true);
  });
  EXPECT_EQ(res[1], ncclInvalidUsage);
  EXPECT_EQ(res[0], ncclRemoteError);  // its peer never arrived: the root gives up after the timeout
}

TEST_F(BootstrapTest, DuplicateRankAndBadMagic) {
  setEnv("MEND_BOOTSTRAP_TIMEOUT", "1000");
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  ncclResult_t res[2];
  runRanks(2, [&](int r) {
    if (r == 1) usleep(100 * 1000);
    ncclComm* c = newComm(0, 2);  // both claim rank 0
    res[r] = mendBootstrapInit(c, 1, &id);
    closeComm(c, true);
  });
  EXPECT_EQ(res[1], ncclInvalidUsage);
  EXPECT_EQ(res[0], ncclRemoteError);
  ncclUniqueId bad;
  ASSERT_EQ(mendBootstrapGetUniqueId(&bad), ncclSuccess);
  bad.internal[0] ^= 0x5a;  // magic no longer the root's
  ncclComm* c = newComm(0, 1);
  EXPECT_EQ(mendBootstrapInit(c, 1, &bad), ncclInvalidUsage);
  closeComm(c, true);
}

TEST_F(BootstrapTest, AbortWhilePeerNeverArrives) {
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  ncclComm* c = newComm(0, 2);
  double tAbort = 0;
  std::thread aborter([&] {
    usleep(200 * 1000);
    tAbort = nowMs();
    mendCommSetAbortFlag(c, 1);
  });
  EXPECT_EQ(mendBootstrapInit(c, 1, &id), ncclInternalError);
  double dt = nowMs() - tAbort;
  aborter.join();
  EXPECT_LT(dt, 150.0);
  closeComm(c, true);
}

TEST_F(BootstrapTest, AbortWhileBlockedInRecv) {
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &id);
  double tAbort = 0;
  std::thread aborter([&] {
    usleep(100 * 1000);
    tAbort = nowMs();
    mendCommSetAbortFlag(comms[0], 1);
  });
  int v;
  EXPECT_EQ(mendBootstrapRecv(comms[0]->bootstrap, 1, 3, &v, sizeof(v)), ncclInternalError);
  EXPECT_LT(nowMs() - tAbort, 100.0);
  aborter.join();
  double t0 = nowMs();
  closeComm(comms[0], true);
  EXPECT_LT(nowMs() - t0, 500.0);
  closeComm(comms[1]);
}

TEST_F(BootstrapTest, CloseIsSeenByPeers) {
  ncclUniqueId id;
  ASSERT_EQ(mendBootstrapGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &id, [](int, ncclComm* c) { checkAllGather(c); });
  double t0 = nowMs();
  closeComm(comms[1]);  // orderly: BYE, then the peer hangs up
  EXPECT_LT(nowMs() - t0, 400.0) << "a live peer answers BYE at once";
  int v;
  t0 = nowMs();
  EXPECT_EQ(mendBootstrapRecv(comms[0]->bootstrap, 1, 3, &v, sizeof(v)), ncclRemoteError);
  EXPECT_LT(nowMs() - t0, 1000.0);
  EXPECT_EQ(mendBootstrapPeerState(comms[0]->bootstrap, 1), MEND_BS_LINK_BYE);
  EXPECT_EQ(mendBootstrapSend(comms[0]->bootstrap, 1, 3, &v, sizeof(v)), ncclRemoteError);
  closeComm(comms[0]);
}

TEST_F(BootstrapTest, DetachedAbortKeepsNetwork) {
  WithRanks(2, [](int r, ncclComm* c) {
    mendBootstrapDetachAbort(c->bootstrap);
    mendCommSetAbortFlag(c, 1);  // a revoked communicator: its bootstrap must keep working
    checkAllGather(c);
    EXPECT_EQ(mendBootstrapBarrier(c->bootstrap, 4), ncclSuccess);
  });
}

}  // namespace
