/* Output in nccl-tests' format: the same header lines, column widths, number formats and
 * footer, so that parsers written for nccl-tests read Mend runs unchanged. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

#define TS_FORMAT "%Y-%m-%d %H:%M:%S"

/* Widest of 2, 1 or 0 decimals that fits `width`, else scientific (nccl-tests' rule). */
void benchFmtFloat(char* out, int width, double v) {
  static const char* const fmts[] = {"%*.2f", "%*.1f", "%*.0f"};
  for (int i = 0; i < 3; i++)
    if (snprintf(out, (size_t)width + 1, fmts[i], width, v) <= width) return;
  snprintf(out, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

void benchPrintPreamble(const struct benchOpts* o, const char* prog, int libVersion) {
  printf("# Mend perf tools %s (nccl-tests compatible) nccl-headers=%d nccl-library=%d\n",
         MEND_VERSION, NCCL_VERSION_CODE, libVersion);
  printf("# Collective test starting: %s\n", prog);
  int factor = o->stepFactor > 1;
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
         "agg iters: %d validation: %d graph: %d unalign: %d\n",
         o->nThreads, o->nGpus, o->minBytes, o->maxBytes, factor ? o->stepFactor : o->stepBytes,
         factor ? "factor" : "bytes", o->warmupIters, o->iters, o->aggIters, o->check,
         o->graphLaunches, o->unalign);
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o->blocking == 3)
    printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  if (o->perIter) {
    printf("# Per-Iteration Report: host timing; i_* uses max over process rows");
    if (o->perIterSkip) printf("; summary skips first %d iterations", o->perIterSkip);
    printf(" \n");
  }
  if (o->parallelInit) printf("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  printf("#\n");
}

void benchPrintTableHeader(const struct benchOpts* o) {
  const char* t = o->reportCputime ? "cputime" : "time";
  const char* tsLbl = o->timestamps ? "timestamp" : "";
  const char* tsFmt = o->timestamps ? TS_FORMAT : "";
  int tsPad = o->timestamps ? 19 : 0;
  printf("#\n");
  if (o->perIter) {
    printf("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)"
           "                                in-place (+ per-iteration)\n", "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s"
           "  %7s  %7s  %7s  %7s %*s\n", "size", "count", "type", "redop", "root", t, "algbw",
           "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", t, "algbw", "busbw", "#wrong",
           "i_min", "i_max", "i_p99", "i_cv%", tsPad, tsLbl);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s"
           "  %7s  %7s  %7s  %7s %*s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)",
           "", "(us)", "(us)", "(us)", "(%)", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
           "(%)", tsPad, tsFmt);
    return;
  }
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
         "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size",
         "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
         "#wrong", tsPad, tsLbl);
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
         tsPad, tsFmt);
}

void benchPrintRowStart(size_t bytes, size_t count, const char* type, const char* op, int root) {
  printf("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, root);
}

void benchPrintRowBody(const struct benchOpts* o, double usec, double algbw, double busbw,
                       int reportErrors, int64_t wrong, const double* iterStats) {
  char ts[8], ab[7], bb[7];
  benchFmtFloat(ts, 7, usec);
  benchFmtFloat(ab, 6, algbw);
  benchFmtFloat(bb, 6, busbw);
  if (reportErrors) printf("  %7s  %6s  %6s  %6g", ts, ab, bb, (double)wrong);
  else printf("  %7s  %6s  %6s    N/A", ts, ab, bb);
  if (o->perIter && iterStats) {
    char s[4][8];
    for (int i = 0; i < 4; i++) benchFmtFloat(s[i], 7, iterStats[i]);
    printf("  %7s  %7s  %7s  %7s", s[0], s[1], s[2], s[3]);
  }
}

void benchPrintRowEnd(const struct benchOpts* o) {
  if (o->timestamps && !o->perIter) {
    char buf[64];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(buf, sizeof(buf), TS_FORMAT, localtime_r(&now, &tmv));
    printf("%21s", buf);
  }
  printf("\n");
  fflush(stdout);
}

void benchPrintFooter(const struct benchOpts* o, int errors, double avgBw, const char* prog) {
  printf("# %-20s : %d %s\n", "Out of bounds values", errors, errors ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", avgBw,
         o->minBw < 0 ? "" : (avgBw < o->minBw * 0.9 ? "FAILED" : "OK"));
  printf("#\n");
  printf("# Collective test concluded: %s\n", prog);
  fflush(stdout);
}

void benchComputeBw(const struct benchColl* coll, size_t paramCount, size_t eltSize, double sec,
                    int nRanks, double* algbw, double* busbw) {
  double bytes = (double)paramCount * (double)eltSize * (coll->algBytesTimesRanks ? nRanks : 1);
  *algbw = sec > 0 ? bytes / 1.0e9 / sec : 0.0;
  *busbw = *algbw * coll->busFactor(nRanks);
}

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* min, max, p99 (microseconds) and coefficient of variation (%) of per-iteration seconds. */
void benchIterStats(const double* t, int n, double* stats4) {
  double* s = malloc((size_t)n * sizeof(double));
  if (!s || n <= 0) {
    free(s);
    memset(stats4, 0, 4 * sizeof(double));
    return;
  }
  memcpy(s, t, (size_t)n * sizeof(double));
  qsort(s, (size_t)n, sizeof(double), cmpDouble);
  double sum = 0, var = 0;
  for (int i = 0; i < n; i++) sum += s[i];
  double avg = sum / n;
  for (int i = 0; i < n; i++) var += (s[i] - avg) * (s[i] - avg);
  int p99 = (n * 99 + 99) / 100 - 1;
  if (p99 > n - 1) p99 = n - 1;
  stats4[0] = s[0] * 1e6;
  stats4[1] = s[n - 1] * 1e6;
  stats4[2] = s[p99] * 1e6;
  stats4[3] = avg > 0 ? sqrt(var / n) / avg * 100.0 : 0.0;
  free(s);
}

/* ---- JSON (-J): rows are kept and written once at the end. */
struct jsonRow {
  size_t bytes, count;   /* size and count columns */
  char type[16], op[16]; /* type and redop columns */
  int root;              /* root column */
  double t[2], alg[2], bus[2];  /* out-of-place [0] and in-place [1] results */
  int report[2];         /* #wrong reported (1) or N/A (0) */
  int64_t wrong[2];      /* #wrong */
};
static struct jsonRow* jsonRows;
static size_t jsonN, jsonCap;

void benchJsonRow(size_t bytes, size_t count, const char* type, const char* op, int root,
                  int inplace, double usec, double algbw, double busbw, int reportErrors,
                  int64_t wrong) {
  if (!inplace) {
    if (jsonN == jsonCap) {
      size_t cap = jsonCap ? 2 * jsonCap : 64;
      struct jsonRow* r = realloc(jsonRows, cap * sizeof(*r));
      if (!r) return;
      jsonRows = r;
      jsonCap = cap;
    }
    struct jsonRow* r = &jsonRows[jsonN++];
    memset(r, 0, sizeof(*r));
    r->bytes = bytes;
    r->count = count;
    snprintf(r->type, sizeof(r->type), "%s", type);
    snprintf(r->op, sizeof(r->op), "%s", op);
    r->root = root;
  }
  if (jsonN == 0) return;
  struct jsonRow* r = &jsonRows[jsonN - 1];
  r->t[inplace] = usec;
  r->alg[inplace] = algbw;
  r->bus[inplace] = busbw;
  r->report[inplace] = reportErrors;
  r->wrong[inplace] = wrong;
}

int benchJsonWrite(const char* path, const struct benchOpts* o, const char* prog, int errors,
                   double avgBw) {
  FILE* f = fopen(path, "w");
  if (!f) {
    printf("# skipping json output; %s not accessible\n", path);
    return -1;
  }
  fprintf(f, "{\"version\":1,\"tool\":\"%s\",\"library\":\"Mend perf tools %s\",\"config\":{"
          "\"nthreads\":%d,\"ngpus\":%d,\"minimum_bytes\":%zu,\"maximum_bytes\":%zu,"
          "\"warmup_iters\":%d,\"iterations\":%d,\"aggregated_iterations\":%d,\"validation\":%d},"
          "\"results\":[", prog, MEND_VERSION, o->nThreads, o->nGpus, o->minBytes, o->maxBytes,
          o->warmupIters, o->iters, o->aggIters, o->check);
  for (size_t i = 0; i < jsonN; i++) {
    struct jsonRow* r = &jsonRows[i];
    fprintf(f, "%s{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d",
            i ? "," : "", r->bytes, r->count, r->type, r->op, r->root);
    for (int p = 0; p < 2; p++) {
      fprintf(f, ",\"%s\":{\"time\":%f,\"alg_bw\":%f,\"bus_bw\":%f,\"nwrong\":", p ? "in_place" : "out_of_place",
              r->t[p], r->alg[p], r->bus[p]);
      if (r->report[p]) fprintf(f, "%lld}", (long long)r->wrong[p]);
      else fprintf(f, "null}");
    }
    fprintf(f, "}");
  }
  fprintf(f, "],\"out_of_bounds\":{\"count\":%d,\"okay\":%s},\"average_bus_bandwidth\":"
          "{\"bandwidth\":%f}}\n", errors, errors ? "false" : "true", avgBw);
  int rc = fclose(f);
  printf("# Wrote JSON output to %s\n", path);
  return rc == 0 ? 0 : -1;
}
