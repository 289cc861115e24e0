// The MAC the bootstrap proves the job secret with (src/misc/mac.c): SipHash-2-4's published test
// vectors, incremental use, key derivation.
#include <gtest/gtest.h>

#include <string.h>

extern "C" {
#include "misc/mac.h"
}

namespace {

TEST(BootstrapMac, SipHashVectors) {
  uint8_t key[16], msg[64];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
  EXPECT_EQ(mendMac(key, msg, 0), 0x726fdb47dd0e0e31ULL);  // the paper's vectors
  EXPECT_EQ(mendMac(key, msg, 15), 0xa129ca6149be45e5ULL);
  for (size_t len : {1, 7, 8, 9, 63}) {  // incremental in any pieces == one shot
    struct mendMac m;
    mendMacInit(&m, key);
    for (size_t i = 0; i < len; i += 3) mendMacUpdate(&m, msg + i, len - i < 3 ? len - i : 3);
    EXPECT_EQ(mendMacFinal(&m), mendMac(key, msg, len)) << len;
  }
  uint8_t a[16], b[16];
  mendMacDeriveKey(nullptr, "job-A", 5, a);
  mendMacDeriveKey(nullptr, "job-B", 5, b);
  EXPECT_NE(memcmp(a, b, 16), 0);
}

}  // namespace
