// The resilient net's unit-test world, shared by test_rnet.cc and test_relay.cc: a test base Net of
// K fake devices that all ride the socket Net on loopback, each of which can be made to fail (every
// call errors, as when the NIC dies under both ends) or to swallow control messages (acknowledgements
// lost); with gRailOnly, a connect from device a to a listener on device b != a fails (rails that
// never meet).  RnetTest connects one sending and one receiving connection and streams through them
// as the proxy does.
#ifndef MEND_TESTS_UNIT_RNET_FIXTURE_H_
#define MEND_TESTS_UNIT_RNET_FIXTURE_H_

#include <gtest/gtest.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
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
std::atomic<int> gRailOnly{0};         // a connect to a listener on another device fails
std::atomic<uint64_t> gWordAdd{0};     // added to every non-zero word sent (a peer that lies)
std::atomic<long> gEmptyLooks{0};     // tests of posted data receives that found nothing (a syscall each)
std::mutex gListenMu;
std::map<std::string, int> gListenDev; // listen handle -> its device (gRailOnly)

std::string HandleKey(const void* handle) { return std::string((const char*)handle, MEND_NET_HANDLE_MAXSIZE); }

struct WComm { int dev; void* inner; std::set<struct WReq*> reqs; };
struct WReq { WComm* c; void* inner; int fake; size_t size; int recv = 0; };

ncclResult_t wInit(void** ctx, uint64_t id, mendDebugLogger_t l) { return S->init(ctx, id, l); }
ncclResult_t wDevices(int* n) { *n = gDevs; return ncclSuccess; }
ncclResult_t wProps(int dev, struct mendNetProperties* p) { return S->getProperties(0, p); }
ncclResult_t wListen(void* ctx, int dev, void* handle, void** lc) {
  if (gDead[dev]) return ncclSystemError;
  WComm* w = new WComm{dev, nullptr, {}};
  ncclResult_t r = S->listen(ctx, 0, handle, &w->inner);
  if (r != ncclSuccess) { delete w; return r; }
  std::lock_guard<std::mutex> g(gListenMu);
  gListenDev[HandleKey(handle)] = dev;
  *lc = w;
  return ncclSuccess;
}
ncclResult_t wConnect(void* ctx, int dev, void* handle, void** sc) {
  *sc = nullptr;
  if (gDead[dev]) return ncclSystemError;
  if (gRailOnly) {  // the first call sees the handle as the listener wrote it
    std::lock_guard<std::mutex> g(gListenMu);
    auto it = gListenDev.find(HandleKey(handle));
    if (it != gListenDev.end() && it->second != dev) return ncclSystemError;
  }
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
ncclResult_t wIsendWord(void* c, void* d, size_t s, int tag, void* mh, uint64_t word, void** req) {
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
  ncclResult_t r = S->isendWord(w->inner, d, s, tag, mh, word ? word + gWordAdd : 0, &inner);
  if (r != ncclSuccess || !inner) return r;
  if (s != kCtrlBytes) gSends[w->dev]++;
  WReq* q = new WReq{w, inner, 0, s};
  w->reqs.insert(q);
  *req = q;
  return ncclSuccess;
}
ncclResult_t wIsend(void* c, void* d, size_t s, int tag, void* mh, void** req) {
  return wIsendWord(c, d, s, tag, mh, 0, req);
}
ncclResult_t wIrecv(void* c, int n, void** d, size_t* s, int* t, void** mh, void** req) {
  WComm* w = (WComm*)c;
  *req = nullptr;
  if (gDead[w->dev]) return ncclSystemError;
  void* inner = nullptr;
  ncclResult_t r = S->irecv(w->inner, n, d, s, t, mh, &inner);
  if (r != ncclSuccess || !inner) return r;
  WReq* q = new WReq{w, inner, 0, 0, 1};
  w->reqs.insert(q);
  *req = q;
  return ncclSuccess;
}
ncclResult_t wIflush(void*, int, void**, int*, void**, void** req) { *req = nullptr; return ncclSuccess; }
ncclResult_t wTestWord(void* req, int* done, int* sizes, uint64_t* word) {
  WReq* q = (WReq*)req;
  *done = 0;
  if (word) *word = 0;
  if (gDead[q->c->dev]) return ncclSystemError;
  if (q->fake) {
    *done = 1;
    if (sizes) *sizes = (int)q->size;
  } else {
    ncclResult_t r = S->testWord(q->inner, done, sizes, word);
    if (r != ncclSuccess) return r;
    if (q->recv && !*done && q->c->dev == 0) gEmptyLooks++;
  }
  if (*done) { q->c->reqs.erase(q); delete q; }
  return ncclSuccess;
}
ncclResult_t wTest(void* req, int* done, int* sizes) { return wTestWord(req, done, sizes, nullptr); }
void wFree(WComm* w) { for (WReq* q : w->reqs) delete q; delete w; }
ncclResult_t wCloseSend(void* c) { ncclResult_t r = S->closeSend(((WComm*)c)->inner); wFree((WComm*)c); return r; }
ncclResult_t wCloseRecv(void* c) { ncclResult_t r = S->closeRecv(((WComm*)c)->inner); wFree((WComm*)c); return r; }
ncclResult_t wCloseListen(void* c) { ncclResult_t r = S->closeListen(((WComm*)c)->inner); wFree((WComm*)c); return r; }
ncclResult_t wFinalize(void* ctx) { return S->finalize(ctx); }

const mendNet_t kTestNet = {
  .name = "TestMulti", .init = wInit, .devices = wDevices, .getProperties = wProps, .listen = wListen,
  .connect = wConnect, .accept = wAccept, .regMr = wRegMr, .deregMr = wDeregMr, .isend = wIsend,
  .irecv = wIrecv, .iflush = wIflush, .test = wTest, .isendWord = wIsendWord,
  .testWord = wTestWord, .closeSend = wCloseSend, .closeRecv = wCloseRecv,
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
    gEmptyLooks = 0;
    gRailOnly = 0;
    gWordAdd = 0;
    gDevs = 3;
    mendRnetSetBase(&kTestNet);
    ASSERT_EQ(R->init(&ctx_, 7, mendDebugLog), ncclSuccess);
    ctxR_ = ctx_;
    alarm(120);  // a hang ends the run (SIGALRM) and so fails
  }
  void TearDown() override {
    alarm(0);
    if (sc_) R->closeSend(sc_);
    if (rc_) R->closeRecv(rc_);
    if (ctxR_ != ctx_) R->finalize(ctxR_);
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
    if (ctxR_ != ctx_) R->finalize(ctxR_);
    R->finalize(ctx_);
    ASSERT_EQ(R->init(&ctx_, 7, mendDebugLog), ncclSuccess);
    ctxR_ = ctx_;
  }

  // The receiver listens in ctxR_ (ctx_ unless a test gives the ends contexts of their own).
  void Connect(int dev = 0) { ConnectIn(ctxR_, ctx_, &sc_, &rc_, dev); }
  // A connection from a sender in sendCtx to a receiver listening in recvCtx.
  void ConnectIn(void* recvCtx, void* sendCtx, void** sc, void** rc, int dev = 0) {
    char handle[MEND_NET_HANDLE_MAXSIZE] = {};
    void* lc = nullptr;
    ASSERT_EQ(R->listen(recvCtx, dev, handle, &lc), ncclSuccess);
    double t0 = nowMs();
    while ((!*sc || !*rc) && nowMs() - t0 < 10000) {
      if (!*sc) { ASSERT_EQ(R->connect(sendCtx, dev, handle, sc), ncclSuccess); }
      if (!*rc) { ASSERT_EQ(R->accept(lc, rc), ncclSuccess); }
    }
    ASSERT_TRUE(*sc && *rc) << "handshake did not complete in 10 s";
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

  // The receiver's calls fail (it stopped waiting for a path) before boundMs after t0: what it
  // returned, the last call's.
  ncclResult_t RecvUntilFailing(double t0, double boundMs) {
    void* q = nullptr;
    char b[8];
    size_t sz = sizeof(b);
    int tag = 0;
    void* bp = b;
    ncclResult_t rr = ncclSuccess;
    while (rr == ncclSuccess && mendtest::nowMs() - t0 < boundMs) rr = R->irecv(rc_, 1, &bp, &sz, &tag, nullptr, &q);
    return rr;
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
  void* ctxR_ = nullptr;
  void* sc_ = nullptr;
  void* rc_ = nullptr;
  std::vector<void*> extra_;
  bool hold_ = false;          // receivers hold acknowledgements (RnetHoldTest)
  mendtest::EnvSnapshot env_;  // NCCL_SOCKET_IFNAME as it was before the test
};

}  // namespace

#endif
