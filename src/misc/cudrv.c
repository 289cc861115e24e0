/*
 * Lazy CUDA driver loading (see cudrv.h).  One dlopen per process; every entry point comes from
 * the driver's own cuGetProcAddress, asked for the CUDA 12.0 ABI of each name.
 */
#include "misc/cudrv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"

#define MEND_CU_ABI_VERSION 12000 /* the ABI asked of cuGetProcAddress */

struct mendCuApi mendCu;
static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;
static ncclResult_t loadResult = ncclSystemError;

typedef CUresult (*getProcV2Fn)(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
typedef CUresult (*getProcV1Fn)(const char* symbol, void** pfn, int version, uint64_t flags);

static void* lookup(void* lib, const char* name) {
  static getProcV2Fn v2;
  static getProcV1Fn v1;
  if (!v2 && !v1) {
    v2 = (getProcV2Fn)dlsym(lib, "cuGetProcAddress_v2");
    if (!v2) v1 = (getProcV1Fn)dlsym(lib, "cuGetProcAddress");
  }
  void* fn = NULL;
  int status = 0;
  CUresult err = v2 ? v2(name, &fn, MEND_CU_ABI_VERSION, 0, &status)
                    : v1 ? v1(name, &fn, MEND_CU_ABI_VERSION, 0) : MEND_CU_ERROR_INVALID_VALUE;
  return err == MEND_CU_SUCCESS ? fn : NULL;
}

static ncclResult_t loadSymbols(void* lib) {
#define MEND_CU_LOOKUP(name, params)                                                         \
  mendCu.name = (CUresult(*) params)lookup(lib, #name);                                     \
  if (mendCu.name == NULL) {                                                                 \
    INFO(NCCL_INIT, "CUDA driver: entry point %s not found; host mode", #name);             \
    return ncclSystemError;                                                                  \
  }
  MEND_CU_FUNCS(MEND_CU_LOOKUP)
#undef MEND_CU_LOOKUP
  return ncclSuccess;
}

static void loadDriver(void) {
  if (mendParamCudaDisable()) {
    INFO(NCCL_INIT, "CUDA: MEND_CUDA_DISABLE=1; host mode");
    return;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    INFO(NCCL_INIT, "CUDA: no driver (%s); host mode", dlerror());
    return;
  }
  if (loadSymbols(lib) != ncclSuccess) return;
  CUresult err = mendCu.cuInit(0);
  int count = 0, version = 0;
  if (err == MEND_CU_SUCCESS) err = mendCu.cuDeviceGetCount(&count);
  if (err != MEND_CU_SUCCESS || count == 0) {
    INFO(NCCL_INIT, "CUDA: driver present but no usable device (error %d, %d devices); host mode", err, count);
    return;
  }
  mendCu.cuDriverGetVersion(&version);
  INFO(NCCL_INIT, "CUDA: driver %d.%d, %d device(s)", version / 1000, (version % 1000) / 10, count);
  loadResult = ncclSuccess; /* the library stays loaded for the life of the process */
}

ncclResult_t mendCuLoad(void) {
  pthread_once(&loadOnce, loadDriver);
  return loadResult;
}

int mendCuAvailable(void) { return mendCuLoad() == ncclSuccess; }

int mendCuCurrentDevice(void) {
  if (!mendCuAvailable()) return -1;
  CUcontext ctx = NULL;
  CUdevice dev = -1;
  if (mendCu.cuCtxGetCurrent(&ctx) != MEND_CU_SUCCESS || ctx == NULL) return -1;
  if (mendCu.cuCtxGetDevice(&dev) != MEND_CU_SUCCESS) return -1;
  return dev;
}

ncclResult_t mendCuCheck(CUresult err, const char* call, const char* file, int line) {
  if (err == MEND_CU_SUCCESS) return ncclSuccess;
  const char* msg = NULL;
  if (mendCu.cuGetErrorString) mendCu.cuGetErrorString(err, &msg);
  WARN("CUDA call %s failed at %s:%d: error %d (%s)", call, file, line, err, msg ? msg : "unknown");
  return ncclUnhandledCudaError;
}

int mendCuMemKind(const void* ptr, int* dev) {
  if (dev) *dev = -1;
  if (ptr == NULL || !mendCuAvailable()) return MEND_MEM_PAGEABLE;
  unsigned int type = 0;
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  if (mendCu.cuPointerGetAttribute(&type, MEND_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != MEND_CU_SUCCESS)
    return MEND_MEM_PAGEABLE; /* unknown to CUDA */
  int ordinal = -1;
  if (mendCu.cuPointerGetAttribute(&ordinal, MEND_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) == MEND_CU_SUCCESS && dev)
    *dev = ordinal;
  if (type == MEND_CU_MEMORYTYPE_DEVICE) return MEND_MEM_DEVICE;
  if (type == MEND_CU_MEMORYTYPE_UNIFIED) return MEND_MEM_MANAGED;
  if (dev) *dev = -1;
  return MEND_MEM_PINNED;
}

ncclResult_t mendCuEnter(void* ctx) {
  CUcontext cur = NULL;
  if (ctx == NULL || !mendCuAvailable()) return ncclSuccess;
  if (mendCu.cuCtxGetCurrent(&cur) == MEND_CU_SUCCESS && cur == (CUcontext)ctx) return ncclSuccess;
  CUCHECK(cuCtxSetCurrent((CUcontext)ctx));
  return ncclSuccess;
}

ncclResult_t mendCuDevAlloc(size_t bytes, void** ptr) {
  CUdeviceptr p = 0;
  *ptr = NULL;
  CUstream s = NULL;
  CUCHECK(cuMemAlloc(&p, bytes ? bytes : 1));
  /* cuMemsetD8 would queue on the legacy stream, which kernels on the user's non-blocking streams
   * do not wait for: a peer's kernel could post into this FIFO before the zeroing lands and lose
   * its post.  A private stream, waited for here, makes the memory zero before anyone sees it. */
  ncclResult_t res = mendCuCheck(mendCu.cuStreamCreate(&s, MEND_CU_STREAM_NON_BLOCKING), "cuStreamCreate", __FILE__,
                                 __LINE__);
  if (res == ncclSuccess)
    res = mendCuCheck(mendCu.cuMemsetD8Async(p, 0, bytes, s), "cuMemsetD8Async", __FILE__, __LINE__);
  if (res == ncclSuccess) res = mendCuCheck(mendCu.cuStreamSynchronize(s), "cuStreamSynchronize", __FILE__, __LINE__);
  if (s) mendCu.cuStreamDestroy(s);
  if (res != ncclSuccess) {
    mendCu.cuMemFree(p);
    return res;
  }
  *ptr = (void*)(uintptr_t)p;
  INFO(NCCL_ALLOC, "CUDA: %zu bytes of device memory at %p", bytes, *ptr);
  return ncclSuccess;
}

void mendCuDevFree(void* ptr) {
  if (ptr) mendCu.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
}

ncclResult_t mendCuHostAlloc(size_t bytes, void** ptr) {
  *ptr = NULL;
  CUCHECK(cuMemHostAlloc(ptr, bytes ? bytes : 1, MEND_CU_MEMHOST_PORTABLE | MEND_CU_MEMHOST_DEVICEMAP));
  memset(*ptr, 0, bytes);
  return ncclSuccess;
}

void mendCuHostFree(void* ptr) {
  if (ptr) mendCu.cuMemFreeHost(ptr);
}

ncclResult_t mendCuHostRegister(void* ptr, size_t bytes, void** devPtr) {
  CUCHECK(cuMemHostRegister(ptr, bytes, MEND_CU_MEMHOST_PORTABLE | MEND_CU_MEMHOST_DEVICEMAP));
  CUdeviceptr d = 0;
  ncclResult_t res = mendCuCheck(mendCu.cuMemHostGetDevicePointer(&d, ptr, 0), "cuMemHostGetDevicePointer", __FILE__,
                                 __LINE__);
  if (res != ncclSuccess) {
    mendCu.cuMemHostUnregister(ptr);
    return res;
  }
  *devPtr = (void*)(uintptr_t)d;
  return ncclSuccess;
}

void mendCuHostUnregister(void* ptr) {
  if (ptr) mendCu.cuMemHostUnregister(ptr);
}

void mendCuReleaseContext(int cudaDev, void* ctx) {
  CUdevice dev;
  if (ctx == NULL || cudaDev < 0 || !mendCuAvailable()) return;
  if (mendCu.cuDeviceGet(&dev, cudaDev) == MEND_CU_SUCCESS) mendCu.cuDevicePrimaryCtxRelease(dev);
}
