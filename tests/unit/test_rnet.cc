// The resilient net over a test base Net: K fake devices that all ride the socket Net on loopback,
// each of which can be made to fail (every call errors, as when the NIC dies under both ends) or to
// swallow control messages (acknowledgements lost).  Checks: ordering, exactly-once delivery under
// replay, chain walking, one-sided fencing, all-paths-dead error within a bound.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "unit_util.h"

extern "C" {
#include "misc/param.h"
#include "resilience/rnet.h"
#include "transport/net.h"
void mendNetSocketResetForTest(void);
}

namespace {

using mendtest::nowMs;

// ---------------------------------------------------------------- the test base Net
const mendNet_t* S = &mendNetSocket;
const int kMaxDevs = 4;
int gDevs = 3;
std::atomic<int> gDead[kMaxDevs];      // every call on the device fails
const size_t kCtrlBytes = 24;          // sizeof(struct rnetCtrl): an isend of this size is a control message
std::atomic<int> gMute[kMaxDevs];      // control messages are swallowed
std::atomic<long> gSends[kMaxDevs];    // isends of data (any other size) per device

struct WComm { int dev; void* inner; std::set<struct WReq*> reqs; };
struct WReq { WComm* c; void* inner; int fake; size_t size; };

ncclResult_t wInit(void** ctx, uint64_t id, mendDebugLogger_t l) { return S->init(ctx, id, l); }
ncclResult_t wDevices(int* n) { *n = gDevs; return ncclSuccess; }
ncclResult_t wProps(int dev, struct mendNetProperties* p) { return S->getProperties(0, p); }
ncclResult_t wListen(void* ctx, int dev, void* handle, void** lc) {
  if (gDead[dev]) return ncclSystemError;
  WComm* w = new WComm{dev, nullptr, {}};
  ncclResult_t r = S->listen(ctx, 0, handle, &w->inner);
  if (r != ncclSuccess) { delete w; return r; }
  *lc = w;
  return ncclSuccess;
}
ncclResult_t wConnect(void* ctx, int dev, void* handle, void** sc) {
  *sc = nullptr;
  if (gDead[dev]) return ncclSystemError;
  void* inner = nullptr;
  ncclResult_t r = S->connect(ctx, 0, handle, &inner);
  if (r == ncclSuccess && inner) *sc = new WComm{dev, inner, {}};
  return r;
}
ncclResult_t wAccept(void* lc, void** rc) {
  WComm* l = (WComm*)lc;
  *rc = nullptr;
  if (gDead[l->dev]) return ncclSystemError;
  void* inner = nullptr;
  ncclResult_t r = S->accept(l->inner, &inner);
  if (r == ncclSuccess && inner) *rc = new WComm{l->dev, inner, {}};
  return r;
}
ncclResult_t wRegMr(void* c, void* d, size_t s, int t, void** mh) { return S->regMr(((WComm*)c)->inner, d, s, t, mh); }
ncclResult_t wDeregMr(void* c, void* mh) { return S->deregMr(((WComm*)c)->inner, mh); }
ncclResult_t wIsend(void* c, void* d, size_t s, int tag, void* mh, void** req) {
  WComm* w = (WComm*)c;
  *req = nullptr;
  if (gDead[w->dev]) return ncclSystemError;
  if (s == kCtrlBytes && gMute[w->dev]) {  // a control message that never arrives
    WReq* q = new WReq{w, nullptr, 1, s};
    w->reqs.insert(q);
    *req = q;
    return ncclSuccess;
  }
  void* inner = nullptr;
  ncclResult_t r = S->isend(w->inner, d, s, tag, mh, &inner);
  if (r != ncclSuccess || !inner) return r;
  if (s != kCtrlBytes) gSends[w->dev]++;
  WReq* q = new WReq{w, inner, 0, s};
  w->reqs.insert(q);
  *req = q;
  return ncclSuccess;
}
ncclResult_t wIrecv(void* c, int n, void** d, size_t* s, int* t, void** mh, void** req) {
  WComm* w = (WComm*)c;
  *req = nullptr;
  if (gDead[w->dev]) return ncclSystemError;
  void* inner = nullptr;
  ncclResult_t r = S->irecv(w->inner, n, d, s, t, mh, &inner);
  if (r != ncclSuccess || !inner) return r;
  WReq* q = new WReq{w, inner, 0, 0};
  w->reqs.insert(q);
  *req = q;
  return ncclSuccess;
}
ncclResult_t wIflush(void*, int, void**, int*, void**, void** req) { *req = nullptr; return ncclSuccess; }
ncclResult_t wTest(void* req, int* done, int* sizes) {
  WReq* q = (WReq*)req;
  *done = 0;
  if (gDead[q->c->dev]) return ncclSystemError;
  if (q->fake) {
    *done = 1;
    if (sizes) *sizes = (int)q->size;
  } else {
    ncclResult_t r = S->test(q->inner, done, sizes);
    if (r != ncclSuccess) return r;
  }
  if (*done) { q->c->reqs.erase(q); delete q; }
  return ncclSuccess;
}
void wFree(WComm* w) { for (WReq* q : w->reqs) delete q; delete w; }
ncclResult_t wCloseSend(void* c) { ncclResult_t r = S->closeSend(((WComm*)c)->inner); wFree((WComm*)c); return r; }
ncclResult_t wCloseRecv(void* c) { ncclResult_t r = S->closeRecv(((WComm*)c)->inner); wFree((WComm*)c); return r; }
ncclResult_t wCloseListen(void* c) { ncclResult_t r = S->closeListen(((WComm*)c)->inner); wFree((WComm*)c); return r; }
ncclResult_t wFinalize(void* ctx) { return S->finalize(ctx); }

const mendNet_t kTestNet = {
  .name = "TestMulti", .init = wInit, .devices = wDevices, .getProperties = wProps, .listen = wListen,
  .connect = wConnect, .accept = wAccept, .regMr = wRegMr, .deregMr = wDeregMr, .isend = wIsend,
  .irecv = wIrecv, .iflush = wIflush, .test = wTest, .closeSend = wCloseSend, .closeRecv = wCloseRecv,
  .closeListen = wCloseListen, .finalize = wFinalize,
};

const mendNet_t* R = &mendNetResilient;

// ---------------------------------------------------------------- fixture
class RnetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.SaveAndUnset("NCCL_SOCKET_IFNAME");
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    mendParamResetCache();
    mendNetSocketResetForTest();
    for (int d = 0; d < kMaxDevs; d++) gDead[d] = gMute[d] = 0, gSends[d] = 0;
    gDevs = 3;
    mendRnetSetBase(&kTestNet);
    ASSERT_EQ(R->init(&ctx_, 7, mendDebugLog), ncclSuccess);
    alarm(120);  // a hang ends the run (SIGALRM) and so fails
  }
  void TearDown() override {
    alarm(0);
    if (sc_) R->closeSend(sc_);
    if (rc_) R->closeRecv(rc_);
    R->finalize(ctx_);
    mendRnetSetBase(nullptr);
    for (int d = 0; d < kMaxDevs; d++) gDead[d] = gMute[d] = 0;
    env_.Restore();
    mendParamResetCache();
    mendNetSocketResetForTest();
  }

  // Start over with `devs` test devices (the device count is read at init).
  void Reinit(int devs) {
    gDevs = devs;
    R->finalize(ctx_);
    ASSERT_EQ(R->init(&ctx_, 7, mendDebugLog), ncclSuccess);
  }

  void Connect(int dev = 0) {
    char handle[MEND_NET_HANDLE_MAXSIZE] = {};
    void* lc = nullptr;
    ASSERT_EQ(R->listen(ctx_, dev, handle, &lc), ncclSuccess);
    double t0 = nowMs();
    while ((!sc_ || !rc_) && nowMs() - t0 < 10000) {
      if (!sc_) { ASSERT_EQ(R->connect(ctx_, dev, handle, &sc_), ncclSuccess); }
      if (!rc_) { ASSERT_EQ(R->accept(lc, &rc_), ncclSuccess); }
    }
    ASSERT_TRUE(sc_ && rc_) << "handshake did not complete in 10 s";
    EXPECT_EQ(R->closeListen(lc), ncclSuccess);
  }

  static size_t SizeOf(int i) {  // mixed sizes, never kCtrlBytes
    static const size_t k[] = {1, 100, 4096, 65536 + 3, 300000, 0, 40, 512 * 1024};
    return k[i % 8];
  }
  static char Byte(int msg, size_t i) { return (char)((msg * 131 + i * 7 + (i >> 9)) & 0xff); }

  // Stream n messages through 8-slot FIFOs on both ends, as the proxy does: the sender posts into a free
  // slot and frees it when its isend completes; the receiver posts an irecv per free slot, checks every
  // completion in order and frees the slot.  action(k) runs once after the k-th message was received.
  // Returns the first error of either side (or ncclInProgress on timeout); *received gets the count.
  ncclResult_t Stream(int n, int* received, std::function<void(int)> action = nullptr, double timeoutMs = 30000) {
    const int kSlots = 8;
    const size_t kSlotBytes = 512 * 1024;
    std::vector<char> sbuf(kSlots * kSlotBytes), rbuf(kSlots * kSlotBytes);
    void *smh = nullptr, *rmh = nullptr;
    EXPECT_EQ(R->regMr(sc_, sbuf.data(), sbuf.size(), MEND_PTR_HOST, &smh), ncclSuccess);
    EXPECT_EQ(R->regMr(rc_, rbuf.data(), rbuf.size(), MEND_PTR_HOST, &rmh), ncclSuccess);
    void* sreq[kSlots] = {};
    void* rreq[kSlots] = {};
    int sPosted = 0, sDone = 0, rPosted = 0, rDone = 0;
    ncclResult_t res = ncclSuccess;
    double t0 = nowMs();
    while (rDone < n && res == ncclSuccess) {
      if (nowMs() - t0 > timeoutMs) { res = ncclInProgress; break; }
      while (sPosted < n && sPosted - sDone < kSlots) {
        int s = sPosted % kSlots;
        char* p = sbuf.data() + s * kSlotBytes;
        for (size_t i = 0; i < SizeOf(sPosted); i++) p[i] = Byte(sPosted, i);
        res = R->isend(sc_, p, SizeOf(sPosted), 0, smh, &sreq[s]);
        if (res != ncclSuccess || !sreq[s]) break;
        sPosted++;
      }
      while (res == ncclSuccess && sDone < sPosted) {
        int s = sDone % kSlots, done = 0, size = -1;
        res = R->test(sreq[s], &done, &size);
        if (res != ncclSuccess || !done) break;
        EXPECT_EQ((size_t)size, SizeOf(sDone));
        sDone++;
      }
      while (res == ncclSuccess && rPosted < n && rPosted - rDone < kSlots) {
        int s = rPosted % kSlots, tag = 0;
        void* d = rbuf.data() + s * kSlotBytes;
        size_t sz = kSlotBytes;
        memset(d, 0xee, 64);
        res = R->irecv(rc_, 1, &d, &sz, &tag, &rmh, &rreq[s]);
        if (res != ncclSuccess || !rreq[s]) break;
        rPosted++;
      }
      while (res == ncclSuccess && rDone < rPosted) {
        int s = rDone % kSlots, done = 0, size = -1;
        res = R->test(rreq[s], &done, &size);
        if (res != ncclSuccess || !done) break;
        EXPECT_EQ((size_t)size, SizeOf(rDone)) << "message " << rDone;
        const char* p = rbuf.data() + s * kSlotBytes;
        size_t bad = 0;
        for (size_t i = 0; i < SizeOf(rDone) && (size_t)size == SizeOf(rDone); i++) bad += p[i] != Byte(rDone, i);
        EXPECT_EQ(bad, 0u) << "message " << rDone << " has wrong bytes";
        rDone++;
        if (action) action(rDone);
      }
    }
    // Drain the sender: its last isends complete on acknowledgement, which the receiver sent when it
    // placed the messages, or, when it holds acknowledgements (RnetHoldTest), sends when it next
    // looks: a receive posted and tested here gives it that look.
    void* look = nullptr;
    while (res == ncclSuccess && sDone < sPosted && nowMs() - t0 < timeoutMs) {
      int s = sDone % kSlots, done = 0, size = -1;
      res = R->test(sreq[s], &done, &size);
      if (res == ncclSuccess && done) sDone++;
      if (res == ncclSuccess && hold_ && sDone < sPosted) res = Look(&look, rbuf.data(), rmh);
    }
    if (res == ncclSuccess && sDone < sPosted) res = ncclInProgress;
    *received = rDone;
    EXPECT_EQ(R->deregMr(sc_, smh), ncclSuccess);
    EXPECT_EQ(R->deregMr(rc_, rmh), ncclSuccess);
    return res;
  }

  // A receiver call that places nothing: post one receive (once) and test it.
  ncclResult_t Look(void** req, void* buf, void* mh) {
    int tag = 0, done = 0, size = 0;
    size_t sz = 64;
    if (!*req) {
      ncclResult_t r = R->irecv(rc_, 1, &buf, &sz, &tag, &mh, req);
      if (r != ncclSuccess || !*req) return r;
      extra_.push_back(*req);
    }
    return R->test(*req, &done, &size);
  }

  // Stream (above) that must deliver all n messages.
  void StreamAll(int n, std::function<void(int)> action = nullptr) {
    int got = 0;
    ASSERT_EQ(Stream(n, &got, action), ncclSuccess);
    EXPECT_EQ(got, n);
  }

  mendRnetStats Stats(void* c) {
    mendRnetStats st;
    EXPECT_EQ(mendRnetGetStats(c, &st), ncclSuccess);
    return st;
  }

  void* ctx_ = nullptr;
  void* sc_ = nullptr;
  void* rc_ = nullptr;
  std::vector<void*> extra_;
  bool hold_ = false;          // receivers hold acknowledgements (RnetHoldTest)
  mendtest::EnvSnapshot env_;  // NCCL_SOCKET_IFNAME as it was before the test
};

// Receivers hold the acknowledgement of small messages (MEND_ACK_DELAY_US); without a resilience
// service only the receiver's own calls send it, so what a call sends is exact here.
class RnetHoldTest : public RnetTest {
 protected:
  void SetUp() override {
    RnetTest::SetUp();
    env_.SaveAndUnset("MEND_ACK_DELAY_US");
    hold_ = true;
    mendRnetHoldAcksForTest(1);
  }
  void TearDown() override {
    mendRnetHoldAcksForTest(0);
    RnetTest::TearDown();
  }
  void Delay(int us) {
    setenv("MEND_ACK_DELAY_US", std::to_string(us).c_str(), 1);
    mendParamResetCache();
  }
  // Register 8 slots of 64 KiB on each end.
  void Buffers() {
    sbuf_.assign(8 << 16, 5);
    rbuf_.assign(8 << 16, 0);
    ASSERT_EQ(R->regMr(sc_, sbuf_.data(), sbuf_.size(), MEND_PTR_HOST, &smh_), ncclSuccess);
    ASSERT_EQ(R->regMr(rc_, rbuf_.data(), rbuf_.size(), MEND_PTR_HOST, &rmh_), ncclSuccess);
  }
  void* Send(int slot, size_t bytes) {
    void* q = nullptr;
    EXPECT_EQ(R->isend(sc_, sbuf_.data() + (slot << 16), bytes, 0, smh_, &q), ncclSuccess);
    EXPECT_NE(q, nullptr);
    return q;
  }
  void* Recv(int slot) {
    void* d = rbuf_.data() + (slot << 16);
    size_t sz = 1 << 16;
    int tag = 0;
    void* q = nullptr;
    EXPECT_EQ(R->irecv(rc_, 1, &d, &sz, &tag, &rmh_, &q), ncclSuccess);
    EXPECT_NE(q, nullptr);
    return q;
  }
  // Test req until done (true) or for ms milliseconds (false); *done tells a caller that tests again.
  bool Poll(void* req, double ms) {
    double t0 = nowMs();
    int done = 0, size = 0;
    do {
      EXPECT_EQ(R->test(req, &done, &size), ncclSuccess);
      if (done) return true;
    } while (nowMs() - t0 < ms);
    return false;
  }
  void Unregister() {
    R->deregMr(sc_, smh_);
    R->deregMr(rc_, rmh_);
  }
  std::vector<char> sbuf_, rbuf_;
  void *smh_ = nullptr, *rmh_ = nullptr;
};

TEST_F(RnetTest, HandshakeBuildsOnePathPerDevice) {
  Connect(1);
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  EXPECT_EQ(s.nPaths, 3);
  EXPECT_EQ(r.nPaths, 3);
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.localDev[0], 1);  // the primary is the device asked for, then the chain
  EXPECT_EQ(s.localDev[1], 2);
  EXPECT_EQ(s.localDev[2], 0);
  EXPECT_EQ(r.localDev[0], 1);
  EXPECT_EQ(s.dead, 0);
}

// With the topology's order (nearest NIC first) the chain is the primary, then that order: device 0
// before device 2, where the rotation of the test above gives 2 first.
TEST_F(RnetTest, ChainFollowsTheTopologyOrder) {
  const int order[3] = {0, 2, 1};
  ASSERT_EQ(mendRnetSetOrder(ctx_, order, 3), ncclSuccess);
  Connect(1);
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  ASSERT_EQ(s.nPaths, 3);
  ASSERT_EQ(r.nPaths, 3);
  int want[3] = {1, 0, 2};
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(s.localDev[i], want[i]) << "sender path " << i;
    EXPECT_EQ(r.localDev[i], want[i]) << "receiver path " << i << ": rails pair the same device";
  }
  ASSERT_NO_FATAL_FAILURE(StreamAll(50, [&](int k) { if (k == 20) mendRnetKillPath(sc_, 0); }));
  EXPECT_EQ(Stats(sc_).active, 1) << "the primary's backup is the nearest NIC";
}

TEST_F(RnetTest, OrderedExactNoFault) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(400));
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.failovers, 0u);
  EXPECT_EQ(s.msgs[1] + s.msgs[2], 0u) << "backups must stay idle without a fault";
  EXPECT_EQ(gSends[1] + gSends[2], 0);
}

TEST_F(RnetTest, SenderFencesPrimaryMidStream) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 100) mendRnetKillPath(sc_, 0); }));
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  EXPECT_EQ(s.active, 1);
  EXPECT_EQ(r.active, 1) << "the receiver must follow when the sender fences the path";
  EXPECT_GT(s.msgs[1], 0u);
}

TEST_F(RnetTest, ReceiverFencesPrimaryMidStream) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 57) mendRnetKillPath(rc_, 0); }));
  EXPECT_EQ(Stats(sc_).active, 1);
  EXPECT_EQ(Stats(rc_).active, 1);
}

TEST_F(RnetTest, DeviceDiesUnderBothEnds) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 150) gDead[0] = 1; }));
  EXPECT_EQ(Stats(sc_).active, 1);
  EXPECT_EQ(Stats(rc_).active, 1);
}

TEST_F(RnetTest, ChainWalksPastTwoFailures) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(400, [&](int k) {
    if (k == 100) gDead[0] = 1;
    if (k == 200) gDead[1] = 1;
  }));
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(s.dead, 2);
  EXPECT_GT(s.msgs[2], 0u);
}

TEST_F(RnetTest, ReplayDeliversExactlyOnceWhenAcksAreLost) {
  Connect();
  // From message 50 on, the receiver's acknowledgements on path 0 vanish: the sender holds every slot
  // (placed but unacknowledged).  Fencing path 0 then makes the receiver's RESUME the rollback point:
  // the sender must replay only what was not placed, and the receiver must see every message once.
  ASSERT_NO_FATAL_FAILURE(StreamAll(200, [&](int k) {
    if (k == 50) gMute[0] = 1;
    if (k == 55) mendRnetKillPath(sc_, 0);
  }));
  EXPECT_EQ(Stats(sc_).active, 1);
}

TEST_F(RnetTest, StalledAcksWithoutFenceHoldTheSender) {
  Connect();
  gMute[0] = 1;  // acks lost: isends must not complete (the slot would be reused before placement is known)
  std::vector<char> buf(1000, 3), dst(1000);
  void *smh, *rmh, *sreq = nullptr, *rreq = nullptr;
  ASSERT_EQ(R->regMr(sc_, buf.data(), buf.size(), MEND_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(R->regMr(rc_, dst.data(), dst.size(), MEND_PTR_HOST, &rmh), ncclSuccess);
  void* d = dst.data();
  size_t sz = dst.size();
  int tag = 0, sdone = 0, rdone = 0, size = 0;
  ASSERT_EQ(R->irecv(rc_, 1, &d, &sz, &tag, &rmh, &rreq), ncclSuccess);
  ASSERT_EQ(R->isend(sc_, buf.data(), buf.size(), 0, smh, &sreq), ncclSuccess);
  double t0 = nowMs();
  while (nowMs() - t0 < 300) {
    ASSERT_EQ(R->test(sreq, &sdone, &size), ncclSuccess);
    if (!rdone) {
      ASSERT_EQ(R->test(rreq, &rdone, &size), ncclSuccess);
    }
  }
  EXPECT_EQ(rdone, 1);
  EXPECT_EQ(sdone, 0) << "an isend completed without acknowledgement";
  gMute[0] = 0;
  mendRnetKillPath(sc_, 0);  // fence: the RESUME on path 1 acknowledges it
  t0 = nowMs();
  while (!sdone && nowMs() - t0 < 5000) {
    ASSERT_EQ(R->test(sreq, &sdone, &size), ncclSuccess);
    void* q = nullptr;  // the receiver must progress to notice the fence: post a receive
    if (extra_.empty()) {
      ASSERT_EQ(R->irecv(rc_, 1, &d, &sz, &tag, &rmh, &q), ncclSuccess);
      if (q) extra_.push_back(q);
    } else {
      int dd;
      ASSERT_EQ(R->test(extra_[0], &dd, &size), ncclSuccess);
    }
  }
  EXPECT_EQ(sdone, 1);
  R->deregMr(sc_, smh);
  R->deregMr(rc_, rmh);
}

TEST_F(RnetHoldTest, BatchOfSixGoesOutWhenTheReceiverWaits) {
  Delay(10 * 1000 * 1000);  // never by time in this test
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq[6];
  for (int k = 0; k < 5; k++) {
    sreq[k] = Send(k, 8);
    ASSERT_TRUE(Poll(Recv(k), 5000)) << "message " << k << " not received";
  }
  void* wait = Recv(5);
  EXPECT_FALSE(Poll(wait, 20)) << "nothing was sent";
  for (int k = 0; k < 5; k++) EXPECT_FALSE(Poll(sreq[k], 20)) << "five held messages are acknowledged";
  sreq[5] = Send(5, 8);
  ASSERT_TRUE(Poll(wait, 5000));  // the call that places the sixth holds it: the caller has data
  EXPECT_FALSE(Poll(sreq[5], 20)) << "sent while the caller had data to act on";
  void* next = Recv(6);
  EXPECT_FALSE(Poll(next, 1));    // this call places nothing: the receiver waits, the batch goes out
  for (int k = 0; k < 6; k++) EXPECT_TRUE(Poll(sreq[k], 5000)) << "message " << k << " never acknowledged";
  extra_.push_back(next);
  Unregister();
}

TEST_F(RnetHoldTest, SeventhGoesOutAtOnce) {
  Delay(10 * 1000 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  // Seven sent before the receiver looks: the call that places them acknowledges at once (the
  // sender's FIFO of 8 slots must not wait for the receiver's next call).
  void* sreq[7];
  void* rreq[7];
  for (int k = 0; k < 7; k++) rreq[k] = Recv(k);
  for (int k = 0; k < 7; k++) sreq[k] = Send(k, 8);
  usleep(200 * 1000);  // all seven wait in the receiver's socket: its next call places them at once
  int done = 0, size = 0;
  ASSERT_EQ(R->test(rreq[6], &done, &size), ncclSuccess);
  ASSERT_EQ(done, 1) << "the seven messages did not arrive in 200 ms";
  for (int k = 0; k < 7; k++) EXPECT_TRUE(Poll(sreq[k], 5000)) << "message " << k << " never acknowledged";
  for (int k = 0; k < 6; k++) EXPECT_TRUE(Poll(rreq[k], 1));
  Unregister();
}

TEST_F(RnetHoldTest, HeldPastTheDelayGoesOutAtTheNextLook) {
  Delay(100 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq = Send(0, 8);
  ASSERT_TRUE(Poll(Recv(0), 5000));
  double placed = nowMs();
  EXPECT_FALSE(Poll(sreq, 20)) << "acknowledged without a receiver call";
  void* next = Recv(1);
  if (nowMs() - placed < 80) {
    EXPECT_FALSE(Poll(next, 1));  // a look before the delay: still held
    EXPECT_FALSE(Poll(sreq, 5)) << "sent before its delay";
  }
  usleep(120 * 1000);
  EXPECT_FALSE(Poll(next, 1));  // a look after it: sent
  EXPECT_TRUE(Poll(sreq, 5000)) << "the acknowledgement held past the delay was not sent";
  extra_.push_back(next);
  Unregister();
}

TEST_F(RnetHoldTest, LargeMessageIsAcknowledgedAtOnce) {
  Delay(10 * 1000 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq = Send(0, 1 << 16);
  ASSERT_TRUE(Poll(Recv(0), 5000));
  EXPECT_TRUE(Poll(sreq, 5000)) << "a 64 KiB message's acknowledgement was held";
  Unregister();
}

TEST_F(RnetHoldTest, ReplayDeliversExactlyOnceWithHeldAcks) {
  Delay(50 * 1000);
  Connect();
  // Mixed sizes with held acknowledgements, a path fenced in the middle: the RESUME carries the
  // placed count (never held), the sender replays from it, every message arrives once and intact.
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) {
    if (k == 101) mendRnetKillPath(sc_, 0);
  }));
  EXPECT_EQ(Stats(sc_).active, 1);
}

TEST_F(RnetTest, LastPathDeadFailsWithinBound) {
  Connect();
  int got = 0;
  double t0 = nowMs();
  ncclResult_t res = Stream(300, &got, [&](int k) {
    if (k == 100) gDead[0] = gDead[1] = gDead[2] = 1;
  });
  double ms = nowMs() - t0;
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(ms, 5000);
  EXPECT_GE(got, 100);
  EXPECT_LT(got, 300);
  // Both ends fail, and keep failing, never hang.  The stream stops at the first end's error, so the
  // other end may learn it from its next call: make that call on each end, then look at both.
  void* q = nullptr;
  char b[8];
  size_t sz = sizeof(b);
  int tag = 0;
  void* bp = b;
  EXPECT_NE(R->isend(sc_, b, 8, 0, nullptr, &q), ncclSuccess);
  EXPECT_NE(R->irecv(rc_, 1, &bp, &sz, &tag, nullptr, &q), ncclSuccess);
  EXPECT_EQ(Stats(sc_).active, -1);
  EXPECT_EQ(Stats(rc_).active, -1);
  EXPECT_NE(R->isend(sc_, b, 8, 0, nullptr, &q), ncclSuccess) << "a failed connection stays failed";
}

// Rails: path i pairs device i at both ends.  Lose path 0 and then path 1 of a two-device connection
// (as when host A lost rail 0 and host B rail 1): no rail is left in common, and with NCCL_CROSS_NIC
// at its default the sender builds a path from one of its devices to the other index at the
// receiver (the test Net, like a fabric whose rails meet at a spine, connects any pair).  Every
// message arrives once, in order, and the crossing path carries the rest.
TEST_F(RnetTest, CrossingPathCarriesTheConnectionWhenNoRailIsLeft) {
  ASSERT_NO_FATAL_FAILURE(Reinit(2));
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(400, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 200) mendRnetKillPath(sc_, 1);
  }));
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  ASSERT_EQ(s.cross, 2) << "the crossing path takes the slot after the chain";
  EXPECT_EQ(r.cross, 2);
  EXPECT_EQ(s.nPaths, 3);
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(r.active, 2);
  EXPECT_NE(s.localDev[2], s.remoteDev[2]) << "it crosses rails";
  EXPECT_EQ(s.localDev[2], r.remoteDev[2]) << "both ends name the same pair";
  EXPECT_EQ(s.remoteDev[2], r.localDev[2]);
  EXPECT_GT(s.msgs[2], 0u);
  // Rail 0 comes back: its rebuilt path comes first in the chain, traffic returns to it, and the
  // crossing path is rebuilt behind it as the last backup.
  ASSERT_NO_FATAL_FAILURE(StreamAll(200, [&](int k) { if (k == 20) mendRnetRebuildPath(sc_, 0); }));
  ASSERT_NO_FATAL_FAILURE(StreamAll(200));
  s = Stats(sc_);
  EXPECT_EQ(s.active, 0) << "fail-back from the crossing path to the rail";
  EXPECT_EQ(Stats(rc_).active, 0);
  EXPECT_EQ(s.dead, 1) << "rail 1 stays dead; the crossing path is a backup again";
  EXPECT_EQ(s.cross, 2);
}

// NCCL_CROSS_NIC=0 forbids crossing rails: the same loss fails the connection, as before.
TEST_F(RnetTest, CrossingForbiddenFailsTheConnection) {
  setenv("NCCL_CROSS_NIC", "0", 1);
  mendParamResetCache();
  ASSERT_NO_FATAL_FAILURE(Reinit(2));
  Connect();
  int got = 0;
  ncclResult_t res = Stream(400, &got, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 200) mendRnetKillPath(sc_, 1);
  });
  unsetenv("NCCL_CROSS_NIC");
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(got, 400);
  EXPECT_EQ(Stats(sc_).cross, -1);
}

// A crossing path whose devices are dead too: the connection fails at both ends within the bound
// (the receiver, which waits for the sender's crossing path, is told it will not come).
TEST_F(RnetTest, CrossingThatCannotBeBuiltFailsBothEnds) {
  ASSERT_NO_FATAL_FAILURE(Reinit(2));
  Connect();
  int got = 0;
  double t0 = nowMs();
  ncclResult_t res = Stream(400, &got, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 200) { gDead[0] = 1; mendRnetKillPath(sc_, 1); }
  });
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(got, 400);
  void* q = nullptr;
  char b[8];
  size_t sz = sizeof(b);
  int tag = 0;
  void* bp = b;
  ncclResult_t rr = ncclSuccess;
  while (rr == ncclSuccess && nowMs() - t0 < 4000) rr = R->irecv(rc_, 1, &bp, &sz, &tag, nullptr, &q);
  EXPECT_NE(rr, ncclSuccess) << "the receiver must stop waiting once the crossing failed";
  EXPECT_LT(nowMs() - t0, 4000);
}

TEST_F(RnetTest, FailBackToRebuiltPrimary) {
  Connect();
  // Path 0 dies at 100 (traffic moves to 1); at 150 the sender rebuilds it (as its service does once
  // the NICs probe healthy); the receiver then moves traffic back to 0 behind a RESUME, and the
  // fenced backup 1 is rebuilt right after.  Every message must arrive exactly once, in order.
  ASSERT_NO_FATAL_FAILURE(StreamAll(600, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 150) mendRnetRebuildPath(sc_, 0);
  }));
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  EXPECT_EQ(s.active, 0) << "traffic must return to the primary";
  EXPECT_EQ(r.active, 0);
  EXPECT_EQ(s.failbacks, 1u);
  EXPECT_EQ(r.failbacks, 1u);
  EXPECT_GE(s.rebuilds, 1u);
  EXPECT_GT(s.msgs[1], 0u) << "the backup carried traffic while the primary was down";
  // The backup fenced by the fail-back comes back as a backup: more traffic lets the rebuild finish.
  int got = 0;
  ASSERT_EQ(Stream(200, &got), ncclSuccess);
  s = Stats(sc_);
  EXPECT_EQ(s.dead, 0) << "every path is live again";
  EXPECT_EQ(s.active, 0);
}

TEST_F(RnetTest, RebuildOfADeadDeviceFailsAndTrafficStays) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) {
    if (k == 100) gDead[0] = 1;
    if (k == 150) mendRnetRebuildPath(sc_, 0);  // the device is still dead: the rebuild fails
  }));
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.active, 1);
  EXPECT_EQ(s.failbacks, 0u);
  EXPECT_EQ(s.rebuilds, 0u);
  EXPECT_EQ(Stats(rc_).active, 1);
}

TEST_F(RnetTest, RebuildOfALivePathIsRefused) {
  Connect();
  EXPECT_EQ(mendRnetRebuildPath(rc_, 0), ncclInvalidArgument) << "only the sender rebuilds";
  EXPECT_EQ(mendRnetRebuildPath(sc_, 7), ncclInvalidArgument);
  ASSERT_EQ(mendRnetRebuildPath(sc_, 1), ncclSuccess);  // path 1 is alive: nothing happens
  int got = 0;
  ASSERT_EQ(Stream(100, &got), ncclSuccess);
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.rebuilds, 0u);
  EXPECT_EQ(s.dead, 0);
  EXPECT_EQ(s.active, 0);
}

TEST_F(RnetTest, BadArgumentsAreRejected) {
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void* c = nullptr;
  EXPECT_EQ(R->connect(ctx_, 0, handle, &c), ncclInvalidArgument);  // not a handle of this Net
  EXPECT_EQ(R->listen(ctx_, 9, handle, &c), ncclInvalidArgument);
  EXPECT_EQ(R->test(nullptr, nullptr, nullptr), ncclInvalidArgument);
  Connect();
  void* d[2];
  size_t s[2];
  void* q;
  EXPECT_EQ(R->irecv(rc_, 2, d, s, nullptr, nullptr, &q), ncclInvalidArgument);
  EXPECT_EQ(R->isend(rc_, d, 1, 0, nullptr, &q), ncclInvalidArgument);
}

TEST_F(RnetTest, OneDeviceStillWorks) {
  ASSERT_NO_FATAL_FAILURE(Reinit(1));
  Connect();
  EXPECT_EQ(Stats(sc_).nPaths, 1);
  ASSERT_NO_FATAL_FAILURE(StreamAll(50));
}

}  // namespace
