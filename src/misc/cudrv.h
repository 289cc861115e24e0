/*
 * The CUDA driver, loaded lazily.  Mend's host code never links against CUDA: on first use it
 * dlopens libcuda.so.1, takes cuGetProcAddress from it and asks the driver for every other entry
 * point by name (the ABI of CUDA 12.0 and later).  A machine without a driver or GPU gets
 * mendCuLoad() == ncclSystemError once (logged at INFO) and runs in host mode.
 *
 * The few driver types and constants used are declared here from the driver API's documented
 * values, so the library builds where the CUDA toolkit is absent.
 */
#ifndef MEND_MISC_CUDRV_H_
#define MEND_MISC_CUDRV_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult;            /* CUDA_SUCCESS = 0 */
typedef int CUdevice;            /* device ordinal */
typedef uint64_t CUdeviceptr;    /* device address */
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUevent_st* CUevent;
typedef struct CUstream_st* CUstream; /* the same handle as cudaStream_t */
typedef uint64_t CUmemGenericAllocationHandle;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUuserObject_st* CUuserObject;
typedef void (*CUhostFn)(void* userData);

#define MEND_CU_SUCCESS 0
#define MEND_CU_ERROR_INVALID_VALUE 1
#define MEND_CU_ERROR_NOT_READY 600
#define MEND_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define MEND_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define MEND_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define MEND_CU_MEMORYTYPE_HOST 1
#define MEND_CU_MEMORYTYPE_DEVICE 2
#define MEND_CU_MEMORYTYPE_UNIFIED 4
#define MEND_CU_MEMHOST_PORTABLE 0x1   /* CU_MEMHOSTALLOC_PORTABLE == CU_MEMHOSTREGISTER_PORTABLE */
#define MEND_CU_MEMHOST_DEVICEMAP 0x2  /* CU_MEMHOSTALLOC_DEVICEMAP == CU_MEMHOSTREGISTER_DEVICEMAP */
#define MEND_CU_EVENT_DISABLE_TIMING 0x2
#define MEND_CU_STREAM_NON_BLOCKING 0x1
#define MEND_CU_IPC_HANDLE_SIZE 64
#define MEND_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define MEND_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define MEND_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID 33
#define MEND_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID 34
#define MEND_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID 50
#define MEND_CU_DEVICE_ATTRIBUTE_CC_MAJOR 75
#define MEND_CU_DEVICE_ATTRIBUTE_VMM_SUPPORTED 102
#define MEND_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES 3
#define MEND_CU_FUNC_ATTRIBUTE_NUM_REGS 4
#define MEND_CU_STREAM_CAPTURE_STATUS_NONE 0
#define MEND_CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define MEND_CU_USER_OBJECT_NO_DESTRUCTOR_SYNC 1
#define MEND_CU_GRAPH_USER_OBJECT_MOVE 1
#define MEND_CU_MEM_ALLOCATION_TYPE_PINNED 1
#define MEND_CU_MEM_LOCATION_TYPE_DEVICE 1
#define MEND_CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define MEND_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1

typedef struct { char reserved[MEND_CU_IPC_HANDLE_SIZE]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;                  /* CUmemLocation_v1 */
typedef struct {                                                     /* CUmemAllocationProp_v1 */
  int type;                     /* MEND_CU_MEM_ALLOCATION_TYPE_PINNED */
  int requestedHandleTypes;     /* 0: no export */
  CUmemLocation location;       /* the device */
  void* win32HandleMetaData;    /* NULL */
  struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc; /* CUmemAccessDesc_v1 */

/* Every entry point Mend uses: X(name, return-less parameter list). */
#define MEND_CU_FUNCS(X)                                                                          \
  X(cuInit, (unsigned flags))                                                                     \
  X(cuDriverGetVersion, (int* version))                                                           \
  X(cuGetErrorString, (CUresult err, const char** str))                                          \
  X(cuDeviceGetCount, (int* count))                                                               \
  X(cuDeviceGet, (CUdevice* dev, int ordinal))                                                    \
  X(cuDeviceGetAttribute, (int* value, int attrib, CUdevice dev))                                 \
  X(cuDeviceGetName, (char* name, int len, CUdevice dev))                                         \
  X(cuDevicePrimaryCtxRetain, (CUcontext* ctx, CUdevice dev))                                     \
  X(cuDevicePrimaryCtxRelease, (CUdevice dev))                                                    \
  X(cuCtxGetCurrent, (CUcontext* ctx))                                                            \
  X(cuCtxSetCurrent, (CUcontext ctx))                                                             \
  X(cuCtxGetDevice, (CUdevice* dev))                                                              \
  X(cuMemAlloc, (CUdeviceptr* ptr, size_t bytes))                                                 \
  X(cuMemFree, (CUdeviceptr ptr))                                                                 \
  X(cuMemAllocAsync, (CUdeviceptr* ptr, size_t bytes, CUstream s))                                \
  X(cuMemFreeAsync, (CUdeviceptr ptr, CUstream s))                                                \
  X(cuMemsetD8Async, (CUdeviceptr ptr, unsigned char v, size_t n, CUstream s))                    \
  X(cuStreamCreate, (CUstream* s, unsigned flags))                                                \
  X(cuStreamSynchronize, (CUstream s))                                                            \
  X(cuStreamDestroy, (CUstream s))                                                                \
  X(cuMemcpyHtoD, (CUdeviceptr dst, const void* src, size_t bytes))                               \
  X(cuMemcpyDtoDAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))               \
  X(cuMemHostAlloc, (void** ptr, size_t bytes, unsigned flags))                                   \
  X(cuMemFreeHost, (void* ptr))                                                                   \
  X(cuMemHostRegister, (void* ptr, size_t bytes, unsigned flags))                                 \
  X(cuMemHostUnregister, (void* ptr))                                                             \
  X(cuMemHostGetDevicePointer, (CUdeviceptr* dptr, void* ptr, unsigned flags))                    \
  X(cuPointerGetAttribute, (void* data, int attrib, CUdeviceptr ptr))                             \
  X(cuModuleLoadData, (CUmodule* mod, const void* image))                                         \
  X(cuModuleGetFunction, (CUfunction* fn, CUmodule mod, const char* name))                        \
  X(cuFuncGetAttribute, (int* value, int attrib, CUfunction fn))                                  \
  X(cuLaunchKernel, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                     unsigned bz, unsigned smem, CUstream s, void** params, void** extra))        \
  X(cuEventCreate, (CUevent* ev, unsigned flags))                                                 \
  X(cuEventRecord, (CUevent ev, CUstream s))                                                      \
  X(cuEventQuery, (CUevent ev))                                                                   \
  X(cuEventSynchronize, (CUevent ev))                                                             \
  X(cuEventDestroy, (CUevent ev))                                                                 \
  X(cuStreamWaitEvent, (CUstream s, CUevent ev, unsigned flags))                                  \
  X(cuStreamIsCapturing, (CUstream s, int* status))                                               \
  X(cuStreamGetCaptureInfo, (CUstream s, int* status, uint64_t* id, CUgraph* graph,               \
                             const CUgraphNode** deps, size_t* nDeps))                            \
  X(cuUserObjectCreate, (CUuserObject* obj, void* ptr, CUhostFn destroy, unsigned refs, unsigned flags)) \
  X(cuGraphRetainUserObject, (CUgraph graph, CUuserObject obj, unsigned count, unsigned flags))   \
  X(cuIpcGetMemHandle, (CUipcMemHandle* h, CUdeviceptr ptr))                                      \
  X(cuIpcOpenMemHandle, (CUdeviceptr* ptr, CUipcMemHandle h, unsigned flags))                     \
  X(cuIpcCloseMemHandle, (CUdeviceptr ptr))                                                       \
  X(cuMemGetAllocationGranularity, (size_t* g, const CUmemAllocationProp* prop, int option))      \
  X(cuMemCreate, (CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop, \
                  unsigned long long flags))                                                      \
  X(cuMemAddressReserve, (CUdeviceptr* ptr, size_t size, size_t align, CUdeviceptr addr,          \
                          unsigned long long flags))                                              \
  X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,       \
               unsigned long long flags))                                                         \
  X(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count))    \
  X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                                   \
  X(cuMemRelease, (CUmemGenericAllocationHandle h))                                               \
  X(cuMemAddressFree, (CUdeviceptr ptr, size_t size))                                             \
  X(cuMemGetAddressRange, (CUdeviceptr* base, size_t* size, CUdeviceptr ptr))

#define MEND_CU_DECLARE(name, params) CUresult (*name) params;
struct mendCuApi {
  MEND_CU_FUNCS(MEND_CU_DECLARE)
};
#undef MEND_CU_DECLARE

/* The driver's table once mendCuLoad() succeeded (members never NULL then). */
extern struct mendCuApi mendCu;

/* Load the driver once per process (thread-safe).  ncclSuccess when a driver with at least one
 * device is usable; ncclSystemError otherwise (host mode), the reason logged once at INFO. */
ncclResult_t mendCuLoad(void);
/* 1 when mendCuLoad() succeeded (cheap after the first call). */
int mendCuAvailable(void);
/* The device of the calling thread's current context, or -1 when none is current (host mode). */
int mendCuCurrentDevice(void);
/* Check a driver call: WARN with the call text, the file/line and the driver's message. */
ncclResult_t mendCuCheck(CUresult err, const char* call, const char* file, int line);
#define CUCHECK(call) MENDCHECK(mendCuCheck(mendCu.call, #call, __FILE__, __LINE__))
#define CUCHECKGOTO(call, res, label) MENDCHECKGOTO(mendCuCheck(mendCu.call, #call, __FILE__, __LINE__), res, label)

/* Make `ctx` (a CUcontext) current on the calling thread; cheap when it already is. */
ncclResult_t mendCuEnter(void* ctx);
/* Drop the primary-context reference a device-mode communicator took (no-op for ctx NULL). */
void mendCuReleaseContext(int cudaDev, void* ctx);
/* Zeroed device memory on the current context: zero when this returns, whatever else runs (the
 * zeroing is not ordered against the legacy stream, where another stream's kernel could overtake it). */
ncclResult_t mendCuDevAlloc(size_t bytes, void** ptr);
void mendCuDevFree(void* ptr);
/* Zeroed pinned host memory, mapped for every context; the kernel uses the same address (UVA). */
ncclResult_t mendCuHostAlloc(size_t bytes, void** ptr);
void mendCuHostFree(void* ptr);
/* Register host memory (page-aligned) for device access; *devPtr: its address in kernels. */
ncclResult_t mendCuHostRegister(void* ptr, size_t bytes, void** devPtr);
void mendCuHostUnregister(void* ptr);

/* What a pointer is, for argument checks and for choosing how a buffer is reached. */
enum mendMemKind {
  MEND_MEM_PAGEABLE = 0, /* host memory the GPU cannot reach (malloc, stack) */
  MEND_MEM_PINNED = 1,   /* host memory registered with / allocated by CUDA (reachable by the GPU) */
  MEND_MEM_DEVICE = 2,   /* device memory */
  MEND_MEM_MANAGED = 3   /* managed (unified) memory */
};
/* Classify ptr; *dev gets the owning device (-1 for host memory). Without a driver: PAGEABLE. */
int mendCuMemKind(const void* ptr, int* dev);

#ifdef __cplusplus
}
#endif

#endif
