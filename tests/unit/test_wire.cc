// The checks every byte read from the network goes through first (bootstrap_wire.c,
// transport/net_socket_wire.c, resilience/resil_wire.c, and mendHealthApply): each test sends what
// a stranger, a corrupt peer or a fuzz target (tests/fuzz/) would, and asserts the refusal.  The
// Regress* tests replay what the fuzz targets found (inputs in tests/fuzz/regress/).
#include <gtest/gtest.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

// C11 headers with _Atomic fields and atomic inline functions, read as mend_internal.h does.
#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_acquire __ATOMIC_ACQUIRE
#define memory_order_relaxed __ATOMIC_RELAXED
extern "C" {
#include "bootstrap_wire.h"
#include "resilience/health.h"
#include "resilience/resil_wire.h"
#include "transport/net_socket_wire.h"
}
#undef atomic_load_explicit
#undef memory_order_acquire
#undef memory_order_relaxed
#undef _Atomic

namespace {

const uint8_t kNonce[MEND_BS_NONCE_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

mendBsId TestId() {
  mendBsId id;
  memset(&id, 0, sizeof(id));
  id.magic = 0x1234;
  memcpy(id.secret, "0123456789abcdef", MEND_MAC_KEY_BYTES);
  return id;
}

mendBsRootHello Hello(const mendBsId& id, int kind, int rank, int nRanks, int nIds, int idIdx, int count) {
  mendBsRootHello h;
  memset(&h, 0, sizeof(h));
  h.magic = id.magic, h.kind = kind, h.rank = rank, h.nRanks = nRanks, h.nIds = nIds, h.idIdx = idIdx;
  h.count = count;
  h.mac = mendBsHelloMac(id.secret, kNonce, &h);
  return h;
}

TEST(WireBootstrap, RootHelloNeedsMagicAndProof) {
  mendBsId id = TestId();
  mendBsRootHello h = Hello(id, MEND_BS_ROOT_HELLO, 1, 4, 1, 0, 0), out;
  EXPECT_EQ(mendBsRootHelloParse(&h, sizeof(h), &id, kNonce, &out), MEND_BS_ROOT_OK);
  EXPECT_EQ(out.rank, 1);
  EXPECT_EQ(mendBsRootHelloParse(&h, sizeof(h) - 1, &id, kNonce, &out), MEND_BS_ROOT_ERR_MAGIC) << "short buffer";
  EXPECT_EQ(mendBsRootHelloParse(nullptr, sizeof(h), &id, kNonce, &out), MEND_BS_ROOT_ERR_MAGIC);
  mendBsRootHello forged = h;
  forged.rank = 3;  // changed after signing: the MAC no longer covers it
  EXPECT_EQ(mendBsRootHelloParse(&forged, sizeof(forged), &id, kNonce, &out), MEND_BS_ROOT_ERR_AUTH);
  mendBsRootHello other = h;
  other.magic = 99;
  EXPECT_EQ(mendBsRootHelloParse(&other, sizeof(other), &id, kNonce, &out), MEND_BS_ROOT_ERR_MAGIC);
  uint8_t otherNonce[MEND_BS_NONCE_BYTES] = {0};
  EXPECT_EQ(mendBsRootHelloParse(&h, sizeof(h), &id, otherNonce, &out), MEND_BS_ROOT_ERR_AUTH) << "a replayed hello";
}

TEST(WireBootstrap, RootHelloMustFitTheRendezvous) {
  mendBsId id = TestId();
  mendBsRootView none = {-1, 0, 0}, four = {4, 1, 0}, scal = {8, 2, 1};
  int detail = -7;
  mendBsRootHello h = Hello(id, MEND_BS_ROOT_HELLO, 3, 4, 1, 0, 0);
  EXPECT_EQ(mendBsRootHelloFits(&h, &none, &detail), MEND_BS_ROOT_OK);
  EXPECT_EQ(mendBsRootHelloFits(&h, &four, &detail), MEND_BS_ROOT_OK);
  h.nRanks = 5;
  EXPECT_EQ(mendBsRootHelloFits(&h, &four, &detail), MEND_BS_ROOT_ERR_NRANKS);
  EXPECT_EQ(detail, 4) << "the refusal names the rendezvous' size";
  const mendBsRootHello bad[] = {
      Hello(id, MEND_BS_ROOT_HELLO, 4, 4, 1, 0, 0),           // rank out of range
      Hello(id, MEND_BS_ROOT_HELLO, -1, 4, 1, 0, 0),          // negative rank
      Hello(id, MEND_BS_ROOT_HELLO, 0, 0, 1, 0, 0),           // no ranks
      Hello(id, MEND_BS_ROOT_HELLO, 0, 4, 5, 0, 5),           // more roots than ranks
      Hello(id, MEND_BS_ROOT_HELLO, 0, 8, 2, 1, 2),           // rank 0 reports to root 0, not 1
      Hello(id, MEND_BS_ROOT_HELLO, 0, 4, 1, 0, 0x7fffffff),  // ids it does not have
      Hello(id, 77, 0, 4, 1, 0, 0),                           // unknown kind
  };
  for (const auto& b : bad) EXPECT_EQ(mendBsRootHelloFits(&b, &none, &detail), MEND_BS_ROOT_ERR_RANK) << b.rank;
  mendBsRootHello s = Hello(id, MEND_BS_ROOT_HELLO, 5, 8, 2, 1, 2);
  EXPECT_EQ(mendBsRootHelloFits(&s, &scal, &detail), MEND_BS_ROOT_OK);
  // A TABLE from root 0 of 2 (ranks 0-3) to root 1: exactly its group's entries.
  mendBsRootHello t = Hello(id, MEND_BS_ROOT_TABLE, 0, 8, 2, 1, 4);
  EXPECT_EQ(mendBsRootHelloFits(&t, &scal, &detail), MEND_BS_ROOT_OK);
  t.count = 0x7fffffff;  // the stall of issue 12: 2^31-1 entries announced
  EXPECT_EQ(mendBsRootHelloFits(&t, &scal, &detail), MEND_BS_ROOT_ERR_RANK);
  t = Hello(id, MEND_BS_ROOT_TABLE, 1, 8, 2, 1, 4);  // from ourselves
  EXPECT_EQ(mendBsRootHelloFits(&t, &scal, &detail), MEND_BS_ROOT_ERR_RANK);
  t = Hello(id, MEND_BS_ROOT_TABLE, 0, 8, 2, 7, 4);  // to a root that does not exist
  EXPECT_EQ(mendBsRootHelloFits(&t, &none, &detail), MEND_BS_ROOT_ERR_RANK);
}

TEST(WireBootstrap, TableEntriesBelongToTheSendersGroup) {
  mendBsRootView v = {8, 2, 1};
  mendBsRootEntry e, out;
  memset(&e, 0, sizeof(e));
  e.rank = 3;
  EXPECT_EQ(mendBsRootEntryParse(&e, sizeof(e), &v, 0, &out), 1);
  e.rank = 4;
  EXPECT_EQ(mendBsRootEntryParse(&e, sizeof(e), &v, 0, &out), 0) << "rank 4 is root 1's";
  e.rank = 8;
  EXPECT_EQ(mendBsRootEntryParse(&e, sizeof(e), &v, 1, &out), 0);
  e.rank = -1;
  EXPECT_EQ(mendBsRootEntryParse(&e, sizeof(e), &v, 0, &out), 0);
  mendBsRootView none = {-1, 0, 0};
  e.rank = 0;
  EXPECT_EQ(mendBsRootEntryParse(&e, sizeof(e), &none, 0, &out), 0) << "no rendezvous yet";
}

TEST(WireBootstrap, ReplyStatusAndSize) {
  union mendSocketAddr root;
  memset(&root, 0, sizeof(root));
  mendBsRootReply r, out;
  memset(&r, 0, sizeof(r));
  r.status = MEND_BS_ROOT_OK, r.nRanks = 4;
  EXPECT_EQ(mendBsRootReplyParse(&r, sizeof(r), 0, 4, &root, &out), ncclSuccess);
  EXPECT_EQ(mendBsRootReplyParse(&r, sizeof(r), 0, 8, &root, &out), ncclInternalError) << "a table of another size";
  EXPECT_EQ(mendBsRootReplyParse(&r, 3, 0, 4, &root, &out), ncclInternalError);
  r.status = MEND_BS_ROOT_ERR_TIMEOUT;
  EXPECT_EQ(mendBsRootReplyParse(&r, sizeof(r), 0, 4, &root, &out), ncclRemoteError);
  r.status = MEND_BS_ROOT_ERR_AUTH;
  EXPECT_EQ(mendBsRootReplyParse(&r, sizeof(r), 0, 4, &root, &out), ncclInvalidUsage);
  r.status = -5;
  EXPECT_EQ(mendBsRootReplyParse(&r, sizeof(r), 0, 4, &root, &out), ncclInvalidUsage) << "unknown status";
}

TEST(WireBootstrap, PeerHandshakeAndHeaders) {
  const uint8_t key[MEND_MAC_KEY_BYTES] = "network-key-123";
  mendBsHandshake hs = {0x55 ^ MEND_BS_HANDSHAKE_MAGIC, 3, 4, 0};
  hs.mac = mendBsHandshakeMac(key, kNonce, &hs);
  EXPECT_EQ(mendBsHandshakeParse(&hs, sizeof(hs), 0, 0x55, key, 4, kNonce), 3);
  EXPECT_EQ(mendBsHandshakeParse(&hs, sizeof(hs), 0, 0x56, key, 4, kNonce), -1) << "another network";
  EXPECT_EQ(mendBsHandshakeParse(&hs, sizeof(hs), 0, 0x55, key, 8, kNonce), -1) << "another size";
  EXPECT_EQ(mendBsHandshakeParse(&hs, sizeof(hs) + 1, 0, 0x55, key, 4, kNonce), -1);
  mendBsHandshake big = hs;
  big.rank = 4;
  big.mac = mendBsHandshakeMac(key, kNonce, &big);
  EXPECT_EQ(mendBsHandshakeParse(&big, sizeof(big), 0, 0x55, key, 4, kNonce), -1) << "rank out of range";
  hs.mac ^= 1;
  EXPECT_EQ(mendBsHandshakeParse(&hs, sizeof(hs), 0, 0x55, key, 4, kNonce), -1) << "no proof of the key";

  mendBsHeader h = {MEND_BS_DATA, 5, 100}, out;
  EXPECT_EQ(mendBsHeaderParse(&h, sizeof(h), 100, &out), MEND_BS_DATA);
  h.size = 101;
  EXPECT_EQ(mendBsHeaderParse(&h, sizeof(h), 100, &out), 0) << "more than a message may carry";
  h.type = MEND_BS_BYE;
  EXPECT_EQ(mendBsHeaderParse(&h, sizeof(h), 100, &out), MEND_BS_BYE);
  h.type = 9;
  EXPECT_EQ(mendBsHeaderParse(&h, sizeof(h), 100, &out), 0);
  uint8_t nonce[MEND_BS_NONCE_BYTES];
  mendBsChallenge c;
  memset(&c, 0, sizeof(c));
  EXPECT_EQ(mendBsChallengeParse(&c, sizeof(c), nonce), 0) << "not a Mend listener";
  c.magic = MEND_BS_CHALLENGE_MAGIC;
  EXPECT_EQ(mendBsChallengeParse(&c, sizeof(c), nonce), 1);
}

TEST(WireNetSocket, HellosAndTheirGrouping) {
  mendSocketHello h, out;
  memset(&h, 0, sizeof(h));
  h.magic = MEND_SOCKET_HELLO_MAGIC, h.index = 2, h.nsocks = 2, h.listenToken = 7, h.chunkSize = 4096;
  EXPECT_EQ(mendSocketHelloParse(&h, sizeof(h), 7, &out), 1);
  EXPECT_EQ(mendSocketHelloParse(&h, sizeof(h), 8, &out), 0) << "another listen comm";
  mendSocketHello b = h;
  b.index = 3;
  EXPECT_EQ(mendSocketHelloParse(&b, sizeof(b), 7, &out), 0) << "index past its sockets";
  b = h, b.nsocks = MEND_SOCKET_MAX_SOCKS + 1;
  EXPECT_EQ(mendSocketHelloParse(&b, sizeof(b), 7, &out), 0);
  b = h, b.chunkSize = 0;
  EXPECT_EQ(mendSocketHelloParse(&b, sizeof(b), 7, &out), 0);
  int byIndex[3] = {-1, -1, -1};
  EXPECT_EQ(mendSocketHelloPlace(&h, 2, byIndex, 5), 1);
  EXPECT_EQ(byIndex[2], 5);
  EXPECT_EQ(mendSocketHelloPlace(&h, 2, byIndex, 6), 0) << "the same index twice";
  b = h, b.nsocks = 1, b.index = 1;
  EXPECT_EQ(mendSocketHelloPlace(&b, 2, byIndex, 7), 0) << "another socket count";
}

TEST(WireNetSocket, HandlesAndHeaders) {
  uint8_t raw[MEND_NET_HANDLE_MAXSIZE];
  memset(raw, 0, sizeof(raw));
  mendSocketHandle h, out;
  memset(&h, 0, sizeof(h));
  h.magic = MEND_SOCKET_HELLO_MAGIC;
  h.addr.sin.sin_family = AF_INET;
  memcpy(raw + 1, &h, sizeof(h));  // at any alignment, as NCCL keeps handles
  EXPECT_EQ(mendSocketHandleParse(raw + 1, sizeof(raw) - 1, &out), 1);
  h.addr.sa.sa_family = AF_UNIX;
  memcpy(raw + 1, &h, sizeof(h));
  EXPECT_EQ(mendSocketHandleParse(raw + 1, sizeof(raw) - 1, &out), 0);
  EXPECT_EQ(mendSocketHandleParse(raw, 8, &out), 0);

  char cause[160];
  mendSocketMsgHdr m = {MEND_SOCKET_MSG_MAGIC, 4, 100}, mo;
  EXPECT_EQ(mendSocketMsgHdrParse(&m, sizeof(m), 4, 100, &mo, cause, sizeof(cause)), 1);
  EXPECT_EQ(mendSocketMsgHdrParse(&m, sizeof(m), 4, 99, &mo, cause, sizeof(cause)), 0);
  EXPECT_NE(strstr(cause, "truncated"), nullptr) << cause;
  EXPECT_EQ(mendSocketMsgHdrParse(&m, sizeof(m), 5, 100, &mo, cause, sizeof(cause)), 0);
  EXPECT_NE(strstr(cause, "expected seq 5"), nullptr) << cause;
}

resilMsg Msg(uint32_t type) {
  resilMsg m;
  memset(&m, 0, sizeof(m));
  m.magic = RESIL_MSG_MAGIC, m.type = type;
  return m;
}

TEST(WireResil, MessagesAndNotices) {
  resilMsg m = Msg(RESIL_MSG_ACK), out;
  EXPECT_EQ(mendResilMsgParse(&m, sizeof(m), 0, 1, &out), 1);
  EXPECT_EQ(mendResilMsgParse(&m, sizeof(m) - 4, 0, 1, &out), 0);
  m.magic ^= 1;
  EXPECT_EQ(mendResilMsgParse(&m, sizeof(m), 0, 1, &out), 0);
  m = Msg(RESIL_MSG_LOC_REQ);
  m.u.loc.n = 3;
  EXPECT_EQ(mendResilMsgParse(&m, sizeof(m), 0, 1, &out), 0) << "three targets";
  m = Msg(RESIL_MSG_LOC_RESP);
  m.u.loc.n = 1, m.u.loc.ok[0] = 7;
  EXPECT_EQ(mendResilMsgParse(&m, sizeof(m), 0, 1, &out), 0) << "an answer that is not -1, 0 or 1";

  rnetNotice n, no;
  memset(&n, 0, sizeof(n));
  n.magic = RNET_MAGIC, n.type = RNET_NOTE_KILL, n.remote = 0, n.cause = 3;
  EXPECT_EQ(mendRnetNoticeParse(&n, sizeof(n), &no), 1);
  EXPECT_EQ(no.remote, 1u) << "a notice from the other end is remote, whatever it says";
  n.type = RNET_NOTE_REBUILD_START;
  EXPECT_EQ(mendRnetNoticeParse(&n, sizeof(n), &no), 0) << "a local detector's notice from the network";
  n.type = 0;
  EXPECT_EQ(mendRnetNoticeParse(&n, sizeof(n), &no), 0);
}

// tests/fuzz/regress/fuzz_resil/health-verdict-unterminated: a health update whose verdict fills its
// 48 bytes without a NUL; the service's log line printed it with %s, reading past the message.
TEST(WireResil, RegressHealthVerdictIsTerminated) {
  resilMsg m = Msg(RESIL_MSG_HEALTH), out;
  memset(m.u.health.verdict, 'x', sizeof(m.u.health.verdict));
  memset(&m.u.health + 1, 'y', sizeof(m.u) - sizeof(m.u.health));
  ASSERT_EQ(mendResilMsgParse(&m, sizeof(m), 0, 1, &out), 1);
  EXPECT_EQ(strlen(out.u.health.verdict), sizeof(out.u.health.verdict) - 1);
}

// tests/fuzz/regress/fuzz_health/state-out-of-range: an update with state 256 was applied, leaving a
// NIC in no known state; NaN, infinite or negative bandwidths were applied too.
TEST(WireHealth, RegressMalformedUpdatesChangeNothing) {
  mendHealth h = {};
  ASSERT_EQ(mendHealthInit(&h, 2, 2, nullptr), ncclSuccess);
  mendHealthUpdate u = {};
  u.rank = 1, u.dev = 1, u.state = 256, u.epoch = 5, u.reporter = 0;
  EXPECT_EQ(mendHealthApply(&h, &u), 0);
  u.state = -1;
  EXPECT_EQ(mendHealthApply(&h, &u), 0);
  u.state = MEND_NIC_DEGRADED;
  const float bad[] = {NAN, INFINITY, -1.0f};
  for (float g : bad) {
    u.gbps = g;
    EXPECT_EQ(mendHealthApply(&h, &u), 0) << g;
  }
  EXPECT_EQ(mendHealthEpoch(&h), 0u) << "nothing was applied";
  EXPECT_EQ(mendHealthState(&h, 1, 1), MEND_NIC_UP);
  u.gbps = 25.0f;
  EXPECT_EQ(mendHealthApply(&h, &u), 1) << "the same update, well formed";
  EXPECT_EQ(mendHealthState(&h, 1, 1), MEND_NIC_DEGRADED);
  mendHealthFree(&h);
}

}  // namespace
