/*
 * External tuner plugins (ABI v2 to v5).  NCCL_TUNER_PLUGIN names a library (as given, then
 * libnccl-tuner-<name>.so); unset: libnccl-tuner.so, then the loaded net plugin library; "none" disables.
 * The planner fills a cost table [NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS] from its own model
 * (NCCL_ALGO_PROTO_IGNORE where Mend has no schedule), lets the tuner rewrite it, then picks the
 * cheapest cell it can run.
 */
#ifndef MEND_PLUGIN_TUNER_PLUGIN_H_
#define MEND_PLUGIN_TUNER_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>
#include "nccl.h"

#define MEND_TUNER_NALGOS 7   /* NCCL_NUM_ALGORITHMS */
#define MEND_TUNER_NPROTOS 3  /* NCCL_NUM_PROTOCOLS */

struct mendTuner;

/* A tuner for one communicator, or *tuner = NULL when no plugin is configured (not an error). */
ncclResult_t mendTunerOpen(uint64_t commHash, int nRanks, int nNodes, struct mendTuner** tuner);
/* Ask the tuner about one operation.  func uses ncclFunc_t numbering (AllReduce = 4 ...).
 * costs is read and rewritten; *nChannels is left alone unless the tuner sets it (> 0). */
ncclResult_t mendTunerGetCollInfo(struct mendTuner* tuner, int func, size_t nBytes,
                                  float costs[MEND_TUNER_NALGOS][MEND_TUNER_NPROTOS], int* nChannels);
const char* mendTunerName(const struct mendTuner* tuner);
void mendTunerClose(struct mendTuner* tuner);

#endif
