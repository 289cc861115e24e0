// Black-hole detection (src/resilience/detect.h): the round-trip estimator against values worked
// out by hand, and the confirmation of a suspicion (a probe of the suspect path and one of another
// path to the same peer) driven by a fake clock: a path that answers refutes, a path silent while
// the other answers fails over after its windows, a peer silent on every path never does.
#include <gtest/gtest.h>

#include "unit_util.h"

extern "C" {
#include "resilience/detect.h"
}

namespace {

// ---------------------------------------------------------------- estimator

TEST(DetectRtt, GainsAreRfc6298s) {
  mendRtt e = {};
  mendRttSample(&e, 1000, 8);  // first: srtt = R, rttvar = R/2 (8 bytes: latency only)
  EXPECT_EQ(e.srttUs, 1000);
  EXPECT_EQ(e.rttvarUs, 500);
  mendRttSample(&e, 2000, 8);  // rttvar = (3*500 + |1000-2000|)/4 = 625; srtt = (7*1000 + 2000)/8 = 1125
  EXPECT_EQ(e.rttvarUs, 625);
  EXPECT_EQ(e.srttUs, 1125);
  mendRttSample(&e, 1125, 8);  // rttvar = (3*625 + 0)/4 = 468; srtt stays 1125
  EXPECT_EQ(e.rttvarUs, 468);
  EXPECT_EQ(e.srttUs, 1125);
  EXPECT_EQ(e.bytesPerUs, 0.0) << "messages under 16 KiB measure no rate";
  mendRttSample(&e, -5, 8);
  EXPECT_EQ(e.nSamples, 3) << "a negative wait is no sample";
}

TEST(DetectRtt, SuspicionNeedsSamplesAndRespectsFloorBackoffAndCap) {
  mendRtt e = {};
  for (int64_t w : {1000, 2000, 1125}) mendRttSample(&e, w, 8);
  EXPECT_EQ(mendRttSuspectUs(&e, 8, 1000, 500000, 0), 500000) << "3 samples: no estimate, the cap";
  mendRttSample(&e, 1125, 8);  // rttvar = (3*468)/4 = 351, srtt 1125
  ASSERT_EQ(e.rttvarUs, 351);
  EXPECT_EQ(mendRttSuspectUs(&e, 8, 1000, 500000, 0), 1125 + 4 * 351);
  EXPECT_EQ(mendRttSuspectUs(&e, 8, 20000, 500000, 0), 20000) << "floor";
  EXPECT_EQ(mendRttSuspectUs(&e, 8, 1000, 500000, 1), 5058) << "one refuted suspicion doubles it";
  EXPECT_EQ(mendRttSuspectUs(&e, 8, 1000, 500000, 3), 20232);
  EXPECT_EQ(mendRttSuspectUs(&e, 8, 1000, 10000, 3), 10000) << "never above the cap";
  EXPECT_EQ(mendRttSuspectUs(&e, 1 << 20, 1000, 500000, 0), 500000) << "bytes in flight and no rate known: the cap";
}

TEST(DetectRtt, RateTakesTheTransmitTimeOutOfTheLatency) {
  mendRtt e = {};
  for (int i = 0; i < 4; i++) mendRttSample(&e, 10000, 1000000);  // 1 MB in 10 ms: 100 B/us, no latency left
  EXPECT_DOUBLE_EQ(e.bytesPerUs, 100.0);
  EXPECT_EQ(e.srttUs, 0);
  EXPECT_EQ(e.rttvarUs, 0);
  // 2 MB in flight at 100 B/us: 20 ms to drain.
  EXPECT_EQ(mendRttSuspectUs(&e, 2000000, 5000, 500000, 0), 20000);
  EXPECT_EQ(mendRttSuspectUs(&e, 2000000, 30000, 500000, 0), 30000);
  // A small message waits 400 us: latency 400 (8 B at 100 B/us is 0 us): rttvar (0+400)/4 = 100, srtt 400/8 = 50.
  mendRttSample(&e, 400, 8);
  EXPECT_EQ(e.rttvarUs, 100);
  EXPECT_EQ(e.srttUs, 50);
  EXPECT_DOUBLE_EQ(e.bytesPerUs, 100.0);
  EXPECT_EQ(mendRttSuspectUs(&e, 1000000, 1000, 500000, 0), 50 + 4 * 100 + 10000);
  // A slower large wait: rate sample 1e6/12500 = 80 B/us, smoothed 100 + (80-100)/8 = 97.5;
  // latency 12500 - floor(1e6/97.5 = 10256.4) = 2244: rttvar (3*100 + 2194)/4 = 623, srtt (7*50 + 2244)/8 = 324.
  mendRttSample(&e, 12500, 1000000);
  EXPECT_DOUBLE_EQ(e.bytesPerUs, 97.5);
  EXPECT_EQ(e.rttvarUs, 623);
  EXPECT_EQ(e.srttUs, 324);
}

TEST(DetectRtt, HeldAcknowledgementIsNotCountedAsRoundTrip) {
  EXPECT_EQ(mendRttAckWaitUs(5000, 1000, 0), 4000) << "acknowledged at once";
  EXPECT_EQ(mendRttAckWaitUs(5000, 1000, 900), 3100) << "held 900 us by the receiver";
  EXPECT_EQ(mendRttAckWaitUs(5000, 1000, 4000), 0);
  EXPECT_EQ(mendRttAckWaitUs(5000, 1000, 4001), -1) << "a hold longer than the wait is not believed";
  EXPECT_EQ(mendRttAckWaitUs(5000, 1000, UINT32_MAX), -1);
  EXPECT_EQ(mendRttAckWaitUs(5000, 0, 0), -1) << "no start";
  EXPECT_EQ(mendRttAckWaitUs(500, 1000, 0), -1) << "clock before the start";
}

// ---------------------------------------------------------------- confirmation, fake clock

mendConfirmCfg Cfg() {
  mendConfirmCfg c = {};
  c.windowMinUs = 15000, c.windowMult = 8, c.attempts = 2, c.timeoutUs = 300000;
  return c;
}

TEST(DetectConfirm, SuspectThatAnswersRefutes) {
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 1000000);
  EXPECT_EQ(mendConfirmDecide(&c, 1000100, &cfg), MEND_CONFIRM_WAIT);
  mendConfirmResult(&c, 1, 1, 1000300);
  EXPECT_EQ(c.refUs, 300);
  EXPECT_EQ(mendConfirmDecide(&c, 1000400, &cfg), MEND_CONFIRM_WAIT);
  mendConfirmResult(&c, 0, 1, 1000500);
  EXPECT_EQ(mendConfirmDecide(&c, 1000500, &cfg), MEND_CONFIRM_REFUTED);
}

TEST(DetectConfirm, StoppedPeerAnswersOnEveryPath) {
  // A SIGSTOPped peer's kernel completes both handshakes, in any order: never a failover.
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 0, 1, 200);
  EXPECT_EQ(mendConfirmDecide(&c, 200, &cfg), MEND_CONFIRM_REFUTED) << "the reference need not answer first";
}

TEST(DetectConfirm, BlackHoleFailsAfterEveryWindow) {
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 1, 1, 400);  // reference answers in 0.4 ms: window max(15 ms, 8 x 0.4 ms) = 15 ms
  EXPECT_EQ(mendConfirmDecide(&c, 10000, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 14999, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 15000, &cfg), MEND_CONFIRM_RETRY);
  mendConfirmRetry(&c, 15000);
  EXPECT_EQ(c.attempt, 2);
  EXPECT_EQ(mendConfirmDecide(&c, 29999, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 30000, &cfg), MEND_CONFIRM_PATH);
}

TEST(DetectConfirm, LateAnswerOfTheFirstProbeStillRefutes) {
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 1, 1, 400);
  ASSERT_EQ(mendConfirmDecide(&c, 15000, &cfg), MEND_CONFIRM_RETRY);
  mendConfirmRetry(&c, 15000);
  mendConfirmResult(&c, 0, 1, 21000);  // the first SYN was only queued behind data
  EXPECT_EQ(mendConfirmDecide(&c, 40000, &cfg), MEND_CONFIRM_REFUTED);
}

TEST(DetectConfirm, WindowScalesWithTheReferenceAndIsBounded) {
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 1, 1, 5000);  // a loaded host: 5 ms connects, window 40 ms
  EXPECT_EQ(mendConfirmDecide(&c, 39999, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 40000, &cfg), MEND_CONFIRM_RETRY);
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 1, 1, 100000);  // 8 x 100 ms is above the probe timeout: 300 ms
  EXPECT_EQ(mendConfirmDecide(&c, 299999, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 300000, &cfg), MEND_CONFIRM_RETRY);
}

TEST(DetectConfirm, PeerSilentOnEveryPathIsNotAPathFault) {
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 0);
  EXPECT_EQ(mendConfirmDecide(&c, 100000, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 299999, &cfg), MEND_CONFIRM_WAIT);
  EXPECT_EQ(mendConfirmDecide(&c, 300000, &cfg), MEND_CONFIRM_PEER);
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 0, 0, 100);
  EXPECT_EQ(mendConfirmDecide(&c, 100, &cfg), MEND_CONFIRM_WAIT) << "the reference has not answered yet";
  mendConfirmResult(&c, 1, 0, 200);
  EXPECT_EQ(mendConfirmDecide(&c, 200, &cfg), MEND_CONFIRM_PEER) << "both failed outright";
}

TEST(DetectConfirm, SuspectErrorsNeedTheReferenceAndEveryAttempt) {
  mendConfirmCfg cfg = Cfg();
  mendConfirm c;
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 0, 0, 50);  // our NIC cannot reach it (connect error)
  mendConfirmResult(&c, 1, 1, 300);
  EXPECT_EQ(mendConfirmDecide(&c, 300, &cfg), MEND_CONFIRM_RETRY) << "no window to wait for a failed probe";
  mendConfirmRetry(&c, 300);
  EXPECT_EQ(mendConfirmDecide(&c, 400, &cfg), MEND_CONFIRM_WAIT) << "the second probe is running";
  mendConfirmResult(&c, 0, 0, 500);
  EXPECT_EQ(mendConfirmDecide(&c, 500, &cfg), MEND_CONFIRM_PATH);
  mendConfirmResult(&c, 1, 0, 600);
  EXPECT_EQ(c.ref, 1) << "a reference's first answer stands";
}

TEST(DetectConfirm, OneAttemptAndConfigFromParameters) {
  mendtest::setEnv("MEND_PROBE_WINDOW", "7");
  mendtest::setEnv("MEND_PROBE_ATTEMPTS", "0");
  mendtest::setEnv("MEND_PROBE_TIMEOUT", "120");
  mendConfirmCfg cfg = mendConfirmConfig();
  mendtest::setEnv("MEND_PROBE_WINDOW", nullptr);
  mendtest::setEnv("MEND_PROBE_ATTEMPTS", nullptr);
  mendtest::setEnv("MEND_PROBE_TIMEOUT", nullptr);
  EXPECT_EQ(cfg.windowMinUs, 7000);
  EXPECT_EQ(cfg.attempts, 1) << "at least one probe";
  EXPECT_EQ(cfg.timeoutUs, 120000);
  EXPECT_EQ(cfg.windowMult, 4);
  mendConfirm c;
  mendConfirmStart(&c, 0);
  mendConfirmResult(&c, 1, 1, 100);
  EXPECT_EQ(mendConfirmDecide(&c, 7000, &cfg), MEND_CONFIRM_PATH);
  EXPECT_STREQ(mendConfirmName(MEND_CONFIRM_PATH), "path");
  EXPECT_STREQ(mendConfirmName(MEND_CONFIRM_PEER), "peer");
  EXPECT_STREQ(mendConfirmName(MEND_CONFIRM_REFUTED), "refuted");
}

}  // namespace
