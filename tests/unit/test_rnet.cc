// The resilient net over the test base Net of rnet_fixture.h.  Checks: ordering, exactly-once
// delivery under replay, chain walking, one-sided fencing, all-paths-dead error within a bound,
// held acknowledgements, crossing paths, fail-back.
#include "rnet_fixture.h"

namespace {

// Receivers hold the acknowledgement of small messages (MEND_ACK_DELAY_US); without a resilience
// service only the receiver's own calls send it, so what a call sends is exact here.
class RnetHoldTest : public RnetTest {
 protected:
  void SetUp() override {
    RnetTest::SetUp();
    env_.SaveAndUnset("MEND_ACK_DELAY_US");
    hold_ = true;
    mendRnetHoldAcksForTest(1);
  }
  void TearDown() override {
    mendRnetHoldAcksForTest(0);
    RnetTest::TearDown();
  }
  void Delay(int us) {
    setenv("MEND_ACK_DELAY_US", std::to_string(us).c_str(), 1);
    mendParamResetCache();
  }
  // Register 8 slots of 64 KiB on each end.
  void Buffers() {
    sbuf_.assign(8 << 16, 5);
    rbuf_.assign(8 << 16, 0);
    ASSERT_EQ(R->regMr(sc_, sbuf_.data(), sbuf_.size(), MEND_PTR_HOST, &smh_), ncclSuccess);
    ASSERT_EQ(R->regMr(rc_, rbuf_.data(), rbuf_.size(), MEND_PTR_HOST, &rmh_), ncclSuccess);
  }
  void* Send(int slot, size_t bytes) {
    void* q = nullptr;
    EXPECT_EQ(R->isend(sc_, sbuf_.data() + (slot << 16), bytes, 0, smh_, &q), ncclSuccess);
    EXPECT_NE(q, nullptr);
    return q;
  }
  void* Recv(int slot) {
    void* d = rbuf_.data() + (slot << 16);
    size_t sz = 1 << 16;
    int tag = 0;
    void* q = nullptr;
    EXPECT_EQ(R->irecv(rc_, 1, &d, &sz, &tag, &rmh_, &q), ncclSuccess);
    EXPECT_NE(q, nullptr);
    return q;
  }
  // Test req until done (true) or for ms milliseconds (false); *done tells a caller that tests again.
  bool Poll(void* req, double ms) {
    double t0 = nowMs();
    int done = 0, size = 0;
    do {
      EXPECT_EQ(R->test(req, &done, &size), ncclSuccess);
      if (done) return true;
    } while (nowMs() - t0 < ms);
    return false;
  }
  void Unregister() {
    R->deregMr(sc_, smh_);
    R->deregMr(rc_, rmh_);
  }
  std::vector<char> sbuf_, rbuf_;
  void *smh_ = nullptr, *rmh_ = nullptr;
};

TEST_F(RnetTest, HandshakeBuildsOnePathPerDevice) {
  Connect(1);
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  EXPECT_EQ(s.nPaths, 3);
  EXPECT_EQ(r.nPaths, 3);
  EXPECT_EQ(s.active, 0);
  EXPECT_EQ(s.localDev[0], 1);  // the primary is the device asked for, then the chain
  EXPECT_EQ(s.localDev[1], 2);
  EXPECT_EQ(s.localDev[2], 0);
  EXPECT_EQ(r.localDev[0], 1);
  EXPECT_EQ(s.dead, 0);
}

// With the topology's order (nearest NIC first) the chain is the primary, then that order: device 0
// before device 2, where the rotation of the test above gives 2 first.
TEST_F(RnetTest, ChainFollowsTheTopologyOrder) {
  const int order[3] = {0, 2, 1};
  ASSERT_EQ(mendRnetSetOrder(ctx_, order, 3), ncclSuccess);
  Connect(1);
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  ASSERT_EQ(s.nPaths, 3);
  ASSERT_EQ(r.nPaths, 3);
  int want[3] = {1, 0, 2};
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(s.localDev[i], want[i]) << "sender path " << i;
    EXPECT_EQ(r.localDev[i], want[i]) << "receiver path " << i << ": rails pair the same device";
  }
  ASSERT_NO_FATAL_FAILURE(StreamAll(50, [&](int k) { if (k == 20) mendRnetKillPath(sc_, 0); }));
  EXPECT_EQ(Stats(sc_).active, 1) << "the primary's backup is the nearest NIC";
}

TEST_F(RnetTest, OrderedExactNoFault) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(400));
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.failovers, 0u);
  EXPECT_EQ(s.msgs[1] + s.msgs[2], 0u) << "backups must stay idle without a fault";
  EXPECT_EQ(gSends[1] + gSends[2], 0);
}

TEST_F(RnetTest, SenderFencesPrimaryMidStream) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 100) mendRnetKillPath(sc_, 0); }));
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  EXPECT_EQ(s.active, 1);
  EXPECT_EQ(r.active, 1) << "the receiver must follow when the sender fences the path";
  EXPECT_GT(s.msgs[1], 0u);
}

TEST_F(RnetTest, ReceiverFencesPrimaryMidStream) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 57) mendRnetKillPath(rc_, 0); }));
  EXPECT_EQ(Stats(sc_).active, 1);
  EXPECT_EQ(Stats(rc_).active, 1);
}

TEST_F(RnetTest, DeviceDiesUnderBothEnds) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 150) gDead[0] = 1; }));
  EXPECT_EQ(Stats(sc_).active, 1);
  EXPECT_EQ(Stats(rc_).active, 1);
}

TEST_F(RnetTest, ChainWalksPastTwoFailures) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(400, [&](int k) {
    if (k == 100) gDead[0] = 1;
    if (k == 200) gDead[1] = 1;
  }));
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(s.dead, 2);
  EXPECT_GT(s.msgs[2], 0u);
}

TEST_F(RnetTest, ReplayDeliversExactlyOnceWhenAcksAreLost) {
  Connect();
  // From message 50 on, the receiver's acknowledgements on path 0 vanish: the sender holds every slot
  // (placed but unacknowledged).  Fencing path 0 then makes the receiver's RESUME the rollback point:
  // the sender must replay only what was not placed, and the receiver must see every message once.
  ASSERT_NO_FATAL_FAILURE(StreamAll(200, [&](int k) {
    if (k == 50) gMute[0] = 1;
    if (k == 55) mendRnetKillPath(sc_, 0);
  }));
  EXPECT_EQ(Stats(sc_).active, 1);
}

TEST_F(RnetTest, StalledAcksWithoutFenceHoldTheSender) {
  Connect();
  gMute[0] = 1;  // acks lost: isends must not complete (the slot would be reused before placement is known)
  std::vector<char> buf(1000, 3), dst(1000);
  void *smh, *rmh, *sreq = nullptr, *rreq = nullptr;
  ASSERT_EQ(R->regMr(sc_, buf.data(), buf.size(), MEND_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(R->regMr(rc_, dst.data(), dst.size(), MEND_PTR_HOST, &rmh), ncclSuccess);
  void* d = dst.data();
  size_t sz = dst.size();
  int tag = 0, sdone = 0, rdone = 0, size = 0;
  ASSERT_EQ(R->irecv(rc_, 1, &d, &sz, &tag, &rmh, &rreq), ncclSuccess);
  ASSERT_EQ(R->isend(sc_, buf.data(), buf.size(), 0, smh, &sreq), ncclSuccess);
  double t0 = nowMs();
  while (nowMs() - t0 < 300) {
    ASSERT_EQ(R->test(sreq, &sdone, &size), ncclSuccess);
    if (!rdone) {
      ASSERT_EQ(R->test(rreq, &rdone, &size), ncclSuccess);
    }
  }
  EXPECT_EQ(rdone, 1);
  EXPECT_EQ(sdone, 0) << "an isend completed without acknowledgement";
  gMute[0] = 0;
  mendRnetKillPath(sc_, 0);  // fence: the RESUME on path 1 acknowledges it
  t0 = nowMs();
  while (!sdone && nowMs() - t0 < 5000) {
    ASSERT_EQ(R->test(sreq, &sdone, &size), ncclSuccess);
    void* q = nullptr;  // the receiver must progress to notice the fence: post a receive
    if (extra_.empty()) {
      ASSERT_EQ(R->irecv(rc_, 1, &d, &sz, &tag, &rmh, &q), ncclSuccess);
      if (q) extra_.push_back(q);
    } else {
      int dd;
      ASSERT_EQ(R->test(extra_[0], &dd, &size), ncclSuccess);
    }
  }
  EXPECT_EQ(sdone, 1);
  R->deregMr(sc_, smh);
  R->deregMr(rc_, rmh);
}

TEST_F(RnetHoldTest, BatchOfSixGoesOutWhenTheReceiverWaits) {
  Delay(10 * 1000 * 1000);  // never by time in this test
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq[6];
  for (int k = 0; k < 5; k++) {
    sreq[k] = Send(k, 8);
    ASSERT_TRUE(Poll(Recv(k), 5000)) << "message " << k << " not received";
  }
  void* wait = Recv(5);
  EXPECT_FALSE(Poll(wait, 20)) << "nothing was sent";
  for (int k = 0; k < 5; k++) EXPECT_FALSE(Poll(sreq[k], 20)) << "five held messages are acknowledged";
  sreq[5] = Send(5, 8);
  ASSERT_TRUE(Poll(wait, 5000));  // the call that places the sixth holds it: the caller has data
  EXPECT_FALSE(Poll(sreq[5], 20)) << "sent while the caller had data to act on";
  void* next = Recv(6);
  EXPECT_FALSE(Poll(next, 1));    // this call places nothing: the receiver waits, the batch goes out
  for (int k = 0; k < 6; k++) EXPECT_TRUE(Poll(sreq[k], 5000)) << "message " << k << " never acknowledged";
  extra_.push_back(next);
  Unregister();
}

TEST_F(RnetHoldTest, SeventhGoesOutAtOnce) {
  Delay(10 * 1000 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  // Seven sent before the receiver looks: the call that places them acknowledges at once (the
  // sender's FIFO of 8 slots must not wait for the receiver's next call).
  void* sreq[7];
  void* rreq[7];
  for (int k = 0; k < 7; k++) rreq[k] = Recv(k);
  for (int k = 0; k < 7; k++) sreq[k] = Send(k, 8);
  usleep(200 * 1000);  // all seven wait in the receiver's socket: its next call places them at once
  int done = 0, size = 0;
  ASSERT_EQ(R->test(rreq[6], &done, &size), ncclSuccess);
  ASSERT_EQ(done, 1) << "the seven messages did not arrive in 200 ms";
  for (int k = 0; k < 7; k++) EXPECT_TRUE(Poll(sreq[k], 5000)) << "message " << k << " never acknowledged";
  for (int k = 0; k < 6; k++) EXPECT_TRUE(Poll(rreq[k], 1));
  Unregister();
}

// Every base test of a receive whose message has not come is a look at the socket (a system call):
// the resilient layer makes no more of them than its caller asks for (the plain path's count).
TEST_F(RnetHoldTest, ReceiverLooksNoFurtherThanTheTestedRequest) {
  Delay(10 * 1000 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  long before = gEmptyLooks;
  void* r0 = Recv(0);
  void* r1 = Recv(1);
  EXPECT_EQ(gEmptyLooks - before, 0) << "posting a receive on a quiet connection tested the base";
  void* s0 = Send(0, 8);
  usleep(100 * 1000);  // it waits in the receiver's socket
  int done = 0, size = 0;
  before = gEmptyLooks;
  ASSERT_EQ(R->test(r0, &done, &size), ncclSuccess);
  ASSERT_EQ(done, 1) << "the message did not arrive in 100 ms";
  EXPECT_EQ(gEmptyLooks - before, 0) << "the call that placed it looked for the next one";
  before = gEmptyLooks;
  ASSERT_EQ(R->test(r1, &done, &size), ncclSuccess);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(gEmptyLooks - before, 1) << "the caller's own test looks once";
  void* s1 = Send(1, 8);
  ASSERT_TRUE(Poll(r1, 5000));
  EXPECT_EQ(rbuf_[0], 5);
  EXPECT_EQ(rbuf_[1 << 16], 5);
  extra_.push_back(s0);
  extra_.push_back(s1);
  Unregister();
}

TEST_F(RnetHoldTest, HeldPastTheDelayGoesOutAtTheNextLook) {
  Delay(100 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq = Send(0, 8);
  ASSERT_TRUE(Poll(Recv(0), 5000));
  double placed = nowMs();
  EXPECT_FALSE(Poll(sreq, 20)) << "acknowledged without a receiver call";
  void* next = Recv(1);
  if (nowMs() - placed < 80) {
    EXPECT_FALSE(Poll(next, 1));  // a look before the delay: still held
    EXPECT_FALSE(Poll(sreq, 5)) << "sent before its delay";
  }
  usleep(120 * 1000);
  EXPECT_FALSE(Poll(next, 1));  // a look after it: sent
  EXPECT_TRUE(Poll(sreq, 5000)) << "the acknowledgement held past the delay was not sent";
  extra_.push_back(next);
  Unregister();
}

// The sender follows the receiver's rule: it looks for an acknowledgement only once one can have
// been sent (six out, or the delay passed), not at every call (each look is a receive syscall).
TEST_F(RnetHoldTest, SenderLooksForAcknowledgementsOnlyWhenOneCanHaveCome) {
  Delay(200 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq[6];
  for (int k = 0; k < 3; k++) {
    sreq[k] = Send(k, 8);
    ASSERT_TRUE(Poll(Recv(k), 5000)) << "message " << k << " not received";
  }
  uint64_t looks = Stats(sc_).ctrlLooks;
  double t0 = nowMs();
  EXPECT_FALSE(Poll(sreq[0], 20)) << "acknowledged with three held";
  if (nowMs() - t0 < 150) {
    EXPECT_EQ(looks, Stats(sc_).ctrlLooks) << "the sender looked with three out";
  }
  void* rreq[6];
  for (int k = 3; k < 6; k++) rreq[k] = Recv(k);
  for (int k = 3; k < 6; k++) sreq[k] = Send(k, 8);
  usleep(50 * 1000);  // the call that places them has data to act on: the batch is held
  ASSERT_TRUE(Poll(rreq[5], 5000));  // one call placed all three
  int done = 0, size = 0;
  for (int i = 0; i < 10 && !done; i++) ASSERT_EQ(R->test(sreq[0], &done, &size), ncclSuccess);
  EXPECT_EQ(done, 0) << "acknowledged while the receiver held six";
  EXPECT_GT(Stats(sc_).ctrlLooks, looks) << "six out: the sender must look";
  for (int k = 3; k < 5; k++) ASSERT_TRUE(Poll(rreq[k], 1));
  void* next = Recv(6);
  EXPECT_FALSE(Poll(next, 1));  // the receiver waits: the batch goes out
  for (int k = done; k < 6; k++) EXPECT_TRUE(Poll(sreq[k], 5000)) << "message " << k << " never acknowledged";
  extra_.push_back(next);
  // One out past the delay: looked for, and acknowledged once the receiver's next look sends it.
  void* last = Send(6, 8);
  ASSERT_TRUE(Poll(extra_.back(), 5000));
  looks = Stats(sc_).ctrlLooks;
  usleep(250 * 1000);
  void* after = Recv(7);
  EXPECT_FALSE(Poll(after, 1));  // past the delay: sent
  EXPECT_TRUE(Poll(last, 5000)) << "an acknowledgement past the delay was never read";
  EXPECT_GT(Stats(sc_).ctrlLooks, looks);
  extra_.push_back(after);
  Unregister();
}

TEST_F(RnetHoldTest, LargeMessageIsAcknowledgedAtOnce) {
  Delay(10 * 1000 * 1000);
  Connect();
  ASSERT_NO_FATAL_FAILURE(Buffers());
  void* sreq = Send(0, 1 << 16);
  ASSERT_TRUE(Poll(Recv(0), 5000));
  EXPECT_TRUE(Poll(sreq, 5000)) << "a 64 KiB message's acknowledgement was held";
  Unregister();
}

// Acknowledgements riding with data: two ranks (contexts of their own), a connection each way, 8-byte
// messages exchanged in lock step as a 2-rank AllReduce does.
class RnetWordTest : public RnetHoldTest {
 protected:
  void SetUp() override {
    RnetHoldTest::SetUp();
    ASSERT_EQ(R->init(&ctxR_, 7, mendDebugLog), ncclSuccess);
    ASSERT_EQ(mendRnetSetRankForTest(ctx_, 0), ncclSuccess);
    ASSERT_EQ(mendRnetSetRankForTest(ctxR_, 1), ncclSuccess);
    Delay(10 * 1000 * 1000);  // never by time: only batches and words
  }
  void TearDown() override {
    if (bmh_) R->deregMr(sb_, bmh_);
    if (amh_) R->deregMr(rb_, amh_);
    if (sb_) R->closeSend(sb_);
    if (rb_) R->closeRecv(rb_);
    RnetHoldTest::TearDown();
  }
  // sc_ -> rc_ (rank 0 to rank 1) and sb_ -> rb_ (rank 1 to rank 0), with 8 slots each way.
  void ConnectBoth() {
    ASSERT_NO_FATAL_FAILURE(Connect());
    ASSERT_NO_FATAL_FAILURE(ConnectIn(ctx_, ctxR_, &sb_, &rb_));
    ASSERT_NO_FATAL_FAILURE(Buffers());
    bbuf_.assign(8 << 16, 0);
    abuf_.assign(8 << 16, 0);
    ASSERT_EQ(R->regMr(sb_, bbuf_.data(), bbuf_.size(), MEND_PTR_HOST, &bmh_), ncclSuccess);
    ASSERT_EQ(R->regMr(rb_, abuf_.data(), abuf_.size(), MEND_PTR_HOST, &amh_), ncclSuccess);
  }
  void* Post(void* comm, bool send, char* buf, void* mh) {
    void* q = nullptr;
    if (send) {
      EXPECT_EQ(R->isend(comm, buf, 8, 0, mh, &q), ncclSuccess);
    } else {
      void* d = buf;
      size_t sz = 1 << 16;
      int tag = 0;
      EXPECT_EQ(R->irecv(comm, 1, &d, &sz, &tag, &mh, &q), ncclSuccess);
    }
    EXPECT_NE(q, nullptr);
    return q;
  }
  // n rounds: both ranks post a receive and a send of round k's bytes and wait for both receives; a
  // send slot is reused once its send completed (8 slots: the FIFO), as the executor does.
  ncclResult_t Exchange(int n) {
    std::vector<void*> sq[2];
    size_t sDone[2] = {0, 0};
    int size = 0;
    auto reap = [&](int side, size_t upTo) -> ncclResult_t {
      while (sDone[side] < upTo) {
        int done = 0;
        ncclResult_t r = R->test(sq[side][sDone[side]], &done, &size);
        if (r != ncclSuccess || !done) return r;
        sDone[side]++;
      }
      return ncclSuccess;
    };
    for (int k = 0; k < n; k++) {
      int slot = k % 8;
      double t0 = nowMs();
      for (int side = 0; side < 2; side++) {  // the slot's last send must be done before it is rewritten
        while (sDone[side] + 8 <= (size_t)k) {
          if (nowMs() - t0 > 5000) return ncclInProgress;
          ncclResult_t r = reap(side, (size_t)k - 7);
          if (r != ncclSuccess) return r;
          for (void* rq : extra_) { int d; R->test(rq, &d, &size); }
        }
      }
      memset(sbuf_.data() + (slot << 16), k & 0xff, 8);
      memset(bbuf_.data() + (slot << 16), ~k & 0xff, 8);
      void* q[2] = {Post(rc_, false, rbuf_.data() + (slot << 16), rmh_), Post(rb_, false, abuf_.data() + (slot << 16), amh_)};
      sq[0].push_back(Post(sc_, true, sbuf_.data() + (slot << 16), smh_));
      sq[1].push_back(Post(sb_, true, bbuf_.data() + (slot << 16), bmh_));
      int done[2] = {0, 0};
      while (!(done[0] && done[1])) {
        if (nowMs() - t0 > 5000) return ncclInProgress;
        for (int i = 0; i < 2; i++) {
          if (done[i]) continue;
          ncclResult_t r = R->test(q[i], &done[i], &size);
          if (r != ncclSuccess) return r;
        }
        for (int side = 0; side < 2; side++) {
          ncclResult_t r = reap(side, sq[side].size());
          if (r != ncclSuccess) return r;
        }
      }
      if (rbuf_[slot << 16] != (char)(k & 0xff) || abuf_[slot << 16] != (char)(~k & 0xff)) return ncclInternalError;
    }
    return ncclSuccess;
  }
  void *sb_ = nullptr, *rb_ = nullptr, *bmh_ = nullptr, *amh_ = nullptr;
  std::vector<char> bbuf_, abuf_;
};

TEST_F(RnetWordTest, WordsReplaceTheBatchesOfAnExchange) {
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  ASSERT_EQ(Exchange(200), ncclSuccess);
  // Each message's acknowledgement rode on the next message the other way: no batch of 6 was owed.
  EXPECT_GT(Stats(sc_).wordAcks, 150u);
  EXPECT_GT(Stats(sb_).wordAcks, 150u);
  EXPECT_LE(Stats(rc_).ctrlSent, 3u);
  EXPECT_LE(Stats(rb_).ctrlSent, 3u);
}

TEST_F(RnetWordTest, WithoutWordsEveryBatchIsAControlMessage) {
  setenv("MEND_ACK_WORDS", "0", 1);  // read when the connections are made
  mendParamResetCache();
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  ASSERT_EQ(Exchange(200), ncclSuccess);
  EXPECT_EQ(Stats(sc_).wordAcks, 0u);
  EXPECT_GE(Stats(rc_).ctrlSent, 25u);  // one per batch of 6-7
  EXPECT_GE(Stats(rb_).ctrlSent, 25u);
  unsetenv("MEND_ACK_WORDS");
  mendParamResetCache();
}

// A word counts as given only once the peer has read the message carrying it: rank 1 answers each of
// rank 0's messages with one carrying a word, rank 0 never reads them, and rank 1's batch of 6 still
// goes out when it waits (counted when sent, the words would have held it back for 10 s).
TEST_F(RnetWordTest, APeerThatDoesNotReadStillGetsItsBatch) {
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  void* s[6];
  for (int k = 0; k < 6; k++) {
    s[k] = Post(sc_, true, sbuf_.data() + (k << 16), smh_);
    ASSERT_TRUE(Poll(Post(rc_, false, rbuf_.data() + (k << 16), rmh_), 5000)) << "message " << k << " not received";
    extra_.push_back(Post(sb_, true, bbuf_.data() + (k << 16), bmh_));  // never read by rank 0
  }
  void* wait = Post(rc_, false, rbuf_.data() + (6 << 16), rmh_);
  EXPECT_FALSE(Poll(wait, 1));  // rank 1 waits (if the last test after placing did not): the batch goes out
  for (int k = 0; k < 6; k++) EXPECT_TRUE(Poll(s[k], 5000)) << "message " << k << " never acknowledged";
  EXPECT_GE(Stats(rc_).ctrlSent, 1u);
  EXPECT_EQ(Stats(sc_).wordAcks, 0u);
  extra_.push_back(wait);
}

// Nothing read from the network is trusted: a word that acknowledges more than was sent fails the
// connection with a WARN, never completes a send that was not placed.
TEST_F(RnetWordTest, AWordBeyondWhatWasSentIsRefused) {
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  ASSERT_EQ(Exchange(3), ncclSuccess);
  gWordAdd = 1000;
  EXPECT_EQ(Exchange(5), ncclRemoteError);
}

TEST_F(RnetHoldTest, ReplayDeliversExactlyOnceWithHeldAcks) {
  Delay(50 * 1000);
  Connect();
  // Mixed sizes with held acknowledgements, a path fenced in the middle: the RESUME carries the
  // placed count (never held), the sender replays from it, every message arrives once and intact.
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) {
    if (k == 101) mendRnetKillPath(sc_, 0);
  }));
  EXPECT_EQ(Stats(sc_).active, 1);
}

TEST_F(RnetTest, LastPathDeadFailsWithinBound) {
  Connect();
  int got = 0;
  double t0 = nowMs();
  ncclResult_t res = Stream(300, &got, [&](int k) {
    if (k == 100) gDead[0] = gDead[1] = gDead[2] = 1;
  });
  double ms = nowMs() - t0;
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(ms, 5000);
  EXPECT_GE(got, 100);
  EXPECT_LT(got, 300);
  // Both ends fail, and keep failing, never hang.  The stream stops at the first end's error, so the
  // other end may learn it from its next call: make that call on each end, then look at both.
  void* q = nullptr;
  char b[8];
  size_t sz = sizeof(b);
  int tag = 0;
  void* bp = b;
  EXPECT_NE(R->isend(sc_, b, 8, 0, nullptr, &q), ncclSuccess);
  EXPECT_NE(R->irecv(rc_, 1, &bp, &sz, &tag, nullptr, &q), ncclSuccess);
  EXPECT_EQ(Stats(sc_).active, -1);
  EXPECT_EQ(Stats(rc_).active, -1);
  EXPECT_NE(R->isend(sc_, b, 8, 0, nullptr, &q), ncclSuccess) << "a failed connection stays failed";
}

// Rails: path i pairs device i at both ends.  Lose path 0 and then path 1 of a two-device connection
// (as when host A lost rail 0 and host B rail 1): no rail is left in common, and with NCCL_CROSS_NIC
// at its default the sender builds a path from one of its devices to the other index at the
// receiver (the test Net, like a fabric whose rails meet at a spine, connects any pair).  Every
// message arrives once, in order, and the crossing path carries the rest.
TEST_F(RnetTest, CrossingPathCarriesTheConnectionWhenNoRailIsLeft) {
  ASSERT_NO_FATAL_FAILURE(Reinit(2));
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(400, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 200) mendRnetKillPath(sc_, 1);
  }));
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  ASSERT_EQ(s.cross, 2) << "the crossing path takes the slot after the chain";
  EXPECT_EQ(r.cross, 2);
  EXPECT_EQ(s.nPaths, 3);
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(r.active, 2);
  EXPECT_EQ(s.relay, -1) << "a crossing path, not a relay";
  EXPECT_NE(s.localDev[2], s.remoteDev[2]) << "it crosses rails";
  EXPECT_EQ(s.localDev[2], r.remoteDev[2]) << "both ends name the same pair";
  EXPECT_EQ(s.remoteDev[2], r.localDev[2]);
  EXPECT_GT(s.msgs[2], 0u);
  // Rail 0 comes back: its rebuilt path comes first in the chain, traffic returns to it, and the
  // crossing path is rebuilt behind it as the last backup.
  ASSERT_NO_FATAL_FAILURE(StreamAll(200, [&](int k) { if (k == 20) mendRnetRebuildPath(sc_, 0); }));
  ASSERT_NO_FATAL_FAILURE(StreamAll(200));
  s = Stats(sc_);
  EXPECT_EQ(s.active, 0) << "fail-back from the crossing path to the rail";
  EXPECT_EQ(Stats(rc_).active, 0);
  EXPECT_EQ(s.dead, 1) << "rail 1 stays dead; the crossing path is a backup again";
  EXPECT_EQ(s.cross, 2);
}

// NCCL_CROSS_NIC=0 forbids crossing rails: the same loss fails the connection, as before.
TEST_F(RnetTest, CrossingForbiddenFailsTheConnection) {
  setenv("NCCL_CROSS_NIC", "0", 1);
  mendParamResetCache();
  ASSERT_NO_FATAL_FAILURE(Reinit(2));
  Connect();
  int got = 0;
  ncclResult_t res = Stream(400, &got, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 200) mendRnetKillPath(sc_, 1);
  });
  unsetenv("NCCL_CROSS_NIC");
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(got, 400);
  EXPECT_EQ(Stats(sc_).cross, -1);
}

// A crossing path whose devices are dead too: the connection fails at both ends within the bound
// (the receiver, which waits for the sender's crossing path, is told it will not come).
TEST_F(RnetTest, CrossingThatCannotBeBuiltFailsBothEnds) {
  ASSERT_NO_FATAL_FAILURE(Reinit(2));
  Connect();
  int got = 0;
  double t0 = nowMs();
  ncclResult_t res = Stream(400, &got, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 200) { gDead[0] = 1; mendRnetKillPath(sc_, 1); }
  });
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(got, 400);
  EXPECT_NE(RecvUntilFailing(t0, 4000), ncclSuccess) << "the receiver must stop waiting once the crossing failed";
  EXPECT_LT(nowMs() - t0, 4000);
}

TEST_F(RnetTest, FailBackToRebuiltPrimary) {
  Connect();
  // Path 0 dies at 100 (traffic moves to 1); at 150 the sender rebuilds it (as its service does once
  // the NICs probe healthy); the receiver then moves traffic back to 0 behind a RESUME, and the
  // fenced backup 1 is rebuilt right after.  Every message must arrive exactly once, in order.
  ASSERT_NO_FATAL_FAILURE(StreamAll(600, [&](int k) {
    if (k == 100) mendRnetKillPath(sc_, 0);
    if (k == 150) mendRnetRebuildPath(sc_, 0);
  }));
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  EXPECT_EQ(s.active, 0) << "traffic must return to the primary";
  EXPECT_EQ(r.active, 0);
  EXPECT_EQ(s.failbacks, 1u);
  EXPECT_EQ(r.failbacks, 1u);
  EXPECT_GE(s.rebuilds, 1u);
  EXPECT_GT(s.msgs[1], 0u) << "the backup carried traffic while the primary was down";
  // The backup fenced by the fail-back comes back as a backup: more traffic lets the rebuild finish.
  int got = 0;
  ASSERT_EQ(Stream(200, &got), ncclSuccess);
  s = Stats(sc_);
  EXPECT_EQ(s.dead, 0) << "every path is live again";
  EXPECT_EQ(s.active, 0);
}

TEST_F(RnetTest, RebuildOfADeadDeviceFailsAndTrafficStays) {
  Connect();
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) {
    if (k == 100) gDead[0] = 1;
    if (k == 150) mendRnetRebuildPath(sc_, 0);  // the device is still dead: the rebuild fails
  }));
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.active, 1);
  EXPECT_EQ(s.failbacks, 0u);
  EXPECT_EQ(s.rebuilds, 0u);
  EXPECT_EQ(Stats(rc_).active, 1);
}

TEST_F(RnetTest, RebuildOfALivePathIsRefused) {
  Connect();
  EXPECT_EQ(mendRnetRebuildPath(rc_, 0), ncclInvalidArgument) << "only the sender rebuilds";
  EXPECT_EQ(mendRnetRebuildPath(sc_, 7), ncclInvalidArgument);
  ASSERT_EQ(mendRnetRebuildPath(sc_, 1), ncclSuccess);  // path 1 is alive: nothing happens
  int got = 0;
  ASSERT_EQ(Stream(100, &got), ncclSuccess);
  mendRnetStats s = Stats(sc_);
  EXPECT_EQ(s.rebuilds, 0u);
  EXPECT_EQ(s.dead, 0);
  EXPECT_EQ(s.active, 0);
}

TEST_F(RnetTest, BadArgumentsAreRejected) {
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void* c = nullptr;
  EXPECT_EQ(R->connect(ctx_, 0, handle, &c), ncclInvalidArgument);  // not a handle of this Net
  EXPECT_EQ(R->listen(ctx_, 9, handle, &c), ncclInvalidArgument);
  EXPECT_EQ(R->test(nullptr, nullptr, nullptr), ncclInvalidArgument);
  Connect();
  void* d[2];
  size_t s[2];
  void* q;
  EXPECT_EQ(R->irecv(rc_, 2, d, s, nullptr, nullptr, &q), ncclInvalidArgument);
  EXPECT_EQ(R->isend(rc_, d, 1, 0, nullptr, &q), ncclInvalidArgument);
}

TEST_F(RnetTest, OneDeviceStillWorks) {
  ASSERT_NO_FATAL_FAILURE(Reinit(1));
  Connect();
  EXPECT_EQ(Stats(sc_).nPaths, 1);
  ASSERT_NO_FATAL_FAILURE(StreamAll(50));
}

}  // namespace
