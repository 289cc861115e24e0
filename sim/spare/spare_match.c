/* Phases 0 and 1 of the controller: the bipartite graph of types and slots, Hopcroft-Karp, HK-Fixed,
 * HK-Free and the search for the least all-reduce stack. */
#include <stdlib.h>
#include <string.h>

#include "spare_internal.h"

void mendSpareGraphFree(struct mendSpareGraph* g) {
  free(g->off);
  free(g->adj);
  free(g->cost);
  memset(g, 0, sizeof(*g));
}

/* Calls fn(type, slot, cost) for every edge of the graph mendSpareGraphBuild describes. */
#define FOR_EACH_EDGE(BODY)                                                     \
  for (int w = 0; w < n; w++) {                                                 \
    if (failed != NULL && failed[w]) continue;                                  \
    const int* row = stk + (size_t)w * r;                                       \
    for (int t = 0; t < (freeOrder ? r : s); t++) {                                  \
      int ty = row[t];                                                          \
      for (int u = (freeOrder ? 0 : t); u < (freeOrder ? s : t + 1); u++) {               \
        int slot = w * s + u, c = (u == t) ? 0 : 1;                             \
        BODY;                                                                   \
      }                                                                         \
    }                                                                           \
  }

ncclResult_t mendSpareGraphBuild(int n, int r, const int* stk, const unsigned char* failed, int s, int freeOrder,
                                 int withCost, struct mendSpareGraph* g) {
  memset(g, 0, sizeof(*g));
  if ((long)n * s > 0x7fffffffL) return mendSpareFail("N * s = %ld slots: too many", (long)n * s);
  g->nLeft = n;
  g->nRight = n * s;
  g->off = calloc((size_t)n + 1, sizeof(int));
  if (g->off == NULL) return mendSpareNoMem("the graph");
  long edges = 0;
  FOR_EACH_EDGE({ (void)slot; (void)c; g->off[ty + 1]++; edges++; })
  if (edges > 0x7fffffffL) {
    mendSpareGraphFree(g);
    return mendSpareFail("%ld edges: the graph is too large", edges);
  }
  for (int i = 0; i < n; i++) g->off[i + 1] += g->off[i];
  g->adj = malloc((size_t)(edges > 0 ? edges : 1) * sizeof(int));
  g->cost = withCost ? malloc((size_t)(edges > 0 ? edges : 1) * sizeof(int)) : NULL;
  int* fill = malloc((size_t)n * sizeof(int));
  if (g->adj == NULL || (withCost && g->cost == NULL) || fill == NULL) {
    free(fill);
    mendSpareGraphFree(g);
    return mendSpareNoMem("the graph");
  }
  memcpy(fill, g->off, (size_t)n * sizeof(int));
  FOR_EACH_EDGE({
    int e = fill[ty]++;
    g->adj[e] = slot;
    if (withCost) g->cost[e] = c;
  })
  free(fill);
  return ncclSuccess;
}

/* Layers from the free types (BFS); 1 when some free slot is reachable. */
static int hkLayers(const struct mendSpareGraph* g, const int* matchL, const int* matchR, int* dist, int* queue) {
  int head = 0, tail = 0, found = 0;
  for (int u = 0; u < g->nLeft; u++) {
    dist[u] = matchL[u] < 0 ? 0 : -1;
    if (matchL[u] < 0) queue[tail++] = u;
  }
  while (head < tail) {
    int u = queue[head++];
    for (int e = g->off[u]; e < g->off[u + 1]; e++) {
      int x = matchR[g->adj[e]];
      if (x < 0) found = 1;
      else if (dist[x] < 0) {
        dist[x] = dist[u] + 1;
        queue[tail++] = x;
      }
    }
  }
  return found;
}

/* One augmenting path from free type root along the layers, iteratively (paths can be long):
 * it[u] is u's next edge to try, stack[] the path so far. */
static int hkAugment(const struct mendSpareGraph* g, int root, int* matchL, int* matchR, int* dist, int* it,
                     int* stack) {
  int depth = 0;
  stack[0] = root;
  while (depth >= 0) {
    int u = stack[depth];
    if (it[u] >= g->off[u + 1]) {  /* dead end: never visit u again in this phase */
      dist[u] = -1;
      if (--depth >= 0) it[stack[depth]]++;
      continue;
    }
    int v = g->adj[it[u]], x = matchR[v];
    if (x < 0) {  /* free slot: flip the path root .. u -> v */
      for (int d = depth; d >= 0; d--) {
        int a = stack[d], b = g->adj[it[a]];
        matchR[b] = a;
        matchL[a] = b;
      }
      return 1;
    }
    if (dist[x] == dist[u] + 1) stack[++depth] = x;
    else it[u]++;
  }
  return 0;
}

ncclResult_t mendSpareMatch(const struct mendSpareGraph* g, int* matchL, int* matchR, int* size) {
  int n = g->nLeft;
  int* dist = malloc((size_t)n * sizeof(int) * 4);
  if (dist == NULL) return mendSpareNoMem("the matching");
  int *queue = dist + n, *it = dist + 2 * n, *stack = dist + 3 * n;
  while (hkLayers(g, matchL, matchR, dist, queue)) {
    int grew = 0;
    for (int u = 0; u < n; u++) it[u] = g->off[u];
    for (int u = 0; u < n; u++)
      if (matchL[u] < 0 && dist[u] == 0) grew += hkAugment(g, u, matchL, matchR, dist, it, stack);
    if (!grew) break;
  }
  int m = 0;
  for (int u = 0; u < n; u++) m += matchL[u] >= 0;
  *size = m;
  free(dist);
  return ncclSuccess;
}

/* Whether the graph (fixed or free stacks, depth s) matches every type. */
static ncclResult_t covers(int n, int r, const int* stk, const unsigned char* failed, int s, int freeOrder, int* ok) {
  struct mendSpareGraph g;
  ncclResult_t res = mendSpareGraphBuild(n, r, stk, failed, s, freeOrder, 0, &g);
  if (res != ncclSuccess) return res;
  int* matchL = malloc(((size_t)g.nLeft + g.nRight) * sizeof(int));
  if (matchL == NULL) {
    mendSpareGraphFree(&g);
    return mendSpareNoMem("the matching");
  }
  int* matchR = matchL + g.nLeft;
  for (int i = 0; i < g.nLeft + g.nRight; i++) matchL[i] = -1;
  int size = 0;
  res = mendSpareMatch(&g, matchL, matchR, &size);
  *ok = size == n;
  free(matchL);
  mendSpareGraphFree(&g);
  return res;
}

static ncclResult_t checkPhase(int n, int r, const int* stk, const unsigned char* failed, int s, const int* out) {
  if (stk == NULL || failed == NULL || out == NULL) return mendSpareFail("a NULL stack table, failed set or result");
  ncclResult_t res = mendSpareCheck(n, r, stk, failed);
  if (res != ncclSuccess) return res;
  if (s < 1 || s > r) return mendSpareFail("all-reduce stack %d: must be in [1, r = %d]", s, r);
  return ncclSuccess;
}

ncclResult_t mendSpareFixed(int n, int r, const int* stk, const unsigned char* failed, int s, int* ok) {
  ncclResult_t res = checkPhase(n, r, stk, failed, s, ok);
  return res != ncclSuccess ? res : covers(n, r, stk, failed, s, 0, ok);
}

ncclResult_t mendSpareFree(int n, int r, const int* stk, const unsigned char* failed, int s, int* ok) {
  ncclResult_t res = checkPhase(n, r, stk, failed, s, ok);
  return res != ncclSuccess ? res : covers(n, r, stk, failed, s, 1, ok);
}

ncclResult_t mendSpareMinStack(int n, int r, const int* stk, const unsigned char* failed, int from, int* s) {
  ncclResult_t res = checkPhase(n, r, stk, failed, from, s);
  if (res != ncclSuccess) return res;
  *s = 0;
  for (int d = from; d <= r; d++) {
    int ok = 0;
    if ((res = covers(n, r, stk, failed, d, 1, &ok)) != ncclSuccess) return res;
    if (ok) {
      *s = d;
      break;
    }
  }
  return ncclSuccess;
}
