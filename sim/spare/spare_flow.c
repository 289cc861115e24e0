/* Phase 2 of the controller (reordering with the fewest moves, min-cost max-flow) and the whole
 * controller (Alg. 2 of the paper). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "spare_internal.h"

/* Scratch of the successive-shortest-path search over types (0..n-1) and slots (n..n+m-1). */
struct flowState {
  const struct mendSpareGraph* g;
  int* matchL;    /* slot of each type, or -1 */
  int* matchR;    /* type of each slot, or -1 */
  int* costR;     /* cost of the edge that matches each slot */
  long* pot;      /* potentials: reduced costs c + pot[u] - pot[v] stay >= 0 */
  long* dist;     /* reduced distance from the free types (LONG_MAX: not reached) */
  int* prevEdge;  /* for a slot: the edge that reached it */
  int* heap;      /* binary heap of vertices keyed by dist */
  int* where;     /* position of a vertex in the heap, -1 when absent */
  int heapLen;
};

static void heapSwap(struct flowState* f, int a, int b) {
  int x = f->heap[a], y = f->heap[b];
  f->heap[a] = y;
  f->heap[b] = x;
  f->where[y] = a;
  f->where[x] = b;
}

static void heapPush(struct flowState* f, int v, long d) {
  f->dist[v] = d;
  int i = f->where[v];
  if (i < 0) {
    i = f->heapLen++;
    f->heap[i] = v;
    f->where[v] = i;
  }
  while (i > 0 && f->dist[f->heap[(i - 1) / 2]] > f->dist[f->heap[i]]) {
    heapSwap(f, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static int heapPop(struct flowState* f) {
  int top = f->heap[0];
  heapSwap(f, 0, --f->heapLen);
  f->where[top] = -1;
  int i = 0;
  for (;;) {
    int a = 2 * i + 1, b = a + 1, m = i;
    if (a < f->heapLen && f->dist[f->heap[a]] < f->dist[f->heap[m]]) m = a;
    if (b < f->heapLen && f->dist[f->heap[b]] < f->dist[f->heap[m]]) m = b;
    if (m == i) break;
    heapSwap(f, i, m);
    i = m;
  }
  return top;
}

/* Dijkstra from every unmatched type (through the super source whose potential is the largest of
 * theirs); returns the free slot of least real distance, or -1. */
static int shortestPath(struct flowState* f) {
  const struct mendSpareGraph* g = f->g;
  int n = g->nLeft, total = n + g->nRight, best = -1;
  long srcPot = LONG_MIN, bestKey = LONG_MAX;
  for (int u = 0; u < n; u++)
    if (f->matchL[u] < 0 && f->pot[u] > srcPot) srcPot = f->pot[u];
  for (int v = 0; v < total; v++) f->dist[v] = LONG_MAX;
  for (int u = 0; u < n; u++)
    if (f->matchL[u] < 0) heapPush(f, u, srcPot - f->pot[u]);
  while (f->heapLen > 0) {
    int v = heapPop(f);
    if (v >= n) {  /* a slot: a free one ends a path, a matched one leads back to its type */
      int slot = v - n, x = f->matchR[slot];
      if (x < 0) {
        long key = f->dist[v] + f->pot[v];
        if (key < bestKey) bestKey = key, best = slot;
        continue;
      }
      long d = f->dist[v] - f->costR[slot] + f->pot[v] - f->pot[x];
      if (d < f->dist[x]) heapPush(f, x, d);
      continue;
    }
    for (int e = g->off[v]; e < g->off[v + 1]; e++) {
      int w = n + g->adj[e];
      if (f->matchL[v] == g->adj[e]) continue;  /* the matched edge runs backwards only */
      long d = f->dist[v] + g->cost[e] + f->pot[v] - f->pot[w];
      if (d < f->dist[w]) {
        heapPush(f, w, d);
        f->prevEdge[w - n] = e;
      }
    }
  }
  long far = 0;
  for (int v = 0; v < total; v++)
    if (f->dist[v] != LONG_MAX && f->dist[v] > far) far = f->dist[v];
  for (int v = 0; v < total; v++) f->pot[v] += f->dist[v] != LONG_MAX ? f->dist[v] : far;
  return best;
}

/* The type whose edge e is (edges are stored by type). */
static int edgeType(const struct mendSpareGraph* g, int e) {
  int lo = 0, hi = g->nLeft - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (g->off[mid] <= e) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* Flips the path that ends at free slot: back through prevEdge until an unmatched type. */
static void augment(struct flowState* f, int slot) {
  for (;;) {
    int e = f->prevEdge[slot], u = edgeType(f->g, e), old = f->matchL[u];
    f->matchR[slot] = u;
    f->costR[slot] = f->g->cost[e];
    f->matchL[u] = slot;
    if (old < 0) return;
    f->matchR[old] = -1;
    slot = old;
  }
}

/* Rewrites alive group w's row: the types matched to its first s slots go there; every other
 * position keeps its type when that type is still unplaced, the rest fill in their old order. */
static void rebuildRow(int* row, int r, int s, const int* matchR, int w, unsigned char* placed, int* old) {
  memcpy(old, row, (size_t)r * sizeof(int));
  for (int t = 0; t < r; t++) placed[t] = 0;
  for (int t = 0; t < r; t++) row[t] = -1;
  for (int t = 0; t < s; t++) {
    int ty = matchR[w * s + t];
    if (ty < 0) continue;
    row[t] = ty;
    for (int k = 0; k < r; k++)
      if (old[k] == ty) placed[k] = 1;
  }
  for (int t = 0; t < r; t++)
    if (row[t] < 0 && !placed[t]) row[t] = old[t], placed[t] = 1;
  int next = 0;
  for (int t = 0; t < r; t++) {
    if (row[t] >= 0) continue;
    while (placed[next]) next++;
    row[t] = old[next];
    placed[next] = 1;
  }
}

/* Min-cost assignment of every type to a slot, starting from the zero-cost one the stacks hold. */
static ncclResult_t assign(struct flowState* f, int n, int r, const int* stk, const unsigned char* failed, int s) {
  for (int w = 0; w < n; w++) {
    if (failed[w]) continue;
    for (int t = 0; t < s; t++) {
      int ty = stk[(size_t)w * r + t];
      if (f->matchL[ty] < 0) f->matchL[ty] = w * s + t, f->matchR[w * s + t] = ty, f->costR[w * s + t] = 0;
    }
  }
  for (int u = 0; u < n; u++) {
    if (f->matchL[u] >= 0) continue;
    int slot = shortestPath(f);
    if (slot < 0) return mendSpareFail("reorder: %d stacks of the survivors cannot hold every type (type %d is short)", s, u);
    augment(f, slot);
    if (f->matchL[u] < 0) u--;  /* another type took this path: u is still to place */
  }
  return ncclSuccess;
}

ncclResult_t mendSpareReorder(int n, int r, int* stk, const unsigned char* failed, int s, int* moves) {
  if (stk == NULL || failed == NULL || moves == NULL) return mendSpareFail("reorder: a NULL stack table, failed set or result");
  ncclResult_t res = mendSpareCheck(n, r, stk, failed);
  if (res != ncclSuccess) return res;
  if (s < 1 || s > r) return mendSpareFail("all-reduce stack %d: must be in [1, r = %d]", s, r);
  struct mendSpareGraph g;
  if ((res = mendSpareGraphBuild(n, r, stk, failed, s, 1, 1, &g)) != ncclSuccess) return res;
  size_t total = (size_t)n + g.nRight;
  struct flowState f = {.g = &g};
  f.matchL = malloc(total * sizeof(int));
  f.costR = malloc((size_t)g.nRight * sizeof(int) + 1);
  f.pot = calloc(total, sizeof(long));
  f.dist = malloc(total * sizeof(long));
  f.prevEdge = malloc((size_t)g.nRight * sizeof(int) + 1);
  f.heap = malloc(total * sizeof(int));
  f.where = malloc(total * sizeof(int));
  int* scratch = malloc((size_t)r * (sizeof(int) + 1));
  if (!f.matchL || !f.costR || !f.pot || !f.dist || !f.prevEdge || !f.heap || !f.where || !scratch) {
    res = mendSpareNoMem("the reordering");
    goto out;
  }
  f.matchR = f.matchL + n;
  for (size_t i = 0; i < total; i++) f.matchL[i] = -1, f.where[i] = -1;
  if ((res = assign(&f, n, r, stk, failed, s)) != ncclSuccess) goto out;
  *moves = 0;
  for (int v = 0; v < g.nRight; v++)
    if (f.matchR[v] >= 0) *moves += f.costR[v];
  for (int w = 0; w < n; w++)
    if (!failed[w]) rebuildRow(stk + (size_t)w * r, r, s, f.matchR, w, (unsigned char*)(scratch + r), scratch);
out:
  free(f.matchL);
  free(f.costR);
  free(f.pot);
  free(f.dist);
  free(f.prevEdge);
  free(f.heap);
  free(f.where);
  free(scratch);
  mendSpareGraphFree(&g);
  return res;
}

ncclResult_t mendSpareControl(int n, int r, int* stk, const unsigned char* failed, int* s, int* outcome, int* moves) {
  if (s == NULL || outcome == NULL) return mendSpareFail("control: a NULL all-reduce stack or outcome");
  int ok = 0, best = 0, moved = 0;
  ncclResult_t res = mendSpareFixed(n, r, stk, failed, *s, &ok);
  if (res != ncclSuccess) return res;
  if (moves != NULL) *moves = 0;
  if (ok) {
    *outcome = MEND_SPARE_KEEP;
    return ncclSuccess;
  }
  if ((res = mendSpareMinStack(n, r, stk, failed, *s, &best)) != ncclSuccess) return res;
  if (best == 0) {
    *outcome = MEND_SPARE_WIPEOUT;
    return ncclSuccess;
  }
  if ((res = mendSpareReorder(n, r, stk, failed, best, &moved)) != ncclSuccess) return res;
  *s = best;
  *outcome = MEND_SPARE_REORDER;
  if (moves != NULL) *moves = moved;
  return ncclSuccess;
}
