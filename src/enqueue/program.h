/*
 * Programs: the schedule is data.  A generator (gen_*.c) emits, for one rank and one channel, a
 * short program of primitive steps over chunk slots; an executor (the host engine, later the CUDA
 * kernel) interprets it.  A program holds no pointers and no sizes: buffers, counts, chunk size,
 * datatype and reduction are arguments of the work that runs it (struct mendWorkArgs), so one
 * program serves any count, and a re-plan (after a NIC failure) is just another program.
 *
 * Shape: a program is 1..MEND_PROG_MAX_PHASES phases run one after the other.  A phase repeats its
 * steps once per loop iteration until the work's window of `count` elements is covered; each loop
 * iteration covers `loopSegs` segments:
 *   CHUNKED  the loop covers loopSegs consecutive chunks of the window; segment s is chunk s.
 *            The chunk of an iteration is min(chunkElems, alignUp(divUp(left, loopSegs), align)),
 *            so the last iteration is spread evenly over the segments (and may leave some empty).
 *   BLOCKED  each buffer holds blocks (one per rank, args.blockStride elements apart; stride 0: a
 *            single block); an iteration covers min(chunkElems, left) elements of every block, and
 *            segment s is block segMap[s] (the identity when the program has no segMap).
 * A step names its input (recv connector, src buffer), its outputs (dst buffer, send connector),
 * a segment, and how often it repeats: repetition t uses segment (seg + t * segDelta) mod loopSegs,
 * so a ring step of n-2 hops is one step and a ring program has five steps at any rank count.
 * A segment of zero elements is skipped by every rank alike (all ranks compute the same lengths).
 */
#ifndef MEND_ENQUEUE_PROGRAM_H_
#define MEND_ENQUEUE_PROGRAM_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_PROG_MAX_PEERS 8  /* connectors one program names (tree: parent + 3 children, 2 dirs) */
#define MEND_PROG_MAX_PHASES 2 /* tree: reduce up, then broadcast down */
#define MEND_PROG_MAX_STEPS 16 /* steps over all phases */
#define MEND_PROG_NO_PEER 0xff /* recvPeer/sendPeer of a step that does not receive/send */

/* Buffers a step can name; the work supplies their base pointers. */
enum mendBufId {
  MEND_BUF_NONE = 0,    /* no buffer */
  MEND_BUF_SEND = 1,    /* the user's send buffer (this rank's input) */
  MEND_BUF_RECV = 2,    /* the user's receive buffer (output, also used for partials) */
  MEND_BUF_SCRATCH = 3, /* a planner-owned temporary (in-place AlltoAll) */
  MEND_NBUFS = 4        /* number of buffer ids */
};

/* Step opcodes are made of four bits; the executor reads the bits, the names read as NCCL's. */
#define MEND_STEP_RECV 0x1   /* take one slot from the recv connector */
#define MEND_STEP_REDUCE 0x2 /* combine the received slot with src (else the data is the slot, or src) */
#define MEND_STEP_COPY 0x4   /* write the data to dst */
#define MEND_STEP_SEND 0x8   /* post the data in one slot of the send connector */
enum mendStepOp {
  MEND_OP_SEND = MEND_STEP_SEND,                                     /* src -> peer */
  MEND_OP_RECV = MEND_STEP_RECV | MEND_STEP_COPY,                    /* peer -> dst */
  MEND_OP_COPY = MEND_STEP_COPY,                                     /* src -> dst (local) */
  MEND_OP_COPY_SEND = MEND_STEP_COPY | MEND_STEP_SEND,               /* src -> dst and peer */
  MEND_OP_RECV_SEND = MEND_STEP_RECV | MEND_STEP_SEND,               /* forward a slot */
  MEND_OP_RECV_COPY_SEND = MEND_STEP_RECV | MEND_STEP_COPY | MEND_STEP_SEND,       /* peer -> dst, next */
  MEND_OP_RECV_REDUCE_SEND = MEND_STEP_RECV | MEND_STEP_REDUCE | MEND_STEP_SEND,   /* src+peer -> next */
  MEND_OP_RECV_REDUCE_COPY = MEND_STEP_RECV | MEND_STEP_REDUCE | MEND_STEP_COPY,   /* src+peer -> dst */
  MEND_OP_RECV_REDUCE_COPY_SEND = MEND_STEP_RECV | MEND_STEP_REDUCE | MEND_STEP_COPY | MEND_STEP_SEND
};

/* Step flags: where this rank's own input enters (pre-multiply) and where a value becomes final
 * (integer average divides); the same values as MEND_RED_PREOP / MEND_RED_POSTOP of reduce.h. */
#define MEND_STEP_PREOP 0x1
#define MEND_STEP_POSTOP 0x2

enum mendLayout {
  MEND_LAYOUT_CHUNKED = 0, /* segments are consecutive chunks of one window */
  MEND_LAYOUT_BLOCKED = 1  /* segments are per-rank blocks of each buffer */
};

/* One connector a program uses, on the work's channel. */
struct mendProgPeer {
  int32_t rank;      /* peer rank in the communicator */
  uint8_t dir;       /* enum mendConnDir: MEND_SEND (0) or MEND_RECV (1) */
  uint8_t connIndex; /* MEND_CONN_COLL or MEND_CONN_P2P */
  uint16_t pad;      /* keeps the struct 8 bytes */
};

struct mendProgPhase {
  uint8_t layout;    /* enum mendLayout */
  uint8_t firstStep; /* index of its first step in steps[] */
  uint8_t nSteps;    /* steps run per loop iteration */
  uint8_t pad;       /* alignment */
  uint32_t loopSegs; /* segments per loop iteration (>= 1) */
};

struct mendProgStep {
  uint8_t op;       /* enum mendStepOp */
  uint8_t flags;    /* MEND_STEP_PREOP / MEND_STEP_POSTOP */
  uint8_t recvPeer; /* index into peers[] of the recv connector, MEND_PROG_NO_PEER if none */
  uint8_t sendPeer; /* index into peers[] of the send connector, MEND_PROG_NO_PEER if none */
  uint8_t src;      /* enum mendBufId read (the local operand) */
  uint8_t dst;      /* enum mendBufId written */
  uint16_t repeat;  /* times the step runs per loop iteration (>= 1) */
  int32_t seg;      /* segment of the first repetition, in [0, loopSegs) */
  int32_t segDelta; /* added (mod loopSegs) to the segment on each repetition */
};

/* Which algorithm produced a program (logs, TUNING lines, tests). */
enum mendAlgo {
  MEND_ALGO_TREE = 0,  /* NCCL_ALGO_TREE: double binary tree (AllReduce) */
  MEND_ALGO_RING = 1,  /* NCCL_ALGO_RING */
  MEND_ALGO_RD = 2,    /* recursive doubling AllReduce, small counts (gen_rd.c; not an NCCL_ALGO bit) */
  MEND_ALGO_P2P = 7,   /* direct sends and receives (send/recv, AlltoAll, Gather, Scatter) */
  MEND_ALGO_LOCAL = 8, /* one rank, or a send to self: a local copy */
  MEND_NALGOS = 9      /* size of name tables */
};

struct mendProgram {
  uint32_t bytes;    /* size of the whole program, segMap included */
  uint8_t algo;      /* enum mendAlgo */
  uint8_t nPeers;    /* entries used in peers[] */
  uint8_t nPhases;   /* entries used in phases[] */
  uint8_t nSteps;    /* entries used in steps[] */
  uint32_t nSegMap;  /* entries of segMap (0: identity) */
  uint32_t overflow; /* builder errors (table full); mendProgValidate rejects the program */
  struct mendProgPeer peers[MEND_PROG_MAX_PEERS];
  struct mendProgPhase phases[MEND_PROG_MAX_PHASES];
  struct mendProgStep steps[MEND_PROG_MAX_STEPS];
  int32_t segMap[];  /* BLOCKED phases: block index of each segment */
};

/* ---- building (program.c) ---- */
/* A zeroed program with room for nSegMap segment-map entries (free with free()). */
ncclResult_t mendProgAlloc(int algo, uint32_t nSegMap, struct mendProgram** prog);
/* Index of the peer entry (rank, dir, connIndex), added when new; -1 when the table is full. */
int mendProgAddPeer(struct mendProgram* prog, int rank, int dir, int connIndex);
/* Start a phase; the steps added next belong to it. */
void mendProgAddPhase(struct mendProgram* prog, int layout, uint32_t loopSegs);
/* Append a step to the current phase.  recvRank/sendRank: -1 for none; connIndex applies to both. */
void mendProgAddStep(struct mendProgram* prog, int op, int flags, int recvRank, int sendRank, int connIndex,
                  int src, int dst, int seg, int repeat, int segDelta);
/* Check the invariants the executors rely on (indices in range, op/peer agreement, segments);
 * WARNs and returns ncclInternalError on a malformed program. */
ncclResult_t mendProgValidate(const struct mendProgram* prog);
/* One line per step, for TRACE logs and test failure messages. */
void mendProgDump(const struct mendProgram* prog, char* buf, size_t len);
const char* mendAlgoName(int algo);

#ifdef __cplusplus
}
#endif

#endif
