// Shared by the planner/engine unit tests: a loopback world (nRanks host-mode communicators in this
// process, connectors in plain memory, see src/device/engine.h) guarded by a watchdog, and a scoped
// environment variable that resets the parameter cache.
#ifndef MEND_TESTS_UNIT_LOOPBACK_WORLD_H_
#define MEND_TESTS_UNIT_LOOPBACK_WORLD_H_

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "device/engine.h"
#include "init.h"
#include "misc/param.h"
}

namespace mendtest {

// Sets (or unsets, with nullptr) an environment variable for the scope; the parameter cache follows.
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had;
  ScopedEnv(const char* n, const char* v) : name(n) {
    const char* o = getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (v) setenv(n, v, 1);
    else unsetenv(n);
    mendParamResetCache();
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
    mendParamResetCache();
  }
};

// A loopback world with a watchdog: a hang aborts every communicator, so the call fails instead.
class World {
 public:
  World(int n, int nChannels = 2, size_t buffSize = 8 * 1024, int timeoutSec = 60) : n_(n) {
    EXPECT_EQ(mendLoopbackCreate(n, nChannels, buffSize, &lb_), ncclSuccess);
    dog_ = std::thread([this, timeoutSec] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(timeoutSec), [this] { return done_; })) {
        fired_ = true;
        for (int r = 0; r < n_; r++) mendCommSetAbortFlag(comm(r), 1);
      }
    });
  }
  ~World() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    dog_.join();
    EXPECT_FALSE(fired_) << "watchdog fired: the engine hung";
    mendLoopbackDestroy(lb_);
  }
  ncclComm_t comm(int r) { return mendLoopbackComm(lb_, r); }
  struct mendFifo* fifo(int channel, int connIndex, int sender, int receiver) {
    return mendLoopbackFifo(lb_, channel, connIndex, sender, receiver);
  }
  int n() const { return n_; }

 private:
  int n_;
  mendLoopback* lb_ = nullptr;
  std::thread dog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
};

// A collective whose peer never comes: an abort flag set 200 ms later (as ncclCommAbort does) makes
// the call fail within 5 s.
inline void expectAbortStopsAWait(World& w) {
  std::vector<float> a(1000, 1), b(1000);
  ncclResult_t res = ncclSuccess;
  auto t0 = std::chrono::steady_clock::now();
  std::thread th([&] { res = ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, w.comm(0), nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  mendCommSetAbortFlag(w.comm(0), 1);
  th.join();
  EXPECT_NE(res, ncclSuccess);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  mendCommSetAbortFlag(w.comm(0), 0);
}

// One group in which every rank r sends `count` elements at src[r] to rank r + 1 and receives rank
// r - 1's into dst[r] (the ring shift), checked against the sender's data; dst[r] holds one more
// element, `guard`, that must stay as it was.
template <typename T>
inline void ringShift(World& w, const std::vector<std::vector<T>>& src, std::vector<std::vector<T>>& dst,
                      size_t count, ncclDataType_t type, T guard) {
  int n = w.n();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(ncclSend(src[r].data(), count, type, (r + 1) % n, w.comm(r), nullptr), ncclSuccess);
    ASSERT_EQ(ncclRecv(dst[r].data(), count, type, (r + n - 1) % n, w.comm(r), nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    // (memcmp only with a count: an empty vector's data() is NULL, which memcmp must not get.)
    ASSERT_TRUE(count == 0 || memcmp(dst[r].data(), src[(r + n - 1) % n].data(), count * sizeof(T)) == 0)
        << "n " << n << " count " << count << " rank " << r;
    ASSERT_EQ(dst[r][count], guard) << "n " << n << " rank " << r << ": written past the end";
  }
}

}  // namespace mendtest

using mendtest::ScopedEnv;
using mendtest::World;

#endif
