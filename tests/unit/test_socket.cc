// Sockets and interfaces (src/misc/socket.c): address parsing, NCCL_SOCKET_IFNAME rules, interface
// discovery, loopback connect/accept/send/recv, abort flags and time bounds, fault injection.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "mend_internal.h"
#include "unit_util.h"

extern "C" {
#include "misc/fault.h"
}

namespace {

using mendtest::nowMs;

class SocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mendtest::setEnv("NCCL_SOCKET_FAMILY", nullptr);
    alarm(60);  // SIGALRM ends the run: a hang is a failure
  }
  void TearDown() override {
    alarm(0);
    mendFaultClear();
    mendtest::setEnv("NCCL_SOCKET_FAMILY", nullptr);
  }
  // A listener on 127.0.0.1, any port.
  void Listen(int* fd, union mendSocketAddr* bound) {
    union mendSocketAddr a;
    ASSERT_EQ(mendSocketParseAddr("127.0.0.1:0", &a), ncclSuccess);
    ASSERT_EQ(mendSocketListen(&a, fd, bound), ncclSuccess);
  }
  void Pair(int* c, int* s) {
    int lfd;
    union mendSocketAddr bound;
    Listen(&lfd, &bound);
    ASSERT_EQ(mendSocketConnect(&bound, c, nullptr, 2000), ncclSuccess);
    ASSERT_EQ(mendSocketAccept(lfd, s, nullptr, 2000), ncclSuccess);
    mendSocketClose(lfd);
  }
};

TEST_F(SocketTest, ParseIpv4) {
  union mendSocketAddr a;
  ASSERT_EQ(mendSocketParseAddr("127.0.0.1:8080", &a), ncclSuccess);
  EXPECT_EQ(a.sa.sa_family, AF_INET);
  EXPECT_EQ(ntohs(a.sin.sin_port), 8080);
  EXPECT_EQ(ntohl(a.sin.sin_addr.s_addr), 0x7f000001u);
  char buf[MEND_SOCKET_NAME_MAXLEN];
  EXPECT_STREQ(mendSocketAddrStr(&a, buf), "127.0.0.1:8080");
  EXPECT_EQ(mendSocketAddrLen(&a), sizeof(struct sockaddr_in));
}

TEST_F(SocketTest, ParseIpv6Brackets) {
  union mendSocketAddr a;
  ASSERT_EQ(mendSocketParseAddr("[::1]:9000", &a), ncclSuccess);
  EXPECT_EQ(a.sa.sa_family, AF_INET6);
  EXPECT_EQ(ntohs(a.sin6.sin6_port), 9000);
  EXPECT_TRUE(IN6_IS_ADDR_LOOPBACK(&a.sin6.sin6_addr));
  char buf[MEND_SOCKET_NAME_MAXLEN];
  EXPECT_STREQ(mendSocketAddrStr(&a, buf), "[::1]:9000");
  EXPECT_EQ(mendSocketAddrLen(&a), sizeof(struct sockaddr_in6));
  ASSERT_EQ(mendSocketParseAddr("[fe80::1]", &a), ncclSuccess);  // no port: 0
  EXPECT_EQ(ntohs(a.sin6.sin6_port), 0);
  ASSERT_EQ(mendSocketParseAddr("::1", &a), ncclSuccess);  // bare IPv6, no port
  EXPECT_EQ(a.sa.sa_family, AF_INET6);
}

TEST_F(SocketTest, ParseHostName) {
  union mendSocketAddr a;
  ASSERT_EQ(mendSocketParseAddr("localhost:1234", &a), ncclSuccess);
  EXPECT_TRUE(a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6);
  EXPECT_EQ(ntohs(a.sa.sa_family == AF_INET ? a.sin.sin_port : a.sin6.sin6_port), 1234);
}

TEST_F(SocketTest, ParseRejectsBadInput) {
  union mendSocketAddr a;
  const char* bad[] = {"", "1.2.3.4:99999", "1.2.3.4:-1", "1.2.3.4:12ab", "[::1", "[::1]x", "[]:80", ":80",
                       "host.invalid.:80", "[zz]:1", "1.2.3.4:"};
  for (const char* s : bad) EXPECT_EQ(mendSocketParseAddr(s, &a), ncclInvalidArgument) << s;
  EXPECT_EQ(mendSocketParseAddr(nullptr, &a), ncclInvalidArgument);
}

TEST_F(SocketTest, IfnameRules) {
  const struct {
    const char* name;  // interface
    const char* rule;  // NCCL_SOCKET_IFNAME
    bool match;        // the interface is selected
  } cases[] = {
      {"eth0", "eth", true},
      {"eth0", "^eth", false},
      {"eth0", "=eth", false},
      {"eth0", "=eth0", true},
      {"eth0", "^=eth0", false},
      {"eth1", "^=eth0", true},
      {"eth10", "^=eth1", true},
      {"eth10", "^eth1", false},
      {"ib0", "eth,ib", true},
      {"rail3", "eth,ib,rail", true},
      {"docker0", "^docker,lo", false},
      {"lo", "^docker,lo", false},
      {"enp1s0", "^docker,lo", true},
      {"anything", nullptr, true},
      {"anything", "", true},
      {"eth0", ",", false},
  };
  for (const auto& c : cases)
    EXPECT_EQ(mendIfaceMatches(c.name, c.rule) != 0, c.match) << c.name << " against " << (c.rule ? c.rule : "(null)");
}

TEST_F(SocketTest, FindLoopback) {
  struct mendIface ifs[8];
  int n = mendFindInterfaces("=lo", ifs, 8);
  ASSERT_EQ(n, 1);
  EXPECT_STREQ(ifs[0].name, "lo");
  EXPECT_EQ(ifs[0].addr.sa.sa_family, AF_INET);  // IPv4 first
  EXPECT_EQ(ifs[0].prefixLen, 8);
  EXPECT_GT(ifs[0].ifIndex, 0);
  EXPECT_EQ(mendFindInterfaces("^lo,=lo", ifs, 0), 0);
  EXPECT_EQ(mendFindInterfaces("=no_such_iface", ifs, 8), 0);
  // Automatic choice never returns zero interfaces on a machine with loopback.
  EXPECT_GE(mendFindInterfaces(nullptr, ifs, 8), 1);
}

TEST_F(SocketTest, FamilyFilter) {
  struct mendIface ifs[4];
  setenv("NCCL_SOCKET_FAMILY", "AF_INET", 1);
  mendParamResetCache();
  ASSERT_EQ(mendFindInterfaces("=lo", ifs, 4), 1);
  EXPECT_EQ(ifs[0].addr.sa.sa_family, AF_INET);
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  mendParamResetCache();
  int n = mendFindInterfaces("=lo", ifs, 4);
  if (n == 1) EXPECT_EQ(ifs[0].addr.sa.sa_family, AF_INET6);  // machines without IPv6 find none
  else EXPECT_EQ(n, 0);
}

TEST_F(SocketTest, SubnetMatch) {
  union mendSocketAddr a;
  struct mendIface iface;
  ASSERT_EQ(mendSocketParseAddr("127.1.2.3:5", &a), ncclSuccess);
  ASSERT_TRUE(mendFindInterfaceForRemote(&a, &iface));
  EXPECT_STREQ(iface.name, "lo");
  // Never loopback's subnet; other interfaces may hold it on a test network.
  ASSERT_EQ(mendSocketParseAddr("203.0.113.77:5", &a), ncclSuccess);
  if (mendFindInterfaceForRemote(&a, &iface)) {
    EXPECT_STRNE(iface.name, "lo");
  }
  // A host route (/32) and a /128 match only their own address.
  ASSERT_EQ(mendSocketParseAddr("[::1]:5", &a), ncclSuccess);
  if (mendFindInterfaceForRemote(&a, &iface)) {
    EXPECT_STREQ(iface.name, "lo");
  }
  ASSERT_EQ(mendSocketParseAddr("[::2]:5", &a), ncclSuccess);
  if (mendFindInterfaceForRemote(&a, &iface)) {
    EXPECT_STRNE(iface.name, "lo");
  }
}

TEST_F(SocketTest, LoopbackTransfer) {
  int c, s;
  Pair(&c, &s);
  std::vector<char> out(4 << 20), in(out.size());
  for (size_t i = 0; i < out.size(); i++) out[i] = (char)(i * 7 + (i >> 13));
  std::thread sender([&] { EXPECT_EQ(mendSocketSendAll(c, out.data(), out.size(), nullptr, 5000), ncclSuccess); });
  EXPECT_EQ(mendSocketRecvAll(s, in.data(), in.size(), nullptr, 5000), ncclSuccess);
  sender.join();
  EXPECT_EQ(memcmp(in.data(), out.data(), out.size()), 0);
  mendSocketClose(c);
  // Peer closed: the receiver sees ncclRemoteError, not a hang.
  char b;
  EXPECT_EQ(mendSocketRecvAll(s, &b, 1, nullptr, 2000), ncclRemoteError);
  mendSocketClose(s);
}

TEST_F(SocketTest, Ipv6Loopback) {
  union mendSocketAddr a, bound;
  ASSERT_EQ(mendSocketParseAddr("[::1]:0", &a), ncclSuccess);
  int lfd;
  if (mendSocketListen(&a, &lfd, &bound) != ncclSuccess) GTEST_SKIP() << "no IPv6 loopback here";
  int c, s;
  ASSERT_EQ(mendSocketConnect(&bound, &c, nullptr, 2000), ncclSuccess);
  ASSERT_EQ(mendSocketAccept(lfd, &s, nullptr, 2000), ncclSuccess);
  uint64_t v = 0x1122334455667788ULL, w = 0;
  EXPECT_EQ(mendSocketSendAll(c, &v, sizeof(v), nullptr, 1000), ncclSuccess);
  EXPECT_EQ(mendSocketRecvAll(s, &w, sizeof(w), nullptr, 1000), ncclSuccess);
  EXPECT_EQ(v, w);
  mendSocketClose(c);
  mendSocketClose(s);
  mendSocketClose(lfd);
}

TEST_F(SocketTest, AbortInterruptsAccept) {
  int lfd;
  union mendSocketAddr bound;
  Listen(&lfd, &bound);
  volatile int flag = 0;
  double t0 = nowMs(), tAbort = 0;
  std::thread aborter([&] {
    usleep(200 * 1000);
    tAbort = nowMs();
    __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
  });
  int fd = -1;
  EXPECT_EQ(mendSocketAccept(lfd, &fd, &flag, -1), ncclInternalError);
  double tEnd = nowMs();
  aborter.join();
  EXPECT_LT(tEnd - tAbort, 100.0) << "abort noticed too late";
  EXPECT_GE(tEnd - t0, 190.0);
  mendSocketClose(lfd);
}

TEST_F(SocketTest, AbortInterruptsRecv) {
  int c, s;
  Pair(&c, &s);
  volatile int flag = 0;
  double tAbort = 0;
  std::thread aborter([&] {
    usleep(100 * 1000);
    tAbort = nowMs();
    __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
  });
  char buf[16];
  EXPECT_EQ(mendSocketRecvAll(s, buf, sizeof(buf), &flag, -1), ncclInternalError);
  double tEnd = nowMs();
  aborter.join();
  EXPECT_LT(tEnd - tAbort, 100.0);
  mendSocketClose(c);
  mendSocketClose(s);
}

TEST_F(SocketTest, AcceptTimeout) {
  int lfd;
  union mendSocketAddr bound;
  Listen(&lfd, &bound);
  int fd = -1;
  double t0 = nowMs();
  EXPECT_EQ(mendSocketAccept(lfd, &fd, nullptr, 100), ncclRemoteError);
  double dt = nowMs() - t0;
  EXPECT_GE(dt, 95.0);
  EXPECT_LT(dt, 1000.0);
  EXPECT_EQ(mendSocketAccept(lfd, &fd, nullptr, 0), ncclInProgress);  // one quiet attempt
  mendSocketClose(lfd);
}

TEST_F(SocketTest, ConnectRefusedTimesOut) {
  int lfd;
  union mendSocketAddr bound;
  Listen(&lfd, &bound);
  mendSocketClose(lfd);  // the port is now closed: every attempt is refused
  int fd = -1;
  double t0 = nowMs();
  EXPECT_EQ(mendSocketConnect(&bound, &fd, nullptr, 300), ncclRemoteError);
  double dt = nowMs() - t0;
  EXPECT_GE(dt, 280.0);
  EXPECT_LT(dt, 2000.0);
}

TEST_F(SocketTest, ConnectRetriesUntilListenerAppears) {
  int lfd;
  union mendSocketAddr bound;
  Listen(&lfd, &bound);
  mendSocketClose(lfd);
  std::atomic<int> s{-1};
  std::thread late([&] {
    usleep(150 * 1000);
    int fd;
    union mendSocketAddr b2;
    if (mendSocketListen(&bound, &fd, &b2) == ncclSuccess) s = fd;
  });
  int fd = -1;
  EXPECT_EQ(mendSocketConnect(&bound, &fd, nullptr, 3000), ncclSuccess);
  late.join();
  ASSERT_GE(s.load(), 0);
  mendSocketClose(fd);
  mendSocketClose(s.load());
}

TEST_F(SocketTest, ProgressNonBlocking) {
  int c, s;
  Pair(&c, &s);
  char buf[8];
  size_t off = 0;
  EXPECT_EQ(mendSocketProgress(s, 0, buf, sizeof(buf), &off), ncclSuccess);  // nothing there: no progress
  EXPECT_EQ(off, 0u);
  EXPECT_EQ(mendSocketSendAll(c, "abcd", 4, nullptr, 1000), ncclSuccess);
  for (int i = 0; i < 1000 && off < 4; i++) {
    ASSERT_EQ(mendSocketProgress(s, 0, buf, 4, &off), ncclSuccess);
    usleep(1000);
  }
  EXPECT_EQ(off, 4u);
  EXPECT_EQ(memcmp(buf, "abcd", 4), 0);
  mendSocketClose(c);
  mendSocketClose(s);
}

TEST_F(SocketTest, FaultInjection) {
  int lfd;
  union mendSocketAddr bound;
  Listen(&lfd, &bound);
  mendFaultSet("socket.connect", 1, 0);
  int fd = -1;
  EXPECT_EQ(mendSocketConnect(&bound, &fd, nullptr, 1000), ncclSystemError);
  EXPECT_EQ(mendSocketConnect(&bound, &fd, nullptr, 1000), ncclSuccess);  // only the first call fails
  int s;
  ASSERT_EQ(mendSocketAccept(lfd, &s, nullptr, 1000), ncclSuccess);
  mendFaultSet("socket.send", 1, 0);
  EXPECT_EQ(mendSocketSendAll(fd, "x", 1, nullptr, 1000), ncclSystemError);
  mendFaultSet("socket.recv", 1, 0);
  char b;
  EXPECT_EQ(mendSocketRecvAll(s, &b, 1, nullptr, 1000), ncclSystemError);
  mendSocketClose(fd);
  mendSocketClose(s);
  mendSocketClose(lfd);
}

}  // namespace
