// The tuner: NCCL_ALGO / NCCL_PROTO syntax, the alpha-beta cost model, the per-call choice of
// algorithm, channels and chunk (NCCL_MIN/MAX_NCHANNELS, NCCL_BUFFSIZE), its TUNING log lines, and
// ncclGroupSimulateEnd.  Choices are exercised on the loopback world, and calls made under unusual
// settings are still checked for correct results.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "enqueue/plan.h"
#include "enqueue/tuning.h"
}

#include "loopback_world.h"

namespace {

// An int64 AllReduce on every rank of w in one group, checked against the exact sum.
void allReduceChecked(World& w, size_t count, bool inPlace) {
  int n = w.n();
  std::vector<std::vector<int64_t>> in(n, std::vector<int64_t>(count)), out(n, std::vector<int64_t>(count, -1));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) in[r][i] = (int64_t)(r + 1) * (int64_t)(i % 1000 + 1);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    int64_t* dst = inPlace ? in[r].data() : out[r].data();
    ASSERT_EQ(ncclAllReduce(in[r].data(), dst, count, ncclInt64, ncclSum, w.comm(r), nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    const std::vector<int64_t>& got = inPlace ? in[r] : out[r];
    for (size_t i = 0; i < count; i++)
      ASSERT_EQ(got[i], (int64_t)n * (n + 1) / 2 * (int64_t)(i % 1000 + 1)) << "rank " << r << " element " << i;
  }
}

// A byte AllGather on every rank of w, checked block by block.
void allGatherChecked(World& w, size_t count) {
  int n = w.n();
  std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(count)), out(n);
  for (int r = 0; r < n; r++) {
    out[r].assign(count * n, 0);
    for (size_t i = 0; i < count; i++) in[r][i] = (unsigned char)(r * 31 + i * 7);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(ncclAllGather(in[r].data(), out[r].data(), count, ncclInt8, w.comm(r), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++)
    for (int q = 0; q < n; q++) ASSERT_EQ(0, memcmp(out[r].data() + q * count, in[q].data(), count)) << r << "<-" << q;
}

}  // namespace

TEST(TuningParse, AlgoAndProtoSyntax) {
  uint32_t m[MEND_NFUNCS];
  const char* bad = nullptr;
  const uint32_t T = 1u << MEND_NCCL_ALGO_TREE, R = 1u << MEND_NCCL_ALGO_RING, ALL = (1u << 7) - 1;
  ASSERT_EQ(mendTuneParse(nullptr, 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], ALL);
  ASSERT_EQ(mendTuneParse("Ring", 0, m, &bad), ncclSuccess);
  for (int f = 0; f < MEND_NFUNCS; f++) EXPECT_EQ(m[f], R);
  ASSERT_EQ(mendTuneParse("tree,RING", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLGATHER], T | R);
  ASSERT_EQ(mendTuneParse("^tree", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], ALL & ~T);
  ASSERT_EQ(mendTuneParse("ring;allreduce:tree", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], T);
  EXPECT_EQ(m[MEND_FUNC_BROADCAST], R);
  ASSERT_EQ(mendTuneParse("allreduce:^ring;allgather:ring,nvls", 0, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], ALL & ~R);
  EXPECT_EQ(m[MEND_FUNC_ALLGATHER], R | (1u << 4));
  EXPECT_EQ(m[MEND_FUNC_REDUCE], ALL);
  EXPECT_EQ(mendTuneParse("ring,bogus", 0, m, &bad), ncclInvalidArgument);
  EXPECT_STREQ(bad, "bogus");
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], R) << "the valid part still applies";
  EXPECT_EQ(mendTuneParse("allredux:tree", 0, m, &bad), ncclInvalidArgument);
  EXPECT_STREQ(bad, "allredux");
  ASSERT_EQ(mendTuneParse("LL,LL128", 1, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], 3u);
  ASSERT_EQ(mendTuneParse("^simple", 1, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], 3u);
  ASSERT_EQ(mendTuneParse("simple;allreduce:ll", 1, m, &bad), ncclSuccess);
  EXPECT_EQ(m[MEND_FUNC_ALLREDUCE], 1u);
  EXPECT_EQ(m[MEND_FUNC_ALLGATHER], 4u);
}

TEST(TuningModel, TreeForSmallRingForLarge) {
  for (int kind = 0; kind < 3; kind++) {
    mendCostIn in = {MEND_FUNC_ALLREDUCE, 8, 16, kind, 1, 0};
    EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&in, MEND_ALGO_RING)) << "kind " << kind;
    in.nBytes = (size_t)1 << 30;
    EXPECT_GT(mendTuneCostUs(&in, MEND_ALGO_TREE), mendTuneCostUs(&in, MEND_ALGO_RING)) << "kind " << kind;
    double prev = 0;
    for (size_t b = 1; b < ((size_t)1 << 32); b *= 4) {
      in.nBytes = b;
      double c = mendTuneCostUs(&in, MEND_ALGO_RING);
      EXPECT_GE(c, prev);
      prev = c;
    }
    in.func = MEND_FUNC_ALLGATHER;
    EXPECT_LT(mendTuneCostUs(&in, MEND_ALGO_TREE), 0) << "no tree AllGather";
  }
  EXPECT_EQ(mendTuneChannels(1024, 0), 1);
  EXPECT_GT(mendTuneChannels((size_t)64 << 20, 0), 1);
  EXPECT_LE(mendTuneChunk(MEND_FUNC_ALLREDUCE, MEND_ALGO_RING, (size_t)1 << 30, 8, 524288), 524288u);
}

// The choice follows NCCL_ALGO (also per function) and the cost model otherwise.
TEST(TuningChoice, FollowsEnvAndModel) {
  struct Case { const char* env; size_t bytes; int n; int want; };
  const Case cases[] = {
      {"ring", 8, 16, MEND_ALGO_RING},          {"tree", (size_t)64 << 20, 16, MEND_ALGO_TREE},
      {"ring;allreduce:tree", 8, 8, MEND_ALGO_TREE}, {"^tree", 8, 16, MEND_ALGO_RING},
      {nullptr, 8, 16, MEND_ALGO_TREE},          {nullptr, (size_t)256 << 20, 16, MEND_ALGO_RING},
      {"nvls", 8, 4, MEND_ALGO_RING},           {"allgather:tree", 8, 16, MEND_ALGO_TREE},
  };
  for (const Case& c : cases) {
    ScopedEnv env("NCCL_ALGO", c.env);
    World w(c.n);
    mendOp op = {};
    op.func = MEND_FUNC_ALLREDUCE;
    op.comm = w.comm(0);
    op.count = c.bytes / 4;
    op.type = ncclFloat;
    op.root = -1;
    ASSERT_EQ(mendRedOpResolve(ncclSum, ncclFloat, c.n, &op.redop), ncclSuccess);
    mendPlanner* pl;
    ASSERT_EQ(mendPlannerGet(w.comm(0), &pl), ncclSuccess);
    mendChoice ch;
    ASSERT_EQ(mendTuneColl(w.comm(0), pl, &op, c.bytes, &ch), ncclSuccess);
    EXPECT_EQ(ch.algo, c.want) << (c.env ? c.env : "(unset)") << " bytes " << c.bytes;
    EXPECT_EQ(ch.proto, MEND_NCCL_PROTO_SIMPLE);
    EXPECT_GT(ch.estUs, 0);
    op.func = MEND_FUNC_ALLGATHER;
    ASSERT_EQ(mendTuneColl(w.comm(0), pl, &op, c.bytes, &ch), ncclSuccess);
    EXPECT_EQ(ch.algo, MEND_ALGO_RING) << "AllGather has only the ring";
  }
}

namespace {
mendChoice choose(ncclComm_t comm, int func, size_t bytes) {
  mendOp op = {};
  op.func = func;
  op.comm = comm;
  op.count = bytes / 4;
  op.type = ncclFloat;
  op.root = func == MEND_FUNC_BROADCAST || func == MEND_FUNC_REDUCE ? 0 : -1;
  int n = 0;
  EXPECT_EQ(ncclCommCount(comm, &n), ncclSuccess);
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclFloat, n, &op.redop), ncclSuccess);
  mendPlanner* pl = nullptr;
  EXPECT_EQ(mendPlannerGet(comm, &pl), ncclSuccess);
  mendChoice ch = {};
  EXPECT_EQ(mendTuneColl(comm, pl, &op, bytes, &ch), ncclSuccess);
  return ch;
}
}  // namespace

// NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS bound the channels a call uses (within the channels the
// communicator has); NCCL_BUFFSIZE sets the FIFO slot, which caps the chunk.  Results stay right.
TEST(TuningChoice, ChannelLimitsAndBuffsize) {
  World w(4, 8, 64 * 1024);
  const size_t big = (size_t)64 << 20, small = 64;
  EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, big).nChannels, 8) << "large calls use every channel";
  EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, small).nChannels, 1);
  EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, big).chunkBytes, (size_t)4194304 / 8) << "default NCCL_BUFFSIZE";
  {
    ScopedEnv maxCh("NCCL_MAX_NCHANNELS", "2");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, big).nChannels, 2);
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLGATHER, big).nChannels, 2);
  }
  {
    ScopedEnv minCh("NCCL_MIN_NCHANNELS", "5");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, small).nChannels, 5);
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_BROADCAST, small).nChannels, 5);
  }
  {
    ScopedEnv minCh("NCCL_MIN_NCHANNELS", "32");
    EXPECT_EQ(choose(w.comm(0), MEND_FUNC_ALLREDUCE, small).nChannels, 8) << "capped by the channels that exist";
  }
  {
    ScopedEnv buff("NCCL_BUFFSIZE", "65536");
    mendChoice ch = choose(w.comm(0), MEND_FUNC_ALLREDUCE, big);
    EXPECT_EQ(ch.chunkBytes, (size_t)65536 / 8);
    ScopedEnv algo("NCCL_ALGO", "ring");
    ScopedEnv maxCh("NCCL_MAX_NCHANNELS", "1");
    for (bool inPlace : {false, true}) allReduceChecked(w, 70001, inPlace);
  }
}

// NCCL_DEBUG_SUBSYS=TUNING shows the cost model's choice for every collective, and only then.
TEST(TuningLog, ChoiceShownWithTuningSubsys) {
  char dir[] = "/tmp/mend-tuning-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/log";
  auto runAndRead = [&](const char* subsys) {
    ScopedEnv level("NCCL_DEBUG", "INFO");
    ScopedEnv sub("NCCL_DEBUG_SUBSYS", subsys);
    ScopedEnv file("NCCL_DEBUG_FILE", path.c_str());
    ncclResetDebugInit();
    {
      World w(3);
      allReduceChecked(w, 1000, false);
      allGatherChecked(w, 5000);
    }
    ncclResetDebugInit();  // closes the file
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::string tuning = runAndRead("TUNING");
  EXPECT_NE(tuning.find("NCCL INFO AllReduce: 8000 Bytes -> Algo "), std::string::npos) << tuning;
  EXPECT_NE(tuning.find("NCCL INFO AllGather: 15000 Bytes -> Algo Ring proto Simple channels "), std::string::npos)
      << tuning;
  EXPECT_NE(tuning.find("(ring "), std::string::npos) << "both candidates' costs are shown";
  EXPECT_EQ(tuning.find("opCount"), std::string::npos) << "no COLL lines at TUNING";
  std::string coll = runAndRead("COLL");
  EXPECT_EQ(coll.find("-> Algo"), std::string::npos) << coll;
  EXPECT_NE(coll.find("AllReduce: opCount"), std::string::npos) << coll;
  std::string cmd = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(cmd.c_str()), 0);
}

TEST(TuningSimulate, GroupSimulateEnd) {
  World w(8);
  std::vector<float> small(16), big((size_t)8 << 20);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  float est[2];
  for (int k = 0; k < 2; k++) {
    std::vector<float>& b = k ? big : small;
    info.estimatedTime = NCCL_UNDEF_FLOAT;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 8; r++)
      ASSERT_EQ(ncclAllReduce(b.data(), b.data(), b.size(), ncclFloat, ncclSum, w.comm(r), nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
    est[k] = info.estimatedTime;
    EXPECT_GT(est[k], 0.0f);
  }
  EXPECT_GT(est[1], est[0] * 10);
  std::fill(big.begin(), big.end(), 3.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(big.data(), big.data(), 1, ncclFloat, ncclSum, w.comm(0), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&info), ncclSuccess);
  EXPECT_EQ(big[0], 3.0f) << "simulation runs nothing";
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupSimulateEnd(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupSimulateEnd(&info), ncclInvalidUsage) << "not in a group";
}
