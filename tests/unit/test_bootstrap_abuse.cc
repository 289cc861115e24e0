// The bootstrap and the socket Net against a hostile network and careless users (issue 12): two jobs
// on one NCCL_COMM_ID, strangers at the root and at a rank's listener, silent connections, lengths no
// rendezvous allows, a flood of unreceived messages, accept at the descriptor limit, half-open and
// silent socket Net connections.  Each test states the outcome and its time bound; the peer and root
// attackers speak the wire format of docs/bootstrap.md by hand.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "bootstrap_util.h"
#include "mend_internal.h"
#include "net_socket_fixture.h"
#include "unit_util.h"

namespace {

using mendtest::checkAllGather;
using mendtest::closeComm;
using mendtest::closeRanks;
using mendtest::EnvSnapshot;
using mendtest::freePort;
using mendtest::initRanks;
using mendtest::newComm;
using mendtest::nowMs;
using mendtest::runRanks;
using mendtest::setEnv;

// ---------------------------------------------------------------- helpers

mendBsId idOf(const ncclUniqueId& uid) {
  mendBsId id;
  memcpy(&id, uid.internal, sizeof(id));
  return id;
}

int rawConnect(const union mendSocketAddr& a) {
  int fd = -1;
  return mendSocketConnect(&a, &fd, nullptr, 2000) == ncclSuccess ? fd : -1;
}

bool readChallenge(int fd, uint8_t nonce[MEND_BS_NONCE_BYTES]) {
  mendBsChallenge c;
  if (mendSocketRecvAll(fd, &c, sizeof(c), nullptr, 2000) != ncclSuccess) return false;
  memcpy(nonce, c.nonce, MEND_BS_NONCE_BYTES);
  return c.magic == MEND_BS_CHALLENGE_MAGIC;
}

// Read until the peer closes or timeoutMs passes; returns the bytes read, *eofMs when it closed (else -1).
std::vector<char> readToEof(int fd, double timeoutMs, double* eofMs = nullptr) {
  std::vector<char> got;
  double t0 = nowMs();
  if (eofMs) *eofMs = -1;
  while (nowMs() - t0 < timeoutMs) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) { got.insert(got.end(), buf, buf + n); continue; }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (eofMs) *eofMs = nowMs() - t0;
    break;
  }
  return got;
}

// A root hello as a rank (or root) would send it, with a MAC over `nonce` by `secret`.
mendBsRootHello rootHello(const mendBsId& id, int kind, int rank, int nRanks, int nIds, int count,
                          const uint8_t* secret, const uint8_t* nonce) {
  mendBsRootHello h;
  memset(&h, 0, sizeof(h));
  h.magic = id.magic;
  h.kind = kind;
  h.rank = rank;
  h.nRanks = nRanks;
  h.nIds = nIds;
  h.idIdx = 0;
  h.count = count;
  h.mac = mendBsHelloMac(secret, nonce, &h);
  return h;
}

// Connect to a rank's listener as `rank`, proving `key` (the real one, or a guess).
int peerConnect(mendBootstrap* bs, int rank, const uint8_t* key) {
  int fd = rawConnect(bs->listenAddr);
  uint8_t nonce[MEND_BS_NONCE_BYTES];
  if (fd < 0 || !readChallenge(fd, nonce)) return -1;
  mendBsHandshake hs = {bs->magic ^ MEND_BS_HANDSHAKE_MAGIC, rank, bs->nRanks, 0};
  hs.mac = mendBsHandshakeMac(key, nonce, &hs);
  return mendSocketSendAll(fd, &hs, sizeof(hs), nullptr, 1000) == ncclSuccess ? fd : -1;
}

long vszKb() {
  long pages = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld", &pages) != 1) pages = 0;
  if (f) fclose(f);
  return pages * (sysconf(_SC_PAGESIZE) / 1024);
}

double cpuMs() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

const char* const kAbuseVars[] = {"NCCL_COMM_ID", "MEND_JOB_SECRET", "MEND_BOOTSTRAP_TIMEOUT",
                                  "MEND_BOOTSTRAP_HELLO_TIMEOUT", "MEND_BOOTSTRAP_MAX_BUFFERED", "MEND_OOB_IFNAME",
                                  "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                                  "TORCHELASTIC_RUN_ID"};

class BootstrapAbuse : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.SaveAndUnset(kAbuseVars);
    setEnv("MEND_OOB_IFNAME", "lo");  // loopback only
    alarm(120);                        // SIGALRM ends the run: a hang is a failure
  }
  void TearDown() override {
    alarm(0);
    env_.Restore();
    mendParamResetCache();
  }
  EnvSnapshot env_;
};

// ---------------------------------------------------------------- the MAC

TEST(BootstrapMac, SipHashVectors) {
  uint8_t key[16], msg[64];
  for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
  EXPECT_EQ(mendMac(key, msg, 0), 0x726fdb47dd0e0e31ULL);  // the paper's vectors
  EXPECT_EQ(mendMac(key, msg, 15), 0xa129ca6149be45e5ULL);
  for (size_t len : {1, 7, 8, 9, 63}) {  // incremental in any pieces == one shot
    struct mendMac m;
    mendMacInit(&m, key);
    for (size_t i = 0; i < len; i += 3) mendMacUpdate(&m, msg + i, len - i < 3 ? len - i : 3);
    EXPECT_EQ(mendMacFinal(&m), mendMac(key, msg, len)) << len;
  }
  uint8_t a[16], b[16];
  mendMacDeriveKey(nullptr, "job-A", 5, a);
  mendMacDeriveKey(nullptr, "job-B", 5, b);
  EXPECT_NE(memcmp(a, b, 16), 0);
}

// ---------------------------------------------------------------- item 1: job identity

// Two jobs on one NCCL_COMM_ID with different MEND_JOB_SECRET: the second job's ranks fail at once
// with a clear error (its rank 0 cannot start a second root, its rank 2 is refused by the first job's
// root), and the first job, whose own rank 2 comes late, finishes correctly.  Before: job B's rank 2
// took job A's place and A's rank 2 failed after MEND_BOOTSTRAP_TIMEOUT.
TEST_F(BootstrapAbuse, TwoJobsOnOneCommId) {
  int port = freePort("127.0.0.1");
  ASSERT_GT(port, 0);
  setEnv("NCCL_COMM_ID", ("127.0.0.1:" + std::to_string(port)).c_str());
  setEnv("MEND_BOOTSTRAP_TIMEOUT", "10000");
  ncclUniqueId a, b;
  setEnv("MEND_JOB_SECRET", "job-A");
  ASSERT_EQ(mendBootstrapGetUniqueId(&a), ncclSuccess);
  setEnv("MEND_JOB_SECRET", "job-B");
  ASSERT_EQ(mendBootstrapGetUniqueId(&b), ncclSuccess);
  EXPECT_EQ(idOf(a).magic, idOf(b).magic) << "one address, one root";
  EXPECT_NE(memcmp(idOf(a).secret, idOf(b).secret, 16), 0);
  const int n = 3;
  std::vector<ncclComm*> jobA(n);
  ncclResult_t resB[2];
  double tB[2];
  runRanks(n + 2, [&](int i) {
    if (i >= n) {  // job B: rank 0 at +150 ms, rank 2 at +100 ms
      int rank = i == n ? 2 : 0;
      usleep(rank == 2 ? 100000 : 150000);
      ncclComm* c = newComm(rank, n);
      double t0 = nowMs();
      resB[i - n] = mendBootstrapInit(c, 1, &b);
      tB[i - n] = nowMs() - t0;
      closeComm(c, true);
      return;
    }
    if (i == 2) usleep(600 * 1000);  // job A's rank 2 comes after job B tried
    jobA[i] = newComm(i, n);
    ASSERT_EQ(mendBootstrapInit(jobA[i], 1, &a), ncclSuccess) << "job A rank " << i;
    checkAllGather(jobA[i]);
  });
  EXPECT_EQ(resB[0], ncclInvalidUsage) << "job B's rank 2 must be refused by job A's root";
  EXPECT_LT(tB[0], 1000.0);
  EXPECT_EQ(resB[1], ncclSystemError) << "job B's rank 0 cannot start a second root on the address";
  EXPECT_LT(tB[1], 1000.0);
  closeRanks(jobA);
}

// A stranger who knows the root's address and magic but not the secret gets a refusal and nothing
// about the job (before: every rank's listen address once the rendezvous completed).
TEST_F(BootstrapAbuse, StrangerAtTheRootLearnsNothing) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  mendBsId id = idOf(uid);
  std::vector<ncclComm*> comms(2);
  std::thread rank0([&] {
    comms[0] = newComm(0, 2);
    ASSERT_EQ(mendBootstrapInit(comms[0], 1, &uid), ncclSuccess);
  });
  usleep(100 * 1000);
  int fd = rawConnect(id.addr);
  ASSERT_GE(fd, 0);
  uint8_t nonce[MEND_BS_NONCE_BYTES], guess[16] = {1, 2, 3};
  ASSERT_TRUE(readChallenge(fd, nonce));
  mendBsRootHello h = rootHello(id, MEND_BS_ROOT_HELLO, 1, 2, 1, 0, guess, nonce);
  ASSERT_EQ(mendSocketSendAll(fd, &h, sizeof(h), nullptr, 1000), ncclSuccess);
  double eofMs;
  std::vector<char> got = readToEof(fd, 2000, &eofMs);
  close(fd);
  ASSERT_EQ(got.size(), sizeof(mendBsRootReply)) << "a status and nothing else";
  mendBsRootReply rep;
  memcpy(&rep, got.data(), sizeof(rep));
  EXPECT_EQ(rep.status, MEND_BS_ROOT_ERR_AUTH);
  EXPECT_EQ(rep.nRanks, 0);
  EXPECT_GE(eofMs, 0.0) << "the root hangs up";
  comms[1] = newComm(1, 2);  // the real rank 1 still gets its place
  ASSERT_EQ(mendBootstrapInit(comms[1], 1, &uid), ncclSuccess);
  rank0.join();
  runRanks(2, [&](int r) { checkAllGather(comms[r]); });
  closeRanks(comms);
}

// At a rank's listener: a wrong key, or the right key over an old nonce (a replay), is dropped at
// the handshake; nothing it sends is delivered and the real peer's link is untouched.
TEST_F(BootstrapAbuse, StrangerAtARankIsDropped) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid);
  mendBootstrap* bs0 = comms[0]->bootstrap;
  uint8_t guess[16] = {9};
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = -1;
    if (attempt == 0) {
      fd = peerConnect(bs0, 1, guess);
    } else {  // right key, but answering a nonce of its choosing instead of the listener's
      fd = rawConnect(bs0->listenAddr);
      uint8_t nonce[MEND_BS_NONCE_BYTES], old[MEND_BS_NONCE_BYTES] = {0};
      ASSERT_TRUE(readChallenge(fd, nonce));
      mendBsHandshake hs = {bs0->magic ^ MEND_BS_HANDSHAKE_MAGIC, 1, 2, 0};
      hs.mac = mendBsHandshakeMac(bs0->key, old, &hs);
      ASSERT_EQ(mendSocketSendAll(fd, &hs, sizeof(hs), nullptr, 1000), ncclSuccess);
    }
    ASSERT_GE(fd, 0);
    mendBsHeader hdr = {MEND_BS_DATA, 55, 4};
    int v = 42;
    (void)mendSocketSendAll(fd, &hdr, sizeof(hdr), nullptr, 1000);
    (void)mendSocketSendAll(fd, &v, sizeof(v), nullptr, 1000);
    double eofMs;
    readToEof(fd, 2000, &eofMs);
    close(fd);
    EXPECT_GE(eofMs, 0.0) << "attempt " << attempt << ": the rank hangs up";
  }
  int peer = -1, v = 0;
  EXPECT_EQ(mendBootstrapRecvAny(bs0, 55, &peer, &v, sizeof(v), 300), ncclInProgress) << "nothing delivered";
  EXPECT_EQ(mendBootstrapPeerState(bs0, 1), MEND_BS_LINK_OPEN);
  runRanks(2, [&](int r) { checkAllGather(comms[r]); });
  closeRanks(comms);
}

// ---------------------------------------------------------------- item 3: bounded everything

// Silent and half-sent connections at the root cost the ranks nothing (before: 5 s each, one at a
// time: 10 silent connections delayed init by 50 s).
TEST_F(BootstrapAbuse, SilentConnectionsDoNotDelayInit) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  mendBsId id = idOf(uid);
  std::vector<int> fds;
  for (int i = 0; i < 30; i++) {
    int fd = rawConnect(id.addr);
    ASSERT_GE(fd, 0);
    uint8_t nonce[MEND_BS_NONCE_BYTES];
    if (i % 3 == 0 && readChallenge(fd, nonce)) (void)!write(fd, "MENDBOOT-half-a-hello", 21);
    fds.push_back(fd);
  }
  double t0 = nowMs();
  std::vector<ncclComm*> comms(4);
  initRanks(comms, 1, &uid, [](int, ncclComm* c) { checkAllGather(c); });
  EXPECT_LT(nowMs() - t0, 1500.0) << "init must not wait behind 30 silent connections";
  for (int fd : fds) close(fd);
  closeRanks(comms);
}

// Connections that prove nothing are closed after MEND_BOOTSTRAP_HELLO_TIMEOUT, at the root and at a
// rank; at a rank at most MEND_BS_MAX_UNPROVEN wait at once (the oldest make room).
TEST_F(BootstrapAbuse, UnprovenConnectionsAreLimited) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid);
  std::vector<int> fds;
  for (int i = 0; i < MEND_BS_MAX_UNPROVEN + 8; i++) fds.push_back(rawConnect(comms[0]->bootstrap->listenAddr));
  usleep(MEND_BS_UNPROVEN_GRACE_MS * 1000 + 300 * 1000);
  int closed = 0;
  for (int fd : fds) {
    double eofMs;
    readToEof(fd, 20, &eofMs);
    closed += eofMs >= 0;
    close(fd);
  }
  EXPECT_GE(closed, 8) << "the oldest unproven connections make room";
  EXPECT_LE(closed, 16);
  runRanks(2, [&](int r) { checkAllGather(comms[r]); });
  closeRanks(comms);

  setEnv("MEND_BOOTSTRAP_HELLO_TIMEOUT", "300");
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);  // a root that reads the new bound
  int atRoot = rawConnect(idOf(uid).addr);
  initRanks(comms, 1, &uid);
  int atRank = rawConnect(comms[1]->bootstrap->listenAddr);
  for (int fd : {atRoot, atRank}) {
    ASSERT_GE(fd, 0);
    double eofMs;
    std::vector<char> got = readToEof(fd, 3000, &eofMs);
    close(fd);
    EXPECT_EQ(got.size(), sizeof(mendBsChallenge)) << "only the challenge";
    EXPECT_GE(eofMs, 0.0) << "closed after MEND_BOOTSTRAP_HELLO_TIMEOUT";
    EXPECT_LT(eofMs, 1500.0);
  }
  closeRanks(comms);
}

// The bound on unproven connections never cuts real peers short: 100 connections at once (more than
// MEND_BS_MAX_UNPROVEN) that all prove the key are all served; the excess waits in the listen backlog.
TEST_F(BootstrapAbuse, ABurstOfRealPeersIsServed) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid);
  mendBootstrap* bs0 = comms[0]->bootstrap;
  const int n = 100;
  std::vector<int> fds(n, -1);
  runRanks(n, [&](int i) {
    fds[i] = peerConnect(bs0, 1, bs0->key);
    mendBsHeader hdr = {MEND_BS_DATA, 300, sizeof(int)};
    if (fds[i] >= 0 && mendSocketSendAll(fds[i], &hdr, sizeof(hdr), nullptr, 1000) == ncclSuccess)
      (void)mendSocketSendAll(fds[i], &i, sizeof(i), nullptr, 1000);
  });
  std::vector<int> seen(n, 0);
  for (int k = 0; k < n; k++) {
    int peer = -1, v = -1;
    ASSERT_EQ(mendBootstrapRecvAny(bs0, 300, &peer, &v, sizeof(v), 3000), ncclSuccess) << k << " of " << n;
    ASSERT_TRUE(v >= 0 && v < n);
    seen[v]++;
  }
  for (int i = 0; i < n; i++) EXPECT_EQ(seen[i], 1) << "connection " << i;
  for (int fd : fds) close(fd);
  runRanks(2, [&](int r) { closeComm(comms[r], true); });
}

// Lengths no rendezvous allows are refused before anything is read or allocated, even from a peer
// that knows the secret (before: a TABLE claiming 2^31-1 entries held the root, reading, and shaped
// it so that the real ranks were refused).
TEST_F(BootstrapAbuse, RootRefusesImpossibleLengths) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  mendBsId id = idOf(uid);
  struct Case { int kind, nIds, count; size_t replyBytes; };
  for (Case k : {Case{MEND_BS_ROOT_TABLE, 2, 0x7fffffff, 0}, Case{MEND_BS_ROOT_HELLO, 1, 0x7fffffff, sizeof(mendBsRootReply)},
                 Case{MEND_BS_ROOT_TABLE, 2, -1, 0}}) {
    int fd = rawConnect(id.addr);
    ASSERT_GE(fd, 0);
    uint8_t nonce[MEND_BS_NONCE_BYTES];
    ASSERT_TRUE(readChallenge(fd, nonce));
    mendBsRootHello h = rootHello(id, k.kind, 1, 2, k.nIds, k.count, id.secret, nonce);
    ASSERT_EQ(mendSocketSendAll(fd, &h, sizeof(h), nullptr, 1000), ncclSuccess);
    double eofMs;
    std::vector<char> got = readToEof(fd, 2000, &eofMs);
    close(fd);
    EXPECT_GE(eofMs, 0.0) << "kind " << k.kind << " count " << k.count;
    EXPECT_LT(eofMs, 500.0) << "refused at once";
    EXPECT_EQ(got.size(), k.replyBytes);
  }
  double t0 = nowMs();
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid, [](int, ncclComm* c) { checkAllGather(c); });
  EXPECT_LT(nowMs() - t0, 1000.0);
  closeRanks(comms);
}

// A header announcing 1 GiB is refused without reserving it (before: every rank reserved 1 GiB).
TEST_F(BootstrapAbuse, PeerRefusesHugeMessage) {
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid);
  mendBootstrap* bs0 = comms[0]->bootstrap;
  long before = vszKb();
  int fd = peerConnect(bs0, 1, bs0->key);  // the worst case: a peer that proved the key
  ASSERT_GE(fd, 0);
  mendBsHeader hdr = {MEND_BS_DATA, 9, 1ull << 30};
  ASSERT_EQ(mendSocketSendAll(fd, &hdr, sizeof(hdr), nullptr, 1000), ncclSuccess);
  double eofMs;
  readToEof(fd, 2000, &eofMs);
  long grewMiB = (vszKb() - before) / 1024;
  close(fd);
  EXPECT_GE(eofMs, 0.0) << "the connection is dropped";
  EXPECT_LT(grewMiB, 64) << "address space grew by " << grewMiB << " MiB";
  EXPECT_EQ(mendBootstrapPeerState(bs0, 1), MEND_BS_LINK_LOST) << "the stream claiming rank 1 is corrupt";
  runRanks(2, [&](int r) { closeComm(comms[r], true); });
}

// Messages nobody receives are kept up to MEND_BOOTSTRAP_MAX_BUFFERED per peer; a peer that sends
// more loses its link (before: everything was kept until destroy, up to 1 GiB per message).
TEST_F(BootstrapAbuse, UnreceivedMessagesAreBounded) {
  setEnv("MEND_BOOTSTRAP_MAX_BUFFERED", "1048576");
  ncclUniqueId uid;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid);
  mendBootstrap* bs0 = comms[0]->bootstrap;
  std::vector<char> msg(8192, 'x');
  for (int i = 0; i < 256; i++)  // 2 MiB; sends fail once rank 0 hangs up
    if (mendBootstrapSend(comms[1]->bootstrap, 0, 21, msg.data(), msg.size()) != ncclSuccess) break;
  double t0 = nowMs();
  while (mendBootstrapPeerState(bs0, 1) != MEND_BS_LINK_LOST && nowMs() - t0 < 3000) usleep(10 * 1000);
  EXPECT_EQ(mendBootstrapPeerState(bs0, 1), MEND_BS_LINK_LOST);
  pthread_mutex_lock(&bs0->lock);
  size_t buffered = bs0->peers[1].buffered;
  pthread_mutex_unlock(&bs0->lock);
  EXPECT_LE(buffered, 1048576u);
  EXPECT_GT(buffered, 512u * 1024) << "what arrived within the bound is kept";
  ASSERT_EQ(mendBootstrapRecv(bs0, 1, 21, msg.data(), msg.size()), ncclSuccess) << "and can still be received";
  runRanks(2, [&](int r) { closeComm(comms[r], true); });
}

// At the descriptor limit accept fails while the listener stays readable: the root and a rank's
// receiver pause instead of spinning (before: a core each), and accept again once descriptors free.
TEST_F(BootstrapAbuse, AcceptBacksOffAtFdLimit) {
  ncclUniqueId uid, idle;
  ASSERT_EQ(mendBootstrapGetUniqueId(&uid), ncclSuccess);
  std::vector<ncclComm*> comms(2);
  initRanks(comms, 1, &uid);
  ASSERT_EQ(mendBootstrapGetUniqueId(&idle), ncclSuccess);  // a root nobody reached yet
  int toRank = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), toRoot = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int spare = open("/dev/null", O_RDONLY);
  ASSERT_TRUE(toRank >= 0 && toRoot >= 0 && spare >= 0);
  struct rlimit old, low;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)spare + 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fill;
  for (int d; (d = dup(spare)) >= 0;) fill.push_back(d);
  mendBsId rootId = idOf(idle);
  (void)!connect(toRank, &comms[0]->bootstrap->listenAddr.sa, mendSocketAddrLen(&comms[0]->bootstrap->listenAddr));
  (void)!connect(toRoot, &rootId.addr.sa, mendSocketAddrLen(&rootId.addr));
  usleep(100 * 1000);
  double cpu0 = cpuMs(), wall0 = nowMs();
  usleep(1000 * 1000);
  double cpu = cpuMs() - cpu0, wall = nowMs() - wall0;
  for (int d : fill) close(d);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_LT(cpu, 0.25 * wall) << cpu << " ms of CPU in " << wall << " ms at the descriptor limit";
  for (int fd : {toRank, toRoot}) {  // served once descriptors are back
    struct pollfd p = {fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 2000), 1) << "no challenge after the limit was lifted";
    close(fd);
  }
  close(spare);
  runRanks(2, [&](int r) { checkAllGather(comms[r]); });
  closeRanks(comms);
}

// ---------------------------------------------------------------- item 4: the socket Net listener

class NetSocketAbuse : public NetSocketBase {
 protected:
  void TearDown() override {
    unsetenv("MEND_SOCKET_ACCEPT_TIMEOUT_MS");
    NetSocketBase::TearDown();
  }
  // Mirrors of the socket Net's handle and hello (transport/net_socket.h, C only).
  struct Handle { uint32_t magic, pad; uint64_t token; union mendSocketAddr addr; };
  struct Hello { uint32_t magic; uint16_t index, nsocks; uint64_t listenToken, connToken; uint32_t chunk, inl; };

  // Connect, then accept, until both are there or boundMs passes; returns the time taken (-1: failed).
  double RealConnection(void* lc, char* handle, double boundMs) {
    void *sc = nullptr, *rc = nullptr;
    double t0 = nowMs();
    while ((!sc || !rc) && nowMs() - t0 < boundMs) {
      if (!sc) { EXPECT_EQ(N->connect(ctx_, 0, handle, &sc), ncclSuccess); }
      if (!rc) { EXPECT_EQ(N->accept(lc, &rc), ncclSuccess); }
    }
    double took = sc && rc ? nowMs() - t0 : -1;
    if (sc && rc) Exchange(sc, rc, 100000, 3);
    if (sc) N->closeSend(sc);
    if (rc) N->closeRecv(rc);
    return took;
  }
};

// 130 connections that send a valid hello and hang up: their slots are freed and a real connection
// is accepted (before: the 130 slots stayed taken for good and no connection was accepted again).
TEST_F(NetSocketAbuse, HalfOpenConnectionsAreFreed) {
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
  const Handle* h = (const Handle*)handle;
  for (int i = 0; i < 130; i++) {
    int fd = rawConnect(h->addr);
    ASSERT_GE(fd, 0);
    Hello m = {h->magic, 1, 2, h->token, 1000u + i, 65536, 0};  // data socket 1 of 2: its group never completes
    ASSERT_EQ(mendSocketSendAll(fd, &m, sizeof(m), nullptr, 1000), ncclSuccess);
    void* rc = nullptr;
    ASSERT_EQ(N->accept(lc, &rc), ncclSuccess);
    ASSERT_EQ(rc, nullptr);
    close(fd);
  }
  EXPECT_GE(RealConnection(lc, handle, 3000), 0) << "a real connection after 130 half-open ones";
  EXPECT_EQ(N->closeListen(lc), ncclSuccess);
}

// Silent connections held open are closed after MEND_SOCKET_ACCEPT_TIMEOUT_MS.
TEST_F(NetSocketAbuse, SilentConnectionsExpire) {
  setenv("MEND_SOCKET_ACCEPT_TIMEOUT_MS", "300", 1);
  Reconfigure();
  char handle[MEND_NET_HANDLE_MAXSIZE] = {};
  void* lc = nullptr;
  ASSERT_EQ(N->listen(ctx_, 0, handle, &lc), ncclSuccess);
  std::vector<int> fds;
  void* rc = nullptr;
  for (int i = 0; i < 130; i++) {
    fds.push_back(rawConnect(((const Handle*)handle)->addr));
    ASSERT_EQ(N->accept(lc, &rc), ncclSuccess);
  }
  double t0 = nowMs();
  while (nowMs() - t0 < 600) {
    ASSERT_EQ(N->accept(lc, &rc), ncclSuccess);
    usleep(10 * 1000);
  }
  int closed = 0;
  for (int fd : fds) {
    double eofMs;
    readToEof(fd, 20, &eofMs);
    closed += eofMs >= 0;
    close(fd);
  }
  EXPECT_EQ(closed, 130);
  EXPECT_GE(RealConnection(lc, handle, 3000), 0);
  EXPECT_EQ(N->closeListen(lc), ncclSuccess);
}

}  // namespace
