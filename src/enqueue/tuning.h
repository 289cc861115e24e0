/*
 * Tuning: NCCL_ALGO / NCCL_PROTO parsing and the alpha-beta cost model (tuning.c).
 * Plain functions of plain numbers, so tests call them directly.  See src/enqueue/README.md for
 * the constants and how a choice is made.
 */
#ifndef MEND_ENQUEUE_TUNING_H_
#define MEND_ENQUEUE_TUNING_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "enqueue/gen.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's numbering (bits of the masks). */
#define MEND_NCCL_ALGO_TREE 0
#define MEND_NCCL_ALGO_RING 1
#define MEND_NCCL_NUM_ALGOS 7
#define MEND_NCCL_PROTO_LL 0
#define MEND_NCCL_PROTO_LL128 1
#define MEND_NCCL_PROTO_SIMPLE 2
#define MEND_NCCL_NUM_PROTOS 3

/* Parse NCCL_ALGO (kind 0) or NCCL_PROTO (kind 1) syntax into per-function masks:
 *   "Ring,Tree"      only these;          "^Tree"      all but these;
 *   "ring;allreduce:tree,ring;allgather:^ring"   a default list, then per-function lists.
 * Names are case-insensitive.  NULL or "" allows everything.  An unknown name or function sets
 * *bad to the offending token (static storage) and is ignored; returns ncclInvalidArgument then. */
ncclResult_t mendTuneParse(const char* str, int kind, uint32_t masks[MEND_NFUNCS], const char** bad);
const char* mendTuneAlgoName(int ncclAlgo);
const char* mendTuneProtoName(int ncclProto);

/* Cost model inputs that are the same on every rank. */
struct mendCostIn {
  int func;          /* enum mendFunc */
  size_t nBytes;     /* NCCL's size of the op (AllGather/ReduceScatter: the full buffer) */
  int nRanks;        /* ranks */
  int kind;          /* slowest transport between ranks (enum mendTransportKind) */
  int nChannels;     /* channels the op is split over */
  double netGBs;     /* NIC speed in GB/s for net transports (0: default) */
};
/* Estimated time in microseconds of algo (enum mendAlgo) for the op; < 0 when it cannot run it. */
double mendTuneCostUs(const struct mendCostIn* in, int algo);
/* Channels worth using for nBytes (before NCCL_MIN/MAX_NCHANNELS and the channels that exist). */
int mendTuneChannels(size_t nBytes, int kind);
/* Chunk for an op on one channel, given the FIFO slot size (before MEND_CHUNKSIZE). */
size_t mendTuneChunk(int func, int algo, size_t bytesPerChannel, int nRanks, size_t slotBytes);

#ifdef __cplusplus
}
#endif

#endif
