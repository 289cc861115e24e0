/*
 * A rank that destroys its communicator right after its last collective must not break a peer that
 * is still receiving that collective over sockets.  The peer's receives are posted ahead of need,
 * so the close is seen while data may still be draining: every byte sent before the close must
 * arrive, and a connector that failed only because the peer closed must not fail an operation that
 * no longer needs it.  Runs 2 processes, 8 MiB Broadcast from rank 0 then an immediate destroy,
 * checked on rank 1, several rounds, over the socket Net alone and over the resilient net.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mendtest.h"
#include "mp_util.h"
#include "nccl.h"

#define ROUNDS 8
#define BYTES (8u << 20)

static int child(char** argv) {
  struct mpChild c = mpChildStart(argv, 60);
  int rank = c.rank;
  ncclComm_t comm = mpInitComm(rank, c.n, c.arg);
  unsigned char* buf = malloc(BYTES);
  CK(buf != NULL);
  for (size_t i = 0; i < BYTES; i++) buf[i] = rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
  CKOK(ncclBroadcast(buf, buf, BYTES, ncclUint8, 0, comm, NULL));
  /* A reduce to rank 1 too: the receiving side of both directions meets the close. */
  CKOK(ncclReduce(buf, buf, BYTES / 4, ncclUint32, ncclMax, 1, comm, NULL));
  CKOK(ncclCommDestroy(comm)); /* at once: the peer may still be receiving */
  if (rank == 1)
    for (size_t i = 0; i < BYTES; i++) CK(buf[i] == (unsigned char)(i * 7 + 3));
  free(buf);
  return 0;
}

static void rounds(const char* name, const char* const* env) {
  int ok = 1;
  double t0 = mtNow();
  char self[512];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[len > 0 ? len : 0] = '\0';
  for (int r = 0; r < ROUNDS && ok; r++) {
    char dir[256];
    mpTempDir(dir, sizeof dir);
    const char* why = mpSpawnWait(self, "race", 2, dir, env, 60, 2, 0);
    ok = why == NULL;
    if (!ok) fprintf(stderr, "%s: round %d failed: %s\n", name, r, why);
    mpRemoveDir(dir);
  }
  mtResult(ok, name, "a peer's destroy broke a collective still being received (%.1f s)", mtNow() - t0);
}

int main(int argc, char** argv) {
  if (mpIsChild(argc, argv)) return child(argv);
  if (!mtStart("close_race", 300)) return mtExitCode();
  const char* const plain[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", "MEND_RESILIENCE=0", NULL};
  const char* const resil[] = {"NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo", "MEND_RESILIENCE=1", NULL};
  rounds("close_race_socket_net", plain);
  rounds("close_race_resilient_net", resil);
  return mtExitCode();
}
