// Relay paths (src/resilience/relay.h): a connection whose two ends share no working rail, on a
// fabric whose rails never meet, is carried through a bridge rank that forwards both directions.
// The test Net of rnet_fixture.h runs rail-only here (a connect to a listener on another device
// fails), the two ends live in contexts of their own (ranks 0 and 1) and the bridge, rank 2, is an
// engine in this process.  Checks: exact, ordered, exactly-once delivery across the move to the relay
// and across its replacement; both ends fail in bounded time when no bridge can carry them; every
// request the bridge takes is checked first; a link nobody accepts is closed.
#include "rnet_fixture.h"

extern "C" {
#include "resilience/relay.h"
}

namespace {

class RelayTest : public RnetTest {
 protected:
  void SetUp() override {
    RnetTest::SetUp();
    env_.SaveAndUnset("MEND_RELAY");
    ASSERT_NO_FATAL_FAILURE(Reinit(2));
    ASSERT_EQ(R->init(&ctxR_, 7, mendDebugLog), ncclSuccess);
    ASSERT_EQ(mendRnetSetRankForTest(ctx_, 0), ncclSuccess);
    ASSERT_EQ(mendRnetSetRankForTest(ctxR_, 1), ncclSuccess);
    gRailOnly = 1;
    ASSERT_EQ(kTestNet.init(&bridgeCtx_, 7, mendDebugLog), ncclSuccess);
    ASSERT_EQ(mendRelayCreate(&kTestNet, bridgeCtx_, kBridge, 3, 2, nullptr, &bridge_), ncclSuccess);
    mendRnetSetTestRelay(bridge_, kBridge);
  }
  void TearDown() override {
    mendRnetSetTestRelay(nullptr, -1);
    mendRelayFree(bridge_);
    kTestNet.finalize(bridgeCtx_);
    RnetTest::TearDown();
  }
  mendRelayStats Bridge() {
    mendRelayStats st;
    mendRelayGetStats(bridge_, &st);
    return st;
  }
  // Lose rail 0 and then rail 1 of the connection while n messages stream.
  ncclResult_t StreamLosingBothRails(int n, int* got, std::function<void(int)> more = nullptr) {
    return Stream(n, got, [&](int k) {
      if (k == n / 4) mendRnetKillPath(sc_, 0);
      if (k == n / 2) mendRnetKillPath(sc_, 1);
      if (more) more(k);
    });
  }
  static constexpr int kBridge = 2;
  void* bridgeCtx_ = nullptr;
  mendRelay* bridge_ = nullptr;
};

// Rails 0 and 1 lost in turn: the crossing path cannot connect (the rails never meet), so the sender
// relays through the bridge: our rail 0 to it, its rail 1 to the receiver.  Every message arrives
// once, in order, with its bytes; the relay carries the rest.
TEST_F(RelayTest, RelayCarriesTheConnectionWhenRailsDoNotMeet) {
  Connect();
  int got = 0;
  ASSERT_EQ(StreamLosingBothRails(400, &got), ncclSuccess);
  EXPECT_EQ(got, 400);
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  ASSERT_EQ(s.cross, 2) << "the relay path takes the last-resort slot";
  EXPECT_EQ(r.cross, 2);
  EXPECT_EQ(s.relay, kBridge);
  EXPECT_EQ(r.relay, kBridge);
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(r.active, 2);
  EXPECT_EQ(s.localDev[2], 0) << "our rail to the bridge";
  EXPECT_EQ(r.localDev[2], 1) << "the bridge's rail to the receiver";
  mendRelayStats b = Bridge();
  EXPECT_EQ(b.running, 1);
  EXPECT_GE(b.msgs, r.msgs[2]) << "everything the receiver placed on the relay came through the bridge";
  EXPECT_GT(r.msgs[2], 0u);
  EXPECT_GT(b.ctrlMsgs, 0u) << "acknowledgements and the RESUME go back through it";
  // The connection goes on over the relay.
  ASSERT_NO_FATAL_FAILURE(StreamAll(100));
}

// The receiver fences the relay path (as when a link under it dies): the bridge closes its link, the
// sender, with no path again, relays once more through a new link, and nothing is lost.
TEST_F(RelayTest, ALostRelayPathIsReplaced) {
  Connect();
  int got = 0;
  ASSERT_EQ(StreamLosingBothRails(600, &got, [&](int k) {
    if (k == 450) mendRnetKillPath(rc_, 2);
  }), ncclSuccess);
  EXPECT_EQ(got, 600);
  EXPECT_EQ(Stats(sc_).active, 2);
  EXPECT_EQ(Stats(sc_).relay, kBridge);
  double t0 = mendtest::nowMs();
  while (Bridge().closed < 1 && mendtest::nowMs() - t0 < 5000) usleep(1000);
  mendRelayStats b = Bridge();
  EXPECT_EQ(b.opened, 2u) << "a second link replaced the fenced one";
  EXPECT_EQ(b.closed, 1u);
  EXPECT_EQ(b.running, 1);
}

// No bridge: after the crossing fails the sender has nothing left; it says so, and both ends fail
// well within the receiver's wait (it does not sit out its bound).
TEST_F(RelayTest, WithoutABridgeBothEndsFail) {
  mendRnetSetTestRelay(nullptr, -1);
  Connect();
  int got = 0;
  double t0 = mendtest::nowMs();
  ncclResult_t res = StreamLosingBothRails(400, &got);
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_LT(got, 400);
  EXPECT_NE(RecvUntilFailing(t0, 4000), ncclSuccess) << "the receiver must stop waiting once the sender gave up";
  EXPECT_LT(mendtest::nowMs() - t0, 4000);
  EXPECT_EQ(Bridge().opened, 0u);
}

// MEND_RELAY=0: the same loss fails the connection; the bridge is never asked.
TEST_F(RelayTest, RelayOffFailsTheConnection) {
  setenv("MEND_RELAY", "0", 1);
  mendParamResetCache();
  Connect();
  int got = 0;
  ncclResult_t res = StreamLosingBothRails(400, &got);
  EXPECT_TRUE(res == ncclRemoteError || res == ncclSystemError) << "got " << res;
  EXPECT_EQ(Bridge().opened, 0u);
  EXPECT_EQ(Stats(sc_).relay, -1);
}

// The connection is made while the sender's NIC of the receiver's primary rail is down (and the rails
// never meet): the sender sets it up through the bridge, the rails start dead in its chain and the relay
// path in the last-resort slot carries the stream.  When the rail comes back and is rebuilt, traffic
// fails back to it.
TEST_F(RelayTest, SetUpThroughABridgeThenFailBack) {
  ASSERT_EQ(mendRnetSetDownForTest(ctx_, 1u << 0), ncclSuccess);  // the sender's NIC 0; the receiver listens on 0
  Connect(0);
  mendRnetStats s = Stats(sc_), r = Stats(rc_);
  ASSERT_EQ(s.nPaths, 3) << "two rails, then the relay path";
  EXPECT_EQ(s.active, 2);
  EXPECT_EQ(r.active, 2);
  EXPECT_EQ(s.relay, kBridge);
  EXPECT_EQ(r.relay, kBridge);
  EXPECT_EQ(s.dead, 2) << "both rails start dead (a NIC down, or a listen the set-up holds)";
  EXPECT_EQ(s.localDev[2], 1);
  EXPECT_EQ(r.localDev[2], 0);
  ASSERT_NO_FATAL_FAILURE(StreamAll(300));
  EXPECT_GT(Stats(rc_).msgs[2], 0u);
  EXPECT_EQ(Bridge().running, 1);
  ASSERT_EQ(mendRnetSetDownForTest(ctx_, 0), ncclSuccess);
  ASSERT_NO_FATAL_FAILURE(StreamAll(300, [&](int k) { if (k == 50) mendRnetRebuildPath(sc_, 0); }));
  ASSERT_NO_FATAL_FAILURE(StreamAll(100));
  s = Stats(sc_);
  EXPECT_EQ(s.active, 0) << "fail-back from the relay to the rebuilt rail";
  EXPECT_EQ(Stats(rc_).active, 0);
  EXPECT_EQ(s.failbacks, 1u);
  double t0 = mendtest::nowMs();
  while (Bridge().closed < 1 && mendtest::nowMs() - t0 < 5000) usleep(1000);
  EXPECT_EQ(Bridge().links, 0) << "the fenced relay is not rebuilt as a backup: the bridge holds nothing";
}

// What the bridge acts on: every field of a request is checked against the bridge's own ranks and
// devices and against the rank that sent it.
TEST_F(RelayTest, BridgeChecksEveryRequest) {
  mendRelayMsg ok = {};
  ok.magic = 0x524e4554u;  // RNET_MAGIC
  ok.kind = MEND_RELAY_OPEN;
  ok.path = 2;
  ok.srcRank = 0, ok.dstRank = 1, ok.srcDev = 0, ok.dstDev = 1;
  const char* why = nullptr;
  EXPECT_EQ(mendRelayMsgCheck(&ok, 0, kBridge, 3, 2, &why), 1);
  EXPECT_EQ(why, nullptr);
  struct Case { const char* name; std::function<void(mendRelayMsg&, int&)> bad; };
  const Case cases[] = {
    {"bad magic", [](mendRelayMsg& m, int&) { m.magic = 1; }},
    {"unknown kind", [](mendRelayMsg& m, int&) { m.kind = 9; }},
    {"path out of range", [](mendRelayMsg& m, int&) { m.path = 200; }},
    {"rank out of range", [](mendRelayMsg& m, int&) { m.dstRank = 3; }},
    {"rank out of range", [](mendRelayMsg& m, int& f) { m.srcRank = -1; f = -1; }},
    {"the bridge must be a third rank", [](mendRelayMsg& m, int&) { m.dstRank = kBridge; }},
    {"the bridge must be a third rank", [](mendRelayMsg& m, int&) { m.dstRank = 0; }},
    {"not sent by that end", [](mendRelayMsg&, int& f) { f = 1; }},
    {"not sent by that end", [](mendRelayMsg& m, int& f) { m.kind = MEND_RELAY_ACCEPT; m.maxBytes = 4096; f = 0; }},
    {"no such device here", [](mendRelayMsg& m, int&) { m.dstDev = 2; }},
    {"no such device here", [](mendRelayMsg& m, int&) { m.srcDev = -3; }},
    {"message size out of range", [](mendRelayMsg& m, int& f) { m.kind = MEND_RELAY_ACCEPT; f = 1; }},
    {"message size out of range",
     [](mendRelayMsg& m, int& f) { m.kind = MEND_RELAY_ACCEPT; m.maxBytes = MEND_RELAY_MAX_BYTES + 1; f = 1; }},
  };
  for (const Case& c : cases) {
    mendRelayMsg m = ok;
    int from = 0;
    c.bad(m, from);
    why = nullptr;
    EXPECT_EQ(mendRelayMsgCheck(&m, from, kBridge, 3, 2, &why), 0) << c.name;
    EXPECT_STREQ(why, c.name);
  }
  mendRelayMsg acc = ok;
  acc.kind = MEND_RELAY_ACCEPT;
  acc.maxBytes = 1 << 20;
  EXPECT_EQ(mendRelayMsgCheck(&acc, 1, kBridge, 3, 2, &why), 1) << "the receiver's ACCEPT";
  // A refused request opens nothing.
  mendRelayMsg bad = ok;
  bad.srcDev = 7;
  mendRelayPost(bridge_, 0, &bad);
  usleep(20000);
  EXPECT_EQ(Bridge().opened, 0u);
}

// An OPEN whose receiver never answers (its connection is unknown here): the bridge listens, then
// closes the link once the rebuild's bound has passed, and holds nothing.
TEST_F(RelayTest, BridgeClosesALinkNobodyAccepts) {
  mendRelayMsg m = {};
  m.magic = 0x524e4554u;
  m.kind = MEND_RELAY_OPEN;
  m.path = 2;
  m.srcRank = 0, m.dstRank = 1, m.srcDev = 0, m.dstDev = 1;
  m.srcConn = 0x1234, m.dstConn = 0x5678;  // no such connections
  void* listen = nullptr;                   // the sender's ctrl listen: real, never accepted
  ASSERT_EQ(kTestNet.listen(bridgeCtx_, 0, m.handle, &listen), ncclSuccess);
  mendRelayPost(bridge_, 0, &m);
  double t0 = mendtest::nowMs();
  while (Bridge().opened < 1 && mendtest::nowMs() - t0 < 2000) usleep(1000);
  EXPECT_EQ(Bridge().links, 1);
  while (Bridge().closed < 1 && mendtest::nowMs() - t0 < 9000) usleep(10000);
  mendRelayStats b = Bridge();
  EXPECT_EQ(b.closed, 1u) << "closed after the rebuild's bound";
  EXPECT_EQ(b.links, 0);
  EXPECT_EQ(b.running, 0);
  EXPECT_GE(mendtest::nowMs() - t0, 4900.0) << "not before the bound (5 s)";
  kTestNet.closeListen(listen);
}

}  // namespace
