/*
 * Every collective of the engine across hosts, every element checked exactly. Run on the
 * multi-host testbed by tests/testbed/test_multihost_colls.sh, one process per rank.
 *
 * Launched as a rank (RANK, WORLD_SIZE and NCCL_COMM_ID set, as the testbed, mend-run or torchrun
 * give them): joins the communicator and runs AllReduce, Broadcast, Reduce, AllGather,
 * ReduceScatter, Send/Recv (every pair, both directions, in one group), AlltoAll, Gather and
 * Scatter at counts 0, 1, 7, 1031, 65537 and the large count (--large, default 1M elements; the
 * per-rank-block collectives use large / nranks per block), rotating types (int32, int64, uint8,
 * float32, float64), ops (sum, prod, max, min), roots and in/out of place; the large count runs
 * both in and out of place. Inputs are small integers from a hash of (rank, index, salt), so every
 * result is exact in every type; the expected value of each element is computed here from the
 * inputs of all ranks, never taken from the library. Prints one line per collective:
 *   mh <Collective> ok <n> checks
 *   mh <Collective> FAIL <failed>/<n> checks: <first mismatch>
 * and exits 0 when all passed, 1 otherwise.
 *
 * Standalone (no RANK in the environment, as tests/run.sh starts it): runs 4 ranks on this
 * machine as 2 hosts x 2 ranks (different NCCL_HOSTID: shared memory inside a host, sockets over
 * lo between hosts) and prints one TAP line.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mendtest.h"
#include "mp_util.h"
#include "nccl.h"

enum {
  C_ALLREDUCE,
  C_BROADCAST,
  C_REDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_SENDRECV,
  C_ALLTOALL,
  C_GATHER,
  C_SCATTER,
  C_NUM
};
static const char* const collName[C_NUM] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                            "SendRecv",  "AlltoAll",  "Gather", "Scatter"};

static const ncclDataType_t types[] = {ncclInt32, ncclFloat32, ncclInt64, ncclUint8, ncclFloat64};
#define NTYPES ((int)(sizeof(types) / sizeof(types[0])))
static const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclProd, ncclMin};
#define NOPS ((int)(sizeof(ops) / sizeof(ops[0])))

struct tally {
  int checks;      /* comparisons of a whole result buffer */
  int fails;       /* of those, how many had a wrong element (or a failed call) */
  char first[240]; /* the first failure */
};

/* One call's parameters. */
struct cfg {
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int inPlace;
  unsigned salt; /* varies the inputs from call to call, so a stale result cannot pass */
  size_t skew;   /* bytes added to every buffer address (unaligned buffers) */
};

static int rank, nranks;
static ncclComm_t comm;
static struct tally tally[C_NUM];
static int plant; /* MH_PLANT=1: corrupt one element of each collective's first result */
static int planted[C_NUM];

static void fail(int coll, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(int coll, const char* fmt, ...) {
  struct tally* t = &tally[coll];
  if (t->fails++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->first, sizeof(t->first), fmt, ap);
    va_end(ap);
  }
}

#define NCCLTRY(coll, call)                                                             \
  do {                                                                                  \
    ncclResult_t r_ = (call);                                                           \
    if (r_ != ncclSuccess) fail(coll, "%s returned %s", #call, ncclGetErrorString(r_)); \
  } while (0)

/* ------------------------------------------------------------------ values and buffers */

static uint32_t hash3(uint32_t a, uint64_t b, uint32_t c) {
  uint64_t h = (a + 1) * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 7) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  return (uint32_t)(h >> 32);
}

/* Input element i of rank r. Ranges keep every result exact in every type (uint8 included):
 * sums <= 7 * nranks, products <= 2^nranks, copies and max/min < 100. */
static double val(ncclRedOp_t op, int r, size_t i, unsigned salt) {
  uint32_t h = hash3((uint32_t)r, i, salt);
  if (op == ncclSum) return (double)(h % 8);
  if (op == ncclProd) return (double)(1 + h % 2);
  return (double)(h % 100); /* max, min, and the data of copy collectives */
}
#define COPYOP ncclMax /* value range used by collectives that only move data */

/* The reduction of element i over all ranks, computed here. */
static double ref(ncclRedOp_t op, size_t i, unsigned salt) {
  double acc = val(op, 0, i, salt);
  for (int r = 1; r < nranks; r++) {
    double v = val(op, r, i, salt);
    if (op == ncclSum)
      acc += v;
    else if (op == ncclProd)
      acc *= v;
    else if (op == ncclMax)
      acc = v > acc ? v : acc;
    else
      acc = v < acc ? v : acc;
  }
  return acc;
}

static size_t tsize(ncclDataType_t t) {
  return t == ncclUint8 ? 1 : (t == ncclInt32 || t == ncclFloat32) ? 4 : 8;
}

static const char* tname(ncclDataType_t t) {
  switch (t) {
    case ncclInt32:
      return "int32";
    case ncclFloat32:
      return "float32";
    case ncclInt64:
      return "int64";
    case ncclUint8:
      return "uint8";
    default:
      return "float64";
  }
}

static const char* oname(ncclRedOp_t op) {
  return op == ncclSum ? "sum" : op == ncclProd ? "prod" : op == ncclMax ? "max" : "min";
}

/* Elements are stored with memcpy: buffers are unaligned on purpose. */
static void put(ncclDataType_t t, void* p, size_t i, double v) {
  char* d = (char*)p + i * tsize(t);
  int32_t i32 = (int32_t)v;
  int64_t i64 = (int64_t)v;
  uint8_t u8 = (uint8_t)v;
  float f = (float)v;
  switch (t) {
    case ncclInt32:
      memcpy(d, &i32, 4);
      break;
    case ncclFloat32:
      memcpy(d, &f, 4);
      break;
    case ncclInt64:
      memcpy(d, &i64, 8);
      break;
    case ncclUint8:
      memcpy(d, &u8, 1);
      break;
    default:
      memcpy(d, &v, 8);
      break;
  }
}

static double get(ncclDataType_t t, const void* p, size_t i) {
  const char* s = (const char*)p + i * tsize(t);
  int32_t i32;
  int64_t i64;
  uint8_t u8;
  float f;
  double d;
  switch (t) {
    case ncclInt32:
      memcpy(&i32, s, 4);
      return i32;
    case ncclFloat32:
      memcpy(&f, s, 4);
      return f;
    case ncclInt64:
      memcpy(&i64, s, 8);
      return (double)i64;
    case ncclUint8:
      memcpy(&u8, s, 1);
      return u8;
    default:
      memcpy(&d, s, 8);
      return d;
  }
}

/* Fill count elements from element `first` of rank r's inputs. */
static void fill(const struct cfg* c, void* p, size_t count, ncclRedOp_t op, int r, size_t first, unsigned salt) {
  for (size_t i = 0; i < count; i++) put(c->type, p, i, val(op, r, first + i, salt));
}

static void* xalloc(size_t bytes) {
  void* p = malloc(bytes + 16);
  if (!p) {
    fprintf(stderr, "mh rank %d: out of memory (%zu bytes)\n", rank, bytes);
    exit(1);
  }
  memset(p, 0xA5, bytes + 16); /* never zero: a result left untouched must not pass */
  return p;
}

/* Compare count elements of buf with want(i) = reduction (op) or rank r's input (from `first`). */
static void expect(int coll, const struct cfg* c, const char* what, const void* buf, size_t count, ncclRedOp_t op,
                   int fromRank, size_t first, unsigned salt) {
  tally[coll].checks++;
  if (plant && count > 0 && !planted[coll]) { /* the checker must catch a wrong element */
    planted[coll] = 1;
    put(c->type, (void*)buf, count / 2, get(c->type, buf, count / 2) + 1);
  }
  for (size_t i = 0; i < count; i++) {
    double want = fromRank < 0 ? ref(op, first + i, salt) : val(op, fromRank, first + i, salt);
    double got = get(c->type, buf, i);
    if (got != want) {
      fail(coll, "rank %d %s count %zu %s %s root %d %s: [%zu] = %g, want %g", rank, what, count, tname(c->type),
           oname(c->op), c->root, c->inPlace ? "in place" : "out of place", i, got, want);
      return;
    }
  }
}

/* ------------------------------------------------------------------ the collectives */

static void runReductions(int coll, const struct cfg* c, size_t count) {
  size_t ts = tsize(c->type), n = (size_t)nranks;
  size_t sendCount = coll == C_REDUCESCATTER ? count * n : count;
  char* a = xalloc(sendCount * ts + c->skew);
  char* b = xalloc(sendCount * ts + c->skew);
  char* send = a + c->skew;
  fill(c, send, sendCount, c->op, rank, 0, c->salt);
  if (coll == C_ALLREDUCE) {
    char* recv = c->inPlace ? send : b + c->skew;
    NCCLTRY(coll, ncclAllReduce(send, recv, count, c->type, c->op, comm, NULL));
    expect(coll, c, "AllReduce", recv, count, c->op, -1, 0, c->salt);
  } else if (coll == C_REDUCE) {
    char* recv = c->inPlace ? send : b + c->skew;
    NCCLTRY(coll, ncclReduce(send, recv, count, c->type, c->op, c->root, comm, NULL));
    if (rank == c->root) expect(coll, c, "Reduce", recv, count, c->op, -1, 0, c->salt);
  } else {
    char* recv = c->inPlace ? send + (size_t)rank * count * ts : b + c->skew;
    NCCLTRY(coll, ncclReduceScatter(send, recv, count, c->type, c->op, comm, NULL));
    expect(coll, c, "ReduceScatter", recv, count, c->op, -1, (size_t)rank * count, c->salt);
  }
  free(a);
  free(b);
}

static void runBroadcast(const struct cfg* c, size_t count) {
  size_t ts = tsize(c->type);
  char* a = xalloc(count * ts + c->skew);
  char* b = xalloc(count * ts + c->skew);
  char* send = a + c->skew;
  char* recv = c->inPlace ? send : b + c->skew;
  if (rank == c->root) fill(c, send, count, COPYOP, rank, 0, c->salt);
  NCCLTRY(C_BROADCAST, ncclBroadcast(send, recv, count, c->type, c->root, comm, NULL));
  expect(C_BROADCAST, c, "Broadcast", recv, count, COPYOP, c->root, 0, c->salt);
  free(a);
  free(b);
}

/* AllGather, Gather, Scatter, AlltoAll: blocks of count elements, one per rank. */
static void runBlocks(int coll, const struct cfg* c, size_t count) {
  size_t ts = tsize(c->type), n = (size_t)nranks, blk = count * ts;
  char* a = xalloc(blk * n + c->skew);
  char* b = xalloc(blk * n + c->skew);
  char *big = b + c->skew, *small = a + c->skew;
  if (coll == C_ALLGATHER || coll == C_GATHER) {
    char* mine = c->inPlace ? big + (size_t)rank * blk : small;
    fill(c, mine, count, COPYOP, rank, 0, c->salt);
    if (coll == C_ALLGATHER)
      NCCLTRY(coll, ncclAllGather(mine, big, count, c->type, comm, NULL));
    else
      NCCLTRY(coll, ncclGather(mine, big, count, c->type, c->root, comm, NULL));
    for (int r = 0; r < nranks && (coll == C_ALLGATHER || rank == c->root); r++)
      expect(coll, c, collName[coll], big + (size_t)r * blk, count, COPYOP, r, 0, c->salt);
  } else if (coll == C_SCATTER) {
    if (rank == c->root) fill(c, big, count * n, COPYOP, rank, 0, c->salt);
    char* recv = c->inPlace ? big + (size_t)rank * blk : small;
    NCCLTRY(coll, ncclScatter(big, recv, count, c->type, c->root, comm, NULL));
    expect(coll, c, "Scatter", recv, count, COPYOP, c->root, (size_t)rank * count, c->salt);
  } else { /* AlltoAll: block p of rank r's input goes to rank p */
    fill(c, big, count * n, COPYOP, rank, 0, c->salt);
    char* recv = c->inPlace ? big : a + c->skew;
    NCCLTRY(coll, ncclAlltoAll(big, recv, count, c->type, comm, NULL));
    for (int r = 0; r < nranks; r++)
      expect(coll, c, "AlltoAll", recv + (size_t)r * blk, count, COPYOP, r, (size_t)rank * count, c->salt);
  }
  free(a);
  free(b);
}

/* Every rank sends to every other (shift k = 1..n-1) and receives from every other, in one
 * group; each shift has its own salt so a message delivered to the wrong buffer is caught. */
static void runSendRecv(const struct cfg* c, size_t count) {
  size_t ts = tsize(c->type), n = (size_t)nranks, blk = count * ts + c->skew;
  char* out = xalloc(blk * n);
  char* in = xalloc(blk * n);
  for (size_t k = 1; k < n; k++) fill(c, out + k * blk + c->skew, count, COPYOP, rank, 0, c->salt + (unsigned)k);
  NCCLTRY(C_SENDRECV, ncclGroupStart());
  for (size_t k = 1; k < n; k++) {
    int to = (int)((rank + k) % n), from = (int)((rank + n - k) % n);
    NCCLTRY(C_SENDRECV, ncclSend(out + k * blk + c->skew, count, c->type, to, comm, NULL));
    NCCLTRY(C_SENDRECV, ncclRecv(in + k * blk + c->skew, count, c->type, from, comm, NULL));
  }
  NCCLTRY(C_SENDRECV, ncclGroupEnd());
  for (size_t k = 1; k < n; k++)
    expect(C_SENDRECV, c, "SendRecv", in + k * blk + c->skew, count, COPYOP, (int)((rank + n - k) % n), 0,
           c->salt + (unsigned)k);
  free(out);
  free(in);
}

static void runOne(int coll, const struct cfg* c, size_t count) {
  switch (coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_REDUCESCATTER:
      runReductions(coll, c, count);
      break;
    case C_BROADCAST:
      runBroadcast(c, count);
      break;
    case C_SENDRECV:
      runSendRecv(c, count);
      break;
    default:
      runBlocks(coll, c, count);
      break;
  }
}

/* ------------------------------------------------------------------ out-of-band barrier */

/* Every rank reaches this point before any destroys its communicator: rank 0 listens on
 * MASTER_ADDR:MASTER_PORT, the others connect and send one byte, and rank 0 answers every one
 * once all have arrived. Bounded by `seconds`; returns 1 on success. It keeps how connections
 * close apart from the results checked here: a destroy right after a collective may disturb a peer
 * still finishing it (MH_DESTROY_NOW=1 skips the barrier to exercise exactly that). */
static int oobAddr(struct sockaddr_in* sa) {
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (!addr || !port) return 0;
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)atoi(port));
  return inet_pton(AF_INET, addr, &sa->sin_addr) == 1;
}

/* Rank 0's listener, opened before the communicator: the port, free when the launcher chose it,
 * must not become one of the library's own ephemeral ports before the barrier (-1: not open). */
static int oobListenFd = -1;
static void oobListen(void) {
  struct sockaddr_in sa;
  if (rank != 0 || !oobAddr(&sa)) return;
  int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (lfd < 0) return;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(lfd, (struct sockaddr*)&sa, sizeof(sa)) != 0 || listen(lfd, MP_MAX_RANKS) != 0) {
    close(lfd);
    return;
  }
  oobListenFd = lfd;
}

static int oobBarrier(int seconds) {
  struct sockaddr_in sa;
  if (!oobAddr(&sa)) return 0;
  double until = mtNow() + seconds;
  char byte = 1;
  if (rank == 0) {
    int lfd = oobListenFd, fds[MP_MAX_RANKS], got = 0, ok = lfd >= 0;
    oobListenFd = -1;
    while (ok && got < nranks - 1 && mtNow() < until) {
      struct pollfd pf = {.fd = lfd, .events = POLLIN};
      if (poll(&pf, 1, 100) <= 0) continue;
      int fd = accept(lfd, NULL, NULL);
      if (fd < 0) continue;
      struct pollfd q = {.fd = fd, .events = POLLIN};
      if (poll(&q, 1, (int)((until - mtNow()) * 1000) + 1) > 0 && read(fd, &byte, 1) == 1)
        fds[got++] = fd;
      else
        close(fd);
    }
    ok = ok && got == nranks - 1;
    for (int i = 0; i < got; i++) {
      if (write(fds[i], &byte, 1) != 1) ok = 0;
      close(fds[i]);
    }
    if (lfd >= 0) close(lfd);
    return ok;
  }
  while (mtNow() < until) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) == 0) {
      struct pollfd q = {.fd = fd, .events = POLLIN};
      int ok =
          write(fd, &byte, 1) == 1 && poll(&q, 1, (int)((until - mtNow()) * 1000) + 1) > 0 && read(fd, &byte, 1) == 1;
      close(fd);
      return ok;
    }
    close(fd);
    usleep(10000); /* rank 0 is not listening yet */
  }
  return 0;
}

/* ------------------------------------------------------------------ rank and standalone mains */

static int rankMain(size_t large) {
  rank = atoi(getenv("RANK"));
  nranks = atoi(getenv("WORLD_SIZE"));
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* host = getenv("NCCL_HOSTID");
  if (nranks < 1 || nranks > MP_MAX_RANKS || rank < 0 || rank >= nranks) {
    printf("mh rank %d of %d: bad RANK/WORLD_SIZE\n", rank, nranks);
    return 1;
  }
  if (!mtLoadedMend()) {
    printf("mh Init FAIL: the loaded libnccl.so.2 is not Mend's build\n");
    return 1;
  }
  oobListen();
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res == ncclSuccess) res = ncclCommInitRank(&comm, nranks, id, rank);
  if (res != ncclSuccess) {
    printf("mh Init FAIL: rank %d: %s\n", rank, ncclGetErrorString(res));
    return 1;
  }
  printf("mh rank %d of %d on host %s\n", rank, nranks, host ? host : "?");
  const char* pl = getenv("MH_PLANT");
  plant = pl && strcmp(pl, "1") == 0;
  const size_t counts[] = {0, 1, 7, 1031, 65537, large, large};
  const int ncounts = (int)(sizeof(counts) / sizeof(counts[0]));
  double t0 = mtNow();
  for (int s = 0; s < ncounts; s++) {
    int isLarge = s >= ncounts - 2;
    for (int coll = 0; coll < C_NUM; coll++) {
      struct cfg c = {
          .type = isLarge ? (coll % 2 ? ncclFloat32 : ncclInt32) : types[(s + coll) % NTYPES],
          .op = isLarge ? ncclSum : ops[(s + 2 * coll) % NOPS],
          .root = isLarge ? nranks - 1 : (s * 5 + coll) % nranks, /* large: the last host's last rank */
          .inPlace = s % 2,
          .salt = (unsigned)(s * C_NUM + coll) * 131u,
          .skew = (size_t)((s + coll) % 3),
      };
      if (c.op == ncclProd && c.type == ncclUint8) c.op = ncclMin;
      size_t count = counts[s];
      int blocks = coll != C_ALLREDUCE && coll != C_BROADCAST && coll != C_REDUCE;
      if (isLarge && blocks) count = large / (size_t)nranks; /* keep every buffer near `large` */
      runOne(coll, &c, count);
    }
  }
  double t1 = mtNow();
  /* Every rank has finished everything before anyone tears its connections down (unless
   * MH_DESTROY_NOW=1: destroy right after the last collective, as many programs do). */
  int bad = 0;
  const char* now = getenv("MH_DESTROY_NOW");
  if (!(now && strcmp(now, "1") == 0) && !oobBarrier(60)) {
    printf("mh Barrier FAIL: rank %d: the out-of-band barrier at %s:%s failed\n", rank, getenv("MASTER_ADDR"),
           getenv("MASTER_PORT"));
    bad = 1;
  }
  for (int coll = 0; coll < C_NUM; coll++) {
    struct tally* t = &tally[coll];
    if (t->fails)
      printf("mh %s FAIL %d/%d checks: %s\n", collName[coll], t->fails, t->checks, t->first);
    else
      printf("mh %s ok %d checks\n", collName[coll], t->checks);
    bad |= t->fails != 0;
  }
  res = ncclCommDestroy(comm);
  if (res != ncclSuccess) printf("mh Destroy FAIL: %s\n", ncclGetErrorString(res));
  printf("mh rank %d done in %.2f s: %s\n", rank, t1 - t0, bad || res != ncclSuccess ? "FAILED" : "passed");
  return bad || res != ncclSuccess ? 1 : 0;
}

/* Run the 4 local ranks with stdout and stderr in `out` (a file, or NULL to keep ours); returns 1
 * if all exited 0. */
static int localRun(const char* self, const char* const* env, FILE* out) {
  int saved[2] = {-1, -1};
  fflush(stdout);
  fflush(stderr);
  for (int fd = 1; out && fd <= 2; fd++) {
    saved[fd - 1] = dup(fd);
    dup2(fileno(out), fd);
  }
  int ok = mpSpawnWait(self, "mh", 4, "65536", env, 110, 4, 0) == NULL;
  fflush(stdout);
  fflush(stderr);
  for (int fd = 1; out && fd <= 2; fd++) {
    dup2(saved[fd - 1], fd);
    close(saved[fd - 1]);
  }
  return ok;
}

/* 4 ranks on this machine, 2 per fake host; then the same with planted errors, which every
 * collective's check must catch. */
static int standalone(const char* self) {
  if (!mtStart("mh_colls", 250)) return mtExitCode();
  static char commId[64], master[64];
  int commPort = mpFreePort("127.0.0.1"), masterPort = mpFreePort("127.0.0.1");
  for (int i = 0; i < 10 && masterPort == commPort; i++) masterPort = mpFreePort("127.0.0.1"); /* one closed, then reused */
  snprintf(commId, sizeof(commId), "NCCL_COMM_ID=127.0.0.1:%d", commPort);
  snprintf(master, sizeof(master), "MASTER_PORT=%d", masterPort);
  const char* env[] = {commId, master, "MASTER_ADDR=127.0.0.1", "NCCL_SOCKET_IFNAME=lo", NULL, NULL};
  double t0 = mtNow();
  int localOk = localRun(self, env, NULL);
  mtResult(localOk, "mh_colls_local_2hosts_x_2ranks", "a rank failed or timed out (%.1f s)", mtNow() - t0);
  FILE* out = tmpfile();
  env[4] = "MH_PLANT=1";
  int allOk = out ? localRun(self, env, out) : 1;
  int caught = 0;
  char line[512], missing[256] = "";
  for (int coll = 0; out && coll < C_NUM; coll++) {
    char want[64];
    int seen = 0;
    snprintf(want, sizeof(want), "mh %s FAIL ", collName[coll]);
    rewind(out);
    while (!seen && fgets(line, sizeof(line), out)) seen = strncmp(line, want, strlen(want)) == 0;
    caught += seen;
    if (!seen) snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s", collName[coll]);
  }
  mtResult(!allOk && caught == C_NUM, "mh_colls_catches_planted_errors", "ranks %s; planted errors not reported for:%s",
           allOk ? "all passed" : "failed", missing);
  if (out) fclose(out);
  return mtExitCode();
}

int main(int argc, char** argv) {
  if (argc == 6 && strcmp(argv[1], "--child") == 0) { /* from standalone(): --child mh RANK N LARGE */
    int r = atoi(argv[3]);
    mpChildSetup(r, 110);
    char host[32];
    snprintf(host, sizeof(host), "mh-local-h%d", r / 2);
    setenv("NCCL_HOSTID", host, 1);
    setenv("RANK", argv[3], 1);
    setenv("WORLD_SIZE", argv[4], 1);
    return rankMain((size_t)strtoull(argv[5], NULL, 10));
  }
  size_t large = (size_t)1 << 20;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--large") == 0 && i + 1 < argc) {
      large = (size_t)strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: %s [--large COUNT]   (a rank needs RANK, WORLD_SIZE, NCCL_COMM_ID)\n", argv[0]);
      return 2;
    }
  }
  if (large < 2 || large > ((size_t)1 << 26)) {
    fprintf(stderr, "mh_colls: --large must be in [2, 67108864] elements\n");
    return 2;
  }
  if (getenv("RANK") && getenv("WORLD_SIZE") && getenv("NCCL_COMM_ID")) {
    mtWatchdog(300);
    return rankMain(large);
  }
  return standalone("/proc/self/exe");
}
