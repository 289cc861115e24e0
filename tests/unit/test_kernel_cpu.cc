// The kernel-cpu executor: the CUDA kernel's own source (src/device/kernel.cu) built for the CPU.
// tests/run.sh runs the Engine* schedule suites through it (MEND_EXECUTOR=kernel-cpu); these cases
// check the choice itself, that the kernel's results are bit for bit the host engine's, and that
// its error and abort paths end instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "loopback_world.h"
#include "mend_internal.h"
extern "C" {
#include "device/engine.h"
}

using mendtest::ScopedEnv;
using mendtest::World;

namespace {

const char* executorOf(ncclComm_t c) { return c->executor ? c->executor->name : "none"; }

// NaN as a value: IEEE leaves the payload of an operation on two NaNs open (x86 returns the first
// operand's, and a vectorizing compiler may swap a sum's operands), so any NaN equals any NaN.
bool isNan(ncclDataType_t t, const uint8_t* p) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case ncclFloat16: memcpy(&h, p, 2); f = mendHalfToFloat(h); return f != f;
    case ncclBfloat16: memcpy(&h, p, 2); f = mendBf16ToFloat(h); return f != f;
    case ncclFloat8e4m3: f = mendE4m3ToFloat(*p); return f != f;
    case ncclFloat8e5m2: f = mendE5m2ToFloat(*p); return f != f;
    case ncclFloat32: memcpy(&f, p, 4); return f != f;
    case ncclFloat64: memcpy(&d, p, 8); return d != d;
    default: return false;
  }
}

// Index of the first element that differs (NaN equals NaN), or count.
size_t firstDiff(ncclDataType_t t, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t ts = mendTypeSize(t), n = a.size() / ts;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(&a[i * ts], &b[i * ts], ts) == 0) continue;
    if (isNan(t, &a[i * ts]) && isNan(t, &b[i * ts])) continue;
    return i;
  }
  return n;
}

// One AllReduce of `count` elements of `type` on every rank of a fresh world; returns each rank's output bytes.
std::vector<std::vector<uint8_t>> allReduce(const char* executor, int n, ncclDataType_t type, ncclRedOp_t op,
                                            size_t count, unsigned seed) {
  ScopedEnv env("MEND_EXECUTOR", executor);
  World w(n, 3, 8 * 1024);
  size_t ts = mendTypeSize(type);
  std::mt19937 rng(seed);
  std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count * ts)), out(n, std::vector<uint8_t>(count * ts));
  for (auto& v : in)
    for (auto& b : v) b = (uint8_t)rng();
  if (type == ncclFloat32) { // finite floats: NaN payloads need not match bit for bit
    for (auto& v : in)
      for (size_t i = 0; i < count; i++) {
        float f = (float)(int)(rng() % 2001 - 1000) / 8.0f;
        memcpy(v.data() + i * 4, &f, 4);
      }
  }
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    EXPECT_EQ(ncclAllReduce(in[r].data(), out[r].data(), count, type, op, w.comm(r), nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_STREQ(executorOf(w.comm(0)), executor);
  return out;
}

}  // namespace

TEST(KernelCpu, ChosenByEnvironment) {
  {
    ScopedEnv env("MEND_EXECUTOR", "kernel-cpu");
    World w(2);
    EXPECT_STREQ(executorOf(w.comm(0)), "kernel-cpu");
    EXPECT_NE(w.comm(0)->devState, nullptr);
  }
  {
    ScopedEnv env("MEND_EXECUTOR", nullptr);
    World w(2);
    EXPECT_STREQ(executorOf(w.comm(0)), "host");
  }
}

TEST(KernelCpu, UnknownExecutorRejected) {
  ScopedEnv env("MEND_EXECUTOR", "gpu-please");
  mendLoopback* lb = nullptr;
  EXPECT_EQ(mendLoopbackCreate(2, 1, 8192, &lb), ncclInvalidUsage);
  mendLoopbackDestroy(lb);
}

// The same schedule gives the same bits (NaN payloads aside): integer wraparound, narrow-float
// rounding, avg, every op, over random bit patterns (infinities, subnormals and NaNs included).
TEST(KernelCpu, BitIdenticalToHostEngine) {
  const ncclDataType_t types[] = {ncclInt8, ncclUint32, ncclInt64, ncclFloat16, ncclFloat32, ncclBfloat16,
                                  ncclFloat8e4m3, ncclFloat8e5m2};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  unsigned seed = 7;
  for (int n : {2, 3, 5}) {
    for (ncclDataType_t t : types) {
      for (ncclRedOp_t op : ops) {
        size_t count = 1000 + 37 * n;
        auto host = allReduce("host", n, t, op, count, seed);
        auto kern = allReduce("kernel-cpu", n, t, op, count, seed++);
        for (int r = 0; r < n; r++) {
          size_t i = firstDiff(t, host[r], kern[r]);
          ASSERT_EQ(i, count) << "ranks " << n << " type " << mendTypeName(t) << " op " << mendOpName(op) << " rank "
                              << r << ": element " << i << " differs from the host engine's";
        }
      }
    }
  }
}

// CTA threads as fibers of 1 or 3 workers, or each an OS thread (workers 0, what sanitizer builds
// run), with 1, 2 or 4 threads per CTA: the same bits as the host engine every way.  Small slots
// (World's 8 KiB) make every lane wait on its peers many times, so fibers yield mid-operation.
TEST(KernelCpu, FibersAndThreadsGiveTheHostEnginesBits) {
  unsigned seed = 101;
  for (const char* workers : {"0", "1", "3"}) {
    for (const char* threads : {"1", "2", "4"}) {
      ScopedEnv w("MEND_KERNEL_CPU_WORKERS", workers), t("MEND_KERNEL_CPU_THREADS", threads);
      for (ncclDataType_t type : {ncclFloat32, ncclFloat16}) {
        const int n = 3;
        const size_t count = 20000 + 11;
        auto host = allReduce("host", n, type, ncclSum, count, seed);
        auto kern = allReduce("kernel-cpu", n, type, ncclSum, count, seed++);
        for (int r = 0; r < n; r++)
          ASSERT_EQ(firstDiff(type, host[r], kern[r]), count)
              << "workers " << workers << " threads " << threads << " type " << mendTypeName(type) << " rank " << r;
      }
    }
  }
}

// Ranks that disagree on the count: the kernel sees a slot of the wrong size, records the error in
// the device state, and every lane of the call stops; the call fails and the rank that saw it
// reports the error through ncclCommGetAsyncError.
TEST(KernelCpu, DisagreeingCountsFailWithoutHang) {
  ScopedEnv env("MEND_EXECUTOR", "kernel-cpu");
  World w(2, 1, 8 * 1024);
  std::vector<float> a(4096, 1), b(4096);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 1000, ncclFloat, ncclSum, w.comm(0), nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 3000, ncclFloat, ncclSum, w.comm(1), nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // The rank that met the wrong-sized slot reports it (which one depends on who got there first).
  int reported = 0;
  for (int r = 0; r < 2; r++) {
    ncclResult_t async = ncclSuccess;
    EXPECT_EQ(ncclCommGetAsyncError(w.comm(r), &async), ncclSuccess);
    reported += async == ncclInvalidUsage;
  }
  EXPECT_GE(reported, 1);
}

// A lane spinning on a peer that never comes leaves at the abort flag (the kernel's poll).
TEST(KernelCpu, AbortStopsASpinningLane) {
  ScopedEnv env("MEND_EXECUTOR", "kernel-cpu");
  World w(2);
  mendtest::expectAbortStopsAWait(w);
}
