/*
 * Example tuner plugin (ABI v5): chooses Ring for AllReduce at or above a size threshold and Tree
 * below it, and asks for a fixed channel count.
 *   EXAMPLE_TUNER_RING_BYTES  threshold (default 65536)
 *   EXAMPLE_TUNER_CHANNELS    channels to ask for (default: leave the library's choice)
 */
#include <stdlib.h>
#include "../nccl_tuner.h"

struct exTuner { size_t ringBytes; int channels; ncclDebugLogger_t log; };

static ncclResult_t exInit(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                           ncclNvlDomainInfo_v5_t* nvl, ncclTunerConstants_v5_t* constants) {
  struct exTuner* t = calloc(1, sizeof(*t));
  if (!t) return ncclSystemError;
  const char* s = getenv("EXAMPLE_TUNER_RING_BYTES");
  t->ringBytes = s ? strtoull(s, NULL, 0) : 65536;
  s = getenv("EXAMPLE_TUNER_CHANNELS");
  t->channels = s ? atoi(s) : 0;
  t->log = log;
  *ctx = t;
  return ncclSuccess;
}

static ncclResult_t exGetCollInfo(void* ctx, ncclFunc_t coll, size_t nBytes, int numPipeOps, float** table,
                                  int numAlgo, int numProto, int regBuff, int* nChannels) {
  struct exTuner* t = ctx;
  float (*cost)[NCCL_NUM_PROTOCOLS] = (float (*)[NCCL_NUM_PROTOCOLS])table;
  if (coll == ncclFuncAllReduce) {
    int want = nBytes >= t->ringBytes ? NCCL_ALGO_RING : NCCL_ALGO_TREE;
    if (want < numAlgo && cost[want][NCCL_PROTO_SIMPLE] != NCCL_ALGO_PROTO_IGNORE) cost[want][NCCL_PROTO_SIMPLE] = 0.0f;
  }
  if (t->channels > 0) *nChannels = t->channels;
  return ncclSuccess;
}

static ncclResult_t exFinalize(void* ctx) { free(ctx); return ncclSuccess; }

__attribute__((visibility("default"))) const ncclTuner_v5_t ncclTunerPlugin_v5 = {
  .name = "ExampleTuner", .init = exInit, .getCollInfo = exGetCollInfo, .finalize = exFinalize,
};
