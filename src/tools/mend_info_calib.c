/*
 * mend-info --calibrate: measure the cost model's constants on this machine and write them in the
 * format MEND_CALIB_FILE reads (src/enqueue/calib.h).
 *
 * Per transport kind, two ranks of a fresh host-mode communicator (p2p: two threads of one process;
 * shm: two processes; net: two processes with NCCL_SHM_DISABLE=1) exchange messages with ncclSend /
 * ncclRecv:
 *   alpha       half the best round trip of an 8-byte ping-pong (batches of 50, best batch average);
 *   bw channel  a 16 MiB one-way stream on one channel per peer (MEND_P2P_NCHANNELS_PER_PEER=1);
 *   bw max      the same on four channels per peer (never below bw channel).
 * The reduction rate is the host's float sum on 4 MiB buffers (dst = a + b, in cache as a chunk is).
 * The hand-off is the shm ping-pong's hop with both processes bound to one CPU: what a dependent step
 * costs when ranks outnumber CPUs (the cost model charges it per step, times the ranks per CPU).
 * The ping-pong and the stream are the library's (mendCalibPairRun), which rank 0 of a communicator
 * also runs at init with MEND_CALIB_AUTO=1 (src/enqueue/calib_measure.c: two threads, one-host kinds).
 * Every measurement runs in a child process with its own environment and a time bound, so the
 * library's cached parameters and threads never leak from one into the next; a kind that cannot be
 * measured (no usable interface for sockets) keeps its built-in values and says so.
 */
#include "mend_info_calib.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/reduce.h"
#include "enqueue/calib.h"
#include "nccl.h"

#define STREAM_BYTES (16u << 20)
#define STREAM_REPS 6
#define CHILD_LIMIT_S 60  /* a measurement that takes longer is killed and reported */

static const char* kindNames[MEND_CALIB_KINDS] = {"p2p", "shm", "net"};

static int rankMain(int rank, ncclUniqueId id, struct mendCalibPair* out) {
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRank(&comm, 2, id, rank);
  if (res == ncclSuccess) res = mendCalibPairRun(comm, STREAM_BYTES, STREAM_REPS, out);
  if (comm) ncclCommDestroy(comm);
  if (res != ncclSuccess) fprintf(stderr, "mend-info --calibrate: rank %d: %s\n", rank, ncclGetErrorString(res));
  return res == ncclSuccess ? 0 : 1;
}

struct threadArg {
  ncclUniqueId id;
  struct mendCalibPair out;
  int rc;
};

static void* rankOneThread(void* p) {
  struct threadArg* a = p;
  a->rc = rankMain(1, a->id, &a->out);
  return NULL;
}

static int writeAll(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int readAll(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Inside the measuring child: rank 0 here, rank 1 in a thread (p2p) or a process of its own. */
static int pairMain(int kind, int resultFd) {
  struct mendCalibPair out = {0};
  int idPipe[2];
  if (pipe(idPipe) != 0) return 1;
  pid_t peer = -1;
  if (kind != 0) {
    peer = fork();
    if (peer < 0) return 1;
    if (peer == 0) { /* rank 1: its id comes from rank 0, which alone started the bootstrap root */
      ncclUniqueId id;
      close(idPipe[1]);
      struct mendCalibPair mine;
      _exit(readAll(idPipe[0], &id, sizeof(id)) == 0 ? rankMain(1, id, &mine) : 1);
    }
  }
  close(idPipe[0]);
  ncclUniqueId id;
  int rc = ncclGetUniqueId(&id) == ncclSuccess ? 0 : 1;
  struct threadArg arg = {.id = id};
  pthread_t th;
  if (rc == 0 && kind != 0) rc = writeAll(idPipe[1], &id, sizeof(id));
  if (rc == 0 && kind == 0) rc = pthread_create(&th, NULL, rankOneThread, &arg);
  if (rc == 0) rc = rankMain(0, id, &out);
  if (kind == 0 && rc == 0) {
    pthread_join(th, NULL);
    rc = arg.rc;
  }
  close(idPipe[1]);
  if (peer > 0) {
    int st = 0;
    if (waitpid(peer, &st, 0) != peer || !WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  out.ok = out.ok && rc == 0;
  writeAll(resultFd, &out, sizeof(out));
  return rc;
}

/* Bind this process (and what it forks) to the first CPU it may run on. */
static int pinToOneCpu(void) {
  cpu_set_t set, one;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (CPU_ISSET(c, &set)) {
      CPU_SET(c, &one);
      return sched_setaffinity(0, sizeof(one), &one);
    }
  }
  return -1;
}

/* One measurement of `kind` with `perPeer` channels per peer, in a child process; pinned: both ranks
 * on one CPU. */
static int runPair(int kind, int perPeer, int pinned, struct mendCalibPair* out) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fds[0]);
    setpgid(0, 0); /* the time bound kills rank 1's process too */
    alarm(CHILD_LIMIT_S);
    if (pinned && pinToOneCpu() != 0) _exit(1);
    char v[16];
    snprintf(v, sizeof(v), "%d", perPeer);
    setenv("MEND_P2P_NCHANNELS_PER_PEER", v, 1);
    setenv("MEND_P2P_CHANNEL_BYTES", "65536", 1);
    setenv("MEND_CUDA_DISABLE", "1", 1);
    setenv("MEND_CALIB_AUTO", "0", 1); /* the measured pair measures nothing at its own init */
    if (kind == 2) setenv("NCCL_SHM_DISABLE", "1", 1);
    _exit(pairMain(kind, fds[1]));
  }
  close(fds[1]);
  memset(out, 0, sizeof(*out));
  int got = readAll(fds[0], out, sizeof(*out)) == 0;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  kill(-pid, SIGKILL); /* whatever of the group is left after a failure */
  return got && out->ok && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

void mendInfoCalibUsage(void* file) {
  fprintf((FILE*)file,
          "  --calibrate [-o FILE]  measure the cost model's constants (hop latency and bandwidths per\n"
          "             transport, host reduction rate) and print them; -o writes them to FILE for\n"
          "             MEND_CALIB_FILE (copy the same file to every host)\n");
}

int mendInfoCalib(int argc, char** argv) {
  const char* outPath = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      outPath = argv[++i];
    } else {
      fprintf(stderr, "mend-info --calibrate: unknown or incomplete option '%s'\n", argv[i]);
      mendInfoCalibUsage(stderr);
      return 2;
    }
  }
  struct mendCalib c;
  mendCalibDefaults(&c);
  int measured = 0;
  printf("# %-4s %10s %14s %12s  %s\n", "kind", "alpha_us", "bw_channel", "bw_max", "(GB/s)");
  for (int k = 0; k < MEND_CALIB_KINDS; k++) {
    struct mendCalibPair one, four;
    if (runPair(k, 1, 0, &one) != 0 || runPair(k, 4, 0, &four) != 0) {
      printf("# %-4s not measured (see the errors above); built-in values kept\n", kindNames[k]);
      continue;
    }
    c.kind[k].alphaUs = one.alphaUs < four.alphaUs ? one.alphaUs : four.alphaUs;
    c.kind[k].bwChannel = one.gbs;
    c.kind[k].bwMax = four.gbs > one.gbs ? four.gbs : one.gbs;
    measured++;
    printf("# %-4s %10.2f %14.2f %12.2f\n", kindNames[k], c.kind[k].alphaUs, c.kind[k].bwChannel, c.kind[k].bwMax);
  }
  struct mendCalibPair crowded;
  if (runPair(1, 1, 1, &crowded) == 0) {
    c.handoffUs = crowded.alphaUs;
    printf("# hand-off (shm, two ranks on one CPU) %.2f us\n", c.handoffUs);
  } else {
    printf("# hand-off not measured (see the errors above); built-in value kept\n");
  }
  double red = mendCalibReduceGBs(2e5);
  if (red > 0) c.reduceGBs = red;
  printf("# reduce (float sum, 4 MiB) %.2f GB/s\n", c.reduceGBs);
  mendCalibWrite(stdout, &c);
  if (outPath) {
    FILE* f = fopen(outPath, "w");
    if (f == NULL) {
      fprintf(stderr, "mend-info --calibrate: cannot write %s: %s\n", outPath, strerror(errno));
      return 1;
    }
    fprintf(f, "# mend-info --calibrate: %d of %d transport kinds measured\n", measured, MEND_CALIB_KINDS);
    mendCalibWrite(f, &c);
    if (fclose(f) != 0) {
      fprintf(stderr, "mend-info --calibrate: cannot write %s: %s\n", outPath, strerror(errno));
      return 1;
    }
  }
  return measured > 0 ? 0 : 1;
}
