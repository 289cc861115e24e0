// The monitor's window arithmetic (src/monitor/window.c) against values computed by hand, and the
// snapshot text of a process with no communicator.  Times are in ns; every message is 1000 bytes.
#include <gtest/gtest.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "mend_internal.h"
#define _Atomic volatile
extern "C" {
#include "monitor/monitor.h"
#include "monitor/window.h"
}
#undef _Atomic

namespace {

struct Msg {
  uint64_t post, done;
};

// Back to back: each message is posted as the previous one completes, and takes gap(i) ns.
template <typename Gap>
std::vector<Msg> backToBack(int n, Gap gap) {
  std::vector<Msg> v;
  uint64_t t = 0;
  for (int i = 0; i < n; i++) {
    uint64_t post = t;
    t += gap(i);
    v.push_back({post, t});
  }
  return v;
}

class Window {
 public:
  Window(int size, int permille, int judge = 1, uint64_t minBytes = 0) {
    EXPECT_EQ(mendMonWindowInit(&w_, size, permille, judge, minBytes), ncclSuccess);
  }
  ~Window() { mendMonWindowFree(&w_); }
  void add(const Msg& m, uint64_t bytes = 1000) { mendMonWindowAdd(&w_, m.post, m.done, bytes); }
  uint64_t bps() const { return w_.bps; }
  uint64_t lat() const { return w_.latNs; }
  uint64_t span() const { return w_.spanNs; }
  uint64_t median() const { return w_.medianBps; }
  uint64_t anomalies() const { return w_.anomalies; }
  int inAnomaly() const { return w_.inAnomaly; }
  uint64_t lastAnomaly() const { return w_.lastAnomalyNs; }
  const mendMonWindow& raw() const { return w_; }

 private:
  mendMonWindow w_;
};

}  // namespace

TEST(MonitorWindow, RejectsBadShapes) {
  mendMonWindow w;
  EXPECT_EQ(mendMonWindowInit(&w, 0, 500, 1, 0), ncclInvalidArgument);
  EXPECT_EQ(mendMonWindowInit(&w, MEND_MON_MAX_WINDOW + 1, 500, 1, 0), ncclInvalidArgument);
  EXPECT_EQ(mendMonWindowInit(&w, 8, 0, 1, 0), ncclInvalidArgument);
  EXPECT_EQ(mendMonWindowInit(&w, 8, 1001, 1, 0), ncclInvalidArgument);
  EXPECT_EQ(mendMonWindowInit(nullptr, 8, 500, 1, 0), ncclInvalidArgument);
}

TEST(MonitorWindow, Median) {
  uint64_t a[] = {5, 1, 4, 2, 3};
  EXPECT_EQ(mendMonMedian(a, 5), 3u);
  uint64_t b[] = {10, 40, 30, 20};
  EXPECT_EQ(mendMonMedian(b, 4), 20u);  // the lower middle one
  EXPECT_EQ(mendMonMedian(b, 0), 0u);
  EXPECT_EQ(mendMonMedian(b, 1), 10u);
}

// 1000 bytes every 1000 ns: each window of 4 holds 4000 bytes over 4000 ns busy, 1e9 B/s.
TEST(MonitorWindow, ConstantRate) {
  Window w(4, 500);
  auto msgs = backToBack(16, [](int) { return 1000; });
  for (int i = 0; i < 3; i++) {
    w.add(msgs[i]);
    EXPECT_EQ(w.bps(), 0u) << "no value before W messages";
  }
  for (int i = 3; i < 16; i++) {
    w.add(msgs[i]);
    EXPECT_EQ(w.bps(), 1000000000u) << i;
    EXPECT_EQ(w.lat(), 1000u) << i;
    EXPECT_EQ(w.span(), 4000u) << i;
  }
  // History: one value per 4 messages (after 4, 8, 12, 16), all 1e9: median 1e9, no anomaly.
  EXPECT_EQ(w.median(), 1000000000u);
  EXPECT_EQ(w.anomalies(), 0u);
  EXPECT_EQ(w.raw().bytes, 16000u);
  EXPECT_EQ(w.raw().msgs, 16u);
  EXPECT_EQ(w.raw().lastDoneNs, 16000u);
}

// All 8 posted at once (a queue): message i starts when i-1 completes at 1000 i, so the rate is
// still 1e9 B/s; the latency includes the wait: window 0..3 waits 1000+2000+3000+4000 -> 2500 mean.
TEST(MonitorWindow, QueuedBurstMeasuresDeliveryRate) {
  Window w(4, 500);
  for (int i = 0; i < 8; i++) {
    w.add({0, 1000u * (i + 1)});
    if (i == 3) {
      EXPECT_EQ(w.bps(), 1000000000u);
      EXPECT_EQ(w.lat(), 2500u);
    }
  }
  EXPECT_EQ(w.bps(), 1000000000u);
  EXPECT_EQ(w.lat(), 6500u);  // (5000 + 6000 + 7000 + 8000) / 4
}

// Idle time with nothing posted is not slowness: message 1 is posted 999 us after message 0 ended.
// Busy time (1000 - 0) + (1001000 - 1000000) = 2000 ns for 2000 bytes: 1e9 B/s.
TEST(MonitorWindow, IdleGapIsNotCounted) {
  Window w(2, 500);
  w.add({0, 1000});
  w.add({1000000, 1001000});
  EXPECT_EQ(w.bps(), 1000000000u);
  EXPECT_EQ(w.span(), 2000u);
  EXPECT_EQ(w.lat(), 1000u);
}

// 24 messages at 1000 ns each (1e9 B/s), then 4000 ns each (2.5e8 B/s).  done(23) = 24000, then
// 28000, 32000, 36000, 40000 ...  Window ending at i spans done(i) - done(i-4):
//   i=24: 28000 - 21000 = 7000  -> 4000e9 / 7000  = 571428571 (floor), latency (3x1000 + 4000)/4 = 1750
//   i=25: 32000 - 22000 = 10000 -> 400000000, latency 2500
//   i=26: 36000 - 23000 = 13000 -> 307692307, latency 3250
//   i=27: 40000 - 24000 = 16000 -> 250000000, latency 4000
// Median of the history (6 values of 1e9 by i=23) is 1e9; threshold 500 permille = 5e8: i=24 is not
// an anomaly, i=25 starts one (at done 32000).  Low values join the history at i=27, 31, ...; the
// lower median of n values turns low once more than (n-1)/2 are low: 6 low of 12, pushed at i=47.
// So i=47 is still judged low, the median is 2.5e8 after it, and i=48 ends the episode.
TEST(MonitorWindow, StepChange) {
  Window w(4, 500);
  auto msgs = backToBack(64, [](int i) { return i < 24 ? 1000 : 4000; });
  for (int i = 0; i <= 23; i++) w.add(msgs[i]);
  EXPECT_EQ(w.bps(), 1000000000u);
  EXPECT_EQ(w.median(), 1000000000u);
  const uint64_t bps[] = {571428571u, 400000000u, 307692307u, 250000000u};
  const uint64_t lat[] = {1750u, 2500u, 3250u, 4000u};
  for (int k = 0; k < 4; k++) {
    w.add(msgs[24 + k]);
    EXPECT_EQ(w.bps(), bps[k]) << "i=" << 24 + k;
    EXPECT_EQ(w.lat(), lat[k]) << "i=" << 24 + k;
    EXPECT_EQ(w.inAnomaly(), k >= 1) << "i=" << 24 + k;
  }
  EXPECT_EQ(w.anomalies(), 1u);
  EXPECT_EQ(w.lastAnomaly(), 32000u);
  for (int i = 28; i <= 47; i++) w.add(msgs[i]);
  EXPECT_EQ(w.inAnomaly(), 1);
  EXPECT_EQ(w.median(), 250000000u);
  w.add(msgs[48]);
  EXPECT_EQ(w.inAnomaly(), 0);
  for (int i = 49; i < 64; i++) w.add(msgs[i]);
  EXPECT_EQ(w.anomalies(), 1u) << "one episode";
  EXPECT_EQ(w.bps(), 250000000u);
}

// 1000 ns per message, but message 20 stalls 10 us (done 31000 instead of 21000).  Every window
// holding it spans 14000 ns: 4000e9 / 14000 = 285714285, latency (3x1000 + 11000)/4 = 3500.  Median
// 1e9 (5 values), so it is an anomaly from i=20 until the stall leaves the window at i=24.
TEST(MonitorWindow, Stall) {
  Window w(4, 500);
  auto msgs = backToBack(32, [](int i) { return i == 20 ? 11000 : 1000; });
  for (int i = 0; i < 20; i++) w.add(msgs[i]);
  EXPECT_EQ(w.bps(), 1000000000u);
  for (int i = 20; i < 24; i++) {
    w.add(msgs[i]);
    EXPECT_EQ(w.bps(), 285714285u) << i;
    EXPECT_EQ(w.lat(), 3500u) << i;
    EXPECT_EQ(w.span(), 14000u) << i;
    EXPECT_EQ(w.inAnomaly(), 1) << i;
  }
  EXPECT_EQ(w.lastAnomaly(), 31000u);
  w.add(msgs[24]);
  EXPECT_EQ(w.bps(), 1000000000u);
  EXPECT_EQ(w.inAnomaly(), 0);
  for (int i = 25; i < 32; i++) w.add(msgs[i]);
  EXPECT_EQ(w.anomalies(), 1u);
}

// Receive windows are not judged (a receive is posted before its data exists), but still measured.
TEST(MonitorWindow, UnjudgedWindowCountsNoAnomaly) {
  Window w(4, 500, /*judge=*/0);
  auto msgs = backToBack(32, [](int i) { return i == 20 ? 11000 : 1000; });
  for (auto& m : msgs) w.add(m);
  EXPECT_EQ(w.anomalies(), 0u);
  EXPECT_EQ(w.median(), 1000000000u);
  EXPECT_EQ(w.bps(), 1000000000u);
}

// Small messages measure latency, not throughput: a window holding one is neither judged nor a
// history sample.  16 bulk messages (1e9 B/s, median 1e9), then 4 of 8 bytes at 1000 ns each
// (8e6 B/s, far below half the median): no anomaly, median unchanged; back to bulk: judged again.
TEST(MonitorWindow, SmallMessagesAreNotJudged) {
  Window w(4, 500, 1, /*minBytes=*/500);
  auto msgs = backToBack(28, [](int) { return 1000; });
  for (int i = 0; i < 16; i++) w.add(msgs[i]);
  EXPECT_EQ(w.median(), 1000000000u);
  for (int i = 16; i < 20; i++) w.add(msgs[i], 8);
  EXPECT_EQ(w.bps(), 8000000u);  // 32 bytes over 4000 ns
  EXPECT_EQ(w.anomalies(), 0u);
  EXPECT_EQ(w.raw().nHist, 4) << "no sample from windows with small messages";
  for (int i = 20; i < 24; i++) w.add(msgs[i]);
  EXPECT_EQ(w.bps(), 1000000000u);
  EXPECT_EQ(w.raw().nHist, 5);
  // Bulk at half the rate now is judged: message 24 takes 3000 ns -> window 21..24 = 4000 B over
  // 6000 ns = 666666666 (not low), message 25 takes 7000 -> 4000 B / 12000 ns = 333333333 (low).
  w.add({msgs[23].done, msgs[23].done + 3000});
  EXPECT_EQ(w.bps(), 666666666u);
  EXPECT_EQ(w.inAnomaly(), 0);
  w.add({msgs[23].done + 3000, msgs[23].done + 10000});
  EXPECT_EQ(w.bps(), 333333333u);
  EXPECT_EQ(w.anomalies(), 1u);
}

// W = 1 is the per-message estimate: each value is one message's own service time.
TEST(MonitorWindow, WindowOfOne) {
  Window w(1, 1000);
  w.add({0, 500});
  EXPECT_EQ(w.bps(), 2000000000u);
  w.add({500, 2500});
  EXPECT_EQ(w.bps(), 500000000u);
  EXPECT_EQ(w.lat(), 2000u);
}

// The window judged live (mendMonWindowSlow): 32 messages of 1000 bytes back to back, 1000 ns each,
// give a median of 1e9 B/s; at MEND_MONITOR_ANOMALY 0.5 a 1000-byte send in service for more than
// 1000 / 0.5e9 s = 2000 ns already runs below half the median.
class LiveWindow : public ::testing::Test {
 protected:
  LiveWindow() : w(8, 500, 1, 1000) {
    for (const Msg& m : backToBack(32, [](int) { return 1000; })) w.add(m);
  }
  int slow(uint64_t post, uint64_t bytes, uint64_t now) {
    return mendMonWindowSlow(const_cast<mendMonWindow*>(&w.raw()), post, bytes, now);
  }
  Window w;
};

TEST_F(LiveWindow, InflightSendBeyondTheBoundIsSlow) {
  ASSERT_EQ(w.median(), 1000000000u);
  EXPECT_EQ(slow(32000, 1000, 32000), 0);
  EXPECT_EQ(slow(32000, 1000, 34000), 0);  // exactly 2000 ns: at the threshold, not below it
  EXPECT_EQ(slow(32000, 1000, 34001), 1);
  EXPECT_EQ(slow(32000, 2000, 36000), 0);  // a message twice the size may take twice as long
  EXPECT_EQ(slow(32000, 2000, 36001), 1);
}

TEST_F(LiveWindow, StepChangeSeenLiveBeforeTheWindow) {
  // The rate drops to a fifth: 5000 ns per message from 32000 on.  Live, the first slow message is
  // judged at 34001 ns (2001 ns in service); the window drops below half only once 3 slow messages
  // completed: 8000 / (5 x 1000 + 3 x 5000) = 0.4e9 < 0.5e9, at 47000 ns.
  EXPECT_EQ(slow(32000, 1000, 34001), 1);
  w.add({32000, 37000});
  EXPECT_EQ(w.inAnomaly(), 0);  // 8000 / 12000 ns
  EXPECT_EQ(slow(37000, 1000, 39000), 0);
  EXPECT_EQ(slow(37000, 1000, 39001), 1);
  w.add({37000, 42000});
  EXPECT_EQ(w.inAnomaly(), 0);  // 8000 / 16000 ns: exactly half
  w.add({42000, 47000});
  EXPECT_EQ(w.inAnomaly(), 1);
  EXPECT_EQ(w.lastAnomaly(), 47000u);
}

TEST_F(LiveWindow, IdleTimeIsNotServiceTime) {
  // Nothing posted from 32000 to 1000000 (between two operations): service starts at the post.
  EXPECT_EQ(slow(1000000, 1000, 1001500), 0);
  EXPECT_EQ(slow(1000000, 1000, 1002000), 0);
  EXPECT_EQ(slow(1000000, 1000, 1002001), 1);
  // Posted at 31500, behind the message that completed at 32000: service starts at 32000.
  EXPECT_EQ(slow(31500, 1000, 34000), 0);
  EXPECT_EQ(slow(31500, 1000, 34001), 1);
}

TEST_F(LiveWindow, SmallMessagesAreNeverSlow) {
  // Below minBytes (1000) a message measures latency: in service for 1 s it is a stall
  // (mend_conn_stalled_seconds), not a judged rate.
  EXPECT_EQ(slow(32000, 999, 32000 + 1000000000ull), 0);
  EXPECT_EQ(slow(32000, 0, 32000 + 1000000000ull), 0);
}

TEST_F(LiveWindow, ReferenceIsTheMedianNotTheLastWindow) {
  // 8 messages at 500 ns: the last window runs at 2e9 B/s, the median stays 1e9 (history 1,1,1,1,2
  // x 1e9): the bound stays 2000 ns.
  uint64_t t = 32000;
  for (int i = 0; i < 8; i++, t += 500) w.add({t, t + 500});
  ASSERT_EQ(w.bps(), 2000000000u);
  ASSERT_EQ(w.median(), 1000000000u);
  EXPECT_EQ(slow(t, 1000, t + 2000), 0);
  EXPECT_EQ(slow(t, 1000, t + 2001), 1);
  // 8 messages at 4000 ns: the last window runs at 0.25e9 B/s (an anomaly); the median is the lower
  // middle of 0.25,1,1,1,1,2 x 1e9 = 1e9: the bound is still 2000 ns.
  for (int i = 0; i < 8; i++, t += 4000) w.add({t, t + 4000});
  ASSERT_EQ(w.bps(), 250000000u);
  ASSERT_EQ(w.median(), 1000000000u);
  EXPECT_EQ(w.inAnomaly(), 1);
  EXPECT_EQ(slow(t, 1000, t + 2000), 0);
  EXPECT_EQ(slow(t, 1000, t + 2001), 1);
}

TEST(MonitorWindow, LiveNeedsAMedianAndASendWindow) {
  Window early(8, 500, 1, 1000);  // 24 messages: 3 window values, no median yet
  for (const Msg& m : backToBack(24, [](int) { return 1000; })) early.add(m);
  EXPECT_EQ(early.bps(), 1000000000u);
  EXPECT_EQ(early.median(), 0u);
  EXPECT_EQ(mendMonWindowSlow(const_cast<mendMonWindow*>(&early.raw()), 24000, 1000, 24000 + 1000000000ull), 0);
  for (const Msg& m : backToBack(8, [](int) { return 1000; })) early.add({m.post + 24000, m.done + 24000});
  EXPECT_EQ(early.median(), 1000000000u);  // the fourth value: judged from now on
  EXPECT_EQ(mendMonWindowSlow(const_cast<mendMonWindow*>(&early.raw()), 32000, 1000, 34001), 1);
  Window recv(8, 500, 0, 1000);  // receive windows are never judged
  for (const Msg& m : backToBack(32, [](int) { return 1000; })) recv.add(m);
  EXPECT_EQ(recv.median(), 1000000000u);
  EXPECT_EQ(mendMonWindowSlow(const_cast<mendMonWindow*>(&recv.raw()), 32000, 1000, 32000 + 1000000000ull), 0);
  EXPECT_EQ(mendMonWindowSlow(NULL, 32000, 1000, 64000), 0);
}

// Without a communicator the snapshot still names the process and every family once.
TEST(MonitorSnapshot, EmptyProcess) {
  char* text = nullptr;
  size_t len = 0;
  ASSERT_EQ(mendMonitorSnapshot(0, &text, &len), ncclSuccess);
  std::string s(text, len);
  free(text);
  EXPECT_NE(s.find("# TYPE mend_monitor_info gauge\nmend_monitor_info{host=\""), std::string::npos) << s;
  EXPECT_NE(s.find("# TYPE mend_comm_ops_total counter\n"), std::string::npos);
  EXPECT_NE(s.find("# TYPE mend_nic_throughput_bytes_per_second gauge\n"), std::string::npos);
  EXPECT_NE(s.find("mend_monitor_communicators 0\n"), std::string::npos) << s;
  ASSERT_EQ(mendMonitorSnapshot(1, &text, &len), ncclSuccess);
  std::string j(text, len);
  free(text);
  EXPECT_EQ(j.rfind("{\"kind\":\"process\",\"host\":\"", 0), 0u) << j;
  EXPECT_NE(j.find("\"monitor_communicators\":0}"), std::string::npos) << j;
  EXPECT_EQ(mendMonitorSnapshot(0, nullptr, &len), ncclInvalidArgument);
}

// ---- who is late: the query service's wire checks (src/bootstrap_ras_wire.c)

extern "C" {
#include "bootstrap_ras.h"
}

namespace {

// A reply of one communicator of nRanks ranks (rank 1, two NICs, the second down).
std::vector<char> rasReply(int nRanks) {
  struct mendRasHeader h;
  memset(&h, 0, sizeof(h));
  h.magic = MEND_RAS_REPLY_MAGIC;
  h.version = MEND_RAS_VERSION;
  h.nComms = 1;
  h.pid = 4242;
  strcpy(h.host, "node-a");
  h.bytes = sizeof(h) + mendRasCommBytes(nRanks);
  struct mendRasComm c;
  memset(&c, 0, sizeof(c));
  c.commHash = 0xabcdef;
  c.rank = 1;
  c.nRanks = nRanks;
  c.issued = 77;
  c.inflight = 1;
  c.nNics = 2;
  c.nic[1] = MEND_RAS_NIC_DOWN;
  std::vector<char> b((const char*)&h, (const char*)&h + sizeof(h));
  b.insert(b.end(), (const char*)&c, (const char*)&c + sizeof(c));
  for (int r = 0; r < nRanks; r++) {
    struct mendRasPeer p;
    memset(&p, 0, sizeof(p));
    p.addr.sin.sin_family = AF_INET;
    p.addr.sin.sin_port = htons((uint16_t)(40000 + r));
    b.insert(b.end(), (const char*)&p, (const char*)&p + sizeof(p));
  }
  return b;
}

// Parse buf; "" when accepted (and checked), else why it was refused.
std::string rasParse(const std::vector<char>& b) {
  struct mendRasReply r;
  const char* why = NULL;
  if (mendRasReplyParse(b.data(), b.size(), &r, &why) != ncclSuccess) return why ? why : "(no reason)";
  std::string bad;
  if (r.pid != 4242 || strcmp(r.host, "node-a") != 0 || r.nComms != 1 || r.comms[0].c.issued != 77 ||
      r.comms[0].c.nic[1] != MEND_RAS_NIC_DOWN || ntohs(r.comms[0].peers[2].sin.sin_port) != 40002)
    bad = "fields read wrong";
  mendRasReplyFree(&r);
  return bad;
}

}  // namespace

TEST(RasWire, QueryAndReplyAccepted) {
  struct mendRasQuery q = {MEND_RAS_QUERY_MAGIC, MEND_RAS_VERSION, 0};
  EXPECT_TRUE(mendRasQueryParse(&q, sizeof(q)));
  EXPECT_FALSE(mendRasQueryParse(&q, sizeof(q) - 1));
  q.flags = 1;
  EXPECT_FALSE(mendRasQueryParse(&q, sizeof(q)));
  EXPECT_EQ(rasParse(rasReply(4)), "");
}

TEST(RasWire, BadRepliesRefused) {
  const size_t comm = sizeof(struct mendRasHeader);
  struct Case {
    const char* what;
    size_t off;     // byte to overwrite (in the reply of 4 ranks)
    int32_t value;  // 32-bit value written there
  } cases[] = {
      {"rank outside the communicator", comm + offsetof(struct mendRasComm, rank), 4},
      {"negative size", comm + offsetof(struct mendRasComm, nRanks), -1},
      {"unknown NIC state", comm + offsetof(struct mendRasComm, nic) + 4, 7},
      {"NIC state past the count", comm + offsetof(struct mendRasComm, nic) + 12, 1},
      {"too many NICs", comm + offsetof(struct mendRasComm, nNics), MEND_RAS_MAX_NICS + 1},
      {"bad pid", offsetof(struct mendRasHeader, pid), 0},
      {"another version", offsetof(struct mendRasHeader, version), MEND_RAS_VERSION + 1},
      {"unknown address family", comm + sizeof(struct mendRasComm), 99},
  };
  for (const Case& c : cases) {
    std::vector<char> b = rasReply(4);
    memcpy(b.data() + c.off, &c.value, sizeof(c.value));
    EXPECT_NE(rasParse(b), "") << c.what;
  }
  std::vector<char> b = rasReply(4);
  b.pop_back();
  EXPECT_NE(rasParse(b), "") << "truncated";
  b = rasReply(4);
  b.push_back(0);
  EXPECT_NE(rasParse(b), "") << "a byte past the length";
  b = rasReply(4);
  memset(b.data() + offsetof(struct mendRasHeader, host), 'x', MEND_RAS_HOST_LEN);
  EXPECT_NE(rasParse(b), "") << "unterminated host name";
}
