/*
 * shm: ranks of one host in different processes.  The receiver creates one POSIX shm segment per
 * connection (FIFO counters, then slots) and the sender maps it, then unlinks its name at once: from
 * then on nothing is left in /dev/shm whatever happens to either process.  Bells come from the bell
 * pages mapped at init (transport.c).
 */
#include "transport/transport_priv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checks.h"
#include "misc/utils.h"
#include "misc/fault.h"

struct shmPriv {
  void* map;                       /* our mapping of the segment */
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

static ncclResult_t shmSetup(struct ncclComm* comm, struct mendConnector* conn, struct mendConnInfo* mine) {
  struct mendTransport* t = comm->transport;
  struct shmPriv* priv;
  MENDCHECK(MENDCALLOC(priv, 1));
  conn->priv = priv;
  if (conn->dir != MEND_RECV) return ncclSuccess;
  mendShmName(comm, "conn", priv->name);
  priv->size = mendConnMemBytes(t);
  MENDCHECK(mendShmCreate(priv->name, priv->size, &priv->map));
  priv->creator = 1;
  mendConnAttach(t, conn, priv->map);
  snprintf(mine->u.shm.name, sizeof(mine->u.shm.name), "%s", priv->name);
  return ncclSuccess;
}

static ncclResult_t shmConnect(struct ncclComm* comm, struct mendConnector* conn, const struct mendConnInfo* peer) {
  struct mendTransport* t = comm->transport;
  struct shmPriv* priv = conn->priv;
  if (conn->dir == MEND_SEND) {
    priv->size = mendConnMemBytes(t);
    MENDCHECK(mendShmOpen(peer->u.shm.name, priv->size, &priv->map));
    /* We are the only other user: the name is no longer needed. */
    shm_unlink(peer->u.shm.name);
    mendConnAttach(t, conn, priv->map);
  }
  conn->peerBell = (mendBell_t*)t->peerBellMap[conn->peer];
  if (!conn->peerBell) {
    WARN("SHM: no bell page mapped for rank %d", conn->peer);
    return ncclInternalError;
  }
  INFO(NCCL_SHM, "Channel %02d: %d %s %d via SHM", conn->channel, comm->rank, conn->dir == MEND_SEND ? "->" : "<-", conn->peer);
  return ncclSuccess;
}

static void shmFree(struct ncclComm* comm, struct mendConnector* conn) {
  struct shmPriv* priv = conn->priv;
  if (!priv) return;
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
