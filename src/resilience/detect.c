/*
 * Failure detection (see detect.h).
 */
#include "resilience/detect.h"

#include "resilience/rnet_priv.h"

void mendRnetDetectFillHello(struct rnetCtx* ctx, struct rnetHello* hello) { (void)ctx, (void)hello; }
void mendRnetDetectAdd(struct rnetComm* rc) { (void)rc; }
void mendRnetDetectRemove(struct rnetComm* rc) { (void)rc; }
void mendRnetDetectCommFree(struct rnetComm* rc) { (void)rc; }
ncclResult_t mendRnetDetectCheck(struct rnetComm* rc) {
  (void)rc;
  return ncclSuccess;
}
void mendRnetDetectPathDown(struct rnetComm* rc, int p) { (void)rc, (void)p; }
