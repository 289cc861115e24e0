/*
 * The internal Net interface, shaped like NCCL's ncclNet v11 so external libnccl-net plugins (v8..v11)
 * plug in through thin adapters, and so the resilient net can stack over per-NIC Nets as a Net itself.
 * Nothing here blocks: listen/connect/accept return at once (connect/accept may return a NULL comm:
 * call again later); isend/irecv return a NULL request when they cannot take more work now.
 */
#ifndef MEND_TRANSPORT_NET_H_
#define MEND_TRANSPORT_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "misc/debug.h"

#define MEND_NET_HANDLE_MAXSIZE 128   /* NCCL_NET_HANDLE_MAXSIZE */
#define MEND_NET_MAX_REQUESTS 32      /* NCCL_NET_MAX_REQUESTS: outstanding requests per comm */
#define MEND_PTR_HOST 0x1             /* NCCL_PTR_HOST */
#define MEND_PTR_CUDA 0x2             /* NCCL_PTR_CUDA */
#define MEND_PTR_DMABUF 0x4           /* NCCL_PTR_DMABUF */

/* Device properties (the fields of ncclNetProperties_v11 Mend uses). */
struct mendNetProperties {
  char* name;            /* interface or device name, e.g. "rail0" */
  char* pciPath;         /* sysfs PCI path, or NULL for virtual devices */
  uint64_t guid;         /* unique id of the device */
  int ptrSupport;        /* MEND_PTR_* */
  int regIsGlobal;       /* registration is not tied to a comm */
  int forceFlush;        /* iflush needed for every receive */
  int speed;             /* line rate in Mbps */
  int port;              /* port number */
  float latency;         /* latency in us */
  int maxComms;          /* connections the device can hold */
  int maxRecvs;          /* receives that can be grouped in one irecv */
  size_t maxP2pBytes;    /* largest send/recv */
  size_t maxCollBytes;   /* largest collective message */
};

typedef struct mendNet {
  const char* name;  /* "Socket", "IB", a plugin's name, or "Resilient" */
  ncclResult_t (*init)(void** ctx, uint64_t commId, mendDebugLogger_t logger);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, struct mendNetProperties* props);
  /* Fill `handle` (MEND_NET_HANDLE_MAXSIZE bytes) that the peer passes to connect. */
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  /* *done = 1 when complete; sizes[i] gets the received size of each grouped receive. */
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  /* A word riding with the data (the resilient net's acknowledgements, src/resilience/README.md):
   * isend carrying a 64-bit word to the receiver beside the data, and a test that also returns the
   * word a completed receive carried (0 for a send).  NULL in a Net that carries none. */
  ncclResult_t (*isendWord)(void* sendComm, void* data, size_t size, int tag, void* mhandle, uint64_t word,
                            void** request);
  ncclResult_t (*testWord)(void* request, int* done, int* sizes, uint64_t* word);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*finalize)(void* ctx);
} mendNet_t;

/* The built-in socket Net: one device per interface chosen by NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY. */
extern const mendNet_t mendNetSocket;
/* Shared "not supported" member for ops tables (never NULL holes). */
ncclResult_t mendNetNotSupported(void);

#endif
