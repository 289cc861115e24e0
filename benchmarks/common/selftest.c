/* --selftest: checks of the harness that need no communicator: flag parsing, per-collective
 * counts and in-place layouts, bus-bandwidth factors (against nccl-tests' table), the number
 * formats and columns of the output, and the test data, whose expected results are compared
 * with an independent in-memory simulation of the collective on a few ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"

static int nPass, nFail;

static void check(int ok, const char* what) {
  printf("%s - %s\n", ok ? "ok" : "not ok", what);
  if (ok) nPass++;
  else nFail++;
}

/* Parses a command line given as one string, with stderr silenced. */
static int parseLine(struct benchOpts* o, const char* line) {
  char buf[512], *argv[64];
  int argc = 0;
  snprintf(buf, sizeof(buf), "tool %s", line);
  for (char* tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
  argv[argc] = NULL;
  benchOptsDefaults(o);
  fflush(stderr);
  int saved = dup(2);
  FILE* devnull = freopen("/dev/null", "w", stderr);
  int rc = benchParseArgs(o, argc, argv, NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  (void)devnull;
  return rc;
}

static void testArgs(void) {
  struct benchOpts o;
  benchOptsDefaults(&o);
  check(o.minBytes == 32u << 20 && o.maxBytes == 32u << 20 && o.stepBytes == 1u << 20 &&
            o.stepFactor == 1 && o.iters == 20 && o.warmupIters == 1 && o.check == 1 &&
            o.op == ncclSum && o.type == ncclFloat && o.average == 1 && o.nThreads == 1,
        "defaults match nccl-tests");
  check(parseLine(&o, "-b 8 -e 1K -f 2 -t 2 -g 1 -c 0 -o max -d half -w 3 -n 7 -r 1 -z 1 -a 2") == 0 &&
            o.minBytes == 8 && o.maxBytes == 1024 && o.stepFactor == 2 && o.nThreads == 2 &&
            o.check == 0 && o.op == ncclMax && o.type == ncclFloat16 && o.warmupIters == 3 &&
            o.iters == 7 && o.root == 1 && o.blocking == 1 && o.average == 2,
        "short flags");
  check(parseLine(&o, "--minbytes 1M --maxbytes 0.5G --stepbytes 4K --op mulsum --datatype bfloat16 "
                      "--iters 3 --agg_iters 2 --run_cycles 2 --unalign 1 --per_iter_timing 1") == 0 &&
            o.minBytes == 1u << 20 && o.maxBytes == 512u << 20 && o.stepBytes == 4096 &&
            o.op == BENCH_OP_MULSUM && o.type == ncclBfloat16 && o.iters == 3 && o.aggIters == 2 &&
            o.runCycles == 2 && o.unalign == 1 && o.perIter == 1,
        "long flags");
  check(parseLine(&o, "-o all -d all") == 0 && o.op == -1 && o.type == -1, "-o all -d all");
  int memOk = parseLine(&o, "-M 1 -M device") == 0 && o.memReport == 1 && o.memMode == benchMemDevice;
  memOk &= parseLine(&o, "--memory host") == 0 && o.memReport == 0 && o.memMode == benchMemHost;
  const char* env = getenv("MEND_PERF_MEMORY");
  memOk &= parseLine(&o, "-M 0") == 0 && o.memMode == (env && strcmp(env, "host") == 0     ? benchMemHost
                                                       : env && strcmp(env, "device") == 0 ? benchMemDevice
                                                                                           : benchMemAuto);
  check(memOk, "-M takes 0/1 (memory line) and host/device (memory mode)");
  static const char* const bad[] = {"-b 1Q", "-n 0", "-b 2M -e 1M", "-d foo", "-o bar", "-t 0",
                                    "-z 4", "-a 9", "-f 0", "extra", "-D 1", "-c x", "-M gpu", "-M 2"};
  int rejected = 0;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) rejected += parseLine(&o, bad[i]) == benchUsage;
  check(rejected == (int)(sizeof(bad) / sizeof(bad[0])), "bad command lines are rejected");
  size_t v = 0;
  check(benchParseSize("32M", &v) == 0 && v == 33554432 && benchParseSize("1k", &v) == 0 && v == 1024 &&
            benchParseSize("3G", &v) == 0 && v == 3ull << 30 && benchParseSize("-1", &v) != 0,
        "size suffixes are binary");
}

static void testFormat(void) {
  char s[16];
  int ok = 1;
  benchFmtFloat(s, 7, 12.345); ok &= strcmp(s, "  12.35") == 0 || strcmp(s, "  12.34") == 0;
  benchFmtFloat(s, 7, 12345.67); ok &= strcmp(s, "12345.7") == 0;
  benchFmtFloat(s, 7, 123456.7); ok &= strcmp(s, " 123457") == 0;
  benchFmtFloat(s, 7, 1.5e9); ok &= strcmp(s, "1.5e+09") == 0;
  benchFmtFloat(s, 6, 0.0); ok &= strcmp(s, "  0.00") == 0;
  check(ok, "numbers use 2, 1 or 0 decimals to fit the column");
}

/* Prints a header, one row and the footer into a file and checks the columns. */
static void testTable(const struct benchColl* coll) {
  struct benchOpts o;
  benchOptsDefaults(&o);
  fflush(stdout);
  FILE* tmp = tmpfile();
  int saved = dup(1);
  if (!tmp || saved < 0) { check(0, "table capture"); return; }
  dup2(fileno(tmp), 1);
  benchPrintTableHeader(&o);
  benchPrintRowStart(1024, 256, "float", coll->reduces ? "sum" : "none", coll->rooted ? 0 : -1);
  benchPrintRowBody(&o, 12.5, 0.08, 0.12, 1, 0, NULL);
  benchPrintRowBody(&o, 123456.0, 0.08, 0.12, 1, 0, NULL);
  benchPrintRowEnd(&o);
  benchPrintFooter(&o, 0, 0.12, "tool");
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  rewind(tmp);
  char lines[10][256];
  int n = 0;
  while (n < 10 && fgets(lines[n], sizeof(lines[n]), tmp)) n++;
  fclose(tmp);
  int ok = n == 9;
  static const char* const names[] = {"#", "size", "count", "type", "redop", "root", "time", "algbw",
                                      "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"};
  char* tok = n > 2 ? strtok(lines[2], " \n") : NULL;
  for (int i = 0; i < 14 && ok; i++, tok = strtok(NULL, " \n")) ok = tok && strcmp(tok, names[i]) == 0;
  check(ok && strstr(lines[1], "out-of-place") && strstr(lines[1], "in-place") &&
            strstr(lines[3], "(B)") && strstr(lines[3], "(elements)") && strstr(lines[3], "(GB/s)"),
        "table header: banner, column names and units");
  int fields = 0;
  size_t rowLen = n > 4 ? strlen(lines[4]) : 0;
  for (tok = n > 4 ? strtok(lines[4], " \n") : NULL; tok; tok = strtok(NULL, " \n")) fields++;
  check(fields == 13 && rowLen == 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6 + 2 * 33 + 1,
        "a row has 13 columns of nccl-tests' widths");
  check(n == 9 && strcmp(lines[5], "# Out of bounds values : 0 OK\n") == 0 &&
            strncmp(lines[6], "# Avg bus bandwidth    : 0.12", 29) == 0 &&
            strcmp(lines[8], "# Collective test concluded: tool\n") == 0,
        "footer lines");
}

struct factorRow {
  const char* name;      /* collective */
  int timesRanks;        /* algbw bytes multiplied by n */
  int kind;              /* 0: 2(n-1)/n, 1: (n-1)/n, 2: 1 */
};

static void testBandwidth(const struct benchColl* coll) {
  static const struct factorRow rows[] = {
      {"AllReduce", 0, 0}, {"ReduceScatter", 1, 1}, {"AllGather", 1, 1}, {"Broadcast", 0, 2},
      {"Reduce", 0, 2},    {"AlltoAll", 1, 1},      {"Gather", 1, 1},    {"Scatter", 1, 1},
      {"SendRecv", 0, 2}};
  const struct factorRow* row = NULL;
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    if (strcmp(rows[i].name, coll->name) == 0) row = &rows[i];
  int ok = row != NULL;
  for (int n = 2; n <= 16 && ok; n *= 2) {
    double want = row->kind == 0 ? 2.0 * (n - 1) / n : row->kind == 1 ? (double)(n - 1) / n : 1.0;
    double alg, bus, bytes = 262144.0 * 4 * (row->timesRanks ? n : 1);
    benchComputeBw(coll, 262144, 4, 1e-3, n, &alg, &bus);
    ok = fabs(alg - bytes / 1e9 / 1e-3) < 1e-9 && fabs(bus - alg * want) < 1e-9;
  }
  check(ok, "algbw and busbw follow nccl-tests' formula for this collective");
}

static void testCounts(const struct benchColl* coll) {
  int ok = 1;
  for (int n = 1; n <= 8 && ok; n++) {
    for (size_t count = 0; count < 5000 && ok; count = count * 3 + 1) {
      for (int t = 0; t < BENCH_NUM_TYPES && ok; t++) {
        size_t sz = benchTypeSize(t), big;
        struct benchCounts c;
        coll->counts(count, sz, n, &c);
        big = c.sendCount > c.recvCount ? c.sendCount : c.recvCount;
        ok = big <= count && c.paramCount <= big &&
             c.sendInplace * (size_t)(n - 1) + c.sendCount <= c.recvCount + (c.sendInplace ? 0 : big) &&
             c.recvInplace * (size_t)(n - 1) + c.recvCount <= big;
        if (strcmp(coll->name, "AllGather") == 0 || strcmp(coll->name, "AlltoAll") == 0 ||
            strcmp(coll->name, "ReduceScatter") == 0)
          ok = ok && (c.paramCount * sz) % 16 == 0;
      }
    }
  }
  check(ok, "counts fit the buffers; in-place slots lie inside; chunks are 16-byte multiples");
}

#define SIM_RANKS 4
#define SIM_COUNT 96

/* Reference result of element i over all ranks' inputs, reduced in double. */
static double simReduce(void* const* in, size_t i, int type, int op) {
  double acc = 0;
  for (int k = 0; k < SIM_RANKS; k++) {
    double v = benchLoad(type, in[k], i) * (op == BENCH_OP_MULSUM ? benchMulsumScalar(type, k) : 1.0);
    if (k == 0) acc = v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else if (op == ncclMin) acc = v < acc ? v : acc;
    else acc += v;
  }
  if (op == ncclAvg) acc = type >= ncclFloat16 ? acc / SIM_RANKS : floor(acc / SIM_RANKS);
  return acc;
}

/* What rank r must hold, computed from the inputs alone; returns elements defined. */
static size_t simulate(const struct benchColl* coll, void* const* in, void* out, const struct benchCounts* c,
                       int type, int op, int r, int root) {
  const char* nm = coll->name;
  size_t sz = benchTypeSize(type), n = c->recvCount, per = c->paramCount;
  for (size_t i = 0; i < n; i++) {
    double v;
    if (!strcmp(nm, "AllReduce")) v = simReduce(in, i, type, op);
    else if (!strcmp(nm, "Reduce")) { if (r != root) return 0; v = simReduce(in, i, type, op); }
    else if (!strcmp(nm, "ReduceScatter")) v = simReduce(in, (size_t)r * per + i, type, op);
    else if (!strcmp(nm, "AllGather")) v = benchLoad(type, in[i / per], i % per);
    else if (!strcmp(nm, "Gather")) { if (r != root) return 0; v = benchLoad(type, in[i / per], i % per); }
    else if (!strcmp(nm, "Broadcast")) v = benchLoad(type, in[root], i);
    else if (!strcmp(nm, "Scatter")) v = benchLoad(type, in[root], (size_t)r * per + i);
    else if (!strcmp(nm, "AlltoAll")) v = benchLoad(type, in[i / per], (size_t)r * per + i % per);
    else v = benchLoad(type, in[(r - 1 + SIM_RANKS) % SIM_RANKS], i);  /* SendRecv */
    benchStore(type, out, i, v);
  }
  (void)sz;
  return n;
}

static void testData(const struct benchColl* coll) {
  int ok = 1, detected = 1, root = 1;
  void* in[SIM_RANKS];
  char* out = malloc(SIM_COUNT * 8), *exp = malloc(SIM_COUNT * 8);
  for (int k = 0; k < SIM_RANKS; k++) in[k] = malloc(SIM_COUNT * 8);
  for (int t = 0; t < BENCH_NUM_TYPES; t++) {
    for (int op = coll->reduces ? 0 : BENCH_OP_NONE; op < (coll->reduces ? BENCH_NUM_OPS : 0); op++) {
      if (!benchOpValid(t, op)) continue;
      struct benchCounts c;
      coll->counts(SIM_COUNT, benchTypeSize(t), SIM_RANKS, &c);
      for (int k = 0; k < SIM_RANKS; k++) coll->fillSend(in[k], &c, t, op, k, SIM_RANKS, root, 7);
      for (int r = 0; r < SIM_RANKS; r++) {
        size_t n = coll->fillExpected(exp, &c, t, op, r, SIM_RANKS, root, 7);
        size_t m = simulate(coll, in, out, &c, t, op, r, root);
        if (n != m || benchCompare(out, exp, n, t, op, SIM_RANKS) != 0) ok = 0;
        if (n > 0) {
          benchStore(t, out, n / 2, benchLoad(t, exp, n / 2) + 50);
          detected &= benchCompare(out, exp, n, t, op, SIM_RANKS) == 1;
        }
      }
    }
  }
  for (int k = 0; k < SIM_RANKS; k++) free(in[k]);
  free(out);
  free(exp);
  check(ok, "expected results equal a simulation of the collective, every type and op");
  check(detected, "one wrong element is counted as one");
}

/* Every partial result of the test data must be exact in the element type. */
static void testExactness(void) {
  int ok = 1;
  for (int t = ncclFloat16; t < BENCH_NUM_TYPES; t++) {
    for (int op = 0; op < BENCH_NUM_OPS; op++) {
      if (op == ncclAvg || !benchOpValid(t, op)) continue;
      for (int n = 2; n <= 8; n++) {
        for (size_t i = 0; i < 64; i++) {
          double acc = 0;
          for (int k = 0; k < n; k++) {
            double v = benchGenValue(t, op, k, i, 3, n) * (op == BENCH_OP_MULSUM ? benchMulsumScalar(t, k) : 1);
            acc = k == 0 ? v : op == ncclProd ? acc * v : op == ncclMax ? fmax(acc, v)
                             : op == ncclMin ? fmin(acc, v) : acc + v;
            ok &= benchEncodeDecode(t, acc) == acc && benchEncodeDecode(t, v) == v;
          }
        }
      }
    }
  }
  check(ok, "inputs and partial results are exact in every floating type");
}

int benchSelftest(const struct benchColl* coll) {
  printf("# selftest of the %s harness\n", coll->name);
  testArgs();
  testFormat();
  testTable(coll);
  testBandwidth(coll);
  testCounts(coll);
  testData(coll);
  testExactness();
  printf("# selftest: %d passed, %d failed\n", nPass, nFail);
  return nFail ? benchFailed : benchOk;
}
