// Shared by the socket Net's unit tests (test_net_socket.cc: devices, connection set-up, failures,
// two namespaces; test_net_socket_data.cc: data of every size and shape, ordering, throughput): a
// loopback fixture with a known configuration and fresh device discovery, and the helpers that
// connect a pair of comms and move checked messages between them.
#ifndef MEND_TESTS_UNIT_NET_SOCKET_FIXTURE_H_
#define MEND_TESTS_UNIT_NET_SOCKET_FIXTURE_H_

#include <gtest/gtest.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "unit_util.h"

extern "C" {
#include "misc/param.h"
#include "transport/net.h"
// From transport/net_socket.h (private, C-only: it holds _Atomic fields).
void mendNetSocketResetForTest(void);
uint64_t mendNetSocketCtrlReadsForTest(void* recvComm);
}

namespace mendtest {

inline const mendNet_t* const N = &mendNetSocket;
inline const char* const kNetSocketVars[] = {"NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
                                             "MEND_SOCKET_CHUNKSIZE", "MEND_SOCKET_INLINE", "MEND_CONNECT_TIMEOUT_MS",
                                             "MEND_SOCKET_POLL_MAX_US"};

inline void fill(std::vector<char>& v, unsigned seed) {
  for (size_t i = 0; i < v.size(); i++) v[i] = (char)((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}

// Loopback, a known configuration, fresh device discovery; a watchdog kills a hung test.
class NetSocketBase : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.SaveAndUnset(kNetSocketVars);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    Reconfigure();
    ASSERT_EQ(N->init(&ctx_, 1, mendDebugLog), ncclSuccess);
    alarm(120);  // SIGALRM's default action ends the run: a hang is a failure
  }
  void TearDown() override {
    alarm(0);
    N->finalize(ctx_);
    env_.Restore();
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
  EnvSnapshot env_;  // the variables above as they were before the test
};

}  // namespace mendtest

using mendtest::fill;
using mendtest::N;
using mendtest::NetSocketBase;
using mendtest::nowMs;

#endif
