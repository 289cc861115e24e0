/* SPARe's reordering controller: shard stacks, the all-reduce stack and the three phases that keep
 * every shard type collectible after group failures (sim/spare/README.md).
 *
 * A layout of N groups with redundancy r is an N x r table: stk[w*r + t] is the shard type group w
 * computes at stack t (0-based).  A group's row holds r distinct types in [0, N).  failed[w] is 1 for
 * a lost group, 0 for a survivor.  The all-reduce stack S (1..r) is how many stacks every surviving
 * group computes before the gradient all-reduce: the step succeeds when the slots (w, t), w alive,
 * t < S, hold every type.  Every function checks its arguments, returns ncclInvalidArgument with a
 * WARN on stderr naming what was wrong (also kept for mendSpareLastError), ncclSystemError when
 * memory runs out, ncclSuccess otherwise. */
#ifndef MEND_SPARE_H
#define MEND_SPARE_H

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_SPARE_API __attribute__((visibility("default")))
/* Largest layout accepted: N groups, and r stacks (r <= N). */
#define MEND_SPARE_MAX_GROUPS (1 << 20)

/* What the controller decided after a failure (mendSpareControl). */
enum mendSpareOutcome {
  MEND_SPARE_KEEP = 0,     /* the committed stacks and all-reduce stack still cover every type */
  MEND_SPARE_REORDER = 1,  /* stacks were reordered (and the all-reduce stack possibly raised) */
  MEND_SPARE_WIPEOUT = 2,  /* some type has no surviving host: a global restart is needed */
};

/* The message of the last error on this thread ("" when none). */
MEND_SPARE_API const char* mendSpareLastError(void);

/* The cyclic Golomb-ruler layout (paper's Def. B.1): marks g[0..r-1] with g[0] = 0 whose pairwise
 * differences are distinct modulo N, so two types share at most one host; stk[w*r+t] = (w+g[t]) % N.
 * ruler may be NULL.  ncclInvalidArgument when no such ruler exists for (N, r) (needs N >= r(r-1)+1)
 * or the bounded search gives up. */
MEND_SPARE_API ncclResult_t mendSpareLayoutCyclic(int n, int r, int* ruler, int* stk);
/* Traditional replication: groups in blocks of r, block b holding types b*r .. b*r+r-1, every group
 * of the block all of them (rotated: group b*r+j starts at type b*r+j).  The last block takes the
 * N mod r extra groups and as many extra types: each of its m groups holds r of its m types
 * cyclically, so every type still has r hosts. */
MEND_SPARE_API ncclResult_t mendSpareLayoutReplica(int n, int r, int* stk);

/* Checks a layout and a failed set (either may be NULL to skip it). */
MEND_SPARE_API ncclResult_t mendSpareCheck(int n, int r, const int* stk, const unsigned char* failed);

/* Phase 0 (HK-Fixed): *ok = 1 when the committed stacks cover every type within s stacks. */
MEND_SPARE_API ncclResult_t mendSpareFixed(int n, int r, const int* stk, const unsigned char* failed, int s,
                                           int* ok);
/* HK-Free: *ok = 1 when some reordering of each survivor's stack covers every type within s. */
MEND_SPARE_API ncclResult_t mendSpareFree(int n, int r, const int* stk, const unsigned char* failed, int s,
                                          int* ok);
/* Phase 1: the least s in [from, r] for which HK-Free succeeds; 0 when none (wipe-out). */
MEND_SPARE_API ncclResult_t mendSpareMinStack(int n, int r, const int* stk, const unsigned char* failed, int from,
                                              int* s);
/* Phase 2: reorders the survivors' stacks in place so that the first s stacks cover every type,
 * moving as few types as possible (min-cost max-flow; a type placed in a slot it did not hold costs
 * one move).  Types that cover nothing keep their relative order behind.  *moves gets the count.
 * ncclInvalidArgument when s stacks cannot cover every type. */
MEND_SPARE_API ncclResult_t mendSpareReorder(int n, int r, int* stk, const unsigned char* failed, int s,
                                             int* moves);
/* The whole controller (paper's Alg. 2): phase 0, else phase 1 from *s, then phase 2.  *s is the
 * committed all-reduce stack on entry and the new one on return; *outcome a mendSpareOutcome;
 * moves (may be NULL) the types moved. */
MEND_SPARE_API ncclResult_t mendSpareControl(int n, int r, int* stk, const unsigned char* failed, int* s,
                                             int* outcome, int* moves);

#ifdef __cplusplus
}
#endif
#endif
