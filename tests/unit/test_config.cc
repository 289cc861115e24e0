// ncclConfig_t acceptance (src/init_config.c) as NCCL does it (ABI facts 3.3): configs written by
// older and newer headers (synthetic structs of 24/40/48/72/80/88/96/112 bytes, allocated at exactly that
// size so a read past the caller's size is caught by ASan), version resets, magic, validation,
// defaults, environment overrides, and inheritance for split/shrink.
#include <gtest/gtest.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <memory>
#include <string>

#include "mend_internal.h"

namespace {

const int U = NCCL_CONFIG_UNDEF_INT;
const char* kEnv[] = {"NCCL_COMM_BLOCKING", "NCCL_CGA_CLUSTER_SIZE", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NET",
                      "NCCL_COMM_SPLIT_SHARE_RESOURCES", "NCCL_COMM_SHRINK_SHARE_RESOURCES", "NCCL_COLLNET_ENABLE",
                      "NCCL_CTA_POLICY", "NCCL_NVLS_NCHANNELS", "NCCL_NCHANNELS_PER_NET_PEER",
                      "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE"};

// Offsets of the x86-64 layout (ABI facts 3.1).
enum Off {
  kSize = 0, kMagic = 8, kVersion = 12, kBlocking = 16, kCga = 20, kMinCTAs = 24, kMaxCTAs = 28, kNetName = 32,
  kSplitShare = 40, kTrafficClass = 44, kCommName = 48, kCollnet = 56, kCTAPolicy = 60, kShrinkShare = 64,
  kNvlsCTAs = 68, kNChannelsPerNetPeer = 72, kNvlinkCentric = 76, kGraphUsageMode = 80, kNumRmaCtx = 84,
  kMaxP2pPeers = 88, kGraphStreamOrdering = 92, kPast2_30 = 96
};

// A config as a header of `size` bytes and `version` would lay it out, every field UNDEF.
struct RawConfig {
  size_t size;
  std::unique_ptr<char[]> buf;
  RawConfig(size_t sz, unsigned version) : size(sz), buf(new char[sz]) {
    memset(buf.get(), 0, sz);
    memcpy(buf.get() + kSize, &sz, sizeof(sz));
    unsigned magic = 0xcafebeef;
    memcpy(buf.get() + kMagic, &magic, 4);
    memcpy(buf.get() + kVersion, &version, 4);
    for (size_t off = kBlocking; off + 4 <= sz; off += 4)
      if (off != kNetName && off != kNetName + 4 && off != kCommName && off != kCommName + 4) Int(off, U);
  }
  void Int(size_t off, int v) {
    ASSERT_LE(off + 4, size);
    memcpy(buf.get() + off, &v, 4);
  }
  void Ptr(size_t off, const char* p) {
    ASSERT_LE(off + 8, size);
    memcpy(buf.get() + off, &p, 8);
  }
  const ncclConfig_t* cfg() const { return reinterpret_cast<const ncclConfig_t*>(buf.get()); }
};

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearEnv(); }
  void TearDown() override { ClearEnv(); }
  static void ClearEnv() {
    for (const char* v : kEnv) unsetenv(v);
    mendParamResetCache();
  }
  static void Env(const char* n, const char* v) {
    setenv(n, v, 1);
    mendParamResetCache();
  }
  struct mendConfig out;
};

TEST_F(ConfigTest, NullMeansDefaults) {
  ASSERT_EQ(mendConfigParse(nullptr, nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 1);
  EXPECT_EQ(out.cgaClusterSize, 4);
  EXPECT_EQ(out.minCTAs, 1);
  EXPECT_EQ(out.maxCTAs, MEND_MAXCHANNELS);
  EXPECT_EQ(out.netName, nullptr);
  EXPECT_EQ(out.splitShare, 0);
  EXPECT_EQ(out.trafficClass, U);
  EXPECT_STREQ(out.commName, "");
  EXPECT_EQ(out.collnetEnable, 0);
  EXPECT_EQ(out.CTAPolicy, NCCL_CTA_POLICY_DEFAULT);
  EXPECT_EQ(out.shrinkShare, 0);
  EXPECT_EQ(out.nvlsCTAs, U);
  EXPECT_EQ(out.nChannelsPerNetPeer, U);
  EXPECT_EQ(out.nvlinkCentricSched, 0);
  EXPECT_EQ(out.graphUsageMode, U);
  EXPECT_EQ(out.numRmaCtx, U);
  EXPECT_EQ(out.maxP2pPeers, U);
  EXPECT_EQ(out.graphStreamOrdering, U);
}

TEST_F(ConfigTest, CurrentHeader) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(sizeof(c), 96u);
  EXPECT_EQ(c.magic, (unsigned)NCCL_API_MAGIC);
  EXPECT_EQ(c.version, (unsigned)NCCL_VERSION(2, 30, 7));
  EXPECT_EQ(offsetof(ncclConfig_t, graphUsageMode), (size_t)kGraphUsageMode);
  EXPECT_EQ(offsetof(ncclConfig_t, numRmaCtx), (size_t)kNumRmaCtx);
  EXPECT_EQ(offsetof(ncclConfig_t, maxP2pPeers), (size_t)kMaxP2pPeers);
  EXPECT_EQ(offsetof(ncclConfig_t, graphStreamOrdering), (size_t)kGraphStreamOrdering);
  c.graphUsageMode = 1;
  c.numRmaCtx = 2;
  c.maxP2pPeers = 8;
  c.graphStreamOrdering = 0;
  c.blocking = 0;
  c.cgaClusterSize = 2;
  c.minCTAs = 2;
  c.maxCTAs = 8;
  c.netName = "Socket";
  c.commName = "trainer";
  c.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  c.nChannelsPerNetPeer = 4;
  c.nvlinkCentricSched = 1;
  ASSERT_EQ(mendConfigParse(&c, nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 0);
  EXPECT_EQ(out.cgaClusterSize, 2);
  EXPECT_EQ(out.minCTAs, 2);
  EXPECT_EQ(out.maxCTAs, 8);
  ASSERT_NE(out.netName, nullptr);
  EXPECT_STREQ(out.netName, "Socket");
  EXPECT_EQ(out.netName, out.netNameBuf);  // a private copy, not the caller's pointer
  EXPECT_STREQ(out.commName, "trainer");
  EXPECT_EQ(out.CTAPolicy, NCCL_CTA_POLICY_ZERO);
  EXPECT_EQ(out.nChannelsPerNetPeer, 4);
  EXPECT_EQ(out.nvlinkCentricSched, 1);
  EXPECT_EQ(out.graphUsageMode, 1);
  EXPECT_EQ(out.numRmaCtx, 2);
  EXPECT_EQ(out.maxP2pPeers, 8);
  EXPECT_EQ(out.graphStreamOrdering, 0);
}

TEST_F(ConfigTest, Size24From2_14) {
  RawConfig r(24, NCCL_VERSION(2, 14, 3));
  r.Int(kBlocking, 0);
  r.Int(kCga, 3);  // inside 24 bytes but the 2.14 header had no such field: reset
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 0);
  EXPECT_EQ(out.cgaClusterSize, 4);
  EXPECT_EQ(out.minCTAs, 1);
  EXPECT_EQ(out.maxCTAs, MEND_MAXCHANNELS);
  EXPECT_EQ(out.splitShare, 0);
}

TEST_F(ConfigTest, Size40From2_17) {
  RawConfig r(40, NCCL_VERSION(2, 17, 1));
  r.Int(kCga, 3);
  r.Int(kMinCTAs, 2);
  r.Int(kMaxCTAs, 5);
  r.Ptr(kNetName, "IB");
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 1);
  EXPECT_EQ(out.cgaClusterSize, 3);
  EXPECT_EQ(out.minCTAs, 2);
  EXPECT_EQ(out.maxCTAs, 5);
  EXPECT_STREQ(out.netName, "IB");
  EXPECT_EQ(out.splitShare, 0);  // not in a 40-byte struct
}

TEST_F(ConfigTest, Size48From2_18And2_26) {
  RawConfig old(48, NCCL_VERSION(2, 18, 3));
  old.Int(kSplitShare, 1);
  old.Int(kTrafficClass, 5);  // 2.18 had no trafficClass: reset below 2.25
  ASSERT_EQ(mendConfigParse(old.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.splitShare, 1);
  EXPECT_EQ(out.trafficClass, U);
  RawConfig newer(48, NCCL_VERSION(2, 26, 2));
  newer.Int(kTrafficClass, 5);
  ASSERT_EQ(mendConfigParse(newer.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.trafficClass, 5);
}

TEST_F(ConfigTest, Size72From2_27) {
  RawConfig r(72, NCCL_VERSION(2, 27, 7));
  r.Ptr(kCommName, "c27");
  r.Int(kCollnet, 1);
  r.Int(kCTAPolicy, NCCL_CTA_POLICY_EFFICIENCY);
  r.Int(kShrinkShare, 1);
  r.Int(kNvlsCTAs, 16);
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_STREQ(out.commName, "c27");
  EXPECT_EQ(out.collnetEnable, 1);
  EXPECT_EQ(out.CTAPolicy, NCCL_CTA_POLICY_EFFICIENCY);
  EXPECT_EQ(out.shrinkShare, 1);
  EXPECT_EQ(out.nvlsCTAs, 16);
  EXPECT_EQ(out.nChannelsPerNetPeer, U);  // beyond 72 bytes
  EXPECT_EQ(out.nvlinkCentricSched, 0);
}

TEST_F(ConfigTest, Size48From2_23) {
  RawConfig r(48, NCCL_VERSION(2, 23, 4));
  r.Int(kBlocking, 0);
  r.Int(kSplitShare, 1);
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 0);
  EXPECT_EQ(out.splitShare, 1);
  EXPECT_STREQ(out.commName, "");  // beyond 48 bytes
  EXPECT_EQ(out.graphUsageMode, U);
}

TEST_F(ConfigTest, Size80From2_28) {
  RawConfig r(80, NCCL_VERSION(2, 28, 9));
  r.Int(kNChannelsPerNetPeer, 2);
  r.Int(kNvlinkCentric, 1);
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.nChannelsPerNetPeer, 2);
  EXPECT_EQ(out.nvlinkCentricSched, 1);
  EXPECT_EQ(out.graphUsageMode, U);  // beyond 80 bytes
  EXPECT_EQ(out.graphStreamOrdering, U);
}

TEST_F(ConfigTest, Size88From2_29) {
  RawConfig r(88, NCCL_VERSION(2, 29, 7));
  r.Int(kGraphUsageMode, 1);
  r.Int(kNumRmaCtx, 4);
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.graphUsageMode, 1);
  EXPECT_EQ(out.numRmaCtx, 4);
  EXPECT_EQ(out.maxP2pPeers, U);  // beyond 88 bytes
  EXPECT_EQ(out.graphStreamOrdering, U);
}

TEST_F(ConfigTest, Size96From2_30) {
  RawConfig r(96, NCCL_VERSION(2, 30, 7));
  r.Int(kBlocking, 0);
  r.Int(kNChannelsPerNetPeer, 2);
  r.Int(kGraphUsageMode, 2);
  r.Int(kNumRmaCtx, 3);
  r.Int(kMaxP2pPeers, 16);
  r.Int(kGraphStreamOrdering, 1);
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 0);
  EXPECT_EQ(out.nChannelsPerNetPeer, 2);
  EXPECT_EQ(out.graphUsageMode, 2);
  EXPECT_EQ(out.numRmaCtx, 3);
  EXPECT_EQ(out.maxP2pPeers, 16);
  EXPECT_EQ(out.graphStreamOrdering, 1);
}

TEST_F(ConfigTest, Size112FromNewerHeader) {
  RawConfig r(112, NCCL_VERSION(2, 32, 3));
  r.Int(kMaxP2pPeers, 4);
  r.Int(kPast2_30, -12345);  // fields Mend does not know are ignored, whatever they hold
  r.Int(kPast2_30 + 4, 7);
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.maxP2pPeers, 4);
}

TEST_F(ConfigTest, VersionResetsFieldsTheHeaderLacked) {
  RawConfig r(80, NCCL_VERSION(2, 13, 0));  // older than the blocking field
  r.Int(kBlocking, 0);
  r.Int(kCga, 99);
  r.Int(kCollnet, 7);  // garbage the validation would reject, but reset first
  r.Int(kNChannelsPerNetPeer, 1000);
  r.Ptr(kNetName, "ignored");
  ASSERT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 1);
  EXPECT_EQ(out.cgaClusterSize, 4);
  EXPECT_EQ(out.netName, nullptr);
  EXPECT_EQ(out.collnetEnable, 0);
  EXPECT_EQ(out.nChannelsPerNetPeer, U);
  RawConfig r27(80, NCCL_VERSION(2, 27, 0));
  r27.Int(kNChannelsPerNetPeer, 7);
  r27.Int(kNvlinkCentric, 9);
  r27.Int(kShrinkShare, 1);
  ASSERT_EQ(mendConfigParse(r27.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.nChannelsPerNetPeer, U);
  EXPECT_EQ(out.nvlinkCentricSched, 0);
  EXPECT_EQ(out.shrinkShare, 1);
  // A 96-byte struct from a 2.28 header (version below 2.29): the 2.29/2.30 fields are reset, and so
  // is garbage in them that validation would reject.  2.29 keeps its own two, resets the 2.30 pair.
  RawConfig r28(96, NCCL_VERSION(2, 28, 9));
  r28.Int(kGraphUsageMode, -5);
  r28.Int(kNumRmaCtx, -1);
  r28.Int(kMaxP2pPeers, 0);
  r28.Int(kGraphStreamOrdering, -9);
  ASSERT_EQ(mendConfigParse(r28.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.graphUsageMode, U);
  EXPECT_EQ(out.numRmaCtx, U);
  EXPECT_EQ(out.maxP2pPeers, U);
  EXPECT_EQ(out.graphStreamOrdering, U);
  RawConfig r29(96, NCCL_VERSION(2, 29, 2));
  r29.Int(kGraphUsageMode, 1);
  r29.Int(kNumRmaCtx, 2);
  r29.Int(kMaxP2pPeers, -3);
  r29.Int(kGraphStreamOrdering, -3);
  ASSERT_EQ(mendConfigParse(r29.cfg(), nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.graphUsageMode, 1);
  EXPECT_EQ(out.numRmaCtx, 2);
  EXPECT_EQ(out.maxP2pPeers, U);
  EXPECT_EQ(out.graphStreamOrdering, U);
}

TEST_F(ConfigTest, BadMagic) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.magic = 0x12345678;
  EXPECT_EQ(mendConfigParse(&c, nullptr, &out), ncclInvalidArgument);
  ncclConfig_t zero;
  memset(&zero, 0, sizeof(zero));  // never initialized
  EXPECT_EQ(mendConfigParse(&zero, nullptr, &out), ncclInvalidArgument);
}

TEST_F(ConfigTest, ValidationFailures) {
  struct Case {
    size_t off;
    int value;
  } cases[] = {{kBlocking, 2},        {kBlocking, -1},      {kCga, -1},         {kMinCTAs, 0},
               {kMaxCTAs, -3},        {kSplitShare, 2},     {kShrinkShare, -1}, {kCollnet, 3},
               {kNvlinkCentric, 2},   {kCTAPolicy, 3},      {kCTAPolicy, -1},   {kNvlsCTAs, 0},
               {kNChannelsPerNetPeer, 0}, {kNChannelsPerNetPeer, 65}, {kGraphUsageMode, -1},
               {kNumRmaCtx, 0},      {kNumRmaCtx, -2},     {kMaxP2pPeers, 0},  {kMaxP2pPeers, -1},
               {kGraphStreamOrdering, -1}};
  for (const Case& k : cases) {
    RawConfig r(96, NCCL_VERSION(2, 30, 7));
    r.Int(k.off, k.value);
    EXPECT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclInvalidArgument) << "offset " << k.off << " = " << k.value;
  }
  RawConfig r(80, NCCL_VERSION(2, 28, 9));
  r.Int(kMinCTAs, 8);
  r.Int(kMaxCTAs, 4);
  EXPECT_EQ(mendConfigParse(r.cfg(), nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(mendConfigParse(r.cfg(), nullptr, nullptr), ncclInvalidArgument);
}

TEST_F(ConfigTest, LimitsAreClamped) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.cgaClusterSize = 16;
  c.maxCTAs = 100;
  ASSERT_EQ(mendConfigParse(&c, nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.cgaClusterSize, 8);
  EXPECT_EQ(out.maxCTAs, MEND_MAXCHANNELS);
  c = NCCL_CONFIG_INITIALIZER;
  c.minCTAs = 100;  // above the channel cap, maxCTAs left to its default
  ASSERT_EQ(mendConfigParse(&c, nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.minCTAs, MEND_MAXCHANNELS);
  EXPECT_EQ(out.maxCTAs, MEND_MAXCHANNELS);
}

TEST_F(ConfigTest, EnvOverrides) {
  Env("NCCL_COMM_BLOCKING", "0");
  Env("NCCL_CGA_CLUSTER_SIZE", "2");
  Env("NCCL_MIN_CTAS", "3");
  Env("NCCL_MAX_CTAS", "6");
  Env("NCCL_NET", "IB");
  Env("NCCL_COMM_SPLIT_SHARE_RESOURCES", "1");
  Env("NCCL_COMM_SHRINK_SHARE_RESOURCES", "1");
  Env("NCCL_COLLNET_ENABLE", "1");
  Env("NCCL_CTA_POLICY", "2");
  Env("NCCL_NVLS_NCHANNELS", "5");
  Env("NCCL_NCHANNELS_PER_NET_PEER", "3");
  Env("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "1");
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 1;
  c.netName = "Socket";
  c.minCTAs = 1;
  for (const ncclConfig_t* p : {(const ncclConfig_t*)&c, (const ncclConfig_t*)nullptr}) {
    ASSERT_EQ(mendConfigParse(p, nullptr, &out), ncclSuccess);
    EXPECT_EQ(out.blocking, 0);
    EXPECT_EQ(out.cgaClusterSize, 2);
    EXPECT_EQ(out.minCTAs, 3);
    EXPECT_EQ(out.maxCTAs, 6);
    EXPECT_STREQ(out.netName, "IB");
    EXPECT_EQ(out.splitShare, 1);
    EXPECT_EQ(out.shrinkShare, 1);
    EXPECT_EQ(out.collnetEnable, 1);
    EXPECT_EQ(out.CTAPolicy, 2);
    EXPECT_EQ(out.nvlsCTAs, 5);
    EXPECT_EQ(out.nChannelsPerNetPeer, 3);
    EXPECT_EQ(out.nvlinkCentricSched, 1);
  }
}

TEST_F(ConfigTest, InvalidEnvIsIgnored) {
  Env("NCCL_COMM_BLOCKING", "7");
  Env("NCCL_CTA_POLICY", "9");
  Env("NCCL_NCHANNELS_PER_NET_PEER", "0");
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  ASSERT_EQ(mendConfigParse(&c, nullptr, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 0);
  EXPECT_EQ(out.CTAPolicy, 0);
  EXPECT_EQ(out.nChannelsPerNetPeer, U);
}

TEST_F(ConfigTest, NullInheritsParent) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  c.netName = "Socket";
  c.commName = "parent";
  c.splitShare = 1;
  struct mendConfig parent;
  ASSERT_EQ(mendConfigParse(&c, nullptr, &parent), ncclSuccess);
  Env("NCCL_COMM_BLOCKING", "1");  // a child inherits what the parent resolved
  ASSERT_EQ(mendConfigParse(nullptr, &parent, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 0);
  EXPECT_EQ(out.splitShare, 1);
  EXPECT_STREQ(out.commName, "parent");
  EXPECT_STREQ(out.netName, "Socket");
  EXPECT_EQ(out.netName, out.netNameBuf);  // never points into the parent's struct
  // An explicit config for the child is parsed on its own.
  ncclConfig_t child = NCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(mendConfigParse(&child, &parent, &out), ncclSuccess);
  EXPECT_EQ(out.blocking, 1);
  EXPECT_EQ(out.splitShare, 0);
}

}  // namespace
