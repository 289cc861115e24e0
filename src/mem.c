/*
 * Memory API.  ncclMemAlloc/ncclMemFree: with a CUDA device current on the calling thread, device
 * memory through CUDA virtual memory (cuMemCreate + reserve + map, the granularity the driver
 * recommends; plain cuMemAlloc where VMM is unsupported or fails); without one (host mode),
 * page-aligned host memory, not zeroed, as NCCL's is not.  Every allocation is recorded, so
 * ncclMemFree knows how to release it.  ncclCommRegister/Deregister (a handle recording the range;
 * nothing to pin; windows are in window.c).  Registrations still alive at destroy are released then.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "api.h"
#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/cudrv.h"
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

/* One ncclMemAlloc allocation. */
enum memKind { MEM_HOST = 0, MEM_VMM = 1, MEM_DEVICE = 2 };
struct memAlloc {
  void* ptr;                       /* what the caller got */
  size_t size;                     /* bytes reserved (rounded) */
  int kind;                        /* enum memKind */
  CUmemGenericAllocationHandle h;  /* MEM_VMM: the physical allocation */
  struct memAlloc* next;           /* process-wide list */
};
static pthread_mutex_t allocLock = PTHREAD_MUTEX_INITIALIZER;
static struct memAlloc* allocList;

/* Device memory on `dev` through CUDA virtual memory; ncclSystemError (no WARN) when VMM is unusable. */
static ncclResult_t vmmAlloc(int dev, size_t size, struct memAlloc* a) {
  int vmm = 0;
  CUdevice d;
  if (mendCu.cuDeviceGet(&d, dev) != MEND_CU_SUCCESS) return ncclSystemError;
  mendCu.cuDeviceGetAttribute(&vmm, MEND_CU_DEVICE_ATTRIBUTE_VMM_SUPPORTED, d);
  if (!vmm) return ncclSystemError;
  CUmemAllocationProp prop = {.type = MEND_CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = MEND_CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
  size_t gran = 0;
  if (mendCu.cuMemGetAllocationGranularity(&gran, &prop, MEND_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != MEND_CU_SUCCESS ||
      gran == 0)
    return ncclSystemError;
  a->size = (size + gran - 1) / gran * gran;
  CUdeviceptr p = 0;
  if (mendCu.cuMemCreate(&a->h, a->size, &prop, 0) != MEND_CU_SUCCESS) return ncclSystemError;
  if (mendCu.cuMemAddressReserve(&p, a->size, gran, 0, 0) != MEND_CU_SUCCESS) goto fail_release;
  if (mendCu.cuMemMap(p, a->size, 0, a->h, 0) != MEND_CU_SUCCESS) goto fail_free_va;
  CUmemAccessDesc access = {.location = {.type = MEND_CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                            .flags = MEND_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (mendCu.cuMemSetAccess(p, a->size, &access, 1) != MEND_CU_SUCCESS) goto fail_unmap;
  a->ptr = (void*)(uintptr_t)p;
  a->kind = MEM_VMM;
  return ncclSuccess;
fail_unmap:
  mendCu.cuMemUnmap(p, a->size);
fail_free_va:
  mendCu.cuMemAddressFree(p, a->size);
fail_release:
  mendCu.cuMemRelease(a->h);
  return ncclSystemError;
}

static ncclResult_t hostAlloc(size_t size, struct memAlloc* a) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  MENDARGCHECK(size <= SIZE_MAX - page, ncclInvalidArgument, "ncclMemAlloc: size %zu too large", size);
  a->size = (size + page - 1) / page * page;
  int err = posix_memalign(&a->ptr, page, a->size);
  if (err != 0 || a->ptr == NULL) {
    WARN("ncclMemAlloc: cannot allocate %zu bytes of host memory", size);
    return ncclSystemError;
  }
  a->kind = MEM_HOST;
  return ncclSuccess;
}

static ncclResult_t memAllocOn(int dev, size_t size, struct memAlloc* a) {
  if (dev < 0) return hostAlloc(size, a);
  if (vmmAlloc(dev, size, a) == ncclSuccess) return ncclSuccess;
  CUdeviceptr p = 0;
  CUCHECK(cuMemAlloc(&p, size));
  a->ptr = (void*)(uintptr_t)p;
  a->size = size;
  a->kind = MEM_DEVICE;
  return ncclSuccess;
}

static const char* const kindNames[] = {"host", "device (CUDA VMM)", "device (cuMemAlloc)"};

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  MENDARGCHECK(ptr != NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = NULL;
  if (size == 0) return ncclSuccess;  /* as cudaMalloc(0): success and a NULL pointer */
  struct memAlloc* a = calloc(1, sizeof(*a));
  if (a == NULL) {
    WARN("ncclMemAlloc: out of memory");
    return ncclSystemError;
  }
  int dev = mendCuCurrentDevice();
  ncclResult_t res = memAllocOn(dev, size, a);
  if (res != ncclSuccess) {
    free(a);
    return res;
  }
  pthread_mutex_lock(&allocLock);
  a->next = allocList;
  allocList = a;
  pthread_mutex_unlock(&allocLock);
  *ptr = a->ptr;
  INFO(NCCL_ALLOC, "ncclMemAlloc: %zu bytes (rounded to %zu) of %s memory at %p", size, a->size, kindNames[a->kind],
       a->ptr);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr);
ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == NULL) return ncclSuccess;  /* as cudaFree(NULL) */
  struct memAlloc* a = NULL;
  pthread_mutex_lock(&allocLock);
  for (struct memAlloc** p = &allocList; *p; p = &(*p)->next) {
    if ((*p)->ptr != ptr) continue;
    a = *p;
    *p = a->next;
    break;
  }
  pthread_mutex_unlock(&allocLock);
  MENDARGCHECK(a != NULL, ncclInvalidArgument, "ncclMemFree: %p was not allocated by ncclMemAlloc (or freed already)",
               ptr);
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)ptr;
  if (a->kind == MEM_VMM) {
    mendCu.cuMemUnmap(d, a->size);
    mendCu.cuMemAddressFree(d, a->size);
    mendCu.cuMemRelease(a->h);
  } else if (a->kind == MEM_DEVICE) {
    mendCu.cuMemFree(d);
  } else {
    free(ptr);
  }
  free(a);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  MENDCHECK(mendCommCheck(comm, "ncclCommRegister"));
  MENDARGCHECK(handle != NULL, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  *handle = NULL;
  MENDARGCHECK(buff != NULL, ncclInvalidArgument, "ncclCommRegister: buff is NULL");
  MENDARGCHECK(size > 0, ncclInvalidArgument, "ncclCommRegister: size is 0");
  MENDARGCHECK(size <= (size_t)PTRDIFF_MAX && (uintptr_t)buff <= UINTPTR_MAX - (size - 1), ncclInvalidArgument,
               "ncclCommRegister: range %p + %zu bytes wraps the address space", buff, size);
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
