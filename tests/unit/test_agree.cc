// Plan-view agreement (src/resilience/agree.h) over a fake network that loses, delays, duplicates and
// reorders messages, between the real planners of a loopback world: every rank plans its ops on its
// own thread while rounds run, and at the end every rank must have planned every op under the same
// view (the per-op hash of mendPlanViewOpHash, what the TRACE log prints), a rank late to the agreed
// op included; a hold is released by COMMIT and bounded by MEND_AGREE_TIMEOUT; fail-back restores the
// epoch-0 view's shape; malformed messages are dropped.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "mend_internal.h"
extern "C" {
#include "enqueue/plan.h"
#include "enqueue/planview.h"
#include "resilience/agree.h"
#include "resilience/health.h"
}

#include "loopback_world.h"

using mendtest::ScopedEnv;
using mendtest::World;

namespace {

constexpr int kDevs = 2;  // NICs per rank in the registries

// Messages in flight between the agreements of one process.
struct FakeNet {
  struct Pkt {
    int from, to;
    mendAgreeMsg m;
    int64_t due;  // deliver at or after (ms)
  };
  std::mutex mu;
  std::vector<Pkt> q;
  std::mt19937 rng{12345};
  double loss = 0, dup = 0;  // probabilities per message
  int maxDelayMs = 0;        // random delay 0..max
  bool reorder = false;      // deliver due messages in random order
  // Return true to drop a message (checked first; a test's targeted loss or block).
  std::function<bool(const Pkt&)> drop;
  int sent = 0, dropped = 0, duplicated = 0;

  void send(int from, int to, const mendAgreeMsg* m) {
    std::lock_guard<std::mutex> g(mu);
    sent++;
    Pkt p{from, to, *m, mendTimeMs()};
    if (drop && drop(p)) {
      dropped++;
      return;
    }
    std::uniform_real_distribution<double> u(0, 1);
    if (u(rng) < loss) {
      dropped++;
      return;
    }
    auto delay = [&] { return maxDelayMs ? (int64_t)(rng() % (unsigned)(maxDelayMs + 1)) : 0; };
    p.due += delay();
    q.push_back(p);
    if (u(rng) < dup) {
      duplicated++;
      p.due += delay();
      q.push_back(p);
    }
  }
  // The messages due now (removed from the queue), in send order or shuffled.
  std::vector<Pkt> due() {
    std::lock_guard<std::mutex> g(mu);
    int64_t now = mendTimeMs();
    std::vector<Pkt> out, keep;
    for (auto& p : q) (p.due <= now ? out : keep).push_back(p);
    q.swap(keep);
    if (reorder) std::shuffle(out.begin(), out.end(), rng);
    return out;
  }
};

struct Sender {
  FakeNet* net;
  int rank;
};

void fakeSend(void* ctx, int peer, const mendAgreeMsg* m) {
  auto* s = static_cast<Sender*>(ctx);
  s->net->send(s->rank, peer, m);
}

// One rank: registry, agreement, and a planning thread that plans ops 0..limit-1 in order.
struct Rank {
  mendHealth health = {};
  mendAgree* agree = nullptr;
  Sender sender{};
  std::thread th;
  std::atomic<uint64_t> limit{0};   // plan ops below this
  std::atomic<uint64_t> planned{0}; // ops planned so far
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::map<uint64_t, std::pair<uint32_t, uint64_t>> ops;  // op -> (view epoch, per-op hash)
};

class Cluster {
 public:
  explicit Cluster(int n, int64_t resendMs = 30, bool installBase = true) : w_(n), ranks_(n) {
    std::vector<int> mbps((size_t)n * kDevs, 100000);
    for (int r = 0; r < n; r++) {
      Rank& k = ranks_[r];
      EXPECT_EQ(mendHealthInit(&k.health, n, kDevs, mbps.data()), ncclSuccess);
      k.sender = Sender{&net, r};
      mendAgreeNet an = {fakeSend, &k.sender};
      EXPECT_EQ(mendAgreeCreate(w_.comm(r), r, n, &k.health, &an, resendMs, &k.agree), ncclSuccess);
      // The base view (epoch 0), installed as the graph layer does at init; nothing planned yet.
      mendPlanView* v = nullptr;
      EXPECT_EQ(mendPlanViewFromChannels(w_.comm(r), &v), ncclSuccess);
      if (r == 0) baseHash_ = v->hash;
      mendPlanView* b = nullptr;
      EXPECT_EQ(mendPlanViewCopy(v, 0, 0, &b), ncclSuccess);
      base.push_back(b);
      if (installBase) {
        EXPECT_EQ(mendPlannerSetView(w_.comm(r), v), ncclSuccess);
      } else {
        unset.push_back(v);
      }
    }
  }
  ~Cluster() {
    stopPlanning();
    for (auto& k : ranks_) {
      mendAgreeFree(k.agree);
      mendHealthFree(&k.health);
    }
    for (auto* b : base) mendPlanViewFree(b);
    for (auto* u : unset) mendPlanViewFree(u);
  }
  int n() const { return (int)ranks_.size(); }
  Rank& rank(int r) { return ranks_[r]; }
  ncclComm_t comm(int r) { return w_.comm(r); }
  uint64_t baseHash() const { return baseHash_; }

  void startPlanning() {
    for (int r = 0; r < n(); r++) {
      Rank* k = &ranks_[r];
      ncclComm_t c = w_.comm(r);
      k->th = std::thread([k, c] {
        uint64_t op = 0;
        while (!k->stop) {
          if (op >= k->limit) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            continue;
          }
          const mendPlanView* v = nullptr;
          if (mendPlannerViewAt(c, op, &v) != ncclSuccess) {
            k->errors++;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;  // the same op again: held ops fail until the round commits
          }
          {
            std::lock_guard<std::mutex> g(k->mu);
            k->ops[op] = {v->epoch, mendPlanViewOpHash(v, op)};
          }
          k->planned = ++op;
          std::this_thread::sleep_for(std::chrono::microseconds(100));  // ops take time
        }
      });
    }
  }
  void stopPlanning() {
    for (auto& k : ranks_) k.stop = true;
    for (auto& k : ranks_)
      if (k.th.joinable()) k.th.join();
  }
  void setLimit(uint64_t l) {
    for (auto& k : ranks_) k.limit = l;
  }
  // Wait (bounded) until every rank planned `ops` ops, or its own limit when lower.
  bool waitPlanned(uint64_t ops, int ms = 10000) {
    return until([&] {
      for (auto& k : ranks_)
        if (k.planned < std::min<uint64_t>(ops, k.limit)) return false;
      return true;
    }, ms);
  }

  // Delivers due messages and ticks every agreement until pred() or the bound.
  bool until(const std::function<bool()>& pred, int ms = 10000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      step();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pred();
  }
  void step() {
    for (auto& p : net.due()) mendAgreeOnMsg(ranks_[p.to].agree, p.from, &p.m, mendTimeMs());
    for (auto& k : ranks_) mendAgreeTick(k.agree, mendTimeMs());
  }
  // Every rank installed round `round` and the coordinator closed it.
  bool settle(uint32_t round, int ms = 10000) {
    return until([&] {
      if (mendAgreeBusy(ranks_[0].agree)) return false;
      for (auto& k : ranks_)
        if (mendAgreeRound(k.agree) < round) return false;
      return true;
    }, ms);
  }

  // A NIC's new state, decided by `reporter` and applied to the coordinator's registry (the others
  // learn it through the agreement's picture).
  void change(int rank, int dev, int state, int reporter = 1) {
    mendHealthUpdate u = {};
    u.rank = rank, u.dev = dev, u.state = state, u.reporter = reporter;
    u.gbps = state == MEND_NIC_DEGRADED ? 40.0f : 0.0f;
    mendHealthDecide(&ranks_[0].health, &u);
  }

  // Every op planned by every rank: the same (epoch, hash) on all ranks.  Returns the epoch per op.
  std::vector<uint32_t> checkSameViews(uint64_t nOps) {
    std::vector<uint32_t> epochs;
    for (uint64_t op = 0; op < nOps; op++) {
      std::pair<uint32_t, uint64_t> first{};
      for (int r = 0; r < n(); r++) {
        std::lock_guard<std::mutex> g(ranks_[r].mu);
        auto it = ranks_[r].ops.find(op);
        if (it == ranks_[r].ops.end()) {
          ADD_FAILURE() << "rank " << r << " did not plan op " << op;
          return epochs;
        }
        if (r == 0) first = it->second;
        EXPECT_EQ(it->second, first) << "op " << op << ": rank " << r << " planned under view epoch "
                                     << it->second.first << ", rank 0 under epoch " << first.first;
      }
      epochs.push_back(first.first);
    }
    return epochs;
  }

  FakeNet net;

 private:
  World w_;
  std::vector<Rank> ranks_;
  uint64_t baseHash_ = 0;

 public:
  std::vector<mendPlanView*> base;   // each rank's epoch-0 view (a copy)
  std::vector<mendPlanView*> unset;  // installBase = false: the views init has not installed yet
};

// The op at which each epoch took over (epochs never go back).
std::map<uint32_t, uint64_t> switches(const std::vector<uint32_t>& epochs) {
  std::map<uint32_t, uint64_t> at;
  for (size_t op = 0; op < epochs.size(); op++) {
    if (op > 0) {
      EXPECT_GE(epochs[op], epochs[op - 1]) << "op " << op << ": a view went back";
    }
    if (!at.count(epochs[op])) at[epochs[op]] = op;
  }
  return at;
}

// v has the base view's shape: the same rings, weights and NICs per channel, every rank at full
// capacity with all its NICs usable.
void expectBaseShape(const mendPlanView* v, const mendPlanView* base, int nDevs) {
  ASSERT_EQ(v->nChannels, base->nChannels);
  ASSERT_EQ(v->nRanks, base->nRanks);
  for (int ch = 0; ch < v->nChannels; ch++) {
    for (int i = 0; i < v->nRanks; i++) EXPECT_EQ(v->ch[ch].ring[i], base->ch[ch].ring[i]) << "channel " << ch;
    EXPECT_EQ(v->ch[ch].weight, base->ch[ch].weight) << "channel " << ch;
    EXPECT_EQ(v->ch[ch].netDev, base->ch[ch].netDev) << "channel " << ch;
  }
  for (int k = 0; k < v->nRanks; k++) {
    EXPECT_EQ(v->rankCap[k], 1000) << "rank " << k;
    EXPECT_EQ(v->rankNics[k], (1u << nDevs) - 1) << "rank " << k;
  }
}

// A fault and its fail-back under a network with the given faults: the ranks keep planning
// throughout, every op is planned under the same view everywhere, epoch 1 (NIC down) then epoch 2
// (NIC up again: the epoch-0 shape).
void downAndBack(int n, double loss, double dup, int delayMs, bool reorder, int lateRank = -1) {
  SCOPED_TRACE("ranks " + std::to_string(n));
  Cluster c(n);
  c.net.loss = loss, c.net.dup = dup, c.net.maxDelayMs = delayMs, c.net.reorder = reorder;
  c.startPlanning();
  // The late rank stops at op 10, the others are at op 50 when the NIC goes down, and run on to 100
  // while the round is agreed.
  for (int r = 0; r < n; r++) c.rank(r).limit = r == lateRank ? 10 : 50;
  ASSERT_TRUE(c.waitPlanned(50));
  c.change(n - 1, 0, MEND_NIC_DOWN);
  for (int r = 0; r < n; r++) c.rank(r).limit = r == lateRank ? 10 : 100;
  ASSERT_TRUE(c.settle(1)) << "round 1 settles (sent " << c.net.sent << ", dropped " << c.net.dropped << ")";
  if (lateRank >= 0) {
    EXPECT_EQ(c.rank(lateRank).planned.load(), 10u) << "the late rank has not moved";
  }
  c.setLimit(200);
  ASSERT_TRUE(c.waitPlanned(200));
  c.change(n - 1, 0, MEND_NIC_UP);
  c.setLimit(300);
  ASSERT_TRUE(c.settle(2)) << "round 2 settles";
  c.setLimit(400);
  ASSERT_TRUE(c.waitPlanned(400));
  c.stopPlanning();
  auto epochs = c.checkSameViews(400);
  auto at = switches(epochs);
  EXPECT_EQ(at.count(1), 1u) << "a view with epoch 1 was in force";
  EXPECT_EQ(at.count(2), 1u) << "the fail-back view was in force";
  EXPECT_EQ(epochs.back(), 2u);
  if (at.count(1)) {
    EXPECT_GE(at[1], 50u) << "the agreed op is the furthest rank's";
  }
  if (at.count(1)) {
    EXPECT_LE(at[1], 100u);
  }
  if (at.count(2)) {
    EXPECT_GE(at[2], 200u);
  }
  for (int r = 0; r < n; r++) {
    const mendPlanView* v = nullptr;
    ASSERT_EQ(mendPlannerViewAt(c.comm(r), 400, &v), ncclSuccess);
    EXPECT_EQ(v->epoch, 2u);
    SCOPED_TRACE("fail-back view of rank " + std::to_string(r));
    expectBaseShape(v, c.base[r], kDevs);
  }
}

}  // namespace

TEST(Agree, FaultAndFailBackOnAReliableNetwork) {
  for (int n : {2, 3, 5, 8, 16}) downAndBack(n, 0, 0, 0, false);
}

TEST(Agree, LostDuplicatedDelayedReorderedMessages) {
  for (int n : {2, 4, 7, 16}) downAndBack(n, 0.25, 0.25, 40, true);
}

TEST(Agree, RankLateToTheAgreedOp) {
  for (int n : {2, 3, 6}) downAndBack(n, 0.1, 0.1, 10, true, n - 1);
}

// The coordinator's picture is what every rank derives from: capacities of the downed rank drop on
// every rank although only the coordinator's registry heard of it.
TEST(Agree, EveryRankDerivesFromTheCoordinatorsPicture) {
  const int n = 4;
  Cluster c(n);
  c.change(2, 1, MEND_NIC_DOWN);
  ASSERT_TRUE(c.settle(1));
  for (int r = 0; r < n; r++) {
    const mendPlanView* v = nullptr;
    ASSERT_EQ(mendPlannerViewAt(c.comm(r), 0, &v), ncclSuccess);
    EXPECT_EQ(v->epoch, 1u) << "nothing was planned yet: fromOp 0";
    EXPECT_EQ(v->rankCap[2], 500) << "rank " << r;
    EXPECT_EQ(v->rankNics[2], 1u) << "rank " << r;
    EXPECT_EQ(v->rankCap[1], 1000);
  }
}

// A notice lost: the one PROPOSE to rank 1 and then its first COMMIT vanish; re-sends carry the round.
TEST(Agree, LostProposeAndCommitAreSentAgain) {
  const int n = 3;
  Cluster c(n);
  int lostPropose = 0, lostCommit = 0;
  c.net.drop = [&](const FakeNet::Pkt& p) {
    if (p.to == 1 && p.m.kind == MEND_AGREE_PROPOSE && lostPropose < 1) return ++lostPropose, true;
    if (p.to == 1 && p.m.kind == MEND_AGREE_COMMIT && lostCommit < 1) return ++lostCommit, true;
    return false;
  };
  c.change(0, 1, MEND_NIC_DOWN);
  ASSERT_TRUE(c.settle(1));
  EXPECT_EQ(lostPropose, 1);
  EXPECT_EQ(lostCommit, 1);
  EXPECT_GE(c.net.sent, 2 * (n - 1) * 2 + 2) << "PROPOSE and COMMIT went twice to rank 1";
}

// Two changes back to back: the second, made while round 1 is being committed, gets round 2 of its
// own, opened as soon as every rank acknowledged round 1.
TEST(Agree, BackToBackChangesSerialize) {
  const int n = 4;
  Cluster c(n);
  c.net.maxDelayMs = 20;
  std::atomic<bool> holdAcks{true};
  c.net.drop = [&](const FakeNet::Pkt& p) { return p.m.kind == MEND_AGREE_ACK && holdAcks; };
  c.startPlanning();
  c.setLimit(100);
  c.change(1, 0, MEND_NIC_DOWN);
  ASSERT_TRUE(c.until([&] { return mendAgreeRound(c.rank(0).agree) == 1; })) << "round 1 committed";
  c.change(2, 1, MEND_NIC_DEGRADED);
  c.until([] { return false; }, 50);
  EXPECT_TRUE(mendAgreeBusy(c.rank(0).agree)) << "round 1 waits for its ACKs";
  holdAcks = false;
  ASSERT_TRUE(c.settle(2));
  c.setLimit(300);
  ASSERT_TRUE(c.waitPlanned(300));
  c.stopPlanning();
  auto at = switches(c.checkSameViews(300));
  EXPECT_EQ(at.count(2), 1u);
  const mendPlanView* v = nullptr;
  ASSERT_EQ(mendPlannerViewAt(c.comm(3), 300, &v), ncclSuccess);
  EXPECT_EQ(v->epoch, 2u);
  EXPECT_EQ(v->rankCap[1], 500);
  EXPECT_EQ(v->rankCap[2], 700) << "40 of 100 Gbit/s on one of two NICs";
}

// A registry change that leaves the picture as agreed opens no round (no view, no hold).
TEST(Agree, NoRoundWhenThePictureIsUnchanged) {
  Cluster c(3);
  c.change(1, 1, MEND_NIC_UP);  // epoch moves, the NIC was up already
  for (int i = 0; i < 20; i++) c.step();
  EXPECT_FALSE(mendAgreeBusy(c.rank(0).agree));
  EXPECT_EQ(mendAgreeRound(c.rank(1).agree), 0u);
  EXPECT_EQ(c.net.sent, 0);
}

// The hold: an op past the rank's reply waits until the COMMIT comes, and no longer.
TEST(Agree, HoldIsReleasedByCommit) {
  const int n = 2;
  Cluster c(n);
  std::atomic<bool> blockCommit{true};
  c.net.drop = [&](const FakeNet::Pkt& p) { return p.m.kind == MEND_AGREE_COMMIT && blockCommit; };
  c.change(1, 0, MEND_NIC_DOWN);
  ASSERT_TRUE(c.until([&] { return c.net.sent >= 2; })) << "PROPOSE and REPLY";
  std::atomic<int> done{0};
  ncclResult_t res = ncclInternalError;
  uint32_t epoch = 0;
  std::thread t([&] {
    const mendPlanView* v = nullptr;
    res = mendPlannerViewAt(c.comm(1), 0, &v);
    if (res == ncclSuccess) epoch = v->epoch;
    done = 1;
  });
  c.until([] { return false; }, 150);
  EXPECT_EQ(done.load(), 0) << "op 0 of rank 1 waits for the COMMIT";
  blockCommit = false;
  EXPECT_TRUE(c.until([&] { return done.load() == 1; }, 5000));
  t.join();
  EXPECT_EQ(res, ncclSuccess);
  EXPECT_EQ(epoch, 1u);
}

TEST(Agree, HoldIsBoundedByTheTimeout) {
  ScopedEnv bound("MEND_AGREE_TIMEOUT", "300");
  const int n = 2;
  Cluster c(n);
  std::atomic<bool> blockCommit{true};
  c.net.drop = [&](const FakeNet::Pkt& p) { return p.m.kind == MEND_AGREE_COMMIT && blockCommit; };
  c.change(1, 0, MEND_NIC_DOWN);
  ASSERT_TRUE(c.until([&] { return c.net.sent >= 2; })) << "PROPOSE and REPLY";
  auto t0 = std::chrono::steady_clock::now();
  const mendPlanView* v = nullptr;
  EXPECT_EQ(mendPlannerViewAt(c.comm(1), 0, &v), ncclRemoteError) << "no commit: the op fails, it does not hang";
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
  blockCommit = false;
  ASSERT_TRUE(c.settle(1));
  ASSERT_EQ(mendPlannerViewAt(c.comm(1), 0, &v), ncclSuccess) << "the commit came: the op runs, under the agreed view";
  EXPECT_EQ(v->epoch, 1u);
}

// Malformed or misdirected messages are dropped: nothing installed, the round still completes.
TEST(Agree, MalformedMessagesAreDropped) {
  const int n = 3;
  Cluster c(n);
  c.change(2, 0, MEND_NIC_DOWN);
  int64_t now = mendTimeMs();
  mendAgreeMsg good = {};
  good.kind = MEND_AGREE_COMMIT, good.round = 1, good.op = 0, good.nNics = 1, good.first = 0, good.count = 1;
  good.nics[0] = {2, 0, MEND_NIC_DOWN, 0.0f};
  std::vector<mendAgreeMsg> bad(8, good);
  bad[0].nNics = MEND_VIEW_MAX_HEALTH + 1;
  bad[1].count = MEND_AGREE_PART_NICS + 1;
  bad[2].nics[0].rank = n;
  bad[3].nics[0].dev = kDevs;
  bad[4].nics[0].state = 9;
  bad[5].nics[0].gbps = NAN;
  bad[6].first = 1;
  bad[7].kind = 77;
  mendAgree* a = c.rank(1).agree;
  // Rank 1 holds round 1 only once its PROPOSE came; wait for that.
  ASSERT_TRUE(c.until([&] { return c.net.sent >= 4; }));
  for (auto& m : bad) mendAgreeOnMsg(a, 0, &m, now);
  mendAgreeOnMsg(a, 2, &good, now);  // a COMMIT from a rank that is not the coordinator
  mendAgreeOnMsg(a, 9, &good, now);  // from no rank
  EXPECT_EQ(mendAgreeRound(a), 0u) << "nothing was installed from a bad message";
  ASSERT_TRUE(c.settle(1));
  const mendPlanView* v = nullptr;
  ASSERT_EQ(mendPlannerViewAt(c.comm(1), 0, &v), ncclSuccess);
  EXPECT_EQ(v->rankCap[2], 500);
}

TEST(Agree, BadArgumentsAreRefused) {
  World w(2);
  mendHealth h = {};
  ASSERT_EQ(mendHealthInit(&h, 2, kDevs, nullptr), ncclSuccess);
  FakeNet net;
  Sender s{&net, 0};
  mendAgreeNet an = {fakeSend, &s};
  mendAgree* a = nullptr;
  EXPECT_EQ(mendAgreeCreate(w.comm(0), 2, 2, &h, &an, 100, &a), ncclInvalidArgument);
  EXPECT_EQ(mendAgreeCreate(w.comm(0), 0, 3, &h, &an, 100, &a), ncclInvalidArgument) << "registry of 2 ranks";
  EXPECT_EQ(mendAgreeCreate(w.comm(0), 0, 2, &h, nullptr, 100, &a), ncclInvalidArgument);
  EXPECT_EQ(mendAgreeCreate(w.comm(0), 0, 2, &h, &an, 0, &a), ncclInvalidArgument);
  mendHealthFree(&h);
}

// P2P ops carry the number of the collective that follows them: a rank that planned a send at op 5
// counts op 5 as planned, so the agreed op is 6 and its collective 5 runs under the old view, as on
// the rank that had planned nothing of op 5 yet.
TEST(Agree, OpNumberSharedWithP2pIsPlannedUnderOneView) {
  const int n = 2;
  Cluster c(n);
  const mendPlanView* v = nullptr;
  for (uint64_t op = 0; op <= 5; op++) ASSERT_EQ(mendPlannerViewAt(c.comm(0), op, &v), ncclSuccess);  // ..., send 5
  for (uint64_t op = 0; op <= 4; op++) ASSERT_EQ(mendPlannerViewAt(c.comm(1), op, &v), ncclSuccess);
  c.change(1, 1, MEND_NIC_DOWN);
  ASSERT_TRUE(c.settle(1));
  ASSERT_EQ(mendPlannerViewAt(c.comm(0), 5, &v), ncclSuccess);  // the collective numbered 5
  EXPECT_EQ(v->epoch, 0u) << "op 5 was under way on rank 0: it stays under the old view";
  uint64_t h0 = mendPlanViewOpHash(v, 5);
  ASSERT_EQ(mendPlannerViewAt(c.comm(1), 5, &v), ncclSuccess);  // rank 1's send 5
  EXPECT_EQ(v->epoch, 0u);
  EXPECT_EQ(mendPlanViewOpHash(v, 5), h0);
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(mendPlannerViewAt(c.comm(r), 6, &v), ncclSuccess);
    EXPECT_EQ(v->epoch, 1u) << "rank " << r << ": the agreed op is 6";
  }
}

// A round that opens while communicators are still being made (no view installed yet): no rank
// answers until it has its view, then the round completes from the views installed.
TEST(Agree, RoundWaitsForTheViewsOfInit) {
  const int n = 3;
  Cluster c(n, 30, false);
  c.change(2, 0, MEND_NIC_DOWN);
  c.until([] { return false; }, 150);
  EXPECT_TRUE(mendAgreeBusy(c.rank(0).agree)) << "the round is open";
  for (int r = 0; r < n; r++) EXPECT_EQ(mendAgreeRound(c.rank(r).agree), 0u) << "rank " << r << " had no view";
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(mendPlannerSetView(c.comm(r), c.unset[r]), ncclSuccess);
    c.unset[r] = nullptr;
  }
  ASSERT_TRUE(c.settle(1));
  const mendPlanView* v = nullptr;
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(mendPlannerViewAt(c.comm(r), 0, &v), ncclSuccess);
    EXPECT_EQ(v->epoch, 1u);
    EXPECT_EQ(v->rankCap[2], 500);
  }
}
