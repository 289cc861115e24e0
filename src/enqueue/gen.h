/*
 * Program generators: one short file per algorithm (docs/algorithms.md has a row for each).
 * A generator sees only plain numbers (rank count, ring order, tree neighbours, root) and emits
 * the program of ONE rank on ONE channel; every rank runs the same generator with its own index,
 * so the programs of all ranks match step for step.
 */
#ifndef MEND_ENQUEUE_GEN_H_
#define MEND_ENQUEUE_GEN_H_

#include "enqueue/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Operations, numbered as NCCL's ncclFunc_t (what a tuner plugin sees). */
enum mendFunc {
  MEND_FUNC_BROADCAST = 0,     /* ncclBroadcast, ncclBcast */
  MEND_FUNC_REDUCE = 1,        /* ncclReduce */
  MEND_FUNC_ALLGATHER = 2,     /* ncclAllGather */
  MEND_FUNC_REDUCESCATTER = 3, /* ncclReduceScatter */
  MEND_FUNC_ALLREDUCE = 4,     /* ncclAllReduce */
  MEND_FUNC_SENDRECV = 5,      /* a send and a receive (tuner numbering only) */
  MEND_FUNC_SEND = 6,          /* ncclSend */
  MEND_FUNC_RECV = 7,          /* ncclRecv */
  MEND_FUNC_ALLTOALL = 8,      /* ncclAlltoAll */
  MEND_FUNC_SCATTER = 9,       /* ncclScatter */
  MEND_FUNC_GATHER = 10,       /* ncclGather */
  MEND_NFUNCS = 11             /* number of functions */
};
const char* mendFuncName(int func);

/* Ring (gen_ring.c): AllReduce, AllGather, ReduceScatter, Broadcast, Reduce over the ring
 * ringRanks[0..nRanks-1] (position -> rank), for the rank at position `index`.  root is a rank.
 * One rank gives a local program (a copy, with the reduction's pre/post ops where they apply). */
ncclResult_t mendGenRing(int func, int nRanks, const int* ringRanks, int index, int root,
                         struct mendProgram** prog);

/* Tree AllReduce (gen_tree.c): reduce up the tree, then broadcast down, pipelined by chunks.
 * up: parent rank (-1 at the root); down: nDown children ranks. */
ncclResult_t mendGenTreeAllReduce(int up, const int* down, int nDown, struct mendProgram** prog);
/* Double binary tree over ring positions: tree 0 is a binary tree in in-order numbering, tree 1
 * its mirror, so most leaves of one are inner nodes of the other.  Fills positions (-1: none). */
void mendTreeDoubleBinary(int nRanks, int pos, int which, int* up, int down[2]);

/* Recursive doubling AllReduce (gen_rd.c) over positions 0..n-1 (ranks[] maps them to ranks), for
 * the rank at position q: log2(P) exchange rounds of the whole partial, P the largest power of two
 * <= n, plus one hop before and after for the n - P positions past P.  mendRdSupported: whether its
 * connectors and steps fit a program (n <= 16). */
int mendRdSupported(int nRanks);
ncclResult_t mendGenRdAllReduce(int n, const int* ranks, int q, struct mendProgram** prog);
/* Recursive doubling AllGather (gen_rd.c): ceil(log2 n) rounds; with n a power of two round k
 * exchanges 2^k blocks with the position q ^ 2^k, otherwise (Bruck's order) the round of distance d
 * sends min(d, n - d) blocks to q - d and takes as many from q + d.  Where its connectors (2 a round)
 * and largest round (slots on one connector, and the op's signature) fit: mendRdAllGatherSupported
 * (2-15 ranks). */
int mendRdAllGatherSupported(int nRanks);
ncclResult_t mendGenRdAllGather(int n, const int* ranks, int q, struct mendProgram** prog);
/* ReduceScatter in one hop, for small counts (MEND_ALGO_RD's slot for it; gen_rd.c): every position
 * sends each other position its block at once, then reduces the n - 1 blocks it receives into its
 * own, so a rank waits for its peers once instead of n - 1 times round a ring (a crowded host pays a
 * turn on a shared CPU per wait).  The same bytes as the ring.  mendRdReduceScatterSupported: its
 * 2(n - 1) connectors fit a program (n <= 5). */
int mendRdReduceScatterSupported(int nRanks);
ncclResult_t mendGenRdReduceScatter(int n, const int* ranks, int q, struct mendProgram** prog);

/* R2 AllReduce, one partial level (gen_r2.c): the part the `inner` ranks (k, sub-ring order) reduce
 * in a ring while the `outer` ranks (d, chain order; 1 <= d <= k x MEND_R2_MAX_FANOUT) work on the
 * global ring, then the outer ranks' inputs join through a chain and the result comes back to them.
 * For rank `me`: an inner rank gets 1 program (ring, then chain), an outer rank 2 (its input going
 * in, the result coming back; they must be separate works).  The global part is mendGenRing. */
#define MEND_R2_MAX_FANOUT 4 /* outer ranks one inner rank hands the result to */
ncclResult_t mendGenR2Level(int k, const int* inner, int d, const int* outer, int me, struct mendProgram* progs[2],
                            int* nProgs);

/* Direct P2P (gen_p2p.c): send the SEND buffer to peer / receive the RECV buffer from peer,
 * chunk by chunk on the P2P connectors; a local copy SEND -> RECV with the given step flags. */
ncclResult_t mendGenP2pSend(int peer, struct mendProgram** prog);
ncclResult_t mendGenP2pRecv(int peer, struct mendProgram** prog);
ncclResult_t mendGenCopy(int flags, struct mendProgram** prog);

#ifdef __cplusplus
}
#endif

#endif
