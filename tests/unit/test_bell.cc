// Doorbells (src/misc/bell.c): a ring with nobody asleep leaves no waiter bit (so it made no wake
// call), a sleeper publishes the bit and is woken by the next ring, a stale `seen` never sleeps, the
// count wraps inside its 31 bits, and a long ping-pong between two threads loses no wake-up.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "mend_internal.h"

namespace {
uint32_t word(const mendBell_t* b) { return __atomic_load_n(b, __ATOMIC_ACQUIRE); }
void setWord(mendBell_t* b, uint32_t v) { __atomic_store_n(b, v, __ATOMIC_RELEASE); }
double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

TEST(MiscBell, WaiterBitAndWake) {
  mendBell_t bell = 0;
  mendBellRing(&bell);
  EXPECT_EQ(word(&bell), 1u) << "nobody asleep: no waiter bit";
  EXPECT_EQ(mendBellRead(&bell), 1u);
  auto t0 = std::chrono::steady_clock::now();
  mendBellWait(&bell, 0, 2000000);  // stale seen: returns at once
  EXPECT_LT(msSince(t0), 500.0);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    mendBellWait(&bell, 1, 5000000);  // 5 s bound: only a lost wake-up would take that long
    woke = true;
  });
  for (int i = 0; i < 2000 && !(word(&bell) & MEND_BELL_WAITER); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(word(&bell), 1u | MEND_BELL_WAITER) << "the sleeper published its bit";
  EXPECT_EQ(mendBellRead(&bell), 1u) << "the bit is not part of the count";
  t0 = std::chrono::steady_clock::now();
  mendBellRing(&bell);
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_LT(msSince(t0), 1000.0) << "woken by the ring, not by the time bound";
  EXPECT_EQ(word(&bell), 2u) << "the ring cleared the bit";
  setWord(&bell, MEND_BELL_COUNT | MEND_BELL_WAITER);
  mendBellRing(&bell);
  EXPECT_EQ(word(&bell), 0u) << "the count wraps within 31 bits and drops the bit";
  t0 = std::chrono::steady_clock::now();
  mendBellWait(&bell, 0, 20000);  // nothing rings: the time bound ends it
  EXPECT_GE(msSince(t0), 15.0);
  EXPECT_EQ(mendBellRead(&bell), 0u);
}

// Two threads hand a token back and forth 20000 times, each sleeping on its own bell after reading
// it (the engine's order: read the bell, look at the counter, sleep): a lost wake-up would show as a
// wait that ran out its 2 s bound.
TEST(MiscBell, PingPongLosesNoWake) {
  mendBell_t bells[2] = {0, 0};
  std::atomic<int> turn{0}, boundHit{0};
  const int rounds = 20000;
  auto player = [&](int me) {
    for (int i = 0; i < rounds; i++) {
      for (;;) {
        uint32_t seen = mendBellRead(&bells[me]);
        if (turn.load() % 2 == me) break;
        auto t0 = std::chrono::steady_clock::now();
        mendBellWait(&bells[me], seen, 2000000);
        if (msSince(t0) >= 1900.0) boundHit++;
      }
      turn.fetch_add(1);
      mendBellRing(&bells[1 - me]);
    }
  };
  std::thread a(player, 0), b(player, 1);
  a.join();
  b.join();
  EXPECT_EQ(turn.load(), 2 * rounds);
  EXPECT_EQ(boundHit.load(), 0) << "wake-ups were lost and waited out their bound";
}
