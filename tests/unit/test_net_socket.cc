// The socket Net over loopback: devices, non-blocking handshake, data of every size and shape,
// back-pressure, ordering, truncation, peer failures, fault injection, close in flight, throughput.
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "misc/fault.h"
#include "misc/param.h"
#include "transport/net.h"
// From transport/net_socket.h (private, C-only: it holds _Atomic fields).
void mendNetSocketResetForTest(void);
}

namespace {

const mendNet_t* N = &mendNetSocket;
const char* kVars[] = {"NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "MEND_SOCKET_CHUNKSIZE",
                       "MEND_SOCKET_INLINE", "MEND_CONNECT_TIMEOUT_MS"};

double nowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void fill(std::vector<char>& v, unsigned seed) {
  for (size_t i = 0; i < v.size(); i++) v[i] = (char)((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}

// Loopback, a known configuration, fresh device discovery; a watchdog kills a hung test.
class NetSocketBase : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = getenv(v);
      saved_.push_back(old ? std::string(old) : std::string("\x01"));
      unsetenv(v);
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    Reconfigure();
    ASSERT_EQ(N->init(&ctx_, 1, mendDebugLog), ncclSuccess);
    alarm(120);  // SIGALRM's default action ends the run: a hang is a failure
  }
  void TearDown() override {
    alarm(0);
    N->finalize(ctx_);
    for (size_t i = 0; i < saved_.size(); i++) {
      if (saved_[i] == "\x01") unsetenv(kVars[i]);
      else setenv(kVars[i], saved_[i].c_str(), 1);
    }
    Reconfigure();
  }
  static void Reconfigure() {
    mendParamResetCache();
    mendNetSocketResetForTest();
  }
  static void SetConfig(int threads, int socks, long chunk = 0, long inl = -1) {
    auto put = [](const char* n, long v) { setenv(n, std::to_string(v).c_str(), 1); };
    put("NCCL_SOCKET_NTHREADS", threads);
    put("NCCL_NSOCKS_PERTHREAD", socks);
    if (chunk > 0) put("MEND_SOCKET_CHUNKSIZE", chunk);
    if (inl >= 0) put("MEND_SOCKET_INLINE", inl);
    Reconfigure();
  }

  // Listen, then call connect and accept until both return a comm; every call must return fast.
  void Connect(void** sc, void** rc, double* maxCallMs = nullptr) {
    char handle[MEND_NET_HANDLE_MAXSIZE] = {};
    void* lc = nullptr;
    *sc = *rc = nullptr;
    ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
    ASSERT_NE(lc, nullptr);
    double worst = 0, t0 = nowMs();
    while ((!*sc || !*rc) && nowMs() - t0 < 10000) {
      double a = nowMs();
      if (!*sc) { ASSERT_EQ(N->connect(ctx_, 0, handle, sc), ncclSuccess); }
      if (!*rc) { ASSERT_EQ(N->accept(lc, rc), ncclSuccess); }
      worst = std::max(worst, nowMs() - a);
    }
    ASSERT_TRUE(*sc && *rc) << "handshake did not complete in 10 s";
    EXPECT_EQ(N->closeListen(lc), ncclSuccess);
    if (maxCallMs) *maxCallMs = worst;
  }

  // Test both requests until done (either may be NULL); returns the first error.
  static ncclResult_t Drive(void* sreq, void* rreq, int* ssize, int* rsize, double timeoutMs = 20000) {
    int sdone = sreq == nullptr, rdone = rreq == nullptr;
    double t0 = nowMs();
    while (!(sdone && rdone)) {
      if (nowMs() - t0 > timeoutMs) return ncclInProgress;
      if (!sdone) {
        ncclResult_t r = N->test(sreq, &sdone, ssize);
        if (r != ncclSuccess) return r;
      }
      if (!rdone) {
        ncclResult_t r = N->test(rreq, &rdone, rsize);
        if (r != ncclSuccess) return r;
      }
    }
    return ncclSuccess;
  }

  // One message of `bytes` into a buffer of `bytes + slack`; checks size, content, untouched tail.
  void Exchange(void* sc, void* rc, size_t bytes, unsigned seed) {
    std::vector<char> src(bytes), dst(bytes + 64, 0x5a);
    fill(src, seed);
    void *smh = nullptr, *rmh = nullptr, *sreq = nullptr, *rreq = nullptr;
    ASSERT_EQ(N->regMr(sc, src.data(), bytes, MEND_PTR_HOST, &smh), ncclSuccess);
    ASSERT_EQ(N->regMr(rc, dst.data(), dst.size(), MEND_PTR_HOST, &rmh), ncclSuccess);
    void* rdata = dst.data();
    size_t rsz = dst.size();
    int tag = 0, ssize = -1, rsize = -1;
    ASSERT_EQ(N->irecv(rc, 1, &rdata, &rsz, &tag, &rmh, &rreq), ncclSuccess);
    ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, smh, &sreq), ncclSuccess);
    ASSERT_TRUE(sreq && rreq);
    ASSERT_EQ(Drive(sreq, rreq, &ssize, &rsize), ncclSuccess) << bytes << " bytes";
    EXPECT_EQ((size_t)rsize, bytes);
    EXPECT_EQ((size_t)ssize, bytes);
    if (bytes > 0) { EXPECT_EQ(memcmp(src.data(), dst.data(), bytes), 0) << bytes << " bytes"; }
    for (size_t i = bytes; i < dst.size(); i++) ASSERT_EQ(dst[i], 0x5a) << "write past the message at " << i;
    EXPECT_EQ(N->deregMr(sc, smh), ncclSuccess);
    EXPECT_EQ(N->deregMr(rc, rmh), ncclSuccess);
  }

  void* ctx_ = nullptr;
  std::vector<std::string> saved_;
};

class NetSocketDev : public NetSocketBase {};
class NetSocketConn : public NetSocketBase {};
class NetSocketData : public NetSocketBase {};
class NetSocketErr : public NetSocketBase {};
class NetSocketPerf : public NetSocketBase {};

TEST_F(NetSocketDev, LoopbackProperties) {
  int ndev = 0;
  ASSERT_EQ(N->devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 1);
  struct mendNetProperties p;
  ASSERT_EQ(N->getProperties(0, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.pciPath, nullptr);  // lo has no backing device
  EXPECT_EQ(p.speed, 10000);      // sysfs cannot tell lo's speed
  EXPECT_EQ(p.ptrSupport, MEND_PTR_HOST);
  EXPECT_NE(p.guid, 0u);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_GE(p.maxComms, 1024);
  EXPECT_EQ(p.maxP2pBytes, (size_t)1 << 30);
  EXPECT_EQ(p.maxCollBytes, (size_t)1 << 30);
  EXPECT_EQ(p.latency, 0.0f);
  EXPECT_EQ(N->getProperties(1, &p), ncclInvalidArgument);
  EXPECT_EQ(N->getProperties(-1, &p), ncclInvalidArgument);
  // A second caller shares the devices.
  void* ctx2 = nullptr;
  ASSERT_EQ(N->init(&ctx2, 2, mendDebugLog), ncclSuccess);
  EXPECT_NE(ctx2, ctx_);
  int ndev2 = 0;
  ASSERT_EQ(N->devices(&ndev2), ncclSuccess);
  EXPECT_EQ(ndev2, ndev);
  struct mendNetProperties q;
  ASSERT_EQ(N->getProperties(0, &q), ncclSuccess);
  EXPECT_EQ(q.guid, p.guid);
  EXPECT_EQ(N->finalize(ctx2), ncclSuccess);
}

TEST_F(NetSocketDev, NoMatchingInterface) {
  setenv("NCCL_SOCKET_IFNAME", "=mend_no_such_if", 1);
  Reconfigure();
  int ndev = -1;
  ASSERT_EQ(N->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 0);
  char handle[MEND_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  EXPECT_EQ(N->listen(ctx_, 0, handle, &lc), ncclInvalidArgument);
  EXPECT_EQ(lc, nullptr);
}

TEST_F(NetSocketDev, UnsupportedMemory) {
  void *sc, *rc;
  Connect(&sc, &rc);
  char buf[64];
  void* mh = (void*)1;
  EXPECT_EQ(N->regMr(sc, buf, sizeof(buf), MEND_PTR_CUDA, &mh), ncclInvalidArgument);
  EXPECT_EQ(mh, nullptr);
  EXPECT_EQ(N->regMr(sc, buf, sizeof(buf), 0x40, &mh), ncclInvalidArgument);
  void* req = (void*)1;
  int sz = 0;
  void* d = buf;
  EXPECT_EQ(N->iflush(rc, 1, &d, &sz, &mh, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

TEST_F(NetSocketConn, HandshakeNeverBlocks) {
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
  // Nothing connected yet: accept returns at once without a comm.
  double t0 = nowMs();
  ASSERT_EQ(N->accept(lc, &rc), ncclSuccess);
  EXPECT_EQ(rc, nullptr);
  EXPECT_LT(nowMs() - t0, 50.0);
  // Poll connect and accept from one thread: only possible if neither blocks.
  double worst = 0;
  t0 = nowMs();
  while ((!sc || !rc) && nowMs() - t0 < 10000) {
    double a = nowMs();
    if (!sc) { ASSERT_EQ(N->connect(ctx_, 0, handle, &sc), ncclSuccess); }
    if (!rc) { ASSERT_EQ(N->accept(lc, &rc), ncclSuccess); }
    worst = std::max(worst, nowMs() - a);
  }
  ASSERT_TRUE(sc && rc);
  EXPECT_LT(worst, 100.0);
  ASSERT_EQ(N->closeListen(lc), ncclSuccess);
  Exchange(sc, rc, 1000, 1);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

TEST_F(NetSocketConn, BadHandleAndDeadListener) {
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void* sc = nullptr;
  EXPECT_EQ(N->connect(ctx_, 0, handle, &sc), ncclInvalidArgument);  // zeroed, not from listen
  // A listener that is gone: connect keeps retrying, then fails within the connect timeout.
  setenv("MEND_CONNECT_TIMEOUT_MS", "500", 1);
  Reconfigure();
  void* lc = nullptr;
  ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
  ASSERT_EQ(N->closeListen(lc), ncclSuccess);
  double t0 = nowMs();
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && !sc && nowMs() - t0 < 5000) r = N->connect(ctx_, 0, handle, &sc);
  EXPECT_NE(r, ncclSuccess);
  EXPECT_EQ(sc, nullptr);
  EXPECT_LT(nowMs() - t0, 3000.0);
}

TEST_F(NetSocketConn, TwoConnectionsOnOneListener) {
  char h1[MEND_NET_HANDLE_MAXSIZE] = {}, h2[MEND_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *s1 = nullptr, *s2 = nullptr, *r1 = nullptr, *r2 = nullptr;
  ASSERT_EQ(N->listen(ctx_, 0, h1, &lc), ncclSuccess);
  memcpy(h2, h1, sizeof(h1));  // each connector keeps its progress in its own copy
  double t0 = nowMs();
  while ((!s1 || !s2 || !r1 || !r2) && nowMs() - t0 < 10000) {
    if (!s1) { ASSERT_EQ(N->connect(ctx_, 0, h1, &s1), ncclSuccess); }
    if (!s2) { ASSERT_EQ(N->connect(ctx_, 0, h2, &s2), ncclSuccess); }
    if (!r1) { ASSERT_EQ(N->accept(lc, &r1), ncclSuccess); }
    else if (!r2) { ASSERT_EQ(N->accept(lc, &r2), ncclSuccess); }
  }
  ASSERT_TRUE(s1 && s2 && r1 && r2);
  ASSERT_EQ(N->closeListen(lc), ncclSuccess);
  // Which accepted comm pairs with which sender is not known: one byte from each tells.
  char a = 'A', b = 'B', got1 = 0, got2 = 0;
  void *q[4] = {}, *d1 = &got1, *d2 = &got2, *mh = nullptr;
  size_t one = 1, one2 = 1;
  int tag = 0, sz;
  ASSERT_EQ(N->irecv(r1, 1, &d1, &one, &tag, &mh, &q[0]), ncclSuccess);
  ASSERT_EQ(N->irecv(r2, 1, &d2, &one2, &tag, &mh, &q[1]), ncclSuccess);
  ASSERT_EQ(N->isend(s1, &a, 1, 0, nullptr, &q[2]), ncclSuccess);
  ASSERT_EQ(N->isend(s2, &b, 1, 0, nullptr, &q[3]), ncclSuccess);
  ASSERT_EQ(Drive(q[2], q[0], &sz, &sz), ncclSuccess);
  ASSERT_EQ(Drive(q[3], q[1], &sz, &sz), ncclSuccess);
  ASSERT_TRUE((got1 == 'A' && got2 == 'B') || (got1 == 'B' && got2 == 'A')) << got1 << got2;
  if (got1 == 'B') std::swap(r1, r2);
  Exchange(s1, r1, 100000, 4);
  Exchange(s2, r2, 100000, 5);
  for (void* s : {s1, s2}) EXPECT_EQ(N->closeSend(s), ncclSuccess);
  for (void* r : {r1, r2}) EXPECT_EQ(N->closeRecv(r), ncclSuccess);
}

// Every size on several connection shapes: (threads, sockets per thread, chunk, inline).
struct Shape {
  int threads, socks;
  long chunk, inl;
};
class NetSocketShapes : public NetSocketBase, public ::testing::WithParamInterface<Shape> {};

TEST_P(NetSocketShapes, SizesAndContent) {
  Shape s = GetParam();
  SetConfig(s.threads, s.socks, s.chunk, s.inl);
  void *sc, *rc;
  Connect(&sc, &rc);
  unsigned seed = 1;
  for (size_t bytes : {(size_t)0, (size_t)1, (size_t)4095, (size_t)1 << 20, (size_t)3 * 1000 * 1001, (size_t)64 << 20})
    Exchange(sc, rc, bytes, seed++);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

INSTANTIATE_TEST_SUITE_P(NetSocket, NetSocketShapes,
                         ::testing::Values(Shape{-2, -2, 0, -1},            // Mend's default
                                           Shape{0, 1, 0, -1},              // caller-driven, one socket
                                           Shape{0, 3, 65536, 0},           // caller-driven, no inline
                                           Shape{2, 2, 4096, 100},          // 4 sockets, tiny chunks
                                           Shape{4, 16, 131072, 16384}));   // 64 sockets

TEST_F(NetSocketData, BackPressureAndManyOutstanding) {
  void *sc, *rc;
  Connect(&sc, &rc);
  const int n = MEND_NET_MAX_REQUESTS;
  const size_t bytes = 200000;
  std::vector<std::vector<char>> src(n, std::vector<char>(bytes)), dst(n, std::vector<char>(bytes));
  std::vector<void*> sreq(n, nullptr), rreq(n, nullptr);
  for (int i = 0; i < n; i++) {
    fill(src[i], 100 + i);
    ASSERT_EQ(N->isend(sc, src[i].data(), bytes, 0, nullptr, &sreq[i]), ncclSuccess);
    ASSERT_NE(sreq[i], nullptr) << i;
  }
  void* extra = (void*)1;
  char x = 0;
  ASSERT_EQ(N->isend(sc, &x, 1, 0, nullptr, &extra), ncclSuccess);
  EXPECT_EQ(extra, nullptr) << "the 33rd isend must be refused with a NULL request";
  for (int i = 0; i < n; i++) {
    void* d = dst[i].data();
    size_t sz = bytes;
    int tag = 0;
    void* mh = nullptr;
    ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &rreq[i]), ncclSuccess);
    ASSERT_NE(rreq[i], nullptr) << i;
  }
  void* d = &x;
  size_t one = 1;
  int tag = 0;
  void* mh = nullptr;
  extra = (void*)1;
  ASSERT_EQ(N->irecv(rc, 1, &d, &one, &tag, &mh, &extra), ncclSuccess);
  EXPECT_EQ(extra, nullptr) << "the 33rd irecv must be refused with a NULL request";
  // Complete in reverse order of posting: test() must not depend on order.
  for (int i = n - 1; i >= 0; i--) {
    int ss, rs;
    ASSERT_EQ(Drive(sreq[i], rreq[i], &ss, &rs), ncclSuccess);
    EXPECT_EQ((size_t)rs, bytes);
    EXPECT_EQ(memcmp(src[i].data(), dst[i].data(), bytes), 0) << i;
  }
  Exchange(sc, rc, 12345, 9);  // slots are free again
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

// 1000 messages, small ones inline and some on the data sockets, pipelined 32 deep; every receive
// must get the message of its posting rank.
TEST_F(NetSocketData, OrderingOf1000) {
  SetConfig(1, 2, 4096, 256);
  void *sc, *rc;
  Connect(&sc, &rc);
  const int total = 1000, window = MEND_NET_MAX_REQUESTS;
  auto sizeOf = [](int i) { return (size_t)(i % 50 == 7 ? 20000 + i : 4 + (i * 37) % 300); };
  std::vector<std::vector<char>> src(total), dst(total);
  std::vector<void*> sreq(total, nullptr), rreq(total, nullptr);
  std::vector<int> sdone(total, 0), rdone(total, 0), rsize(total, -1);
  for (int i = 0; i < total; i++) {
    src[i].resize(sizeOf(i));
    fill(src[i], i);
    memcpy(src[i].data(), &i, sizeof(i));
    dst[i].assign(20000 + total, 0);
  }
  int ns = 0, nr = 0, doneS = 0, doneR = 0;
  double t0 = nowMs();
  while ((doneS < total || doneR < total) && nowMs() - t0 < 30000) {
    while (ns < total && ns - doneS < window) {
      ASSERT_EQ(N->isend(sc, src[ns].data(), src[ns].size(), 0, nullptr, &sreq[ns]), ncclSuccess);
      if (!sreq[ns]) break;
      ns++;
    }
    while (nr < total && nr - doneR < window) {
      void* d = dst[nr].data();
      size_t sz = dst[nr].size();
      int tag = 0;
      void* mh = nullptr;
      ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &rreq[nr]), ncclSuccess);
      if (!rreq[nr]) break;
      nr++;
    }
    for (int i = doneS; i < ns; i++)
      if (!sdone[i]) { int s; ASSERT_EQ(N->test(sreq[i], &sdone[i], &s), ncclSuccess); }
    for (int i = doneR; i < nr; i++)
      if (!rdone[i]) { ASSERT_EQ(N->test(rreq[i], &rdone[i], &rsize[i]), ncclSuccess); }
    while (doneS < ns && sdone[doneS]) doneS++;
    while (doneR < nr && rdone[doneR]) doneR++;
  }
  ASSERT_EQ(doneS, total);
  ASSERT_EQ(doneR, total);
  for (int i = 0; i < total; i++) {
    int idx;
    memcpy(&idx, dst[i].data(), sizeof(idx));
    ASSERT_EQ(idx, i) << "receive " << i << " got message " << idx;
    ASSERT_EQ((size_t)rsize[i], src[i].size()) << i;
    ASSERT_EQ(memcmp(src[i].data(), dst[i].data(), src[i].size()), 0) << i;
  }
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

TEST_F(NetSocketErr, TruncationFailsTheConnection) {
  void *sc, *rc;
  Connect(&sc, &rc);
  for (size_t bytes : {(size_t)1000, (size_t)1 << 20}) {  // inline and on the data sockets
    std::vector<char> src(bytes, 1), dst(bytes / 2);
    void *sreq = nullptr, *rreq = nullptr, *d = dst.data(), *mh = nullptr;
    size_t sz = dst.size();
    int tag = 0, s, r;
    ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &sreq), ncclSuccess);
    ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &rreq), ncclSuccess);
    EXPECT_EQ(Drive(nullptr, rreq, &s, &r), ncclInternalError);
    // The connection stays failed: every later op on it fails.
    void* again = nullptr;
    EXPECT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &again), ncclInternalError);
    EXPECT_EQ(again, nullptr);
    int done = 1;
    EXPECT_EQ(N->test(rreq, &done, &r), ncclInternalError);
    EXPECT_EQ(done, 0);
    EXPECT_EQ(N->closeSend(sc), ncclSuccess);
    EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
    if (bytes == 1000) Connect(&sc, &rc);
  }
}

TEST_F(NetSocketErr, SenderClosesMidTransfer) {
  void *sc, *rc;
  Connect(&sc, &rc);
  const size_t bytes = 64 << 20;
  std::vector<char> src(bytes, 3), dst(bytes);
  void *sreq = nullptr, *rreq = nullptr, *d = dst.data(), *mh = nullptr;
  size_t sz = bytes;
  int tag = 0, s, r, done = 0;
  ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &sreq), ncclSuccess);
  ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &rreq), ncclSuccess);
  ASSERT_EQ(N->test(rreq, &done, &r), ncclSuccess);
  ASSERT_EQ(N->closeSend(sc), ncclSuccess);  // with its send still in flight
  double t0 = nowMs();
  ncclResult_t res = ncclSuccess;
  while (res == ncclSuccess && !done && nowMs() - t0 < 5000) res = N->test(rreq, &done, &r);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(res, ncclRemoteError) << "the receiver must see the peer's close, within 5 s";
  (void)s;
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

TEST_F(NetSocketErr, ReceiverClosesMidTransfer) {
  void *sc, *rc;
  Connect(&sc, &rc);
  const size_t bytes = 64 << 20;
  std::vector<char> src(bytes, 3);
  void* sreq = nullptr;
  int s, done = 0;
  ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &sreq), ncclSuccess);
  ASSERT_EQ(N->test(sreq, &done, &s), ncclSuccess);
  ASSERT_EQ(N->closeRecv(rc), ncclSuccess);  // unread data: the kernel resets the connection
  double t0 = nowMs();
  ncclResult_t res = ncclSuccess;
  while (res == ncclSuccess && !done && nowMs() - t0 < 5000) res = N->test(sreq, &done, &s);
  EXPECT_EQ(done, 0);
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << res;
  void* again = nullptr;
  char x = 0;
  EXPECT_EQ(N->isend(sc, &x, 1, 0, nullptr, &again), res);  // still failed, same code
  EXPECT_EQ(again, nullptr);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
}

TEST_F(NetSocketErr, InjectedIsendFault) {
  void *sc, *rc;
  Connect(&sc, &rc);
  Exchange(sc, rc, 100, 1);
  mendFaultSet("net.isend", 1, 0);
  char buf[100] = {};
  void* sreq = (void*)1;
  EXPECT_EQ(N->isend(sc, buf, sizeof(buf), 0, nullptr, &sreq), ncclSystemError);
  EXPECT_EQ(sreq, nullptr);
  mendFaultClear();
  // The fault failed the connection: later sends fail too, and close still works.
  EXPECT_EQ(N->isend(sc, buf, sizeof(buf), 0, nullptr, &sreq), ncclSystemError);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
  // A fresh connection is unaffected.
  Connect(&sc, &rc);
  Exchange(sc, rc, 100000, 2);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

TEST_F(NetSocketErr, CloseWithRequestsInFlight) {
  SetConfig(2, 2, 65536, 1024);
  for (int round = 0; round < 3; round++) {
    void *sc, *rc;
    Connect(&sc, &rc);
    const size_t bytes = 4 << 20;
    std::vector<char> src(bytes, 1), dst(bytes);
    for (int i = 0; i < 8; i++) {
      void* req;
      ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &req), ncclSuccess);
    }
    for (int i = 0; i < 4; i++) {
      void *req, *d = dst.data(), *mh = nullptr;
      size_t sz = bytes;
      int tag = 0;
      ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &req), ncclSuccess);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(round * 5));
    double t0 = nowMs();
    if (round == 1) {
      EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
      EXPECT_EQ(N->closeSend(sc), ncclSuccess);
    } else {
      EXPECT_EQ(N->closeSend(sc), ncclSuccess);
      EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
    }
    EXPECT_LT(nowMs() - t0, 1000.0) << "close must not wait for the transfers";
  }
}

TEST_F(NetSocketErr, BadArguments) {
  void *sc, *rc;
  Connect(&sc, &rc);
  char buf[16];
  void *req = nullptr, *d = buf, *mh = nullptr;
  size_t sizes[2] = {16, 16};
  void* datas[2] = {buf, buf};
  int tags[2] = {0, 0};
  EXPECT_EQ(N->isend(rc, buf, 16, 0, nullptr, &req), ncclInvalidArgument);  // recv comm
  EXPECT_EQ(N->isend(sc, nullptr, 16, 0, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(N->isend(sc, buf, ((size_t)1 << 30) + 1, 0, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(N->irecv(rc, 2, datas, sizes, tags, nullptr, &req), ncclInvalidArgument);  // maxRecvs is 1
  EXPECT_EQ(N->irecv(sc, 1, &d, sizes, tags, &mh, &req), ncclInvalidArgument);
  int done;
  EXPECT_EQ(N->test(nullptr, &done, nullptr), ncclInvalidArgument);
  char fake[64] = {};
  EXPECT_EQ(N->isend(sc, buf, 16, 0, fake, &req), ncclInvalidArgument);  // not a registration
  // None of these failed the connection.
  Exchange(sc, rc, 16, 1);
  EXPECT_EQ(N->closeSend(rc), ncclInvalidArgument);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

// Throughput of 4 MiB messages between two threads (printed, not asserted; see docs/net.md).
// Like a proxy, a thread whose request is not done yet gives the CPU away before testing again:
// on 2 cores, two threads spinning in test() starve the helpers (and the kernel's TCP work).
double Throughput(void* sc, void* rc, size_t bytes, int iters) {
  std::vector<char> src(bytes), dst(bytes);
  fill(src, 42);
  std::atomic<int> failed{0};
  double t0 = nowMs();
  std::thread rx([&] {
    const int depth = 4;
    std::vector<void*> reqs;
    for (int posted = 0, done = 0; done < iters && !failed;) {
      while (posted < iters && posted - done < depth) {
        void *req = nullptr, *d = dst.data(), *mh = nullptr;
        size_t sz = bytes;
        int tag = 0;
        if (N->irecv(rc, 1, &d, &sz, &tag, &mh, &req) != ncclSuccess) { failed = 1; return; }
        if (!req) break;
        reqs.push_back(req);
        posted++;
      }
      int fin = 0, s;
      if (N->test(reqs[done], &fin, &s) != ncclSuccess) { failed = 1; return; }
      if (fin) done++;
      else sched_yield();
    }
  });
  const int depth = 4;
  std::vector<void*> reqs;
  for (int posted = 0, done = 0; done < iters && !failed;) {
    while (posted < iters && posted - done < depth) {
      void* req = nullptr;
      if (N->isend(sc, src.data(), bytes, 0, nullptr, &req) != ncclSuccess) { failed = 1; break; }
      if (!req) break;
      reqs.push_back(req);
      posted++;
    }
    int fin = 0, s;
    if (N->test(reqs[done], &fin, &s) != ncclSuccess) { failed = 1; break; }
    if (fin) done++;
    else sched_yield();
  }
  rx.join();
  double sec = (nowMs() - t0) / 1e3;
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(memcmp(src.data(), dst.data(), bytes), 0);
  return (double)bytes * iters / sec / 1e9;
}

TEST_F(NetSocketPerf, Throughput4MiB) {
  struct { const char* name; int threads, socks; } cfgs[] = {
      {"1 socket, caller-driven (0 threads)", 0, 1},
      {"2 sockets, caller-driven (0 threads)", 0, 2},
      {"1 socket, 1 helper thread", 1, 1},
      {"default (1 helper thread, 2 sockets)", -2, -2},
      {"2 sockets, 2 helper threads", 2, 1},
      {"4 sockets, 2 helper threads", 2, 2},
  };
  for (auto& c : cfgs) {
    SetConfig(c.threads, c.socks);
    void *sc, *rc;
    Connect(&sc, &rc);
    Throughput(sc, rc, 4 << 20, 16);  // warm-up: TCP buffer autotuning
    std::vector<double> runs;
    for (int r = 0; r < 3; r++) runs.push_back(Throughput(sc, rc, 4 << 20, 96));
    std::sort(runs.begin(), runs.end());
    printf("[ NetSocket ] 4 MiB messages over loopback, %-38s median %.2f GB/s (min %.2f, max %.2f)\n", c.name,
           runs[1], runs[0], runs[2]);
    EXPECT_GT(runs[1], 0.0);
    EXPECT_EQ(N->closeSend(sc), ncclSuccess);
    EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
  }
}

// Small-message latency on the inline path: post, then test both ends from one thread.
TEST_F(NetSocketPerf, SmallMessageLatency) {
  void *sc, *rc;
  Connect(&sc, &rc);
  for (size_t bytes : {(size_t)8, (size_t)4096}) {
    std::vector<char> src(bytes, 7), dst(bytes);
    const int iters = 2000;
    double t0 = nowMs();
    for (int i = 0; i < iters; i++) {
      void *sreq = nullptr, *rreq = nullptr, *d = dst.data(), *mh = nullptr;
      size_t sz = bytes;
      int tag = 0, s, r;
      ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &rreq), ncclSuccess);
      ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &sreq), ncclSuccess);
      ASSERT_EQ(Drive(sreq, rreq, &s, &r), ncclSuccess);
      ASSERT_EQ((size_t)r, bytes);
    }
    printf("[ NetSocket ] %zu-byte message, one thread posting and testing both ends: %.1f us per message\n", bytes,
           (nowMs() - t0) * 1e3 / iters);
  }
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
}

// ---- Two "hosts" (network namespaces) joined by two veth pairs, run by
// tests/integration/test_net_socket_ns.sh: one process per namespace, MEND_NETSOCK_NS_ROLE=send|recv,
// handles and phase markers exchanged as files in MEND_NETSOCK_NS_DIR.  Skipped when run alone.
class NetSocketNs : public NetSocketBase {
 protected:
  void SetUp() override {
    NetSocketBase::SetUp();
    role_ = getenv("MEND_NETSOCK_NS_ROLE") ? getenv("MEND_NETSOCK_NS_ROLE") : "";
    dir_ = getenv("MEND_NETSOCK_NS_DIR") ? getenv("MEND_NETSOCK_NS_DIR") : "";
    if (role_.empty() || dir_.empty()) return;
    setenv("NCCL_SOCKET_IFNAME", getenv("MEND_NETSOCK_NS_IFNAME") ? getenv("MEND_NETSOCK_NS_IFNAME") : "mrail", 1);
    // The connection shape to measure (the base fixture cleared NCCL_SOCKET_NTHREADS and friends).
    if (getenv("MEND_NETSOCK_NS_NTHREADS")) setenv("NCCL_SOCKET_NTHREADS", getenv("MEND_NETSOCK_NS_NTHREADS"), 1);
    if (getenv("MEND_NETSOCK_NS_NSOCKS")) setenv("NCCL_NSOCKS_PERTHREAD", getenv("MEND_NETSOCK_NS_NSOCKS"), 1);
    Reconfigure();
    alarm(90);
  }
  std::string Path(const std::string& name) { return dir_ + "/" + name; }
  void Mark(const std::string& name, const void* data = "", size_t len = 0) {
    std::string tmp = Path(name + ".tmp");
    FILE* f = fopen(tmp.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fwrite(data, 1, len, f), len);
    fclose(f);
    ASSERT_EQ(rename(tmp.c_str(), Path(name).c_str()), 0);
  }
  bool Marked(const std::string& name) { return access(Path(name).c_str(), F_OK) == 0; }
  void WaitMark(const std::string& name, void* data = nullptr, size_t len = 0) {
    double t0 = nowMs();
    while (!Marked(name) && nowMs() - t0 < 30000) usleep(10000);
    ASSERT_TRUE(Marked(name)) << "peer never wrote " << name;
    if (data) {
      FILE* f = fopen(Path(name).c_str(), "rb");
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(fread(data, 1, len, f), len);
      fclose(f);
    }
  }
  std::string role_, dir_;
};

// Keep 4 receives of 4 MiB posted on `rc` until `stop` says so (a stalled rail gives no error here).
static void DrainUntil(void* rc, const std::function<bool()>& stop) {
  std::vector<char> buf(4 << 20);
  std::vector<void*> reqs;
  while (!stop()) {
    while (reqs.size() < 4) {
      void *req = nullptr, *d = buf.data(), *mh = nullptr;
      size_t sz = buf.size();
      int tag = 0;
      if (N->irecv(rc, 1, &d, &sz, &tag, &mh, &req) != ncclSuccess || !req) break;
      reqs.push_back(req);
    }
    int done = 0, s;
    if (reqs.empty() || N->test(reqs.front(), &done, &s) != ncclSuccess) {
      usleep(10000);
      continue;
    }
    if (done) reqs.erase(reqs.begin());
    else usleep(100);
  }
}

TEST_F(NetSocketNs, TwoRailsAndOneFails) {
  if (role_.empty() || dir_.empty()) GTEST_SKIP() << "run by tests/integration/test_net_socket_ns.sh";
  int ndev = 0;
  ASSERT_EQ(N->devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 2) << "two rails expected";
  for (int d = 0; d < 2; d++) {
    struct mendNetProperties p;
    ASSERT_EQ(N->getProperties(d, &p), ncclSuccess);
    EXPECT_EQ(std::string(p.name), "mrail" + std::to_string(d));  // sorted by name
    EXPECT_EQ(p.pciPath, nullptr);                                 // veth: no device
    EXPECT_GT(p.speed, 0);
  }
  void* comm[2] = {nullptr, nullptr};
  bool recv = role_ == "recv";
  if (recv) {
    void* lc[2];
    for (int d = 0; d < 2; d++) {
      char h[MEND_NET_HANDLE_MAXSIZE] = {};
      ASSERT_EQ(N->listen(ctx_, d, h, &lc[d]), ncclSuccess);
      Mark("handle" + std::to_string(d), h, sizeof(h));
    }
    double t0 = nowMs();
    while ((!comm[0] || !comm[1]) && nowMs() - t0 < 30000) {
      for (int d = 0; d < 2; d++) {
        if (!comm[d]) { ASSERT_EQ(N->accept(lc[d], &comm[d]), ncclSuccess); }
      }
      usleep(1000);
    }
    for (int d = 0; d < 2; d++) EXPECT_EQ(N->closeListen(lc[d]), ncclSuccess);
  } else {
    char h[2][MEND_NET_HANDLE_MAXSIZE];
    for (int d = 0; d < 2; d++) WaitMark("handle" + std::to_string(d), h[d], sizeof(h[d]));
    double t0 = nowMs();
    while ((!comm[0] || !comm[1]) && nowMs() - t0 < 30000) {
      for (int d = 0; d < 2; d++) {
        if (!comm[d]) { ASSERT_EQ(N->connect(ctx_, d, h[d], &comm[d]), ncclSuccess); }
      }
      usleep(1000);
    }
  }
  ASSERT_TRUE(comm[0] && comm[1]) << "handshake on both rails";

  // Phase 1: both rails carry data, checked byte for byte (one side sends, the other receives).
  for (int d = 0; d < 2; d++) {
    for (size_t bytes : {(size_t)100, (size_t)64 << 20}) {
      std::vector<char> buf(bytes);
      void *req = nullptr, *d0 = buf.data(), *mh = nullptr;
      size_t sz = bytes;
      int tag = 0, got = -1;
      if (recv) {
        ASSERT_EQ(N->irecv(comm[d], 1, &d0, &sz, &tag, &mh, &req), ncclSuccess);
      } else {
        fill(buf, d * 10 + (unsigned)(bytes & 7));
        ASSERT_EQ(N->isend(comm[d], buf.data(), bytes, 0, nullptr, &req), ncclSuccess);
      }
      ASSERT_NE(req, nullptr);
      ASSERT_EQ(Drive(recv ? nullptr : req, recv ? req : nullptr, &got, &got, 30000), ncclSuccess);
      if (recv) {
        std::vector<char> want(bytes);
        fill(want, d * 10 + (unsigned)(bytes & 7));
        EXPECT_EQ((size_t)got, bytes);
        EXPECT_EQ(memcmp(want.data(), buf.data(), bytes), 0) << "rail " << d;
      }
    }
  }

  // Throughput over rail 0 (printed by the sender; see docs/net.md).
  {
    const size_t bytes = 4 << 20;
    const int warmup = 16, iters = 128;  // warm-up: TCP buffer autotuning
    std::vector<char> buf(bytes, 1);
    std::vector<void*> reqs;
    double t0 = nowMs(), tStart = 0;
    for (int posted = 0, done = 0; done < warmup + iters;) {
      if (done == warmup && tStart == 0) tStart = nowMs();
      while (posted < warmup + iters && posted - done < 4) {
        void *req = nullptr, *d0 = buf.data(), *mh = nullptr;
        size_t sz = bytes;
        int tag = 0;
        if (recv) { ASSERT_EQ(N->irecv(comm[0], 1, &d0, &sz, &tag, &mh, &req), ncclSuccess); }
        else { ASSERT_EQ(N->isend(comm[0], buf.data(), bytes, 0, nullptr, &req), ncclSuccess); }
        if (!req) break;
        reqs.push_back(req);
        posted++;
      }
      int fin = 0, sz;
      ASSERT_EQ(N->test(reqs[done], &fin, &sz), ncclSuccess);
      if (fin) done++;
      else usleep(50);  // like a proxy between polls
      ASSERT_LT(nowMs() - t0, 30000.0);
    }
    if (!recv)
      printf("[ NetSocket ] 4 MiB messages over a veth rail, %s threads x %s sockets: %.2f GB/s\n",
             getenv("NCCL_SOCKET_NTHREADS") ? getenv("NCCL_SOCKET_NTHREADS") : "default",
             getenv("NCCL_NSOCKS_PERTHREAD") ? getenv("NCCL_NSOCKS_PERTHREAD") : "default",
             (double)bytes * iters / (nowMs() - tStart) / 1e6);
  }

  // Phase 2: the receiver's rail 1 goes down (the script does it) while the sender streams on it.
  // With MEND_SOCKET_USER_TIMEOUT_MS the sender's connection fails within bounded time; rail 0 lives.
  if (recv) {
    DrainUntil(comm[1], [&] { return Marked("rail1.failed"); });
  } else {
    std::vector<char> buf(4 << 20, 9);
    std::vector<void*> reqs;
    ncclResult_t res = ncclSuccess;
    int completed = 0;
    double t0 = nowMs(), tDown = 0;
    while (res == ncclSuccess && nowMs() - t0 < 40000) {
      while (reqs.size() < 4) {
        void* req = nullptr;
        res = N->isend(comm[1], buf.data(), buf.size(), 0, nullptr, &req);
        if (res != ncclSuccess || !req) break;
        reqs.push_back(req);
      }
      if (res != ncclSuccess) break;
      int done = 0, s;
      res = N->test(reqs.front(), &done, &s);
      if (done) {
        reqs.erase(reqs.begin());
        if (++completed == 8) { Mark("rail1.streaming"); }
      } else {
        usleep(100);
      }
      if (tDown == 0 && Marked("rail1.down")) tDown = nowMs();
    }
    Mark("rail1.failed");
    EXPECT_TRUE(res == ncclSystemError || res == ncclRemoteError) << "rail 1 failure not seen: " << res;
    ASSERT_GT(tDown, 0) << "the script never took rail 1 down";
    double detectMs = nowMs() - tDown;
    printf("[ NetSocket ] rail 1 failure seen by the sender %.0f ms after the link went down\n", detectMs);
    EXPECT_LT(detectMs, 15000.0);
    int done = 0, s;
    if (!reqs.empty()) { EXPECT_EQ(N->test(reqs.front(), &done, &s), res); }  // the comm stays failed
  }

  // Phase 3: rail 0 still works.
  {
    std::vector<char> buf(1 << 20, 5);
    void *req = nullptr, *d0 = buf.data(), *mh = nullptr;
    size_t sz = buf.size();
    int tag = 0, got = -1;
    if (recv) {
      std::fill(buf.begin(), buf.end(), 0);
      ASSERT_EQ(N->irecv(comm[0], 1, &d0, &sz, &tag, &mh, &req), ncclSuccess);
    } else {
      ASSERT_EQ(N->isend(comm[0], buf.data(), buf.size(), 0, nullptr, &req), ncclSuccess);
    }
    ASSERT_EQ(Drive(recv ? nullptr : req, recv ? req : nullptr, &got, &got, 30000), ncclSuccess);
    if (recv) { EXPECT_EQ(buf[12345], 5); }
  }
  // Close works on a failed or stalled comm, in bounded time.
  double t0 = nowMs();
  for (int d = 0; d < 2; d++) EXPECT_EQ(recv ? N->closeRecv(comm[d]) : N->closeSend(comm[d]), ncclSuccess);
  EXPECT_LT(nowMs() - t0, 3000.0);
}

}  // namespace
