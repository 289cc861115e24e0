/*
 * Mend's own nccl.h: layouts and values from the ABI facts.  Compiled as C11 and as C++17 by
 * tests/integration/test_abi.sh; a wrong layout fails to compile.
 */
#include "nccl.h"
#include <stddef.h>

#ifdef __cplusplus
#define MEND_SA static_assert
#else
#define MEND_SA _Static_assert
#endif

MEND_SA(sizeof(ncclUniqueId) == 128, "unique id is 128 bytes");
MEND_SA(sizeof(ncclConfig_t) == 96, "2.30 config is 96 bytes");
MEND_SA(offsetof(ncclConfig_t, magic) == 8, "magic");
MEND_SA(offsetof(ncclConfig_t, version) == 12, "version");
MEND_SA(offsetof(ncclConfig_t, blocking) == 16, "blocking");
MEND_SA(offsetof(ncclConfig_t, netName) == 32, "netName");
MEND_SA(offsetof(ncclConfig_t, splitShare) == 40, "splitShare");
MEND_SA(offsetof(ncclConfig_t, trafficClass) == 44, "trafficClass");
MEND_SA(offsetof(ncclConfig_t, commName) == 48, "commName");
MEND_SA(offsetof(ncclConfig_t, collnetEnable) == 56, "collnetEnable");
MEND_SA(offsetof(ncclConfig_t, shrinkShare) == 64, "shrinkShare");
MEND_SA(offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72, "nChannelsPerNetPeer");
MEND_SA(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "nvlinkCentricSched");
MEND_SA(offsetof(ncclConfig_t, graphUsageMode) == 80, "graphUsageMode (2.29)");
MEND_SA(offsetof(ncclConfig_t, numRmaCtx) == 84, "numRmaCtx (2.29)");
MEND_SA(offsetof(ncclConfig_t, maxP2pPeers) == 88, "maxP2pPeers (2.30)");
MEND_SA(offsetof(ncclConfig_t, graphStreamOrdering) == 92, "graphStreamOrdering (2.30)");
MEND_SA(sizeof(ncclSimInfo_t) == 24, "sim info is 24 bytes");
MEND_SA(NCCL_VERSION_CODE == 23007 && NCCL_MAJOR == 2 && NCCL_MINOR == 30 && NCCL_PATCH == 7, "version code");
MEND_SA(NCCL_VERSION(2, 30, 7) == 23007 && NCCL_VERSION(2, 28, 9) == 22809 && NCCL_VERSION(2, 8, 4) == 2804,
        "version macro");
MEND_SA(ncclInProgress == 7 && ncclTimeout == 8 && ncclNumResults == 9, "result codes");
MEND_SA(ncclFloat8e5m2 == 11 && ncclNumTypes == 12 && ncclBfloat16 == 9, "types");
MEND_SA(ncclAvg == 4 && ncclNumOps == 5 && ncclMaxRedOp == 0x7fffffff, "ops");
MEND_SA(sizeof(ncclRedOp_t) == 4 && sizeof(ncclDataType_t) == 4 && sizeof(ncclResult_t) == 4, "enum sizes");
MEND_SA(NCCL_SPLIT_NOCOLOR == -1 && NCCL_SHRINK_ABORT == 1 && NCCL_WIN_REQUIRED_ALIGNMENT == 4096, "macros");
MEND_SA(NCCL_WIN_DEFAULT == 0 && NCCL_WIN_COLL_SYMMETRIC == 1 && NCCL_WIN_STRICT_ORDERING == 2, "window flags");
MEND_SA(NCCL_SUSPEND_MEM == 1 && NCCL_API_MAGIC == 0xcafebeef, "2.29/2.30 macros");
MEND_SA(ncclStatGpuMemSuspend == 0 && ncclStatGpuMemSuspended == 1 && ncclStatGpuMemPersist == 2 &&
            ncclStatGpuMemTotal == 3 && sizeof(ncclCommMemStat_t) == 4,
        "memory statistics");
MEND_SA(sizeof(ncclWaitSignalDesc_t) == 16 && offsetof(ncclWaitSignalDesc_t, opCnt) == 0 &&
            offsetof(ncclWaitSignalDesc_t, peer) == 4 && offsetof(ncclWaitSignalDesc_t, sigIdx) == 8 &&
            offsetof(ncclWaitSignalDesc_t, ctx) == 12,
        "wait-signal descriptor");
MEND_SA(sizeof(ncclParamHandle_t) == sizeof(void*), "parameter handle is a pointer");

int main(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  return (config.magic == 0xcafebeef && sim.magic == 0x74685283 && config.blocking == NCCL_CONFIG_UNDEF_INT &&
          config.graphStreamOrdering == NCCL_CONFIG_UNDEF_INT && config.size == 96)
             ? 0
             : 1;
}
