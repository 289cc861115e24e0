/*
 * Private to the socket Net (net_socket*.c).  See docs/net.md for the design:
 *   a connection = one control socket (message headers, small messages inline) + N data sockets
 *   (large messages cut into chunks dealt round-robin), data sockets moved by helper threads.
 * Wire formats are native-endian: both ends run the same build on the same architecture.
 */
#ifndef MEND_TRANSPORT_NET_SOCKET_H_
#define MEND_TRANSPORT_NET_SOCKET_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "misc/socket.h"
#include "transport/net.h"

#define MEND_SOCKET_MAX_DEVS 32      /* interfaces the socket Net exposes at most */
#define MEND_SOCKET_MAX_SOCKS 64     /* data sockets per connection (NCCL's bound) */
#define MEND_SOCKET_MAX_THREADS 16   /* helper threads per connection (NCCL's bound) */
#define MEND_SOCKET_MAX_PENDING 130  /* accepted sockets waiting for their hello, per listen comm */
#define MEND_SOCKET_MAX_SIZE (1ull << 30)  /* largest message: NCCL's MAX_NET_SIZE */
#define MEND_SOCKET_RXBUF 65536      /* control-socket read-ahead buffer */
#define MEND_SOCKET_HELLO_MAGIC 0x4d534b48u  /* "MSKH": first word of every connection hello */
#define MEND_SOCKET_MSG_MAGIC 0x4d534b4du    /* "MSKM": first word of every message header */
#define MEND_SOCKET_MR_MAGIC 0x4d534b52u     /* "MSKR": marks a live memory registration */

/* One usable interface. */
struct mendSocketDev {
  struct mendIface iface;  /* name, address, index */
  char* pciPath;           /* realpath of /sys/class/net/<if>/device, NULL when virtual */
  int speed;               /* Mbps from sysfs, 10000 when unknown */
  uint64_t guid;           /* hash of name and address */
};

/* Connect progress kept inside the caller's handle between connect calls (as NCCL does). */
struct mendSocketConnStage {
  int state;                     /* 0: not started, 1: sockets connecting */
  struct mendSocketComm* comm;   /* the comm being built */
};

/* The listen handle the peer passes to connect (fits MEND_NET_HANDLE_MAXSIZE). */
struct mendSocketHandle {
  uint32_t magic;                    /* MEND_SOCKET_HELLO_MAGIC: rejects foreign handles */
  uint32_t pad;                      /* keeps the token aligned */
  uint64_t listenToken;              /* random id of the listen comm, echoed in every hello */
  union mendSocketAddr addr;         /* where the listen socket waits */
  struct mendSocketConnStage stage;  /* connector-side progress, meaningless on the wire */
};

/* First bytes on every socket of a connection, connector to acceptor. */
struct mendSocketHello {
  uint32_t magic;        /* MEND_SOCKET_HELLO_MAGIC */
  uint16_t index;        /* 0: control socket, 1..nsocks: data sockets */
  uint16_t nsocks;       /* data sockets of this connection */
  uint64_t listenToken;  /* the listen comm this connection is for */
  uint64_t connToken;    /* random id grouping the sockets of one connection */
  uint32_t chunkSize;    /* sender's chunk size: both ends must cut messages alike */
  uint32_t inlineMax;    /* sender's inline threshold: both ends must route messages alike */
};

/* Header of every message, on the control socket. */
struct mendSocketMsgHdr {
  uint32_t magic;  /* MEND_SOCKET_MSG_MAGIC: catches a desynchronised stream */
  uint32_t seq;    /* message number on this connection, from 0 */
  uint64_t size;   /* payload bytes */
  uint64_t word;   /* a word riding with the message for the layer above (isendWord), opaque here */
};

struct mendSocketComm;

/* What regMr returns: host memory needs no pinning, so it only remembers the range. */
struct mendSocketMr {
  uint32_t magic;  /* MEND_SOCKET_MR_MAGIC while registered */
  int type;        /* MEND_PTR_HOST */
  char* data;      /* registered range start */
  size_t size;     /* registered range length */
};

/* A posted isend or irecv. */
struct mendSocketReq {
  struct mendSocketComm* comm;  /* owner */
  int used;                     /* slot taken (until test reports it done) */
  int isSend;                   /* 1: isend, 0: irecv */
  uint32_t seq;                 /* message number */
  char* data;                   /* user buffer */
  size_t posted;                /* irecv: buffer size; isend: message size */
  size_t size;                  /* message size (irecv: known once the header arrived) */
  int ctrlDone;                 /* header and inline payload moved on the control socket */
  uint64_t word;                /* isendWord's word; a receive's, once its header came */
  _Atomic int partsLeft;        /* data-socket tasks not finished */
};

/* One message's share of one data socket: chunks first, first+n, first+2n, ... */
struct mendSocketTask {
  struct mendSocketReq* req;  /* completed when every task of it is done */
  char* data;                 /* message base */
  size_t size;                /* message size */
  size_t chunk;               /* chunk size */
  size_t stride;              /* bytes from one of this socket's chunks to the next: nsocks x chunk */
  size_t off;                 /* start of the current chunk */
  size_t done;                /* bytes moved of the current chunk */
};

/* A data socket and its queue of tasks (single producer: the caller; single consumer: a helper). */
struct mendSocketData {
  int fd;                                           /* non-blocking TCP socket */
  int owner;                                        /* helper thread moving it (-1: the caller) */
  struct mendSocketTask tasks[MEND_NET_MAX_REQUESTS]; /* ring */
  _Atomic uint32_t head;                            /* next task to move (consumer) */
  _Atomic uint32_t tail;                            /* next free slot (producer) */
};

/* A helper thread moving a contiguous range of data sockets. */
struct mendSocketThread {
  struct mendSocketComm* comm;  /* owner */
  pthread_t thread;             /* the thread */
  int started;                  /* thread created (must be joined) */
  int efd;                      /* eventfd the producer writes to wake it */
  int first;                    /* first data socket it owns */
  int count;                    /* data sockets it owns */
  _Atomic int sleeping;         /* about to wait in poll: producers must ring efd */
};

/* Per-connection socket of the connector while it is being set up. */
struct mendSocketConnecting {
  int state;           /* 0: no socket yet, 1: connect in progress, 2: sending hello, 3: done */
  size_t helloOff;     /* hello bytes sent */
  int64_t retryAtMs;   /* when a refused connect may be retried */
};

/* A send or receive connection. */
struct mendSocketComm {
  int isSend;                        /* 1: sendComm, 0: recvComm */
  int dev;                           /* local device */
  int ctrlFd;                        /* control socket */
  int nsocks;                        /* data sockets */
  struct mendSocketData* socks;      /* [nsocks] */
  int nthreads;                      /* helper threads (0: the caller moves data in test) */
  struct mendSocketThread threads[MEND_SOCKET_MAX_THREADS]; /* helpers */
  size_t chunkSize;                  /* chunk size agreed at connect */
  size_t inlineMax;                  /* inline threshold agreed at connect */
  struct mendSocketReq reqs[MEND_NET_MAX_REQUESTS];  /* request slots */
  int fifo[MEND_NET_MAX_REQUESTS];   /* slots in posting order whose control part is pending */
  int fifoHead;                      /* oldest entry */
  int fifoCount;                     /* entries */
  uint32_t seqPost;                  /* number of the next posted message */
  struct mendSocketMsgHdr txHdr;     /* header of the message being sent on the control socket */
  size_t ctrlOff;                    /* bytes moved of the fifo head's header + inline payload */
  struct mendSocketMsgHdr rxHdr;     /* header being received */
  char* rxBuf;                       /* control-socket read-ahead (receiver) */
  size_t rxStart, rxEnd;             /* valid bytes of rxBuf */
  _Atomic int stop;                  /* helpers exit */
  _Atomic int error;                 /* ncclResult_t of the first failure; the comm stays failed */
  int peerClosed;                    /* receiver: the peer closed the control socket (orderly) */
  uint64_t pollQuietSinceNs;         /* receiver: first control read of the current run that found nothing (0: none) */
  uint64_t pollNextNs;               /* receiver: no control read before this (paced polling, ctrlRead) */
  uint64_t pollMaxNs;                /* receiver: MEND_SOCKET_POLL_MAX_US (0: a read on every look) */
  uint64_t ctrlReads;                /* receiver: recv calls on the control socket (tests count them) */
  char peer[MEND_SOCKET_NAME_MAXLEN];  /* peer address, for log lines */
  /* connector setup only */
  struct mendSocketHello hello;      /* what every socket sends first (index patched per socket) */
  union mendSocketAddr remote;       /* listen address */
  int* fds;                          /* [nsocks + 1] during setup: control then data sockets */
  struct mendSocketConnecting* conn; /* [nsocks + 1] during setup */
  int64_t deadlineMs;                /* setup gives up after this */
};

/* An accepted socket waiting for its hello. */
struct mendSocketPending {
  int fd;                        /* accepted socket, -1 when the slot is free */
  size_t got;                    /* hello bytes received */
  struct mendSocketHello hello;  /* the hello */
  int64_t sinceMs;               /* when the accept sweep first saw it (0: not yet; a new slot is zeroed) */
};

struct mendSocketListenComm {
  int fd;                        /* listening socket (non-blocking) */
  int dev;                       /* device */
  uint64_t token;                /* listenToken of the handle */
  struct mendSocketPending pend[MEND_SOCKET_MAX_PENDING];  /* accepted, not yet grouped */
};

/* ---- net_socket_dev.c: devices, properties, parameters ---- */
ncclResult_t mendNetSocketDevices(int* ndev);
ncclResult_t mendNetSocketGetProperties(int dev, struct mendNetProperties* props);
/* Address of device `dev` (valid after devices() succeeded). */
ncclResult_t mendNetSocketDevAddr(int dev, union mendSocketAddr* addr, const char** name);
/* Forget the discovered devices so the next call reads NCCL_SOCKET_IFNAME again (tests). */
void mendNetSocketResetForTest(void);
/* recv calls a receive comm made on its control socket so far (tests of paced polling). */
uint64_t mendNetSocketCtrlReadsForTest(void* recvComm);
/* Connection shape from the parameters: threads, data sockets, chunk and inline sizes. */
void mendNetSocketConfig(int* nthreads, int* nsocks, size_t* chunk, size_t* inlineMax);
/* MEND_SOCKET_POLL_MAX_US in ns: the longest a receiver's quiet control socket goes unread (ctrlRead). */
uint64_t mendNetSocketPollMaxNs(void);
/* Socket options every connection socket gets: non-blocking, TCP_NODELAY, buffers, user timeout. */
ncclResult_t mendNetSocketSetOpts(int fd, int isData);
/* A random 64-bit token (not zero). */
uint64_t mendNetSocketToken(void);

/* ---- net_socket_conn.c: listen, connect, accept, close ---- */
ncclResult_t mendNetSocketListen(void* ctx, int dev, void* handle, void** listenComm);
ncclResult_t mendNetSocketConnect(void* ctx, int dev, void* handle, void** sendComm);
ncclResult_t mendNetSocketAccept(void* listenComm, void** recvComm);
ncclResult_t mendNetSocketCloseSend(void* sendComm);
ncclResult_t mendNetSocketCloseRecv(void* recvComm);
ncclResult_t mendNetSocketCloseListen(void* listenComm);

/* ---- net_socket_data.c: requests, progress, helper threads ---- */
ncclResult_t mendNetSocketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t mendNetSocketIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                                void** request);
ncclResult_t mendNetSocketTest(void* request, int* done, int* sizes);
/* isend / test with a word riding in the message header (mendNet_t's isendWord, testWord). */
ncclResult_t mendNetSocketIsendWord(void* sendComm, void* data, size_t size, int tag, void* mhandle, uint64_t word,
                                   void** request);
ncclResult_t mendNetSocketTestWord(void* request, int* done, int* sizes, uint64_t* word);
/* Start the helper threads of a connected comm. */
ncclResult_t mendNetSocketStartThreads(struct mendSocketComm* comm);
/* Stop and join them (bounded); returns 0 when a thread did not exit (its memory must be kept). */
int mendNetSocketStopThreads(struct mendSocketComm* comm);
/* Mark the comm failed with `res` (first failure wins and is logged once with `cause`). */
ncclResult_t mendNetSocketFail(struct mendSocketComm* comm, ncclResult_t res, const char* cause);

#endif
