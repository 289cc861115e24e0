// The executor's short path over the net transport (mendProxyKick, src/transport/net.c): a producer
// that posts a slot and kicks the connector sends it from its own thread; a consumer that kicks while
// it waits receives without the proxy's hand-over; with the proxy moving the same connectors at the
// same time, every slot still arrives once, in order, with its content (plain socket Net and the
// resilient one); MEND_NET_DIRECT=0 leaves everything to the proxy; other connectors are not moved.
#include <gtest/gtest.h>

#include <thread>

#include "transport_harness.h"
#define _Atomic volatile  // proxy.h is C11 (see mend_internal.h)
extern "C" {
#include "proxy.h"
}
#undef _Atomic

namespace {

class NetDirect : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    for (const char* v : {"MEND_FORCE_TRANSPORT", "NCCL_SHM_DISABLE", "NCCL_P2P_DISABLE", "NCCL_NET", "MEND_NET_DIRECT"})
      tt::setEnv(v, nullptr);
    tt::setEnv("NCCL_SOCKET_IFNAME", "lo");
    tt::setEnv("NCCL_BUFFSIZE", "65536");
    tt::setEnv("MEND_RESILIENCE", GetParam());
    alarm(240);  // a hang ends the run (SIGALRM) instead of blocking the suite
  }
  void TearDown() override {
    alarm(0);
    for (const char* v : {"NCCL_BUFFSIZE", "MEND_RESILIENCE", "MEND_NET_DIRECT"}) tt::setEnv(v, nullptr);
  }
  // Two comms whose peers talk through the Net; rank 0 sends to rank 1 on channel 0.
  void connect(bool net) {
    tt::setEnv("MEND_FORCE_TRANSPORT", net ? "net" : nullptr);
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclResult_t res[2] = {ncclInternalError, ncclInternalError};
    std::thread t([&] { res[1] = tt::makeComm(1, 2, id, &comms[1]); });
    res[0] = tt::makeComm(0, 2, id, &comms[0]);
    t.join();
    tt::setEnv("MEND_FORCE_TRANSPORT", nullptr);
    ASSERT_EQ(res[0], ncclSuccess);
    ASSERT_EQ(res[1], ncclSuccess);
    mendConnReq r0 = {1, 0, MEND_SEND, 0}, r1 = {0, 0, MEND_RECV, 0};
    std::thread t0([&] { res[0] = mendTransportConnect(comms[0], 1, &r0); });
    res[1] = mendTransportConnect(comms[1], 1, &r1);
    t0.join();
    ASSERT_EQ(res[0], ncclSuccess);
    ASSERT_EQ(res[1], ncclSuccess);
    send = mendTransportGetConn(comms[0], 0, 1, MEND_SEND, 0);
    recv = mendTransportGetConn(comms[1], 0, 0, MEND_RECV, 0);
    ASSERT_TRUE(send && recv);
  }
  void freeComms() {
    std::thread t([&] { tt::freeComm(comms[1]); });
    tt::freeComm(comms[0]);
    t.join();
  }
  // Wait for cond, kicking conn between looks (the executor's poll), bounded by 30 s.
  template <class F>
  bool kickUntil(ncclComm* c, mendConnector* conn, F cond) {
    double deadline = tt::now() + 30;
    for (;;) {
      uint32_t seen = mendBellRead(c->bell);
      if (cond()) return true;
      mendProxyKick(conn);
      if (cond()) return true;
      if (tt::now() > deadline || __atomic_load_n(&conn->error, __ATOMIC_ACQUIRE) != 0) return false;
      mendBellWait(c->bell, seen, 50);
    }
  }
  // n slots from rank 0 to rank 1, both ends kicking; alsoRing: ring the proxy after every post too,
  // so the proxy and the producer race for the connector.  Returns "" or what went wrong.
  std::string stream(uint64_t n, bool alsoRing) {
    std::string err[2];
    std::thread prod([&] {
      mendFifo* f = send->fifo;
      for (uint64_t i = 0; i < n; i++) {
        uint64_t tail = __atomic_load_n(&f->tail, __ATOMIC_RELAXED);
        if (!kickUntil(comms[0], send, [&] { return tail - __atomic_load_n(&f->head, __ATOMIC_ACQUIRE) < (uint64_t)send->nSlots; })) {
          err[0] = "producer: no free slot at message " + std::to_string(i);
          return;
        }
        char* slot = send->buff + (tail % send->nSlots) * send->slotBytes;
        size_t sz = tt::msgSize(i, send->slotBytes);
        for (size_t k = 0; k < sz; k++) slot[k] = (char)tt::pat(i, k);
        f->bytes[tail % send->nSlots] = sz;
        __atomic_store_n(&f->tail, tail + 1, __ATOMIC_RELEASE);
        if (mendProxyKick(send)) idleKicks++;
        else mendBellRing(send->peerBell);
        if (alsoRing) mendBellRing(send->peerBell);
      }
    });
    mendFifo* f = recv->fifo;
    for (uint64_t i = 0; i < n && err[1].empty(); i++) {
      uint64_t head = __atomic_load_n(&f->head, __ATOMIC_RELAXED);
      if (!kickUntil(comms[1], recv, [&] { return __atomic_load_n(&f->tail, __ATOMIC_ACQUIRE) > head; })) {
        err[1] = "consumer: nothing arrived for message " + std::to_string(i);
        break;
      }
      const char* slot = recv->buff + (head % recv->nSlots) * recv->slotBytes;
      size_t want = tt::msgSize(i, recv->slotBytes), got = f->bytes[head % recv->nSlots];
      if (got != want) err[1] = "message " + std::to_string(i) + ": " + std::to_string(got) + " bytes, expected " + std::to_string(want);
      for (size_t k = 0; k < got && err[1].empty(); k++)
        if ((uint8_t)slot[k] != tt::pat(i, k)) err[1] = "message " + std::to_string(i) + ": byte " + std::to_string(k) + " differs";
      __atomic_store_n(&f->head, head + 1, __ATOMIC_RELEASE);
      mendBellRing(recv->peerBell);
    }
    if (!err[1].empty()) tt::abortComm(comms[0]);  // a producer waiting for a slot gives up
    prod.join();
    return err[1].empty() ? err[0] : err[1];
  }
  ncclComm* comms[2] = {nullptr, nullptr};
  mendConnector *send = nullptr, *recv = nullptr;
  std::atomic<uint64_t> idleKicks{0};
};

TEST_P(NetDirect, KickedSlotsArriveOnceInOrder) {
  connect(true);
  ASSERT_EQ(send->kind, MEND_TRANSPORT_NET);
  EXPECT_EQ(stream(3000, false), "");
  // The plain socket Net completes small sends inside the caller's kick; a resilient send stays in
  // flight until acknowledged, so its kicks leave work to the proxy (only a kick that finds every
  // earlier send acknowledged and nothing new to post is idle).
  if (std::string(GetParam()) == "0")
    EXPECT_GT(idleKicks.load(), 1500u) << "most small sends must leave from the producer's thread";
  else
    EXPECT_LT(idleKicks.load(), 1500u);
  freeComms();
}

TEST_P(NetDirect, ProxyAndExecutorRaceForTheConnector) {
  connect(true);
  EXPECT_EQ(stream(3000, true), "");
  freeComms();
}

TEST_P(NetDirect, DisabledLeavesSlotsToTheProxy) {
  tt::setEnv("MEND_NET_DIRECT", "0");
  connect(true);
  EXPECT_EQ(mendProxyKick(send), 0);
  EXPECT_EQ(stream(300, false), "");
  EXPECT_EQ(idleKicks.load(), 0u);
  freeComms();
}

TEST_P(NetDirect, OtherConnectorsAreNotMoved) {
  EXPECT_EQ(mendProxyKick(nullptr), 0);
  connect(false);
  EXPECT_NE(send->kind, MEND_TRANSPORT_NET);
  EXPECT_EQ(mendProxyKick(send), 0);
  EXPECT_EQ(mendProxyKick(recv), 0);
  freeComms();
}

INSTANTIATE_TEST_SUITE_P(Resilience, NetDirect, ::testing::Values("0", "1"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param) == "0" ? "Socket" : "Rnet";
                         });

}  // namespace
