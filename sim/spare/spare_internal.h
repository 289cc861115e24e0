/* Internals shared by the controller's files: the error report and a bipartite graph with
 * Hopcroft-Karp matching.  Not part of the library's interface. */
#ifndef MEND_SPARE_INTERNAL_H
#define MEND_SPARE_INTERNAL_H

#include "spare.h"

/* Records the message for mendSpareLastError and prints it as a WARN; returns ncclInvalidArgument. */
ncclResult_t mendSpareFail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same for an allocation that failed: returns ncclSystemError. */
ncclResult_t mendSpareNoMem(const char* what);

/* A bipartite graph in compressed rows: left vertex u (a shard type) has the right vertices (slots)
 * adj[off[u] .. off[u+1]-1]; cost[] (optional) holds one integer per edge. */
struct mendSpareGraph {
  int nLeft;    /* shard types */
  int nRight;   /* slots: group w's stack t is w*s + t */
  int* off;     /* nLeft+1 row offsets */
  int* adj;     /* right vertex of each edge */
  int* cost;    /* movement cost of each edge (NULL when unused) */
};

/* Builds the graph of the committed stacks (freeOrder = 0: type stk[w][t] -> slot (w,t)) or of free
 * reordering (freeOrder = 1: every type of w -> every slot (w,t)), t < s, w alive; withCost fills cost[]. */
ncclResult_t mendSpareGraphBuild(int n, int r, const int* stk, const unsigned char* failed, int s, int freeOrder,
                                 int withCost, struct mendSpareGraph* g);
void mendSpareGraphFree(struct mendSpareGraph* g);
/* Hopcroft-Karp: maximum matching; matchL[u] (slot or -1) and matchR[v] (type or -1) may start
 * from a partial matching (all -1 for none).  *size gets the matching's size. */
ncclResult_t mendSpareMatch(const struct mendSpareGraph* g, int* matchL, int* matchR, int* size);

#endif
