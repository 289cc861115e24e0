/*
 * Export of the public API.  Every ncclX is a weak, default-visibility alias of the strong pncclX,
 * so a profiling tool can define its own ncclX and forward to pncclX (NCCL's PMPI-style hook).
 * Usage:  NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, ...);
 *         ncclResult_t pncclAllReduce(const void* sendbuff, ...) { ... }
 */
#ifndef MEND_API_H_
#define MEND_API_H_

#include "nccl.h"

#define NCCL_API(ret, func, ...)                                                           \
  __attribute__((visibility("default"))) ret p##func(__VA_ARGS__);                        \
  __attribute__((visibility("default"), weak, alias("p" #func))) ret func(__VA_ARGS__)

#endif
