/*
 * Collective and point-to-point entry points.  Each checks its arguments (WARN naming the problem,
 * ncclInvalidArgument / ncclInvalidUsage), resolves the reduction op at once (a PreMulSum op may
 * be destroyed before ncclGroupEnd), logs an INFO COLL line as NCCL does, and hands a struct
 * mendOp to the group.  A count of 0 is a valid no-op (still checked).
 */
#include <stdint.h>
#include <string.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "device/engine.h"
#include "misc/cudrv.h"
#include "enqueue/plan.h"
#include "group.h"

/* Which buffers an operation reads/writes on this rank. */
#define NEED_SEND 0x1
#define NEED_RECV 0x2

static ncclResult_t checkCommReady(struct ncclComm* comm, const char* api) {
  MENDCHECK(mendCommCheck(comm, api));
  (void)mendExecPollError(comm); /* a kernel's error becomes the communicator's asynchronous error */
  int state = atomic_load(&comm->state);
  ncclResult_t async = (ncclResult_t)atomic_load(&comm->asyncResult);
  MENDARGCHECK(state != MEND_COMM_INITIALIZING, ncclInvalidArgument,
               "%s: communicator %p is still initializing (poll ncclCommGetAsyncError until ncclSuccess)", api,
               (void*)comm);
  MENDARGCHECK(state != MEND_COMM_FINALIZED, ncclInvalidUsage, "%s: communicator %p was finalized", api, (void*)comm);
  MENDARGCHECK(state != MEND_COMM_REVOKED, ncclInvalidUsage, "%s: communicator %p was revoked", api, (void*)comm);
  MENDARGCHECK(!mendCommAborted(comm), ncclInvalidUsage, "%s: communicator %p was aborted", api, (void*)comm);
  MENDARGCHECK(!atomic_load(&comm->suspended), ncclInvalidUsage,
               "%s: communicator %p is suspended (ncclCommResume first)", api, (void*)comm);
  if (state == MEND_COMM_FAILED || (async != ncclSuccess && async != ncclInProgress)) {
    WARN("%s: communicator %p has failed (%s)", api, (void*)comm,
         ncclGetErrorString(async != ncclSuccess ? async : ncclInvalidUsage));
    return async != ncclSuccess && async != ncclInProgress ? async : ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* Everything but the buffers: communicator, stream, datatype, op, root/peer. */
static ncclResult_t checkArgs(struct mendOp* op, cudaStream_t stream, const char* api, int hasOp, int hasRoot) {
  struct ncclComm* comm = op->comm;
  MENDCHECK(checkCommReady(comm, api));
  if (comm->hostMode) {
    MENDARGCHECK(stream == NULL, ncclInvalidArgument,
                 "%s: stream %p must be NULL: communicator %p runs in host mode (no CUDA device)", api,
                 (void*)stream, (void*)comm);
  }
  op->stream = (void*)stream;
  MENDARGCHECK((int)op->type >= 0 && (int)op->type < ncclNumTypes, ncclInvalidArgument,
               "%s: invalid datatype %d (valid: 0..%d)", api, (int)op->type, ncclNumTypes - 1);
  if (!hasOp) {
    /* Copies still carry a well-formed op of the right datatype (executors size elements by it). */
    MENDCHECK(mendRedOpResolve(ncclSum, op->type, comm->nRanks, &op->redop));
  } else {
    MENDARGCHECK((int)op->userOp >= 0, ncclInvalidArgument, "%s: invalid reduction operation %d", api,
                 (int)op->userOp);
    if (mendRedOpResolveComm(comm, op->userOp, op->type, &op->redop) != ncclSuccess) {
      WARN("%s: invalid reduction operation %d for datatype %s on communicator %p", api, (int)op->userOp,
           mendTypeName(op->type), (void*)comm);
      return ncclInvalidArgument;
    }
  }
  if (hasRoot) {
    MENDARGCHECK(op->root >= 0 && op->root < comm->nRanks, ncclInvalidArgument, "%s: invalid %s %d (nranks %d)",
                 api, (op->func == MEND_FUNC_SEND || op->func == MEND_FUNC_RECV) ? "peer" : "root", op->root,
                 comm->nRanks);
  }
  return ncclSuccess;
}

/* Device mode: a buffer the kernel can reach (device, managed or pinned host memory), aligned to
 * its elements, and for device memory inside one allocation.  Host mode: not device memory. */
static ncclResult_t checkMemory(const struct mendOp* op, const void* buf, size_t bytes, const char* what,
                                const char* api) {
  struct ncclComm* comm = op->comm;
  int dev = -1, kind = mendCuMemKind(buf, &dev);
  if (comm->hostMode) {
    MENDARGCHECK(kind != MEND_MEM_DEVICE, ncclInvalidArgument,
                 "%s: %s %p is device memory, but communicator %p runs in host mode (no CUDA device was current "
                 "when it was created)", api, what, buf, (void*)comm);
    return ncclSuccess;
  }
  MENDARGCHECK(kind != MEND_MEM_PAGEABLE, ncclInvalidArgument,
               "%s: %s %p is host memory the GPU cannot reach (allocate it with cudaMalloc or ncclMemAlloc, or "
               "register it with cudaHostRegister)", api, what, buf);
  size_t ts = mendTypeSize(op->type);
  MENDARGCHECK((uintptr_t)buf % ts == 0, ncclInvalidArgument, "%s: %s %p is not aligned to its %zu-byte elements",
               api, what, buf, ts);
  if (kind == MEND_MEM_DEVICE) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (mendCu.cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)buf) == MEND_CU_SUCCESS) {
      uintptr_t p = (uintptr_t)buf;
      MENDARGCHECK(p - (uintptr_t)base <= size && bytes <= size - (p - (uintptr_t)base), ncclInvalidArgument,
                   "%s: %s %p holds %zu bytes up to the end of its allocation, but the operation needs %zu", api,
                   what, buf, size - (size_t)(p - (uintptr_t)base), bytes);
    }
  }
  return ncclSuccess;
}

/* Bytes this rank's send and receive buffers span for the operation. */
static void bufferBytes(const struct mendOp* op, size_t* sendBytes, size_t* recvBytes) {
  size_t b = op->count * mendTypeSize(op->type), n = (size_t)op->comm->nRanks;
  int me = op->comm->rank == op->root;
  *sendBytes = *recvBytes = b;
  switch (op->func) {
    case MEND_FUNC_ALLGATHER: *recvBytes = b * n; break;
    case MEND_FUNC_REDUCESCATTER: *sendBytes = b * n; break;
    case MEND_FUNC_ALLTOALL: *sendBytes = *recvBytes = b * n; break;
    case MEND_FUNC_GATHER: *recvBytes = me ? b * n : 0; break;
    case MEND_FUNC_SCATTER: *sendBytes = me ? b * n : 0; break;
    default: break;
  }
}

/* Where sendbuff lies when the operation runs in place (NCCL's layouts): AllGather's input is this
 * rank's block of the output, ReduceScatter's output this rank's block of the input, Gather's and
 * Scatter's the root's block at the root; the other functions use one buffer for both. */
static uintptr_t inPlaceSend(const struct mendOp* op) {
  uintptr_t r = (uintptr_t)op->recvbuff, b = (uintptr_t)(op->count * mendTypeSize(op->type));
  switch (op->func) {
    case MEND_FUNC_ALLGATHER: return r + (uintptr_t)op->comm->rank * b;
    case MEND_FUNC_GATHER: return r + (uintptr_t)op->root * b;
    case MEND_FUNC_REDUCESCATTER: return r - (uintptr_t)op->comm->rank * b;
    case MEND_FUNC_SCATTER: return r - (uintptr_t)op->root * b;
    default: return r;
  }
}

/* Buffers that overlap must be exactly the in-place layout: any other overlap would read data that
 * the operation already overwrote (NCCL leaves it undefined; Mend refuses it). */
static ncclResult_t checkOverlap(const struct mendOp* op, size_t sendBytes, size_t recvBytes, const char* api) {
  uintptr_t s = (uintptr_t)op->sendbuff, r = (uintptr_t)op->recvbuff;
  if (sendBytes == 0 || recvBytes == 0) return ncclSuccess;
  int overlap = s >= r ? s - r < recvBytes : r - s < sendBytes;
  if (!overlap || s == inPlaceSend(op)) return ncclSuccess;
  WARN("%s: sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) partially overlap: buffers that overlap must be "
       "in place (sendbuff %p for this rank)", api, op->sendbuff, sendBytes, op->recvbuff, recvBytes,
       (void*)inPlaceSend(op));
  return ncclInvalidArgument;
}

static ncclResult_t checkBuffers(const struct mendOp* op, int need, const char* api) {
  if (op->count == 0) return ncclSuccess;
  MENDARGCHECK(!(need & NEED_SEND) || op->sendbuff != NULL, ncclInvalidArgument,
               "%s: sendbuff is NULL with count %zu", api, op->count);
  MENDARGCHECK(!(need & NEED_RECV) || op->recvbuff != NULL, ncclInvalidArgument,
               "%s: recvbuff is NULL with count %zu", api, op->count);
  size_t ts = mendTypeSize(op->type);
  MENDARGCHECK(op->count <= SIZE_MAX / ts / (size_t)op->comm->nRanks, ncclInvalidArgument,
               "%s: count %zu overflows the address space", api, op->count);
  size_t sb, rb;
  bufferBytes(op, &sb, &rb);
  if (need & NEED_SEND) MENDCHECK(checkMemory(op, op->sendbuff, sb, "sendbuff", api));
  if (need & NEED_RECV) MENDCHECK(checkMemory(op, op->recvbuff, rb, "recvbuff", api));
  if ((need & NEED_SEND) && (need & NEED_RECV)) MENDCHECK(checkOverlap(op, sb, rb, api));
  return ncclSuccess;
}

/* Common tail: checks, log, queue.  need: NEED_* flags for this rank. */
static ncclResult_t submit(struct mendOp* op, cudaStream_t stream, const char* api, int hasOp, int hasRoot,
                           int needAll, int needRoot) {
  ncclResult_t res = checkArgs(op, stream, api, hasOp, hasRoot);
  if (res == ncclSuccess) {
    int need = needAll | (hasRoot && op->comm->rank == op->root ? needRoot : 0);
    res = checkBuffers(op, need, api);
  }
  if (res != ncclSuccess) {
    mendGroupSetError(res);
    return res;
  }
  struct ncclComm* comm = op->comm;
  int p2p = op->func == MEND_FUNC_SEND || op->func == MEND_FUNC_RECV;
  op->opCount = p2p ? comm->collSeq : comm->collSeq++;
  INFO(p2p ? NCCL_P2P : NCCL_COLL,
       "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream %p",
       mendFuncName(op->func), (unsigned long)op->opCount, op->sendbuff, op->recvbuff, op->count, (int)op->type,
       (int)op->userOp, op->root, (void*)comm, comm->nRanks, (void*)stream);
  res = mendGroupEnqueue(op);
  if (res != ncclSuccess) mendGroupSetError(res);
  return res;
}

#define OP(f, s, r, c, t, o, rt, cm) \
  {.func = (f), .comm = (cm), .sendbuff = (s), .recvbuff = (r), .count = (c), .type = (t), .userOp = (o), .root = (rt)}

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm);
  return submit(&o, stream, "ncclAllReduce", 1, 0, NEED_SEND | NEED_RECV, 0);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm);
  return submit(&o, stream, "ncclBroadcast", 0, 1, NEED_RECV, NEED_SEND);
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_BROADCAST, buff, buff, count, datatype, ncclSum, root, comm);
  return submit(&o, stream, "ncclBcast", 0, 1, NEED_RECV, NEED_SEND);
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm);
  return submit(&o, stream, "ncclReduce", 1, 1, NEED_SEND, NEED_RECV);
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm);
  return submit(&o, stream, "ncclAllGather", 0, 0, NEED_SEND | NEED_RECV, 0);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1, comm);
  return submit(&o, stream, "ncclReduceScatter", 1, 0, NEED_SEND | NEED_RECV, 0);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, -1, comm);
  return submit(&o, stream, "ncclAlltoAll", 0, 0, NEED_SEND | NEED_RECV, 0);
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_GATHER, sendbuff, recvbuff, count, datatype, ncclSum, root, comm);
  return submit(&o, stream, "ncclGather", 0, 1, NEED_SEND, NEED_RECV);
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum, root, comm);
  return submit(&o, stream, "ncclScatter", 0, 1, NEED_RECV, NEED_SEND);
}

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm);
  return submit(&o, stream, "ncclSend", 0, 1, NEED_SEND, 0);
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  struct mendOp o = OP(MEND_FUNC_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm);
  return submit(&o, stream, "ncclRecv", 0, 1, NEED_RECV, 0);
}
