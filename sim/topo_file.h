/*
 * The topology description of sim/README.md: one "key value..." per line, '#' starts a comment.
 *   servers N | gpus N (per server) | nics N (per server, one per rail) | gbps R (NIC line rate)
 *   channels N (exactly N channels) | minchannels N | maxchannels N
 *   down S D (server S's NIC D is down) | degraded S D R (it runs at R Gbit/s)
 * '=' and ',' read as spaces: "servers=2;down=0,1" is one shell word.
 */
#ifndef MEND_SIM_TOPO_FILE_H_
#define MEND_SIM_TOPO_FILE_H_

#include "nccl.h"
#include "enqueue/plan_offline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Add the lines of `text` to *t (defaults: 1 server, 1 GPU, no NICs); `where` names the text in
 * errors.  A bad line: a WARN naming it and ncclInvalidArgument. */
ncclResult_t mendSimTopoParse(const char* text, const char* where, struct mendOfflineTopo* t);
/* The same for a file. */
ncclResult_t mendSimTopoRead(const char* path, struct mendOfflineTopo* t);
/* Defaults before any line. */
void mendSimTopoInit(struct mendOfflineTopo* t);

#ifdef __cplusplus
}
#endif

#endif
