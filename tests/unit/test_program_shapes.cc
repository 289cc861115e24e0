// Program generators without the engine: ring, double binary tree and recursive-doubling shapes
// are valid and every message sent is received in the same order (expanded per connector), and the
// program validator rejects malformed programs.  Run for real in test_programs.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "enqueue/gen.h"
#include "enqueue/program.h"

namespace {
// Expand one loop iteration of a program into per-connector message lists (segment ids / blocks).
struct Msg { int peer; int dir; int block; };
std::vector<Msg> expand(const mendProgram* p, int phase) {
  std::vector<Msg> out;
  const struct mendProgPhase& ph = p->phases[phase];
  for (int s = ph.firstStep; s < ph.firstStep + ph.nSteps; s++) {
    const struct mendProgStep& st = p->steps[s];
    for (int k = 0; k < st.repeat; k++) {
      int seg = (int)((st.seg + (int64_t)k * st.segDelta) % ph.loopSegs);
      int block = ph.layout == MEND_LAYOUT_BLOCKED && p->nSegMap ? p->segMap[seg] : seg;
      if (st.op & MEND_STEP_RECV) out.push_back({p->peers[st.recvPeer].rank, 1, block});
      if (st.op & MEND_STEP_SEND) out.push_back({p->peers[st.sendPeer].rank, 0, block});
    }
  }
  return out;
}

// Every message rank a sends to b in phase h is received by b from a, in the same order.
void checkMatching(const std::vector<mendProgram*>& progs, const std::string& ctx) {
  int n = (int)progs.size();
  for (int h = 0; h < progs[0]->nPhases; h++) {
    std::map<std::pair<int, int>, std::vector<int>> sent, recvd;
    for (int r = 0; r < n; r++) {
      ASSERT_EQ(progs[r]->nPhases, progs[0]->nPhases) << ctx;
      for (const Msg& m : expand(progs[r], h)) {
        if (m.dir == 0) sent[{r, m.peer}].push_back(m.block);
        else recvd[{m.peer, r}].push_back(m.block);
      }
    }
    EXPECT_EQ(sent, recvd) << ctx << " phase " << h;
  }
}
}  // namespace

TEST(ProgramRing, ShapesValidAndMatching) {
  const int funcs[] = {MEND_FUNC_ALLREDUCE, MEND_FUNC_ALLGATHER, MEND_FUNC_REDUCESCATTER, MEND_FUNC_BROADCAST,
                       MEND_FUNC_REDUCE};
  for (int n = 1; n <= 33; n++) {
    std::vector<int> perm(n);  // ring order differs from rank order
    for (int p = 0; p < n; p++) perm[p] = (p + n / 2) % n;
    for (int f : funcs) {
      for (int root = 0; root < n; root += (n > 4 ? n / 3 : 1)) {
        std::vector<mendProgram*> progs(n);
        for (int j = 0; j < n; j++) {
          ASSERT_EQ(mendGenRing(f, n, perm.data(), j, root, &progs[perm[j]]), ncclSuccess);
          EXPECT_EQ(mendProgValidate(progs[perm[j]]), ncclSuccess);
          EXPECT_LE(progs[perm[j]]->nSteps, 5) << "ring programs stay a few steps at any rank count";
        }
        checkMatching(progs, std::string(mendFuncName(f)) + " n=" + std::to_string(n));
        for (auto* p : progs) free(p);
      }
    }
  }
}

TEST(ProgramTree, DoubleBinaryTreesValid) {
  for (int n = 1; n <= 70; n++) {
    for (int which = 0; which < 2; which++) {
      std::vector<int> up(n), d0(n), d1(n);
      int roots = 0, maxDepth = 0;
      for (int p = 0; p < n; p++) {
        int d[2];
        mendTreeDoubleBinary(n, p, which, &up[p], d);
        d0[p] = d[0];
        d1[p] = d[1];
        if (up[p] < 0) roots++;
      }
      ASSERT_EQ(roots, 1) << "n=" << n;
      for (int p = 0; p < n; p++) {
        if (up[p] >= 0) {
          EXPECT_TRUE(d0[up[p]] == p || d1[up[p]] == p) << "n=" << n << " p=" << p;
        }
        for (int c : {d0[p], d1[p]}) {
          if (c >= 0) {
            EXPECT_EQ(up[c], p) << "n=" << n;
          }
        }
        int depth = 0;
        for (int q = p; up[q] >= 0 && depth <= n; q = up[q]) depth++;
        EXPECT_LE(depth, n) << "cycle";
        maxDepth = std::max(maxDepth, depth);
      }
      EXPECT_LE(maxDepth, (int)std::ceil(std::log2(n + 1))) << "n=" << n;
    }
    if (n >= 4) {  // most leaves of one tree are inner nodes of the other
      int bothLeaves = 0, leaves = 0;
      for (int p = 0; p < n; p++) {
        int u, a[2], b[2];
        mendTreeDoubleBinary(n, p, 0, &u, a);
        mendTreeDoubleBinary(n, p, 1, &u, b);
        bool l0 = a[0] < 0 && a[1] < 0, l1 = b[0] < 0 && b[1] < 0;
        leaves += l0;
        bothLeaves += l0 && l1;
      }
      EXPECT_LT(bothLeaves, leaves) << "n=" << n;
    }
  }
}

TEST(ProgramTree, AllReduceMatching) {
  for (int n = 2; n <= 20; n++) {
    for (int which = 0; which < 2; which++) {
      std::vector<mendProgram*> progs(n);
      for (int p = 0; p < n; p++) {
        int up, d[2];
        mendTreeDoubleBinary(n, p, which, &up, d);
        ASSERT_EQ(mendGenTreeAllReduce(up, d, 2, &progs[p]), ncclSuccess);
        EXPECT_EQ(progs[p]->nPhases, 2);
      }
      checkMatching(progs, "tree n=" + std::to_string(n));
      for (auto* p : progs) free(p);
    }
  }
}

// Recursive doubling: every rank count it supports (2..16), ranks in a ring order unlike rank order:
// valid, matching pairwise, log2 rounds (+2 hops past a power of two); 17 ranks do not fit a program.
TEST(ProgramRd, MatchingAndRounds) {
  for (int n = 1; n <= 16; n++) {
    ASSERT_TRUE(n == 1 || mendRdSupported(n)) << "n=" << n;
    std::vector<int> perm(n);  // position -> rank: reversed, so partners are not rank ^ bit
    for (int p = 0; p < n; p++) perm[p] = n - 1 - p;
    std::vector<mendProgram*> progs(n);
    int pow2 = 1, rounds = 0;
    while (pow2 * 2 <= n) pow2 *= 2, rounds++;
    for (int q = 0; q < n; q++) {
      ASSERT_EQ(mendGenRdAllReduce(n, perm.data(), q, &progs[perm[q]]), ncclSuccess) << "n=" << n;
      EXPECT_EQ(mendProgValidate(progs[perm[q]]), ncclSuccess);
      int steps = q >= pow2 ? 2 : 2 * rounds + (q < n - pow2 ? 2 : 0);
      if (n > 1) {
        EXPECT_EQ(progs[perm[q]]->nSteps, steps) << "n=" << n << " q=" << q;
      }
    }
    if (n > 1) checkMatching(progs, "rd n=" + std::to_string(n));
    for (auto* p : progs) free(p);
  }
  EXPECT_FALSE(mendRdSupported(17)) << "17 ranks need 10 connectors";
  EXPECT_FALSE(mendRdSupported(32));
  mendProgram* p = nullptr;
  EXPECT_EQ(mendGenRdAllReduce(17, std::vector<int>(17, 0).data(), 0, &p), ncclInternalError);
}

// AllGather by recursive doubling (powers of two) or Bruck's order (the rest): for every rank count it
// supports, ranks in an order unlike rank order: valid, matching pairwise, ceil(log2 n) rounds of
// two steps, and, replayed round by round in program order, every rank sends only blocks it holds
// and ends with each of the n blocks received exactly once (its own one copied).  16 ranks do not
// fit a FIFO (the last round's 8 slots and a signature alone).
TEST(ProgramRdAllGather, EveryBlockOnceAndMatching) {
  for (int n = 2; n <= 16; n++) {
    if (n == 16) {
      EXPECT_FALSE(mendRdAllGatherSupported(n));
      continue;
    }
    ASSERT_TRUE(mendRdAllGatherSupported(n)) << "n=" << n;
    std::vector<int> perm(n);  // position -> rank
    for (int p = 0; p < n; p++) perm[p] = (2 * n - 1 - p + n / 2) % n;  // reversed and rotated
    std::vector<mendProgram*> progs(n);
    int rounds = 0;
    for (int p = 1; p < n; p <<= 1) rounds++;
    for (int q = 0; q < n; q++) {
      ASSERT_EQ(mendGenRdAllGather(n, perm.data(), q, &progs[perm[q]]), ncclSuccess) << "n=" << n;
      EXPECT_EQ(mendProgValidate(progs[perm[q]]), ncclSuccess);
      EXPECT_EQ(progs[perm[q]]->nSteps, 2 * rounds) << "n=" << n << " q=" << q;
    }
    checkMatching(progs, "rd allgather n=" + std::to_string(n));
    // Replay: each program's steps are (send, receive) per round; a round's sends read what the
    // rank held before it.  held[r][b]: times rank r got block b (its own by the copy).
    std::vector<std::vector<int>> held(n, std::vector<int>(n, 0));
    for (int r = 0; r < n; r++) {
      const mendProgram* p = progs[r];
      ASSERT_EQ(p->steps[0].op, MEND_OP_COPY_SEND) << "n=" << n;
      held[r][p->segMap[p->steps[0].seg]]++;
    }
    for (int k = 0; k < rounds; k++) {
      std::vector<std::vector<int>> next = held;
      for (int r = 0; r < n; r++) {
        const mendProgram* p = progs[r];
        const mendProgStep& send = p->steps[2 * k];
        const mendProgStep& recv = p->steps[2 * k + 1];
        ASSERT_EQ(recv.op, MEND_OP_RECV);
        for (int j = 0; j < send.repeat; j++) {
          int b = p->segMap[(send.seg + j * send.segDelta) % n];
          EXPECT_EQ(held[r][b], 1) << "n=" << n << " rank " << r << " round " << k << " sends block " << b
                                   << " it does not hold";
        }
        for (int j = 0; j < recv.repeat; j++) next[r][p->segMap[(recv.seg + j * recv.segDelta) % n]]++;
      }
      held = next;
    }
    for (int r = 0; r < n; r++)
      for (int b = 0; b < n; b++) EXPECT_EQ(held[r][b], 1) << "n=" << n << " rank " << r << " block " << b;
    for (auto* p : progs) free(p);
  }
  mendProgram* p = nullptr;
  EXPECT_EQ(mendGenRdAllGather(16, std::vector<int>(16, 0).data(), 0, &p), ncclInternalError);
}

TEST(ProgramFormat, ValidateRejectsMalformed) {
  mendProgram* p;
  ASSERT_EQ(mendGenP2pSend(1, &p), ncclSuccess);
  EXPECT_EQ(mendProgValidate(p), ncclSuccess);
  p->steps[0].sendPeer = 5;  // beyond nPeers
  EXPECT_EQ(mendProgValidate(p), ncclInternalError);
  p->steps[0].sendPeer = 0;
  p->steps[0].seg = 3;  // beyond loopSegs
  EXPECT_EQ(mendProgValidate(p), ncclInternalError);
  p->steps[0].seg = 0;
  p->steps[0].op = MEND_STEP_REDUCE;  // reduce without a receive
  EXPECT_EQ(mendProgValidate(p), ncclInternalError);
  free(p);
  ASSERT_EQ(mendProgAlloc(MEND_ALGO_RING, 0, &p), ncclSuccess);
  mendProgAddPhase(p, MEND_LAYOUT_CHUNKED, 1);
  for (int i = 0; i < MEND_PROG_MAX_PEERS + 1; i++)
    mendProgAddStep(p, MEND_OP_SEND, 0, -1, i + 1, 0, MEND_BUF_SEND, MEND_BUF_NONE, 0, 1, 0);
  EXPECT_EQ(mendProgValidate(p), ncclInternalError) << "peer table overflow is reported";
  char dump[2048];
  mendProgDump(p, dump, sizeof dump);
  EXPECT_NE(strstr(dump, "send"), nullptr);
  free(p);
}
