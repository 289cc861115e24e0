// Single copy for send/recv, host engine only (not Engine*: the kernel-cpu executor never posts or
// takes direct slots) (transport/fifo.h, MEND_FIFO_DIRECT; src/device/host_direct.c): a
// receiver that has checked it can read the sender's memory takes large P2P chunks from where the
// sender's buffer holds them.  In a loopback world every rank is this process: the same-process
// copy, and, with a token that only process_vm_readv can confirm, the cross-process read on itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "loopback_world.h"

extern "C" {
#include "misc/fault.h"
#include "transport/fifo.h"
}

using mendtest::ScopedEnv;
using mendtest::World;

namespace {

const int kConnColl = 0;  // MEND_CONN_COLL (transport.h is C only)
const int kConnP2p = 1;   // MEND_CONN_P2P

std::vector<int32_t> values(int tag, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; i++) v[i] = (int32_t)(tag * 1000003 + (int32_t)i);
  return v;
}

// Ring shift of `count` int32 (each rank to the next) and an AlltoAll of `count` per peer, out of
// place and in place; every result checked.
void exchange(World& w, size_t count) {
  int n = w.n();
  std::vector<std::vector<int32_t>> src(n), dst(n, std::vector<int32_t>(count + 1, -7));
  for (int r = 0; r < n; r++) src[r] = values(r, count);
  mendtest::ringShift<int32_t>(w, src, dst, count, ncclInt32, -7);
  for (int inPlace = 0; inPlace < 2; inPlace++) {
    std::vector<std::vector<int32_t>> in(n), out(n, std::vector<int32_t>(count * n, -1));
    for (int r = 0; r < n; r++) {
      in[r] = values(100 + r, count * n);
      if (inPlace) out[r] = in[r];
    }
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      ASSERT_EQ(ncclAlltoAll(inPlace ? out[r].data() : in[r].data(), out[r].data(), count, ncclInt32, w.comm(r),
                             nullptr),
                ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < n; r++)
      for (int p = 0; p < n; p++)
        ASSERT_EQ(0, memcmp(out[r].data() + (size_t)p * count, in[p].data() + (size_t)r * count,
                            count * sizeof(int32_t)))
            << "AlltoAll " << (inPlace ? "in place" : "out of place") << ", rank " << r << " block of " << p;
  }
}

// What the P2P connectors from sender to receiver show: the largest directOk of the channels, and
// whether a slot still holds a direct slot's flag.
struct Seen {
  uint64_t ok = 0;
  bool directSlot = false;
};
Seen seen(World& w, int sender, int receiver, int nChannels, int connIndex = kConnP2p) {
  Seen s;
  for (int ch = 0; ch < nChannels; ch++) {
    struct mendFifo* f = w.fifo(ch, connIndex, sender, receiver);
    if (f == nullptr) continue;
    if (f->directOk > s.ok) s.ok = f->directOk;
    for (int i = 0; i < MEND_FIFO_SLOTS; i++) s.directSlot |= (f->bytes[i] & MEND_FIFO_DIRECT) != 0;
  }
  return s;
}

}  // namespace

// Large chunks are read in place once the receiver has checked it can; the data is right before,
// during and after, at rank counts where AlltoAll pairs differ, and small chunks still go as copies.
TEST(HostEngineDirect, SendRecvAndAlltoAllReadInPlace) {
  ScopedEnv min("MEND_SHM_DIRECT_MIN", "512");
  for (int n : {2, 3, 5}) {
    World w(n, 2, 8 * 1024);
    exchange(w, 100);  // 400 bytes a transfer: below the minimum, never direct
    for (int r = 0; r < n; r++) {
      Seen s = seen(w, r, (r + 1) % n, 2);
      EXPECT_FALSE(s.directSlot) << "n " << n << " rank " << r;
    }
    for (size_t count : {(size_t)30011, (size_t)262144, (size_t)1000}) exchange(w, count);
    for (int r = 0; r < n; r++) {
      Seen s = seen(w, r, (r + 1) % n, 2);
      EXPECT_EQ(s.ok, 1u) << "n " << n << ": rank " << (r + 1) % n << " never welcomed direct slots from " << r;
      EXPECT_TRUE(s.directSlot) << "n " << n << ": rank " << r << " posted no direct slot";
    }
  }
}

// A ring AllGather's sends are read in place too (their data is then final in the output, written
// once), out of place and in place; a ring Broadcast's never are (its sends stay copies: slower
// where measured), nor is anything of an AllReduce.
TEST(HostEngineDirect, RingAllGatherOnly) {
  ScopedEnv min("MEND_SHM_DIRECT_MIN", "512");
  ScopedEnv algo("NCCL_ALGO", "Ring");
  for (int n : {2, 3, 5}) {
    World w(n, 2, 8 * 1024);
    size_t count = 30011;
    for (int round = 0; round < 2; round++)  // the first probes, the second reads
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        std::vector<std::vector<int32_t>> in(n), out(n, std::vector<int32_t>(count * n + 1, -1));
        for (int r = 0; r < n; r++) {
          in[r] = values(7 + r + round, count);
          if (inPlace) memcpy(out[r].data() + (size_t)r * count, in[r].data(), count * sizeof(int32_t));
        }
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < n; r++)
          ASSERT_EQ(ncclAllGather(inPlace ? out[r].data() + (size_t)r * count : in[r].data(), out[r].data(), count,
                                  ncclInt32, w.comm(r), nullptr),
                    ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
        for (int r = 0; r < n; r++) {
          for (int p = 0; p < n; p++)
            ASSERT_EQ(0, memcmp(out[r].data() + (size_t)p * count, in[p].data(), count * sizeof(int32_t)))
                << "n " << n << (inPlace ? " in place" : " out of place") << ", rank " << r << " block of " << p;
          ASSERT_EQ(out[r][count * n], -1) << "written past the end";
        }
      }
    int direct = 0;
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++)
        if (q != r) direct += seen(w, r, q, 2, kConnColl).directSlot;
    EXPECT_GE(direct, n) << "n " << n << ": every rank sends on to the next in a ring";
  }
  World w(3, 2, 8 * 1024);
  size_t count = 100003;
  for (int round = 0; round < 2; round++) {
    std::vector<std::vector<int32_t>> buf(3, std::vector<int32_t>(count, -1));
    buf[1] = values(5, count);
    std::vector<int32_t> want = buf[1];
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 3; r++)
      ASSERT_EQ(ncclBroadcast(buf[r].data(), buf[r].data(), count, ncclInt32, 1, w.comm(r), nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < 3; r++) ASSERT_EQ(buf[r], want) << "rank " << r;
  }
  for (int r = 0; r < 3; r++)
    for (int q = 0; q < 3; q++)
      if (q != r) {
        EXPECT_FALSE(seen(w, r, q, 2, kConnColl).directSlot) << "Broadcast " << r << " -> " << q;
      }
}

// MEND_SHM_DIRECT=0: the receiver refuses, every chunk is copied through the FIFO.
TEST(HostEngineDirect, OffCopiesEverything) {
  ScopedEnv off("MEND_SHM_DIRECT", "0");
  ScopedEnv min("MEND_SHM_DIRECT_MIN", "512");
  World w(3, 2, 8 * 1024);
  for (size_t count : {(size_t)30011, (size_t)262144}) exchange(w, count);
  for (int r = 0; r < 3; r++) {
    Seen s = seen(w, r, (r + 1) % 3, 2);
    EXPECT_EQ(s.ok, 2u);
    EXPECT_FALSE(s.directSlot);
  }
}

// The token decides: a producer whose token is not at the address it gave (read through
// process_vm_readv, as for another process) is refused; one whose token is there is read that way.
// And a read the kernel refuses (the fault site) refuses direct slots, the data still right.
TEST(HostEngineDirect, TokenAndRefusedRead) {
  ScopedEnv min("MEND_SHM_DIRECT_MIN", "512");
  static uint64_t token = 0x1234567890abcdefull;
  for (int good = 0; good < 2; good++) {
    World w(2, 1, 8 * 1024);
    exchange(w, 10);  // connects, below the minimum: nobody introduced
    for (int r = 0; r < 2; r++) {
      struct mendFifo* f = w.fifo(0, kConnP2p, r, 1 - r);
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(f->directPid, 0u);
      f->directToken = good ? token : token + 1;
      f->directAt = (uint64_t)(uintptr_t)&token;
      f->directPid = (uint64_t)getpid();
    }
    for (size_t count : {(size_t)30011, (size_t)262144}) exchange(w, count);
    for (int r = 0; r < 2; r++) {
      Seen s = seen(w, r, 1 - r, 1);
      EXPECT_EQ(s.ok, good ? 1u : 2u) << "token " << (good ? "at its address" : "not at its address");
      EXPECT_EQ(s.directSlot, good == 1);
    }
  }
  mendFaultSet("shm.direct", 1, 1);
  {
    World w(2, 1, 8 * 1024);
    exchange(w, 10);
    for (int r = 0; r < 2; r++) {
      struct mendFifo* f = w.fifo(0, kConnP2p, r, 1 - r);
      f->directToken = token;
      f->directAt = (uint64_t)(uintptr_t)&token;
      f->directPid = (uint64_t)getpid();
    }
    exchange(w, 30011);
    for (int r = 0; r < 2; r++) EXPECT_EQ(seen(w, r, 1 - r, 1).ok, 2u);
  }
  mendFaultClear();
}

// A direct slot the receiver cannot read (here: a producer that never gave its process, so the read
// goes to pid 0) fails the operation with a WARN and ncclSystemError: no crash, no hang.
TEST(HostEngineDirect, UnreadableSlotFails) {
  ScopedEnv min("MEND_SHM_DIRECT_MIN", "512");
  World w(2, 1, 8 * 1024);
  exchange(w, 10);
  struct mendFifo* f = w.fifo(0, kConnP2p, 0, 1);
  ASSERT_NE(f, nullptr);
  f->directOk = 1;  // as if rank 1 had welcomed them; rank 0 then never introduces itself
  std::vector<int32_t> src = values(1, 30011), dst(30011);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(src.data(), src.size(), ncclInt32, 1, w.comm(0), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(dst.data(), dst.size(), ncclInt32, 0, w.comm(1), nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSystemError);
}

// A sender whose every chunk went as a direct slot has run all its steps, but waits for them to be
// read: a receiver that never comes leaves it waiting until the abort flag, which ends the call with
// an error within seconds, as for any other wait.
TEST(HostEngineDirect, AbortStopsAWaitForReads) {
  ScopedEnv min("MEND_SHM_DIRECT_MIN", "512");
  World w(2, 1, 8 * 1024);  // 1 KiB slots, 8 of them
  exchange(w, 30011);       // connects; rank 1 welcomes rank 0's direct slots
  ASSERT_EQ(seen(w, 0, 1, 1).ok, 1u);
  std::vector<int32_t> src = values(3, 1024);  // 4 KiB: four direct slots, all posted at once
  ncclResult_t res = ncclSuccess;
  auto t0 = std::chrono::steady_clock::now();
  std::thread th([&] { res = ncclSend(src.data(), src.size(), ncclInt32, 1, w.comm(0), nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  struct mendFifo* f = w.fifo(0, kConnP2p, 0, 1);
  uint64_t posted = __atomic_load_n(&f->tail, __ATOMIC_ACQUIRE) - __atomic_load_n(&f->head, __ATOMIC_ACQUIRE);
  EXPECT_GE(posted, 4u) << "the sender posted its chunks and waits for their reads";
  mendCommSetAbortFlag(w.comm(0), 1);
  th.join();
  EXPECT_NE(res, ncclSuccess);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  mendCommSetAbortFlag(w.comm(0), 0);
}
