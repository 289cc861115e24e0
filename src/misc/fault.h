/*
 * Fault-injection seam: thin wrappers around socket, verbs, shm and CUDA calls ask
 * mendFaultCheck("<site>") before the real call and fail as the real call would when it says 1.
 *
 *   MEND_FAULT_INJECT="socket.connect:3,net.isend:10+"
 *     socket.connect:3   the 3rd call at that site fails (once)
 *     net.isend:10+      every call from the 10th on fails (sticky)
 * Tests use mendFaultSet()/mendFaultClear() instead of the environment.
 *
 * Site names are "<layer>.<call>", lower case, one per wrapped call, e.g.
 *   socket.connect socket.accept socket.send socket.recv    bootstrap.send bootstrap.recv
 *   net.listen net.connect net.accept net.isend net.irecv net.test net.regmr
 *   shm.open shm.map    cuda.malloc cuda.memcpy cuda.launch    ib.post_send ib.poll_cq
 *   host.calloc (mendCalloc)    proxy.progress
 * Counting is per site and per process; a site that is never configured costs one relaxed load.
 */
#ifndef MEND_MISC_FAULT_H_
#define MEND_MISC_FAULT_H_

/* -1: MEND_FAULT_INJECT not read yet, 0: nothing configured, 1: some site is armed. */
extern int mendFaultState;

int mendFaultCheckSlow(const char* site);
/* 1 when this call at `site` must fail. */
static inline int mendFaultCheck(const char* site) {
  if (__atomic_load_n(&mendFaultState, __ATOMIC_RELAXED) == 0) return 0;
  return mendFaultCheckSlow(site);
}
/* Arm `site` to fail its nth call from now on (calls are counted from this call; nth >= 1),
 * or every call from the nth on when sticky.  Re-arming a site restarts its count. */
void mendFaultSet(const char* site, int nth, int sticky);
/* Disarm every site (and forget MEND_FAULT_INJECT until mendFaultReload). */
void mendFaultClear(void);
/* Read MEND_FAULT_INJECT again (after mendParamResetCache in tests). */
void mendFaultReload(void);
/* How many times `site` was checked since armed (0 if not armed); for tests. */
long mendFaultCalls(const char* site);

#endif
