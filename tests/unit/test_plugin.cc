// Plugin loading: the example net plugin (ABI v11 and v8) through Mend's adapter, and the example tuner.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "misc/param.h"
#include "nccl.h"
#include "plugin/net_plugin.h"
#include "plugin/tuner_plugin.h"
}

static std::string libDir() {
  const char* b = getenv("MEND_BUILDDIR");
  return std::string(b ? b : "build") + "/lib/";
}

// Drive a send and a receive to completion through `net` on one device (bounded).
static void exchange(const mendNet_t* net, size_t bytes) {
  void* ctx = nullptr;
  ASSERT_EQ(net->init(&ctx, 1, mendDebugLog), ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(net->devices(&ndev), ncclSuccess);
  ASSERT_GE(ndev, 1);
  struct mendNetProperties props;
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_TRUE(props.ptrSupport & MEND_PTR_HOST);
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_EQ(net->listen(ctx, 0, handle, &lc), ncclSuccess);
  for (int i = 0; i < 10000 && (!sc || !rc); i++) {
    if (!sc) {
      ASSERT_EQ(net->connect(ctx, 0, handle, &sc), ncclSuccess);
    }
    if (!rc) {
      ASSERT_EQ(net->accept(lc, &rc), ncclSuccess);
    }
  }
  ASSERT_TRUE(sc && rc);
  std::vector<char> src(bytes), dst(bytes + 16, 0);
  for (size_t i = 0; i < bytes; i++) src[i] = (char)(i * 7 + 3);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_EQ(net->regMr(sc, src.data(), bytes, MEND_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(net->regMr(rc, dst.data(), dst.size(), MEND_PTR_HOST, &rmh), ncclSuccess);
  void *sreq = nullptr, *rreq = nullptr;
  void* rdata = dst.data();
  size_t rsize = dst.size();
  int tag = 0;
  ASSERT_EQ(net->irecv(rc, 1, &rdata, &rsize, &tag, &rmh, &rreq), ncclSuccess);
  ASSERT_EQ(net->isend(sc, src.data(), bytes, 0, smh, &sreq), ncclSuccess);
  ASSERT_TRUE(sreq && rreq);
  int sdone = 0, rdone = 0, got = -1, sent = -1;
  for (long i = 0; i < 20000000 && (!sdone || !rdone); i++) {
    if (!sdone) {
      ASSERT_EQ(net->test(sreq, &sdone, &sent), ncclSuccess);
    }
    if (!rdone) {
      ASSERT_EQ(net->test(rreq, &rdone, &got), ncclSuccess);
    }
  }
  ASSERT_TRUE(sdone && rdone);
  EXPECT_EQ((size_t)got, bytes);
  EXPECT_EQ(memcmp(src.data(), dst.data(), bytes), 0);
  net->deregMr(sc, smh);
  net->deregMr(rc, rmh);
  EXPECT_EQ(net->closeSend(sc), ncclSuccess);
  EXPECT_EQ(net->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(net->closeListen(lc), ncclSuccess);
  net->finalize(ctx);
}

class PluginNet : public ::testing::TestWithParam<const char*> {};

TEST_P(PluginNet, ExampleLoadsAndMovesData) {
  std::string lib = libDir() + GetParam();
  setenv("NCCL_NET_PLUGIN", lib.c_str(), 1);
  mendParamResetCache();
  mendNetPluginReset();
  const mendNet_t* net = nullptr;
  ASSERT_EQ(mendNetSelect("Example", &net), ncclSuccess);
  ASSERT_NE(net, nullptr);
  EXPECT_STREQ(net->name, "Example");
  EXPECT_EQ(mendNetPluginVersion(), strstr(GetParam(), "example8") ? 8 : 11);
  exchange(net, 1);
  exchange(net, 3 << 20);
  unsetenv("NCCL_NET_PLUGIN");
  mendParamResetCache();
  mendNetPluginReset();
}
INSTANTIATE_TEST_SUITE_P(Versions, PluginNet,
                         ::testing::Values("libnccl-net-example.so", "libnccl-net-example8.so"));

TEST(PluginNetSelect, UnknownNameIsInvalidUsage) {
  setenv("NCCL_NET_PLUGIN", "none", 1);
  mendParamResetCache();
  mendNetPluginReset();
  const mendNet_t* net = nullptr;
  EXPECT_EQ(mendNetSelect("NoSuchNet", &net), ncclInvalidUsage);
  EXPECT_EQ(mendNetSelect("socket", &net), ncclSuccess);
  EXPECT_STREQ(net->name, "Socket");
  EXPECT_EQ(mendNetSelect(nullptr, &net), ncclSuccess);
  EXPECT_STREQ(net->name, "Socket");
  unsetenv("NCCL_NET_PLUGIN");
  mendParamResetCache();
  mendNetPluginReset();
}

TEST(PluginTuner, ExampleRewritesCosts) {
  std::string lib = libDir() + "libnccl-tuner-example.so";
  setenv("NCCL_TUNER_PLUGIN", lib.c_str(), 1);
  setenv("EXAMPLE_TUNER_RING_BYTES", "4096", 1);
  setenv("EXAMPLE_TUNER_CHANNELS", "3", 1);
  mendParamResetCache();
  struct mendTuner* t = nullptr;
  ASSERT_EQ(mendTunerOpen(42, 4, 2, &t), ncclSuccess);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(mendTunerName(t), "ExampleTuner");
  for (size_t bytes : {1024ul, 1ul << 20}) {
    float costs[MEND_TUNER_NALGOS][MEND_TUNER_NPROTOS];
    for (auto& row : costs) for (float& c : row) c = -1.0f;
    costs[0][2] = 10.0f;  // tree/simple
    costs[1][2] = 10.0f;  // ring/simple
    int nch = 0;
    ASSERT_EQ(mendTunerGetCollInfo(t, 4 /* AllReduce */, bytes, costs, &nch), ncclSuccess);
    EXPECT_EQ(nch, 3);
    int want = bytes >= 4096 ? 1 : 0;
    EXPECT_EQ(costs[want][2], 0.0f);
    EXPECT_EQ(costs[1 - want][2], 10.0f);
    EXPECT_EQ(costs[0][0], -1.0f);
  }
  mendTunerClose(t);
  setenv("NCCL_TUNER_PLUGIN", "none", 1);
  mendParamResetCache();
  ASSERT_EQ(mendTunerOpen(42, 4, 2, &t), ncclSuccess);
  EXPECT_EQ(t, nullptr);
  unsetenv("NCCL_TUNER_PLUGIN");
  unsetenv("EXAMPLE_TUNER_RING_BYTES");
  unsetenv("EXAMPLE_TUNER_CHANNELS");
  mendParamResetCache();
}

// Whether `lib` is mapped in this process now (RTLD_NOLOAD loads nothing; its reference is dropped).
static bool isLoaded(const std::string& lib) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

// A communicator's planner (created by its first operation) holds the tuner plugin it opened; destroy
// frees the planner, so the plugin is closed and unloaded with the last communicator using it.
TEST(PluginTuner, ClosedWhenItsCommunicatorsAreDestroyed) {
  std::string lib = libDir() + "libnccl-tuner-example.so";
  ASSERT_FALSE(isLoaded(lib));
  setenv("NCCL_TUNER_PLUGIN", lib.c_str(), 1);
  mendParamResetCache();
  ncclComm_t comms[2];
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  std::vector<float> buf[2] = {std::vector<float>(1024, 1.0f), std::vector<float>(1024, 2.0f)};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(ncclAllReduce(buf[r].data(), buf[r].data(), 1024, ncclFloat, ncclSum, comms[r], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(buf[1][1023], 3.0f);
  EXPECT_TRUE(isLoaded(lib)) << "the first AllReduce opens the tuner plugin";
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_FALSE(isLoaded(lib)) << "destroy left the planner, and the tuner plugin it holds, allocated";
  unsetenv("NCCL_TUNER_PLUGIN");
  mendParamResetCache();
}
