// Programs, generators, the host engine and the planner, run for real on the loopback world
// (connectors in plain memory, one thread drives every rank through the public API inside a group).
// Results are compared with references computed here, independently of Mend's reduction code.
// The tuner (NCCL_ALGO/NCCL_PROTO, cost model, channels, TUNING logs) is tested in test_tuning.cc.
// The generators' shapes without the engine (matching, validation) are in test_program_shapes.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

extern "C" {
#include "narrow_float.h"
#include "device/engine.h"
#include "enqueue/plan.h"
#include "enqueue/tuning.h"
#include "init.h"
#include "misc/param.h"
#include "transport/fifo.h"
}

#include "loopback_world.h"

namespace {

// ---------------------------------------------------------------- element formats (independent)

struct Fmt {
  int bytes;          // storage size
  bool isFloat;       // floating type
  bool isSigned;      // signed integer
  int ebits, mbits;   // narrow float layout (0 for native types)
  int bias;           // exponent bias
  bool e4m3;          // no inf, only S.1111.111 is NaN
};
const Fmt kFmts[ncclNumTypes] = {
    {1, false, true, 0, 0, 0, false},   {1, false, false, 0, 0, 0, false}, {4, false, true, 0, 0, 0, false},
    {4, false, false, 0, 0, 0, false},  {8, false, true, 0, 0, 0, false},  {8, false, false, 0, 0, 0, false},
    {2, true, true, 5, 10, 15, false},  {4, true, true, 0, 0, 0, false},   {8, true, true, 0, 0, 0, false},
    {2, true, true, 8, 7, 127, false},  {1, true, true, 4, 3, 7, true},    {1, true, true, 5, 2, 15, false},
};

double decodeNarrow(uint32_t v, const Fmt& f) { return mendtest::decodeNarrow(v, f.ebits, f.mbits, f.bias, f.e4m3); }

double decode(int t, const void* p) { return mendtest::decodeElem(t, p); }

// Exact encoding of a representable value: narrow formats by table (every pattern decoded once).
void encode(int t, double x, void* p) {
  const Fmt& f = kFmts[t];
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclInt32: case ncclUint32: case ncclInt64: case ncclUint64: {
    int64_t v = (int64_t)x;
    memcpy(p, &v, f.bytes);
    return;
  }
  case ncclFloat32: { float v = (float)x; memcpy(p, &v, 4); return; }
  case ncclFloat64: memcpy(p, &x, 8); return;
  default: break;
  }
  static std::mutex mu;
  static std::map<int, std::unordered_map<double, uint32_t>> tables;
  std::lock_guard<std::mutex> lock(mu);
  auto& tab = tables[t];
  if (tab.empty()) {
    for (uint32_t v = (1u << (8 * f.bytes)) - 1;; v--) {  // descending: +0 wins over -0
      double d = decodeNarrow(v, f);
      if (!std::isnan(d)) tab[d] = v;
      if (v == 0) break;
    }
  }
  auto it = tab.find(x);
  ASSERT_TRUE(it != tab.end()) << "value " << x << " not representable in type " << t;
  memcpy(p, &it->second, f.bytes);
}

// One rank's buffers: a region with guard bytes after it, at an odd offset (unaligned).
struct Buf {
  std::vector<unsigned char> mem;
  size_t off = 3, bytes;
  explicit Buf(size_t b) : mem(b + 3 + 64, 0xA5), bytes(b) {}
  unsigned char* p() { return mem.data() + off; }
  bool guardsOk() const {
    for (size_t i = 0; i < off; i++) if (mem[i] != 0xA5) return false;
    for (size_t i = off + bytes; i < mem.size(); i++) if (mem[i] != 0xA5) return false;
    return true;
  }
};

// ---------------------------------------------------------------- data and references

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS_HOST, OP_PMS_DEV, NUM_TEST_OPS };
const char* kOpNames[NUM_TEST_OPS] = {"sum", "prod", "max", "min", "avg", "premulsum-host", "premulsum-dev"};

bool isFp8(int t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

// Small integers whose every partial result is exact in the type: fp8 uses a sparse pattern
// (at most two ranks contribute per element).
double inputValue(int t, int op, int n, int r, size_t i) {
  if (op == OP_MAX || op == OP_MIN) return (double)((r * 5 + i * 3) % 7);
  bool sparse = isFp8(t);
  if (op == OP_PROD) {
    if (sparse) return ((i + r) % n) < 2 ? 1.0 + (double)(i % 2) : 1.0;
    return ((r * 3 + i) % 5 == 0) ? 2.0 : 1.0;
  }
  if (sparse) return ((i + r) % n) < 2 ? 1.0 + (double)(i % 2) : 0.0;
  return (double)((r * 7 + i * 13 + 1) % 4);
}

// Reference of the reduction over ranks of element i; *tol: allowed absolute error.
double reference(int t, int op, int n, size_t i, double* tol) {
  *tol = 0;
  double acc = inputValue(t, op, n, 0, i);
  for (int r = 1; r < n; r++) {
    double v = inputValue(t, op, n, r, i);
    switch (op) {
    case OP_PROD: acc *= v; break;
    case OP_MAX: acc = std::max(acc, v); break;
    case OP_MIN: acc = std::min(acc, v); break;
    default: acc += v; break;
    }
  }
  if (op == OP_PMS_HOST || op == OP_PMS_DEV) {
    acc = 0;
    for (int r = 0; r < n; r++) acc += 2.0 * inputValue(t, op, n, r, i);
  }
  if (op == OP_AVG) {
    if (!kFmts[t].isFloat) return std::trunc(acc / n);
    double rel = kFmts[t].mbits ? std::ldexp(1.0, -kFmts[t].mbits) : 1e-6;
    *tol = (n + 2) * rel * std::max(1.0, acc / n);
    return acc / n;
  }
  return acc;
}

// The op handle for a test op on one communicator (PreMulSum with scalar 2).
struct OpHandle {
  ncclRedOp_t op = ncclSum;
  ncclComm_t comm = nullptr;
  bool user = false;
  std::vector<unsigned char> scalar;
  OpHandle(int testOp, int t, ncclComm_t c) : comm(c) {
    static const ncclRedOp_t builtin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    if (testOp < OP_PMS_HOST) { op = builtin[testOp]; return; }
    scalar.resize(8);
    encode(t, 2.0, scalar.data());
    auto res = testOp == OP_PMS_HOST ? ncclScalarHostImmediate : ncclScalarDevice;
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, scalar.data(), (ncclDataType_t)t, res, c), ncclSuccess);
    user = true;
    if (testOp == OP_PMS_HOST) memset(scalar.data(), 0, 8);  // copied at creation: must not be read later
  }
  ~OpHandle() {
    if (user) {
      EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
    }
  }
};

std::string where(const char* coll, int n, int t, int op, size_t count, bool inPlace, const char* algo) {
  char b[256];
  snprintf(b, sizeof b, "%s n=%d type=%d op=%s count=%zu %s algo=%s", coll, n, t, op >= 0 ? kOpNames[op] : "-",
           count, inPlace ? "in-place" : "out-of-place", algo ? algo : "auto");
  return b;
}

// Compare element i of a buffer against a reference value; returns false (with a message) once.
bool checkElem(int t, const unsigned char* p, size_t i, double want, double tol, const std::string& ctx, int rank) {
  double got = decode(t, p + i * kFmts[t].bytes);
  if (std::fabs(got - want) <= tol) return true;
  ADD_FAILURE() << ctx << ": rank " << rank << " element " << i << " = " << got << ", expected " << want;
  return false;
}

}  // namespace

// ================================================================ engine: collectives end to end

namespace {

bool reducing(int f) {
  return f == MEND_FUNC_ALLREDUCE || f == MEND_FUNC_REDUCE || f == MEND_FUNC_REDUCESCATTER;
}
size_t sendElems(int f, int n, size_t c) {
  return (f == MEND_FUNC_REDUCESCATTER || f == MEND_FUNC_ALLTOALL || f == MEND_FUNC_SCATTER) ? n * c : c;
}
size_t recvElems(int f, int n, size_t c) {
  return (f == MEND_FUNC_ALLGATHER || f == MEND_FUNC_ALLTOALL || f == MEND_FUNC_GATHER) ? n * c : c;
}
unsigned char pat(int r, size_t byte) { return (unsigned char)(r * 37 + byte * 11 + 5); }

struct Rank {
  std::vector<Buf> bufs;
  unsigned char* send = nullptr;
  unsigned char* recv = nullptr;
};

// Buffers of one rank, with NCCL's in-place layouts.
void setupRank(Rank& R, int f, int n, int r, size_t count, size_t ts, bool inPlace) {
  size_t sb = sendElems(f, n, count) * ts, rb = recvElems(f, n, count) * ts;
  if (!inPlace) {
    R.bufs.emplace_back(sb);
    R.bufs.emplace_back(rb);
    R.send = R.bufs[0].p();
    R.recv = R.bufs[1].p();
    return;
  }
  R.bufs.emplace_back(std::max(sb, rb));
  unsigned char* b = R.bufs[0].p();
  R.send = R.recv = b;
  if (f == MEND_FUNC_ALLGATHER || f == MEND_FUNC_GATHER) R.send = b + r * count * ts;
  if (f == MEND_FUNC_REDUCESCATTER || f == MEND_FUNC_SCATTER) R.recv = b + r * count * ts;
}

void fillSend(Rank& R, int f, int t, int op, int n, int r, size_t count) {
  size_t ts = kFmts[t].bytes, elems = sendElems(f, n, count);
  for (size_t i = 0; i < elems; i++) {
    if (reducing(f)) encode(t, inputValue(t, op, n, r, i), R.send + i * ts);
    else for (size_t b = 0; b < ts; b++) R.send[i * ts + b] = pat(r, i * ts + b);
  }
}

ncclResult_t issue(int f, Rank& R, size_t count, int t, ncclRedOp_t op, int root, ncclComm_t comm) {
  ncclDataType_t dt = (ncclDataType_t)t;
  switch (f) {
  case MEND_FUNC_ALLREDUCE: return ncclAllReduce(R.send, R.recv, count, dt, op, comm, nullptr);
  case MEND_FUNC_REDUCE: return ncclReduce(R.send, R.recv, count, dt, op, root, comm, nullptr);
  case MEND_FUNC_REDUCESCATTER: return ncclReduceScatter(R.send, R.recv, count, dt, op, comm, nullptr);
  case MEND_FUNC_ALLGATHER: return ncclAllGather(R.send, R.recv, count, dt, comm, nullptr);
  case MEND_FUNC_BROADCAST: return ncclBroadcast(R.send, R.recv, count, dt, root, comm, nullptr);
  case MEND_FUNC_ALLTOALL: return ncclAlltoAll(R.send, R.recv, count, dt, comm, nullptr);
  case MEND_FUNC_GATHER: return ncclGather(R.send, R.recv, count, dt, root, comm, nullptr);
  case MEND_FUNC_SCATTER: return ncclScatter(R.send, R.recv, count, dt, root, comm, nullptr);
  default: return ncclInternalError;
  }
}

// Expected bytes of a copying collective at rank r, element i of its receive buffer (-1: untouched).
int expectByte(int f, int n, int r, int root, size_t count, size_t ts, size_t byte) {
  size_t blockBytes = count * ts, b = blockBytes ? byte / blockBytes : 0, in = blockBytes ? byte % blockBytes : 0;
  switch (f) {
  case MEND_FUNC_ALLGATHER: return pat((int)b, in);
  case MEND_FUNC_BROADCAST: return pat(root, byte);
  case MEND_FUNC_ALLTOALL: return pat((int)b, r * blockBytes + in);
  case MEND_FUNC_GATHER: return r == root ? pat((int)b, in) : -1;
  case MEND_FUNC_SCATTER: return pat(root, r * blockBytes + byte);
  default: return -1;
  }
}

// Run one collective on every rank of `w` in one group; check every rank's result.
void runColl(World& w, int f, int t, int op, size_t count, bool inPlace, int root, const char* algo) {
  int n = w.n();
  size_t ts = kFmts[t].bytes;
  std::string ctx = where(mendFuncName(f), n, t, op, count, inPlace, algo) + " root=" + std::to_string(root);
  std::vector<Rank> ranks(n);
  std::vector<std::unique_ptr<OpHandle>> ops(n);
  for (int r = 0; r < n; r++) {
    setupRank(ranks[r], f, n, r, count, ts, inPlace);
    fillSend(ranks[r], f, t, op < 0 ? OP_SUM : op, n, r, count);
    if (reducing(f)) ops[r].reset(new OpHandle(op, t, w.comm(r)));
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(issue(f, ranks[r], count, t, ops[r] ? ops[r]->op : ncclSum, root, w.comm(r)), ncclSuccess) << ctx;
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ctx;
  for (int r = 0; r < n; r++) {
    Rank& R = ranks[r];
    for (auto& b : R.bufs) ASSERT_TRUE(b.guardsOk()) << ctx << " rank " << r << ": write outside the buffer";
    if (reducing(f)) {
      if (f == MEND_FUNC_REDUCE && r != root) {
        for (size_t i = 0; !inPlace && i < count * ts; i++) {
          ASSERT_EQ(R.recv[i], 0xA5) << ctx << " non-root recv written";
        }
        continue;
      }
      size_t base = f == MEND_FUNC_REDUCESCATTER ? r * count : 0;
      for (size_t i = 0; i < count; i++) {
        double tol, want = reference(t, op, n, base + i, &tol);
        if (!checkElem(t, R.recv, i, want, tol, ctx, r)) return;
      }
    } else {
      size_t rb = recvElems(f, n, count) * ts;
      for (size_t i = 0; i < rb; i++) {
        int e = expectByte(f, n, r, root, count, ts, i);
        if (e < 0) {
          if (!inPlace) {
            ASSERT_EQ(R.recv[i], 0xA5) << ctx << " rank " << r << " byte " << i << " written";
          }
          continue;
        }
        ASSERT_EQ(R.recv[i], (unsigned char)e) << ctx << " rank " << r << " byte " << i;
      }
    }
  }
}

const size_t kCounts[] = {0, 1, 2, 13, 97, 1009, 4099};

}  // namespace

// AllReduce: every rank count 1..16, every type and op, ring and tree, in and out of place, sizes
// from 0 to several loops of several chunks (8 KiB FIFO: 1 KiB slots).
TEST(EngineAllReduce, AllRanksTypesOpsAlgos) {
  for (const char* algo : {"ring", "tree"}) {
    ScopedEnv env("NCCL_ALGO", algo);
    for (int n = 1; n <= 16; n++) {
      World w(n);
      for (int t = 0; t < ncclNumTypes; t++) {
        for (int op = 0; op < NUM_TEST_OPS; op++) {
          for (size_t count : {(size_t)0, (size_t)1, (size_t)13, (size_t)1009}) {
            for (bool inPlace : {false, true}) {
              runColl(w, MEND_FUNC_ALLREDUCE, t, op, count, inPlace, -1, algo);
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Recursive doubling (MEND_RD=1): powers of two and every shape of fold (1..7 extra ranks) up to 16
// ranks, every type and op, in and out of place, sizes from 0 to several loops of several chunks,
// then many loops on 3 channels.  (ProgramRd checks every count 1..16 for matching messages.)
TEST(EngineAllReduce, RecursiveDoubling) {
  ScopedEnv rd("MEND_RD", "1");
  for (int n : {1, 2, 3, 4, 6, 8, 13, 16}) {
    World w(n);
    for (int t = 0; t < ncclNumTypes; t++) {
      for (int op = 0; op < NUM_TEST_OPS; op++) {
        for (size_t count : {(size_t)0, (size_t)1, (size_t)13, (size_t)1009}) {
          for (bool inPlace : {false, true}) {
            runColl(w, MEND_FUNC_ALLREDUCE, t, op, count, inPlace, -1, "rd");
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  ScopedEnv chunk("MEND_CHUNKSIZE", "320");
  ScopedEnv minCh("NCCL_MIN_NCHANNELS", "3");
  for (int n : {2, 3, 6, 8, 13}) {
    World w(n, 3, 16 * 1024);
    for (int t : {ncclInt32, ncclFloat64, ncclFloat16}) {
      runColl(w, MEND_FUNC_ALLREDUCE, t, OP_SUM, 65537, n % 2, -1, "rd");
      if (HasFailure()) return;
    }
  }
}

// Recursive doubling AllGather (MEND_RD=1): 2, 4 and 8 ranks, and Bruck's order at 3, 5, 6, 7, 12,
// 13 and 15 (16 keeps the ring: its last round's 8 slots and an op signature alone in the first
// overfill the FIFO, which hung at 1009 bytes a block; 15's last round fills it exactly), every type,
// in and out of place, counts from 0 to several loops of several chunks on 3 channels.
TEST(EngineAllGather, RecursiveDoubling) {
  ScopedEnv rd("MEND_RD", "1");
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 15, 16}) {
    World w(n);
    for (int t = 0; t < ncclNumTypes; t++) {
      for (size_t count : {(size_t)0, (size_t)1, (size_t)13, (size_t)1009}) {
        for (bool inPlace : {false, true}) {
          runColl(w, MEND_FUNC_ALLGATHER, t, OP_SUM, count, inPlace, -1, "rd");
          if (HasFailure()) return;
        }
      }
    }
  }
  ScopedEnv chunk("MEND_CHUNKSIZE", "320");
  ScopedEnv minCh("NCCL_MIN_NCHANNELS", "3");
  for (int n : {2, 3, 4, 6, 7, 8, 13, 15, 16}) {
    World w(n, 3, 16 * 1024);
    for (int t : {ncclInt8, ncclFloat64, ncclFloat16}) {
      runColl(w, MEND_FUNC_ALLGATHER, t, OP_SUM, 65537, n % 4 == 0 || n == 7, -1, "rd");
      if (HasFailure()) return;
    }
  }
}

// ReduceScatter in one hop (MEND_RD=1): 2 to 5 ranks (6 keeps the ring: 10 connectors do not fit a
// program), every type and reduction op (PreMulSum and avg pre-multiply each sent block and the own
// one), in and out of place, counts from 0 to several loops of several chunks on 3 channels.
TEST(EngineReduceScatter, OneHop) {
  ScopedEnv rd("MEND_RD", "1");
  for (int n : {1, 2, 3, 4, 5, 6}) {
    World w(n);
    for (int t = 0; t < ncclNumTypes; t++) {
      for (int op : {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS_HOST, OP_PMS_DEV}) {
        for (size_t count : {(size_t)0, (size_t)1, (size_t)13, (size_t)1009}) {
          for (bool inPlace : {false, true}) {
            runColl(w, MEND_FUNC_REDUCESCATTER, t, op, count, inPlace, -1, "rd");
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  ScopedEnv chunk("MEND_CHUNKSIZE", "320");
  ScopedEnv minCh("NCCL_MIN_NCHANNELS", "3");
  for (int n : {2, 3, 4, 5}) {
    World w(n, 3, 16 * 1024);
    for (int t : {ncclInt8, ncclFloat64, ncclFloat16}) {
      runColl(w, MEND_FUNC_REDUCESCATTER, t, OP_AVG, 65537, n % 2 == 0, -1, "rd");
      if (HasFailure()) return;
    }
  }
}

// Latency lines (transport/fifo.h): a small slot also goes as one cache line the receiver reads
// first; a line that is not for the slot at the head (stale, or claiming more than a line) is ignored.
static const int kConnColl = 0;  // MEND_CONN_COLL (transport.h is C only)

static const struct mendFifoLine* usedLine(World& w, int sender, int receiver) {
  for (int ch = 0; ch < 2; ch++) {
    struct mendFifo* f = w.fifo(ch, kConnColl, sender, receiver);
    if (f != nullptr && f->line[0].seq != 0) return &f->line[0];
  }
  return nullptr;
}

TEST(EngineLatencyLines, UsedOnlyWhenOnAndStaleLinesIgnored) {
  ScopedEnv host("MEND_EXECUTOR", "host");  // lines are the host engine's (tests/run.sh also runs Engine* on kernel-cpu)
  ScopedEnv rd("MEND_RD", "1");
  {
    World w(2);
    runColl(w, MEND_FUNC_ALLREDUCE, ncclFloat32, OP_SUM, 1, false, -1, "rd");
    const struct mendFifoLine* l = usedLine(w, 0, 1);
    ASSERT_NE(l, nullptr) << "an 8-byte AllReduce left no latency line";
    EXPECT_EQ(l->seq, 1u);
    EXPECT_EQ(l->bytes, 8u + MEND_OPSIG_BYTES);  // 4 bytes of data aligned to 8, then the signature
  }
  {
    ScopedEnv off("MEND_SHM_LL", "0");
    World w(2);
    runColl(w, MEND_FUNC_ALLREDUCE, ncclFloat32, OP_SUM, 1, false, -1, "rd");
    EXPECT_EQ(usedLine(w, 0, 1), nullptr) << "MEND_SHM_LL=0 still wrote a line";
  }
  // Lines the receiver must not take: for an older slot, or claiming more bytes than a line holds.
  // The next slots go without lines (MEND_SHM_LL=0), so only the slots carry the data.
  World w(2);
  runColl(w, MEND_FUNC_ALLREDUCE, ncclFloat32, OP_SUM, 1, false, -1, "rd");
  ASSERT_NE(usedLine(w, 0, 1), nullptr);
  ASSERT_NE(usedLine(w, 1, 0), nullptr);
  ScopedEnv off("MEND_SHM_LL", "0");
  for (int sender = 0; sender < 2; sender++) {
    for (int ch = 0; ch < 2; ch++) {
      struct mendFifo* f = w.fifo(ch, kConnColl, sender, 1 - sender);
      if (f == nullptr) continue;
      f->line[1].seq = 1;  // stale: slot 1 is the second one (seq 2)
      memset(f->line[1].data, 0x7f, sizeof f->line[1].data);
      f->line[2].seq = 3;  // for the third slot, but too long to be a line
      f->line[2].bytes = MEND_FIFO_LINE_BYTES + 8;
      memset(f->line[2].data, 0x7f, sizeof f->line[2].data);
    }
  }
  for (int i = 0; i < 2; i++) {
    for (int t : {ncclFloat32, ncclInt64}) {
      runColl(w, MEND_FUNC_ALLREDUCE, t, OP_SUM, 1, false, -1, "rd");
      if (HasFailure()) return;
    }
  }
}

TEST(EngineAllReduce, LargeCountsManyLoopsAndChannels) {
  ScopedEnv chunk("MEND_CHUNKSIZE", "320");  // not a multiple of most rank counts' segment sizes
  ScopedEnv minCh("NCCL_MIN_NCHANNELS", "3");
  for (const char* algo : {"ring", "tree"}) {
    ScopedEnv env("NCCL_ALGO", algo);
    for (int n : {2, 3, 5, 8, 11, 16}) {
      World w(n, 3, 16 * 1024);
      for (int t : {ncclInt32, ncclFloat64, ncclFloat16, ncclUint8}) {
        for (size_t count : {(size_t)65537, (size_t)100003}) {
          runColl(w, MEND_FUNC_ALLREDUCE, t, OP_SUM, count, count % 2, -1, algo);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(EngineCollectives, ReduceScatterAllGatherBroadcastReduce) {
  const int funcs[] = {MEND_FUNC_REDUCESCATTER, MEND_FUNC_ALLGATHER, MEND_FUNC_BROADCAST, MEND_FUNC_REDUCE};
  for (int n = 1; n <= 16; n++) {
    World w(n);
    for (int f : funcs) {
      bool rooted = f == MEND_FUNC_BROADCAST || f == MEND_FUNC_REDUCE;
      for (int t = 0; t < ncclNumTypes; t++) {
        for (int op : {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PMS_HOST, OP_PMS_DEV}) {
          if (!reducing(f) && op != OP_SUM) continue;
          if (reducing(f) && t % 3 != op % 3 && n % 4 != 1) continue;  // sample the cross product
          for (size_t count : kCounts) {
            if (count > 1009 && n > 8) continue;
            for (bool inPlace : {false, true}) {
              int root = rooted ? (int)((count + t) % n) : -1;
              runColl(w, f, t, op, count, inPlace, root, nullptr);
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(EngineCollectives, AlltoAllGatherScatter) {
  const int funcs[] = {MEND_FUNC_ALLTOALL, MEND_FUNC_GATHER, MEND_FUNC_SCATTER};
  for (int n = 1; n <= 16; n++) {
    World w(n);
    for (int f : funcs) {
      for (int t : {ncclInt8, ncclFloat32, ncclFloat64, ncclBfloat16}) {
        for (size_t count : kCounts) {
          if (count > 1009 && n > 8) continue;
          for (bool inPlace : {false, true}) {
            for (int root = 0; root < n; root += (f == MEND_FUNC_ALLTOALL ? n : std::max(1, n / 3))) {
              runColl(w, f, t, -1, count, inPlace, f == MEND_FUNC_ALLTOALL ? -1 : root, nullptr);
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Half, bf16 and fp8 sums of values that do not add exactly: every rank holds the same bits, and
// the result is within the rounding bound of the exact sum.
TEST(EngineRounding, NarrowFloatsIdenticalAndBounded) {
  for (const char* algo : {"ring", "tree"}) {
    ScopedEnv env("NCCL_ALGO", algo);
    for (int n : {3, 5, 8, 13}) {
      World w(n);
      for (int t : {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2}) {
        size_t count = 513, ts = kFmts[t].bytes;
        std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(count * ts)), out = in;
        std::vector<double> exact(count, 0), mag(count, 0);
        for (int r = 0; r < n; r++) {
          for (size_t i = 0; i < count; i++) {
            // a pattern byte decoded as the type, kept if finite and small
            uint32_t bits = (uint32_t)((r * 2654435761u + i * 40503u) >> 7);
            memcpy(in[r].data() + i * ts, &bits, ts);
            double v = decode(t, in[r].data() + i * ts);
            if (!std::isfinite(v) || std::fabs(v) > 8 || std::fabs(v) < 1e-3) {
              encode(t, (double)((r + i) % 3), in[r].data() + i * ts);
              v = decode(t, in[r].data() + i * ts);
            }
            exact[i] += v;
            mag[i] += std::fabs(v);
          }
        }
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        for (int r = 0; r < n; r++)
          ASSERT_EQ(ncclAllReduce(in[r].data(), out[r].data(), count, (ncclDataType_t)t, ncclSum, w.comm(r), nullptr),
                    ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
        double eps = std::ldexp(1.0, -kFmts[t].mbits);
        for (int r = 1; r < n; r++) EXPECT_EQ(out[r], out[0]) << "type " << t << " rank " << r << " differs";
        for (size_t i = 0; i < count; i++) {
          double got = decode(t, out[0].data() + i * ts);
          EXPECT_LE(std::fabs(got - exact[i]), n * eps * mag[i] + 1e-2) << "type " << t << " n " << n << " i " << i;
        }
      }
    }
  }
}

// ================================================================ engine: send/recv and groups

namespace {
std::vector<unsigned char> pattern(int tag, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; i++) v[i] = pat(tag, i);
  return v;
}
}  // namespace

// Ring shift and all-pairs exchanges larger than the FIFO, all issued in one group per world.
TEST(EngineSendRecv, ShiftAndAllPairs) {
  for (int n : {2, 3, 4, 7, 8, 16}) {
    World w(n);
    for (size_t bytes : {(size_t)0, (size_t)1, (size_t)1000, (size_t)100003, (size_t)1 << 20}) {
      std::vector<std::vector<unsigned char>> src(n), dst(n);
      for (int r = 0; r < n; r++) {
        src[r] = pattern(r, bytes);
        dst[r].assign(bytes + 1, 0xA5);
      }
      mendtest::ringShift<unsigned char>(w, src, dst, bytes, ncclUint8, 0xA5);
    }
    // all pairs, int32 elements, each rank sending a different block to each peer
    size_t count = 30011;
    std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count * n)), in(n, std::vector<int32_t>(count * n, -1));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count * n; i++) out[r][i] = (int32_t)(r * 1000003 + i);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++) {
      for (int p = 0; p < n; p++) {
        ASSERT_EQ(ncclSend(out[r].data() + p * count, count, ncclInt32, p, w.comm(r), nullptr), ncclSuccess);
        ASSERT_EQ(ncclRecv(in[r].data() + p * count, count, ncclInt32, p, w.comm(r), nullptr), ncclSuccess);
      }
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < n; r++)
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(in[r][p * count + i], out[p][r * count + i]) << "n " << n << " " << r << "<-" << p;
  }
}

// Several sends to one peer are matched with the receives in call order; send to self works.
TEST(EngineSendRecv, CallOrderAndSelf) {
  World w(3);
  std::vector<unsigned char> a = pattern(1, 5000), b = pattern(2, 70000), c = pattern(3, 12);
  std::vector<unsigned char> x(5000), y(70000), z(12), s0(777), s1(777);
  std::vector<unsigned char> self0 = pattern(9, 777), self1 = pattern(10, 777);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(a.data(), a.size(), ncclUint8, 1, w.comm(0), nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(b.data(), b.size(), ncclUint8, 1, w.comm(0), nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(c.data(), c.size(), ncclUint8, 1, w.comm(0), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(x.data(), x.size(), ncclUint8, 0, w.comm(1), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(y.data(), y.size(), ncclUint8, 0, w.comm(1), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(z.data(), z.size(), ncclUint8, 0, w.comm(1), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(s0.data(), s0.size(), ncclUint8, 2, w.comm(2), nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(self0.data(), self0.size(), ncclUint8, 2, w.comm(2), nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(self1.data(), self1.size(), ncclUint8, 2, w.comm(2), nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(s1.data(), s1.size(), ncclUint8, 2, w.comm(2), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
  EXPECT_EQ(z, c);
  EXPECT_EQ(s0, self0);
  EXPECT_EQ(s1, self1);
  // A send to self alone has no partner: a clear error, not a hang.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(self0.data(), self0.size(), ncclUint8, 0, w.comm(0), nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
}

// One group: collectives and send/recv mixed, on two worlds (several communicators) at once.
TEST(EngineGroup, MixedOpsSeveralComms) {
  World w1(4), w2(3);
  World* ws[2] = {&w1, &w2};
  size_t count = 20000;
  std::vector<std::vector<float>> arIn[2], arOut[2], agOut[2], sr[2];
  for (int k = 0; k < 2; k++) {
    int n = ws[k]->n();
    arIn[k].assign(n, std::vector<float>(count));
    arOut[k].assign(n, std::vector<float>(count, -1));
    agOut[k].assign(n, std::vector<float>(count * n, -1));
    sr[k].assign(n, std::vector<float>(count, -1));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) arIn[k][r][i] = (float)((r + 1) * (i % 100) + k);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < 2; k++) {
    int n = ws[k]->n();
    for (int r = 0; r < n; r++) {
      ncclComm_t c = ws[k]->comm(r);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // nesting
      ASSERT_EQ(ncclAllReduce(arIn[k][r].data(), arOut[k][r].data(), count, ncclFloat, ncclSum, c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclSend(arIn[k][r].data(), count, ncclFloat, (r + 1) % n, c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclRecv(sr[k][r].data(), count, ncclFloat, (r + n - 1) % n, c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclAllGather(arIn[k][r].data(), agOut[k][r].data(), count, ncclFloat, c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    }
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int k = 0; k < 2; k++) {
    int n = ws[k]->n();
    for (int r = 0; r < n; r++) {
      for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (int q = 0; q < n; q++) sum += arIn[k][q][i];
        ASSERT_EQ(arOut[k][r][i], sum) << "world " << k << " rank " << r << " i " << i;
        ASSERT_EQ(sr[k][r][i], arIn[k][(r + n - 1) % n][i]);
        for (int q = 0; q < n; q++) ASSERT_EQ(agOut[k][r][q * count + i], arIn[k][q][i]);
      }
    }
  }
}

// An abort (ncclCommAbort sets the flag) stops a collective whose peers never come, in bounded time.
TEST(EngineGroup, AbortStopsAWait) {
  World w(2);
  mendtest::expectAbortStopsAWait(w);
}

// ncclGroupEnd connects every communicator of a world on its own thread, and a link's two ends ask for
// it at once: both must get the one link (a second copy leaked, and the rank left on it hung).  Each
// round is a fresh world, so every link is made by racing threads; TSan flags an unguarded table.
TEST(EngineGroup, ConcurrentConnectsShareOneLink) {
  const int n = 8;
  const size_t count = 5000;
  for (int round = 0; round < 20; round++) {
    World w(n, 4, 8 * 1024, 20);
    std::vector<std::vector<float>> in(n, std::vector<float>(count)), out(n, std::vector<float>(count));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) in[r][i] = (float)(r * 7 + i % 13);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      ASSERT_EQ(ncclAllReduce(in[r].data(), out[r].data(), count, ncclFloat, ncclSum, w.comm(r), nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << "round " << round;
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        ASSERT_EQ(out[r][i], (float)(7 * n * (n - 1) / 2 + n * (i % 13))) << "round " << round << " rank " << r;
  }
}

// ================================================================ argument checks

TEST(EngineArgs, BadInputsReturnCodes) {
  World w(2);
  ncclComm_t c = w.comm(0);
  float buf[4] = {};
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, (ncclDataType_t)12, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, (ncclDataType_t)-1, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)99, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)-3, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(nullptr, buf, 4, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, nullptr, 4, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c, (cudaStream_t)0x1), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(buf, buf, 4, ncclFloat, 2, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(buf, buf, 4, ncclFloat, ncclSum, -1, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(buf, 4, ncclFloat, 2, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(buf, 4, ncclFloat, -1, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGather(buf, buf, 4, ncclFloat, 5, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclScatter(buf, buf, 4, ncclFloat, 5, c, nullptr), ncclInvalidArgument);
  // Count 0 is a no-op, even with NULL buffers; Reduce's recvbuff matters only at the root.
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 0, ncclFloat, c, nullptr), ncclSuccess);
  // A PreMulSum op: wrong datatype, destroyed, created on another communicator.
  ncclRedOp_t op;
  float scalar = 2;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclDouble, op, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, op, w.comm(1), nullptr), ncclInvalidArgument);
  ASSERT_EQ(ncclRedOpDestroy(op, c), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, op, c, nullptr), ncclInvalidArgument);
  // Groups: end without start; an error inside a group is returned again by ncclGroupEnd.
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, (ncclDataType_t)77, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
}
