/*
 * Grow ids (ncclCommGetUniqueId): a unique id whose root serves the rendezvous of one ncclCommGrow.
 * It is an ordinary bootstrap id (root address, fresh magic, fresh secret: docs/bootstrap.md) with a
 * tail the grow needs: a tag, the size of the communicator being grown (new ranks take the numbers
 * from there up), and a MAC by the id's secret over both and the root's address, so a damaged or
 * made-up id is refused before anything is sent.  Only a holder of the id can join: the root
 * refuses a hello that does not prove the secret.
 */
#ifndef MEND_BOOTSTRAP_GROW_H_
#define MEND_BOOTSTRAP_GROW_H_

#include "nccl.h"

union mendSocketAddr;

/* A fresh grow id for a communicator of oldNRanks ranks whose bootstrap listens on `near` (the root
 * listens on the same interface); starts the root, which waits for the grow's ranks. */
ncclResult_t mendBsGrowIdCreate(const union mendSocketAddr* near, int oldNRanks, ncclUniqueId* out);
/* Check an id given to ncclCommGrow: 1 and *oldNRanks when it is an intact grow id, else 0 and
 * *why says what is wrong with it. */
int mendBsGrowIdParse(const ncclUniqueId* id, int* oldNRanks, const char** why);
/* Retire the root of a grow id nobody will use (its grow failed, or its communicator is destroyed):
 * a one-rank rendezvous ends the root's thread at once.  A root already done or serving other ranks
 * is left alone (it ends at its own bound).  Bounded by timeoutMs. */
void mendBsGrowIdRetire(const ncclUniqueId* id, int64_t timeoutMs);

#endif
