/* The collectives the peers (Open MPI, Gloo) run, described like the Mend tools describe theirs
 * (same counts, in-place layouts, bus-bandwidth factors and test data), so all three print
 * comparable rows. Only the descriptor fields that need no NCCL call are filled. */
#ifndef MEND_PEER_COLLS_H_
#define MEND_PEER_COLLS_H_

#include "bench.h"

#ifdef __cplusplus
extern "C" {
#endif

enum peerCollId { peerAllReduce, peerAllGather, peerBroadcast, peerReduceScatter, peerAlltoAll, peerNumColls };

/* A peer collective. */
struct peerColl {
  enum peerCollId id;        /* which one */
  const char* arg;           /* command-line name: allreduce, allgather, broadcast, reduce_scatter, alltoall */
  const char* tool;          /* the Mend tool that measures the same thing */
  struct benchColl desc;     /* counts, busFactor, fillSend, fillExpected (run is NULL) */
};

/* NULL (after listing the names on stderr) when `arg` names no peer collective. */
const struct peerColl* peerCollByArg(const char* arg);
/* Reads RANK and WORLD_SIZE (an env launch such as mend-run's); -1 if unset or invalid. */
int peerEnvRank(int* rank, int* size);

#ifdef __cplusplus
}
#endif

#endif

#ifndef MEND_PEER_DRIVER_H_
#define MEND_PEER_DRIVER_H_
#ifdef __cplusplus
extern "C" {
#endif

/* What a peer library provides to the shared driver (peer_driver.c). */
struct peerBackend {
  const char* label;         /* e.g. "Open MPI 4.1.4", printed in the header */
  int rank;                  /* this process */
  int size;                  /* processes */
  void* ctx;                 /* the library's state, passed back to every call */
  int (*barrier)(void* ctx);
  int (*sumDoubles)(void* ctx, double* v, int n);   /* allreduce sum, in place */
  /* One call. In place, `send` points into `recv` at the nccl-tests layout; a library whose
   * in-place call puts the result elsewhere says where with resultOffset (elements into recv). */
  int (*run)(void* ctx, const struct peerColl* pc, void* send, void* recv, const struct benchCounts* c,
             int type, int op, int root, int inplace);
  size_t (*resultOffset)(void* ctx, const struct peerColl* pc, const struct benchCounts* c, int inplace);
  int (*supports)(void* ctx, const struct peerColl* pc, int type, int op);  /* 0: print why on stderr */
};

/* Parses "<collective> [nccl-tests flags]", runs the sweep and prints the table on rank 0. */
int peerMain(int argc, char** argv, const struct peerColl* pc, struct peerBackend* be);

#ifdef __cplusplus
}
#endif
#endif
