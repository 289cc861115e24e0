/* Argument checks, the error report and the two layouts (cyclic Golomb ruler, replica blocks). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spare_internal.h"

static _Thread_local char lastError[256];

const char* mendSpareLastError(void) { return lastError; }

ncclResult_t mendSpareFail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lastError, sizeof(lastError), fmt, ap);
  va_end(ap);
  fprintf(stderr, "mend-spare WARN %s\n", lastError);
  return ncclInvalidArgument;
}

ncclResult_t mendSpareNoMem(const char* what) {
  snprintf(lastError, sizeof(lastError), "out of memory for %s", what);
  fprintf(stderr, "mend-spare WARN %s\n", lastError);
  return ncclSystemError;
}

static ncclResult_t checkSizes(int n, int r) {
  if (n < 1 || n > MEND_SPARE_MAX_GROUPS) return mendSpareFail("N = %d groups: must be in [1, %d]", n, MEND_SPARE_MAX_GROUPS);
  if (r < 1 || r > n) return mendSpareFail("redundancy r = %d: must be in [1, N = %d]", r, n);
  return ncclSuccess;
}

/* Each row: r distinct types in [0, n).  seen[] is n bytes of scratch, stamped with the row. */
static ncclResult_t checkStacks(int n, int r, const int* stk) {
  int* seen = malloc((size_t)n * sizeof(int));
  if (seen == NULL) return mendSpareNoMem("the stack check");
  for (int i = 0; i < n; i++) seen[i] = -1;
  ncclResult_t res = ncclSuccess;
  for (int w = 0; w < n && res == ncclSuccess; w++) {
    for (int t = 0; t < r; t++) {
      int ty = stk[(size_t)w * r + t];
      if (ty < 0 || ty >= n) {
        res = mendSpareFail("group %d stack %d holds type %d: types are in [0, %d)", w, t, ty, n);
        break;
      }
      if (seen[ty] == w) {
        res = mendSpareFail("group %d holds type %d twice (stack %d)", w, ty, t);
        break;
      }
      seen[ty] = w;
    }
  }
  free(seen);
  return res;
}

ncclResult_t mendSpareCheck(int n, int r, const int* stk, const unsigned char* failed) {
  ncclResult_t res = checkSizes(n, r);
  if (res != ncclSuccess) return res;
  if (stk != NULL && (res = checkStacks(n, r, stk)) != ncclSuccess) return res;
  if (failed != NULL) {
    for (int w = 0; w < n; w++)
      if (failed[w] > 1) return mendSpareFail("failed[%d] = %d: must be 0 (alive) or 1 (failed)", w, failed[w]);
  }
  return ncclSuccess;
}

/* Depth-first search for r marks 0 = g0 < g1 < ... < n with distinct differences modulo n (used[d]
 * marks a difference taken), at most *budget steps. */
static int rulerSearch(int n, int r, int k, int* g, unsigned char* used, long* budget) {
  if (k == r) return 1;
  for (int m = g[k - 1] + 1; m < n; m++) {
    if (--*budget < 0) return 0;
    int j, ok = 1;
    for (j = 0; j < k && ok; j++) {
      int d = (m - g[j]) % n, e = n - d;
      if (used[d] || used[e] || d == e) ok = 0;
      else used[d] = used[e] = 1;
    }
    if (ok) {
      g[k] = m;
      if (rulerSearch(n, r, k + 1, g, used, budget)) return 1;
    }
    for (int i = 0; i < j - (ok ? 0 : 1); i++) {  /* undo the differences this mark took */
      int d = (m - g[i]) % n;
      used[d] = used[n - d] = 0;
    }
  }
  return 0;
}

ncclResult_t mendSpareLayoutCyclic(int n, int r, int* ruler, int* stk) {
  ncclResult_t res = checkSizes(n, r);
  if (res != ncclSuccess) return res;
  if (stk == NULL) return mendSpareFail("cyclic layout: the stack table is NULL");
  if ((long)r * (r - 1) > n - 1)
    return mendSpareFail("no cyclic ruler of %d marks modulo N = %d: needs N >= r(r-1)+1 = %ld", r, n, (long)r * (r - 1) + 1);
  int* g = malloc((size_t)r * sizeof(int));
  unsigned char* used = calloc((size_t)n, 1);
  if (g == NULL || used == NULL) {
    free(g);
    free(used);
    return mendSpareNoMem("the ruler search");
  }
  g[0] = 0;
  long budget = 20000000;
  int found = rulerSearch(n, r, 1, g, used, &budget);
  if (found) {
    for (int w = 0; w < n; w++)
      for (int t = 0; t < r; t++) stk[(size_t)w * r + t] = (int)(((long)w + g[t]) % n);
    if (ruler != NULL) memcpy(ruler, g, (size_t)r * sizeof(int));
  }
  free(g);
  free(used);
  if (!found) return mendSpareFail("no cyclic ruler of %d marks modulo N = %d found within the search bound", r, n);
  return ncclSuccess;
}

ncclResult_t mendSpareLayoutReplica(int n, int r, int* stk) {
  ncclResult_t res = checkSizes(n, r);
  if (res != ncclSuccess) return res;
  if (stk == NULL) return mendSpareFail("replica layout: the stack table is NULL");
  int blocks = n / r;
  for (int w = 0; w < n; w++) {
    int b = w / r < blocks ? w / r : blocks - 1, base = b * r, m = b == blocks - 1 ? n - base : r;
    for (int t = 0; t < r; t++) stk[(size_t)w * r + t] = base + (w - base + t) % m;
  }
  return ncclSuccess;
}
