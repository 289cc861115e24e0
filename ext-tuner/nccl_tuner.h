/*
 * The tuner plugin ABI, versions 2 to 5, as Mend loads it (written from the ABI facts).
 * A tuner exports `ncclTunerPlugin_vN`; Mend finds it through NCCL_TUNER_PLUGIN.
 */
#ifndef MEND_EXT_NCCL_TUNER_H_
#define MEND_EXT_NCCL_TUNER_H_

#include <stddef.h>
#include <stdint.h>
#include "../ext-net/nccl_net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective kinds a tuner is asked about. */
typedef enum {
  ncclFuncBroadcast = 0, ncclFuncReduce = 1, ncclFuncAllGather = 2, ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4, ncclFuncSendRecv = 5, ncclFuncSend = 6, ncclFuncRecv = 7, ncclFuncAlltoAll = 8,
  ncclFuncScatter = 9, ncclFuncGather = 10, ncclNumFuncs = 11
} ncclFunc_t;

#define NCCL_NUM_FUNCTIONS 5
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7
#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3
/* A cost-table cell set to this disables that algorithm/protocol pair. */
#define NCCL_ALGO_PROTO_IGNORE -1.0

typedef struct {
  int nNvlDomains;          /* NVLink domains in the communicator */
  int minRanksPerNvlDomain; /* smallest domain */
  int maxRanksPerNvlDomain; /* largest domain */
} ncclNvlDomainInfo_v5_t;

/* Latency and bandwidth constants NCCL's model starts from (Mend fills what it models, zero elsewhere). */
typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];      /* us */
  double hwLatencies[3][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];     /* us, per link kind */
  double bandwidths[5][4][NCCL_NUM_PROTOCOLS];                        /* GB/s, per capability class */
} ncclTunerConstants_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                              int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       ncclNvlDomainInfo_v5_t* nvlDomainInfo, ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

#ifdef __cplusplus
}
#endif

#endif
