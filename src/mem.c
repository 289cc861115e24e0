/*
 * Memory API in host mode: ncclMemAlloc/ncclMemFree (page-aligned host memory, not zeroed, as
 * NCCL's is not), ncclCommRegister/Deregister (a handle recording the range; nothing to pin), and
 * ncclCommWindowRegister/Deregister (success with a NULL window, as NCCL does where windows are
 * unsupported).  Registrations still alive at destroy are released then.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/debug.h"

#define REG_MAGIC 0x4d454e4452454721ULL /* "MENDREG!" */

struct mendReg {
  uint64_t magic;          /* REG_MAGIC while registered */
  struct ncclComm* comm;   /* owner */
  void* buff;              /* registered range start */
  size_t size;             /* and length */
  struct mendReg* next;    /* process-wide list, for release at destroy */
};

static pthread_mutex_t regLock = PTHREAD_MUTEX_INITIALIZER;
static struct mendReg* regList;  /* every live registration */

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  MENDARGCHECK(ptr != NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = NULL;
  if (size == 0) return ncclSuccess;  /* as cudaMalloc(0): success and a NULL pointer */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  MENDARGCHECK(size <= SIZE_MAX - page, ncclInvalidArgument, "ncclMemAlloc: size %zu too large", size);
  size_t rounded = (size + page - 1) / page * page;
  void* p = NULL;
  int err = posix_memalign(&p, page, rounded);
  if (err != 0 || p == NULL) {
    WARN("ncclMemAlloc: cannot allocate %zu bytes of host memory", size);
    return ncclSystemError;
  }
  *ptr = p;
  INFO(NCCL_ALLOC, "ncclMemAlloc: %zu bytes (rounded to %zu) of host memory at %p", size, rounded, p);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr);
ncclResult_t pncclMemFree(void* ptr) {
  free(ptr);  /* NULL is a no-op, as cudaFree(NULL) */
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  MENDCHECK(mendCommCheck(comm, "ncclCommRegister"));
  MENDARGCHECK(handle != NULL, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  *handle = NULL;
  MENDARGCHECK(buff != NULL, ncclInvalidArgument, "ncclCommRegister: buff is NULL");
  MENDARGCHECK(size > 0, ncclInvalidArgument, "ncclCommRegister: size is 0");
  struct mendReg* r = calloc(1, sizeof(*r));
  if (r == NULL) {
    WARN("ncclCommRegister: out of memory");
    return ncclSystemError;
  }
  *r = (struct mendReg){.magic = REG_MAGIC, .comm = comm, .buff = buff, .size = size};
  pthread_mutex_lock(&regLock);
  r->next = regList;
  regList = r;
  pthread_mutex_unlock(&regLock);
  *handle = r;
  return ncclSuccess;
}

/* Unlink `handle` if it is a live registration of `comm`; 1 when found. */
static int unlinkReg(struct ncclComm* comm, struct mendReg* handle) {
  int found = 0;
  pthread_mutex_lock(&regLock);
  for (struct mendReg** p = &regList; *p; p = &(*p)->next) {
    if (*p != handle) continue;
    found = handle->comm == comm;
    if (found) *p = handle->next;
    break;
  }
  pthread_mutex_unlock(&regLock);
  return found;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  MENDCHECK(mendCommCheck(comm, "ncclCommDeregister"));
  MENDARGCHECK(handle != NULL, ncclInvalidArgument, "ncclCommDeregister: handle is NULL");
  MENDARGCHECK(unlinkReg(comm, handle), ncclInvalidArgument,
               "ncclCommDeregister: handle %p is not a live registration of communicator %p", handle, (void*)comm);
  ((struct mendReg*)handle)->magic = 0;
  free(handle);
  return ncclSuccess;
}

void mendMemReleaseComm(struct ncclComm* comm) {
  pthread_mutex_lock(&regLock);
  for (struct mendReg** p = &regList; *p;) {
    struct mendReg* r = *p;
    if (r->comm != comm) { p = &r->next; continue; }
    *p = r->next;
    r->magic = 0;
    free(r);
  }
  pthread_mutex_unlock(&regLock);
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
         int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  MENDCHECK(mendCommCheck(comm, "ncclCommWindowRegister"));
  MENDARGCHECK(win != NULL, ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  *win = NULL;
  MENDARGCHECK(buff != NULL && size > 0, ncclInvalidArgument, "ncclCommWindowRegister: empty buffer (%p, %zu bytes)",
               buff, size);
  MENDARGCHECK((winFlags & ~0x3) == 0, ncclInvalidArgument, "ncclCommWindowRegister: invalid winFlags 0x%x", winFlags);
  INFO_ONCE(NCCL_REG, "ncclCommWindowRegister: symmetric windows need device memory; host mode returns a NULL window");
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  MENDCHECK(mendCommCheck(comm, "ncclCommWindowDeregister"));
  /* Register only ever hands out NULL windows in host mode. */
  MENDARGCHECK(win == NULL, ncclInvalidArgument, "ncclCommWindowDeregister: window %p was not registered by Mend",
               (void*)win);
  return ncclSuccess;
}
