/*
 * Who is late (issue 14): a query service over the bootstrap network.  Every process with a
 * communicator and MEND_RAS on listens on one TCP port, on the bootstrap's interface
 * (MEND_RAS_PORT, default any free port; the monitor snapshot names it in mend_monitor_info's
 * "ras" label).  Each communicator's ranks exchange their service addresses with one bootstrap
 * allgather when the communicator's transport is set up.  A query (struct mendRasQuery) is
 * answered with this process's view of each of its communicators: rank, size, the ops it issued
 * and has in flight, its NIC states, and the service address of every rank.  A client (mend-info
 * --ras) asks one process, then every rank it names, and compares their op counts (the op-count
 * method of ICCL): a rank behind the others, or silent, is late; a refused connection is DEAD.
 * Wire format: docs/monitor.md.  Everything read is checked by the pure functions below first.
 */
#ifndef MEND_BOOTSTRAP_RAS_H_
#define MEND_BOOTSTRAP_RAS_H_

#include <stddef.h>
#include <stdint.h>

#include "misc/socket.h"
#include "nccl.h"

struct ncclComm;

#define MEND_RAS_QUERY_MAGIC 0x4d454e4452415351ULL /* "MENDRASQ" */
#define MEND_RAS_REPLY_MAGIC 0x4d454e4452415341ULL /* "MENDRASA" */
#define MEND_RAS_VERSION 1
#define MEND_RAS_MAX_COMMS 64      /* communicators one reply describes (more are left out) */
#define MEND_RAS_MAX_RANKS 65536   /* ranks of a communicator a reply may name */
#define MEND_RAS_MAX_NICS 8        /* NIC states per rank (more are left out) */
#define MEND_RAS_HOST_LEN 64       /* host name, NUL-terminated */
#define MEND_RAS_MAX_REPLY (64u << 20) /* bytes a client accepts */

/* NIC states in a reply: the health registry's (resilience/health.h), or LINK_DOWN when the local
 * link is down before the registry says so. */
enum mendRasNic { MEND_RAS_NIC_UP = 0, MEND_RAS_NIC_DOWN = 1, MEND_RAS_NIC_DEGRADED = 2, MEND_RAS_NIC_PROBING = 3 };

/* What a client sends (all integers in the sender's byte order; a reader with another order sees a
 * wrong magic). */
struct mendRasQuery {
  uint64_t magic;   /* MEND_RAS_QUERY_MAGIC */
  uint32_t version; /* MEND_RAS_VERSION */
  uint32_t flags;   /* 0 */
};

/* A reply: this header, then nComms (struct mendRasComm, then nRanks struct mendRasPeer). */
struct mendRasHeader {
  uint64_t magic;                 /* MEND_RAS_REPLY_MAGIC */
  uint32_t version;               /* MEND_RAS_VERSION */
  uint32_t nComms;                /* communicators that follow */
  uint64_t bytes;                 /* the whole reply, this header included */
  int32_t pid;                    /* the answering process */
  uint32_t pad;                   /* 0 */
  char host[MEND_RAS_HOST_LEN];   /* its host name, NUL-terminated */
};
struct mendRasComm {
  uint64_t commHash;                    /* the communicator's id (as in logs and snapshots) */
  int32_t rank, nRanks;                 /* the answering rank, and the size */
  uint64_t issued;                      /* collectives issued (comm->collSeq) */
  int64_t inflight;                     /* operations queued or running, send/recv included */
  int32_t error;                        /* its asynchronous error (ncclResult_t) */
  int32_t aborted;                      /* 1: aborted or revoked */
  int32_t nNics;                        /* NIC states that follow (0..MEND_RAS_MAX_NICS) */
  int32_t nic[MEND_RAS_MAX_NICS];       /* enum mendRasNic of each local NIC */
  uint32_t pad;                         /* 0 */
};
struct mendRasPeer {
  union mendSocketAddr addr;  /* that rank's query service (family 0: it has none) */
};

/* A parsed reply (mendRasReplyParse); free with mendRasReplyFree. */
struct mendRasCommView {
  struct mendRasComm c;          /* as received, checked */
  union mendSocketAddr* peers;   /* [c.nRanks] */
};
struct mendRasReply {
  int pid;                            /* answering process */
  char host[MEND_RAS_HOST_LEN];       /* its host */
  int nComms;
  struct mendRasCommView* comms;      /* [nComms] */
};

/* 1 when buf is a query this version answers. */
int mendRasQueryParse(const void* buf, size_t len);
/* A reply's fixed header: 1 and *bytes (the whole reply's length, <= MEND_RAS_MAX_REPLY) when it is
 * one, else 0 and *why. */
int mendRasHeaderParse(const void* buf, size_t len, uint64_t* bytes, const char** why);
/* A whole reply: ncclSuccess and *out filled, or ncclSystemError and *why (nothing to free). */
ncclResult_t mendRasReplyParse(const void* buf, size_t len, struct mendRasReply* out, const char** why);
void mendRasReplyFree(struct mendRasReply* r);
/* Encode one communicator's part of a reply at buf (room for mendRasCommBytes(nRanks)). */
size_t mendRasCommBytes(int nRanks);

/* Service side (bootstrap_ras.c).  Is it on (MEND_RAS)?  Decided once per process. */
int mendRasOn(void);
/* A communicator whose transport is set up: every rank calls it (one bootstrap allgather of the
 * service addresses).  The first one starts the service.  No-op with MEND_RAS off. */
ncclResult_t mendRasCommAdd(struct ncclComm* comm);
/* Before the communicator's resilience state is freed; the last one stops the service. */
void mendRasCommRemove(struct ncclComm* comm);
/* The service's "ip:port" into buf (MEND_SOCKET_NAME_MAXLEN); 0 when there is none. */
int mendRasEndpoint(char* buf);

#endif
