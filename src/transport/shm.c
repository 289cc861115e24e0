/*
 * shm: ranks of one host in different processes.  The receiver creates one POSIX shm segment per
 * connection (FIFO counters, then slots) and the sender maps it, then unlinks its name at once: from
 * then on nothing is left in /dev/shm whatever happens to either process.  Bells come from the bell
 * pages mapped at init (transport.c).
 * Device mode: ranks on the same GPU share a block of device memory through CUDA IPC instead (the
 * receiver allocates and exports it, the sender opens it); ranks on different GPUs keep the shm
 * segment, registered with CUDA in both processes so kernels reach it (pinned, mapped).
 */
#include "transport/transport_priv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checks.h"
#include "misc/cudrv.h"
#include "misc/utils.h"
#include "misc/fault.h"

struct shmPriv {
  void* map;                       /* our mapping of the segment */
  void* ipcMem;                    /* device mode, same GPU: the block (receiver: allocated; sender: opened) */
  int registered;                  /* device mode, other GPUs: map is registered with CUDA */
  size_t size;                     /* its length */
  int creator;                     /* 1: we created it (the receiver) */
  char name[MEND_SHM_NAME_LEN];    /* its name, for the receiver's unlink when the sender never came */
};

static ncclResult_t shmMap(const char* name, int fd, size_t size, void** map) {
  void* p = mendFaultCheck("shm.map") ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    WARN("SHM: cannot map %s (%zu bytes): %m", name, size);
    return ncclSystemError;
  }
  *map = p;
  return ncclSuccess;
}

ncclResult_t mendShmCreate(const char* name, size_t size, void** map) {
  int fd = mendFaultCheck("shm.open") ? (errno = EACCES, -1) : shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    WARN("SHM: cannot create %s: %m", name);
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  /* Reserve the pages now: a full /dev/shm must fail here, not SIGBUS on first touch. */
  int err = posix_fallocate(fd, 0, (off_t)size);
  if (err) {
    errno = err;
    WARN("SHM: cannot reserve %zu bytes for %s (is /dev/shm full?): %m", size, name);
    res = ncclSystemError;
    goto fail_unlink;
  }
  MENDCHECKGOTO(shmMap(name, fd, size, map), res, fail_unlink);
  close(fd);
  return ncclSuccess;
fail_unlink:
  close(fd);
  shm_unlink(name);
  return res;
}

ncclResult_t mendShmOpen(const char* name, size_t size, void** map) {
  int fd = mendFaultCheck("shm.open") ? (errno = EACCES, -1) : shm_open(name, O_RDWR, 0600);
  if (fd < 0) {
    WARN("SHM: cannot open %s: %m", name);
    return ncclSystemError;
  }
  ncclResult_t res = shmMap(name, fd, size, map);
  close(fd);
  return res;
}

/* Device mode and both ranks on one GPU: the connector memory is device memory shared by IPC. */
static int useIpc(struct ncclComm* comm, const struct mendConnector* conn) {
  return !comm->hostMode && comm->peerInfo[conn->peer].cudaDev == comm->cudaDev &&
         comm->peerInfo[conn->peer].busId == comm->peerInfo[comm->rank].busId;
}

static void attachDevice(struct mendTransport* t, struct mendConnector* conn, void* mem) {
  mendConnAttach(t, conn, mem);
  conn->devFifo = conn->fifo;
  conn->devBuff = conn->buff;
  conn->fifo = NULL; /* kernels only */
  conn->buff = NULL;
}

static ncclResult_t ipcSetup(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine) {
  struct shmPriv* priv = conn->priv;
  MENDCHECK(mendCuEnter(comm->cuCtx));
  MENDCHECK(mendCuDevAlloc(mendConnMemBytes(comm->transport), &priv->ipcMem));
  CUipcMemHandle h;
  CUCHECK(cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)priv->ipcMem));
  memcpy(mine->u.ipc.handle, &h, sizeof(h));
  attachDevice(comm->transport, conn, priv->ipcMem);
  return ncclSuccess;
}

static ncclResult_t ipcConnect(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer) {
  struct shmPriv* priv = conn->priv;
  CUipcMemHandle h;
  CUdeviceptr p = 0;
  memcpy(&h, peer->u.ipc.handle, sizeof(h));
  MENDCHECK(mendCuEnter(comm->cuCtx));
  CUCHECK(cuIpcOpenMemHandle(&p, h, MEND_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  priv->ipcMem = (void*)(uintptr_t)p;
  attachDevice(comm->transport, conn, priv->ipcMem);
  return ncclSuccess;
}

/* Device mode, other GPUs: kernels reach the segment as pinned host memory. */
static ncclResult_t registerMap(struct ncclComm* comm, struct mendConnector* conn) {
  struct shmPriv* priv = conn->priv;
  void* dev = NULL;
  if (comm->hostMode) return ncclSuccess;
  MENDCHECK(mendCuEnter(comm->cuCtx));
  MENDCHECK(mendCuHostRegister(priv->map, priv->size, &dev));
  priv->registered = 1;
  conn->devFifo = (struct mendFifo*)dev;
  conn->devBuff = (char*)dev + MEND_CONN_HDR_BYTES;
  return ncclSuccess;
}

static ncclResult_t shmSetup(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine) {
  struct mendTransport* t = comm->transport;
  struct shmPriv* priv;
  MENDCHECK(MENDCALLOC(priv, 1));
  conn->priv = priv;
  if (conn->dir != MEND_RECV) return ncclSuccess;
  if (useIpc(comm, conn)) return ipcSetup(comm, conn, mine);
  mendShmName(comm, "conn", priv->name);
  priv->size = mendConnMemBytes(t);
  MENDCHECK(mendShmCreate(priv->name, priv->size, &priv->map));
  priv->creator = 1;
  mendConnAttach(t, conn, priv->map);
  snprintf(mine->u.shm.name, sizeof(mine->u.shm.name), "%s", priv->name);
  return registerMap(comm, conn);
}

static ncclResult_t shmConnect(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer) {
  struct mendTransport* t = comm->transport;
  struct shmPriv* priv = conn->priv;
  if (conn->dir == MEND_SEND && useIpc(comm, conn)) {
    MENDCHECK(ipcConnect(comm, conn, peer));
  } else if (conn->dir == MEND_SEND) {
    priv->size = mendConnMemBytes(t);
    MENDCHECK(mendShmOpen(peer->u.shm.name, priv->size, &priv->map));
    /* We are the only other user: the name is no longer needed. */
    shm_unlink(peer->u.shm.name);
    mendConnAttach(t, conn, priv->map);
    MENDCHECK(registerMap(comm, conn));
  }
  conn->peerBell = (mendBell_t*)t->peerBellMap[conn->peer];
  if (!conn->peerBell) {
    WARN("SHM: no bell page mapped for rank %d", conn->peer);
    return ncclInternalError;
  }
  INFO(NCCL_SHM, "Channel %02d: %d %s %d via SHM%s", conn->channel, comm->rank, conn->dir == MEND_SEND ? "->" : "<-",
       conn->peer, priv->ipcMem ? "/CUDA-IPC" : "");
  return ncclSuccess;
}

static void shmFree(struct ncclComm* comm, struct mendConnector* conn) {
  struct shmPriv* priv = conn->priv;
  if (!priv) return;
  if (priv->ipcMem) {
    if (conn->dir == MEND_SEND) mendCu.cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)priv->ipcMem);
    else mendCuDevFree(priv->ipcMem);
  }
  if (priv->registered) mendCuHostUnregister(priv->map);
  if (priv->map) munmap(priv->map, priv->size);
  if (priv->creator) shm_unlink(priv->name); /* ENOENT when the sender already did: fine */
  free(priv);
  conn->priv = NULL;
}

const struct mendTransportOps mendTransportShm = {
  .name = "SHM",
  .setup = shmSetup,
  .connect = shmConnect,
  .free = shmFree,
};
