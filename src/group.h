/*
 * Groups (ncclGroupStart/End).  Collectives and send/recv issued inside a group are planned and run
 * together at ncclGroupEnd; communicator creation inside a group (several ncclCommInitRank from one
 * thread) is deferred to ncclGroupEnd and run as jobs, one thread each, so the inits meet.
 */
#ifndef MEND_GROUP_H_
#define MEND_GROUP_H_

#include "nccl.h"

struct ncclComm;

/* Depth of the calling thread's group nesting (0: not in a group). */
int mendGroupDepth(void);
/* Run fn(arg) for `comm` at the end of the current group, in its own thread, together with the
 * other jobs of the group.  Outside a group the caller runs it directly.  The job's result becomes
 * comm->asyncResult; ncclGroupEnd returns the first failure (or ncclInProgress for a non-blocking
 * comm whose job still runs). freeArg (may be NULL) releases arg after the job. */
ncclResult_t mendGroupAddJob(struct ncclComm* comm, ncclResult_t (*fn)(void* arg), void* arg,
                             void (*freeArg)(void* arg));

#endif
