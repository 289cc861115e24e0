// The socket Net over loopback: devices, non-blocking handshake, truncation, peer failures, fault
// injection, close in flight, bad arguments, and two "hosts" in network namespaces with a failing
// rail.  Data of every size and shape, ordering and throughput are in test_net_socket_data.cc.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "net_socket_fixture.h"
// The handle's layout (C11 header with _Atomic fields, read as test_wire.cc does).
#define _Atomic volatile
extern "C" {
#include "transport/net_socket.h"
}
#undef _Atomic

extern "C" {
#include "misc/fault.h"
}

namespace {

class NetSocketDev : public NetSocketBase {};
class NetSocketConn : public NetSocketBase {};
class NetSocketErr : public NetSocketBase {};

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

// NCCL keeps net handles in char arrays inside its structs: listen and connect take a handle at any
// address (a typed access to a misaligned one is undefined behaviour, flagged by UBSan).
TEST_F(NetSocketConn, HandleAtAnyAlignment) {
  alignas(16) char buf[MEND_NET_HANDLE_MAXSIZE + 16];
  for (int off : {1, 4, 12}) {
    memset(buf, 0, sizeof(buf));
    char* handle = buf + off;
    void *lc = nullptr, *sc = nullptr, *rc = nullptr;
    ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
    double t0 = nowMs();
    while ((!sc || !rc) && nowMs() - t0 < 10000) {
      if (!sc) { ASSERT_EQ(N->connect(ctx_, 0, handle, &sc), ncclSuccess); }
      if (!rc) { ASSERT_EQ(N->accept(lc, &rc), ncclSuccess); }
    }
    ASSERT_TRUE(sc && rc) << "offset " << off;
    ASSERT_EQ(N->closeListen(lc), ncclSuccess);
    Exchange(sc, rc, 100000, off);
    EXPECT_EQ(N->closeSend(sc), ncclSuccess);
    EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
  }
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

// Connect progress travels in the handle (as in NCCL), but a handle also comes from the network: a
// handle claiming progress that no connect of this process started is refused, never dereferenced.
TEST_F(NetSocketConn, ForgedConnectProgressIsRefused) {
  char handle[MEND_NET_HANDLE_MAXSIZE] = {}, forged[MEND_NET_HANDLE_MAXSIZE];
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
  for (int state : {1, 2, -1}) {
    memcpy(forged, handle, sizeof(handle));
    struct mendSocketHandle h;
    memcpy(&h, forged, sizeof(h));
    h.stage.state = state;
    h.stage.comm = (struct mendSocketComm*)(uintptr_t)0x1000;  // any address: must never be read
    memcpy(forged, &h, sizeof(h));
    EXPECT_EQ(N->connect(ctx_, 0, forged, &sc), ncclInvalidArgument) << "state " << state;
    EXPECT_EQ(sc, nullptr);
  }
  // The listener is untouched: a connect with the handle as listen made it still completes.
  double t0 = nowMs();
  while ((!sc || !rc) && nowMs() - t0 < 10000) {
    if (!sc) { ASSERT_EQ(N->connect(ctx_, 0, handle, &sc), ncclSuccess); }
    if (!rc) { ASSERT_EQ(N->accept(lc, &rc), ncclSuccess); }
  }
  ASSERT_TRUE(sc && rc);
  // A copy of the finished handle (progress cleared) cannot resume a connect that ended either.
  EXPECT_EQ(N->closeListen(lc), ncclSuccess);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
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
    // One buffer per receive: receives in flight at once are written at once, by different helpers.
    std::vector<char> src(bytes, 1);
    std::vector<std::vector<char>> dst(4, std::vector<char>(bytes));
    for (int i = 0; i < 8; i++) {
      void* req;
      ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &req), ncclSuccess);
    }
    for (int i = 0; i < 4; i++) {
      void *req, *d = dst[i].data(), *mh = nullptr;
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

static double cpuMs() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

// A connection that failed with data tasks still queued: its helpers sleep until close (they spun on
// the queued tasks, a core each), and close still returns at once.
TEST_F(NetSocketErr, FailedConnectionHelpersSleep) {
  SetConfig(2, 2, 65536);
  void *sc, *rc;
  Connect(&sc, &rc);
  const size_t bytes = 64 << 20;
  std::vector<char> src(bytes, 1), dst(bytes);
  void *sreq, *rreq, *d = dst.data(), *mh = nullptr;
  size_t sz = bytes;
  int tag = 0, done = 0;
  ASSERT_EQ(N->irecv(rc, 1, &d, &sz, &tag, &mh, &rreq), ncclSuccess);
  ASSERT_EQ(N->isend(sc, src.data(), bytes, 0, nullptr, &sreq), ncclSuccess);  // sends the header now
  ASSERT_EQ(N->test(rreq, &done, nullptr), ncclSuccess);  // reads it: the helpers get the data tasks
  ASSERT_FALSE(done);
  mendFaultSet("net.test", 1, 0);
  EXPECT_EQ(N->test(rreq, &done, nullptr), ncclSystemError);  // the receiving end fails for good
  mendFaultClear();
  double cpu0 = cpuMs();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  double used = cpuMs() - cpu0;
  EXPECT_LT(used, 100.0) << "threads of a failed connection used " << used << " ms of CPU in 300 ms";
  double t0 = nowMs();
  EXPECT_EQ(N->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(N->closeSend(sc), ncclSuccess);
  EXPECT_LT(nowMs() - t0, 1000.0);
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
// ---- Two "hosts" (network namespaces) joined by two veth pairs, run by
// tests/integration/test_net_socket_ns.sh: one process per namespace, MEND_NETSOCK_NS_ROLE=send|recv,
// handles and phase markers exchanged as files in MEND_NETSOCK_NS_DIR.  Skipped when run alone.

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

class NetSocketNs : public NetSocketBase {
 protected:
  void SetUp() override {
    NetSocketBase::SetUp();
    role_ = getenv("MEND_NETSOCK_NS_ROLE") ? getenv("MEND_NETSOCK_NS_ROLE") : "";
    dir_ = getenv("MEND_NETSOCK_NS_DIR") ? getenv("MEND_NETSOCK_NS_DIR") : "";
    recv_ = role_ == "recv";
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

  // The two rails are the Net's devices, sorted by name.
  void CheckRails() {
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
  }

  // One comm per rail: the receiver listens and publishes the handles, the sender connects.
  void ConnectRails() {
    if (recv_) {
      void* lc[2];
      for (int d = 0; d < 2; d++) {
        char h[MEND_NET_HANDLE_MAXSIZE] = {};
        ASSERT_EQ(N->listen(ctx_, d, h, &lc[d]), ncclSuccess);
        Mark("handle" + std::to_string(d), h, sizeof(h));
      }
      double t0 = nowMs();
      while ((!comm_[0] || !comm_[1]) && nowMs() - t0 < 30000) {
        for (int d = 0; d < 2; d++) {
          if (!comm_[d]) { ASSERT_EQ(N->accept(lc[d], &comm_[d]), ncclSuccess); }
        }
        usleep(1000);
      }
      for (int d = 0; d < 2; d++) EXPECT_EQ(N->closeListen(lc[d]), ncclSuccess);
    } else {
      char h[2][MEND_NET_HANDLE_MAXSIZE];
      for (int d = 0; d < 2; d++) WaitMark("handle" + std::to_string(d), h[d], sizeof(h[d]));
      double t0 = nowMs();
      while ((!comm_[0] || !comm_[1]) && nowMs() - t0 < 30000) {
        for (int d = 0; d < 2; d++) {
          if (!comm_[d]) { ASSERT_EQ(N->connect(ctx_, d, h[d], &comm_[d]), ncclSuccess); }
        }
        usleep(1000);
      }
    }
    ASSERT_TRUE(comm_[0] && comm_[1]) << "handshake on both rails";
  }

  // Phase 1: both rails carry data, checked byte for byte (one side sends, the other receives).
  void CheckDataOnRails() {
    for (int d = 0; d < 2; d++) {
      for (size_t bytes : {(size_t)100, (size_t)64 << 20}) {
        std::vector<char> buf(bytes);
        void *req = nullptr, *d0 = buf.data(), *mh = nullptr;
        size_t sz = bytes;
        int tag = 0, got = -1;
        if (recv_) {
          ASSERT_EQ(N->irecv(comm_[d], 1, &d0, &sz, &tag, &mh, &req), ncclSuccess);
        } else {
          fill(buf, d * 10 + (unsigned)(bytes & 7));
          ASSERT_EQ(N->isend(comm_[d], buf.data(), bytes, 0, nullptr, &req), ncclSuccess);
        }
        ASSERT_NE(req, nullptr);
        ASSERT_EQ(Drive(recv_ ? nullptr : req, recv_ ? req : nullptr, &got, &got, 30000), ncclSuccess);
        if (recv_) {
          std::vector<char> want(bytes);
          fill(want, d * 10 + (unsigned)(bytes & 7));
          EXPECT_EQ((size_t)got, bytes);
          EXPECT_EQ(memcmp(want.data(), buf.data(), bytes), 0) << "rail " << d;
        }
      }
    }
  }

  // Throughput over rail 0 (printed by the sender; see docs/net.md).
  void MeasureRail0() {
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
        if (recv_) { ASSERT_EQ(N->irecv(comm_[0], 1, &d0, &sz, &tag, &mh, &req), ncclSuccess); }
        else { ASSERT_EQ(N->isend(comm_[0], buf.data(), bytes, 0, nullptr, &req), ncclSuccess); }
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
    if (!recv_)
      printf("[ NetSocket ] 4 MiB messages over a veth rail, %s threads x %s sockets: %.2f GB/s\n",
             getenv("NCCL_SOCKET_NTHREADS") ? getenv("NCCL_SOCKET_NTHREADS") : "default",
             getenv("NCCL_NSOCKS_PERTHREAD") ? getenv("NCCL_NSOCKS_PERTHREAD") : "default",
             (double)bytes * iters / (nowMs() - tStart) / 1e6);
  }

  // Phase 2, sender: stream on rail 1 until its connection fails (the script takes the receiver's
  // rail 1 down meanwhile); the failure must be seen in bounded time, and the comm stays failed.
  void StreamUntilRail1Fails() {
    std::vector<char> buf(4 << 20, 9);
    std::vector<void*> reqs;
    ncclResult_t res = ncclSuccess;
    int completed = 0;
    double t0 = nowMs(), tDown = 0;
    while (res == ncclSuccess && nowMs() - t0 < 40000) {
      while (reqs.size() < 4) {
        void* req = nullptr;
        res = N->isend(comm_[1], buf.data(), buf.size(), 0, nullptr, &req);
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
  void CheckRail0() {
    std::vector<char> buf(1 << 20, 5);
    void *req = nullptr, *d0 = buf.data(), *mh = nullptr;
    size_t sz = buf.size();
    int tag = 0, got = -1;
    if (recv_) {
      std::fill(buf.begin(), buf.end(), 0);
      ASSERT_EQ(N->irecv(comm_[0], 1, &d0, &sz, &tag, &mh, &req), ncclSuccess);
    } else {
      ASSERT_EQ(N->isend(comm_[0], buf.data(), buf.size(), 0, nullptr, &req), ncclSuccess);
    }
    ASSERT_EQ(Drive(recv_ ? nullptr : req, recv_ ? req : nullptr, &got, &got, 30000), ncclSuccess);
    if (recv_) { EXPECT_EQ(buf[12345], 5); }
  }

  std::string role_, dir_;
  bool recv_ = false;                  // this process is the receiver
  void* comm_[2] = {nullptr, nullptr};  // one comm per rail
};

TEST_F(NetSocketNs, TwoRailsAndOneFails) {
  if (role_.empty() || dir_.empty()) GTEST_SKIP() << "run by tests/integration/test_net_socket_ns.sh";
  ASSERT_NO_FATAL_FAILURE(CheckRails());
  ASSERT_NO_FATAL_FAILURE(ConnectRails());
  ASSERT_NO_FATAL_FAILURE(CheckDataOnRails());
  ASSERT_NO_FATAL_FAILURE(MeasureRail0());
  // Phase 2: the receiver's rail 1 goes down (the script does it) while the sender streams on it.
  // With MEND_SOCKET_USER_TIMEOUT_MS the sender's connection fails within bounded time; rail 0 lives.
  if (recv_) {
    DrainUntil(comm_[1], [&] { return Marked("rail1.failed"); });
  } else {
    ASSERT_NO_FATAL_FAILURE(StreamUntilRail1Fails());
  }
  ASSERT_NO_FATAL_FAILURE(CheckRail0());
  // Close works on a failed or stalled comm, in bounded time.
  double t0 = nowMs();
  for (int d = 0; d < 2; d++) EXPECT_EQ(recv_ ? N->closeRecv(comm_[d]) : N->closeSend(comm_[d]), ncclSuccess);
  EXPECT_LT(nowMs() - t0, 3000.0);
}

}  // namespace
