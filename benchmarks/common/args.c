/* Command line of the perf tools: nccl-tests' flags, long names and defaults. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

void benchOptsDefaults(struct benchOpts* o) {
  *o = (struct benchOpts){
      .nThreads = 1, .nGpus = 1,
      .minBytes = 32u << 20, .maxBytes = 32u << 20, .stepBytes = 1u << 20, .stepFactor = 1,
      .iters = 20, .aggIters = 1, .warmupIters = 1, .runCycles = 1,
      .check = 1, .op = 0, .type = ncclFloat, .root = 0,
      .average = 1, .ctaPolicy = -1, .deviceCtaCount = 16, .minBw = -1.0,
  };
}

/* Size with an optional K, M or G suffix (binary units); fractions allowed ("0.5M"). */
int benchParseSize(const char* text, size_t* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || v < 0) return -1;
  while (*end == ' ') end++;
  double unit = 1;
  switch (*end) {
    case 'K': case 'k': unit = 1024.0; end++; break;
    case 'M': case 'm': unit = 1024.0 * 1024; end++; break;
    case 'G': case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
    case '\0': break;
    default: return -1;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0' || v * unit > 1e18) return -1;
  *out = (size_t)(v * unit);
  return 0;
}

static int parseInt(int flag, const char* text, long lo, long hi, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) {
    fprintf(stderr, "Invalid value '%s' for -%c: want an integer in %ld..%ld\n", text, flag, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parseSizeFlag(int flag, const char* text, size_t* out) {
  if (benchParseSize(text, out) != 0) {
    fprintf(stderr, "Invalid size '%s' for -%c: want bytes with an optional K, M or G suffix\n",
            text, flag);
    return -1;
  }
  return 0;
}

void benchUsageText(FILE* f, const char* prog) {
  fprintf(f,
    "USAGE: %s\n"
    "\t[-t,--nthreads <num threads>] (1)\n"
    "\t[-g,--ngpus <ranks per thread>] (1)\n"
    "\t[-b,--minbytes <min size in bytes>] (32M)\n"
    "\t[-e,--maxbytes <max size in bytes>] (32M)\n"
    "\t[-i,--stepbytes <increment size>] (1M)\n"
    "\t[-f,--stepfactor <increment factor>] (1 = off)\n"
    "\t[-n,--iters <iteration count>] (20)\n"
    "\t[-m,--agg_iters <aggregated iteration count>] (1)\n"
    "\t[-w,--warmup_iters <warmup iteration count>] (1)\n"
    "\t[-N,--run_cycles <cycle count>] run & print each cycle (1; 0 = infinite)\n"
    "\t[-p,--parallel_init <0/1>] each thread creates its communicators (0)\n"
    "\t[-c,--check <check iteration count>] (1; 0 = no check, #wrong is N/A)\n"
    "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] (sum)\n"
    "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/"
    "f8e4m3/f8e5m2/all>] (float)\n"
    "\t[-r,--root <root>] (0)\n"
    "\t[-z,--blocking <0/1/2/3>] (0)\n"
    "\t[-y,--stream_null <0/1>] device mode: call on the NULL stream (0; host mode has none)\n"
    "\t[-T,--timeout <time in seconds>] abort the communicators (0 = off)\n"
    "\t[-G,--cudagraph <num graph launches>] device mode: replay the timed loop as a CUDA graph\n"
    "\t    this many times (0; ignored in host mode)\n"
    "\t[-C,--report_cputime <0/1>] (0)\n"
    "\t[-a,--average <0/1/2/3>] report rank 0/average/min/max time across ranks (1)\n"
    "\t[-R,--local_register <0/1/2>] 1 ncclCommRegister, 2 symmetric window (0)\n"
    "\t[-x,--cta_policy <0/1/2>] config.CTAPolicy (unset)\n"
    "\t[-D,--device_implementation <0>] device-API kernels: not supported (0)\n"
    "\t[-V,--device_cta_count <count>] (16)\n"
    "\t[-J,--output_file <file>] also write the results as JSON\n"
    "\t[-S,--report_timestamps <0/1>] add a timestamp column (0)\n"
    "\t[-M,--memory <0/1>] print buffer memory use (0)\n"
    "\t[-M,--memory <host/device>] memory mode: device (GPU buffers, a stream per rank) when\n"
    "\t    built with CUDA and a GPU is found, else host; also MEND_PERF_MEMORY (auto)\n"
    "\t[-u,--unalign <elements>] misalign buffers (0)\n"
    "\t[-I,--per_iter_timing <0/1>] add i_min, i_max, i_p99, i_cv%% columns (0)\n"
    "\t[-K,--per_iter_skip <count>] samples skipped for -I (0)\n"
    "\t[--selftest] check the harness itself (no communicator) and exit\n"
    "\t[-h,--help]\n"
    "Ranks: threads x ranks-per-thread in this process; with RANK/WORLD_SIZE set (mend-run,\n"
    "torchrun) or under mpirun (built with MPI=1), times the number of processes.\n"
    "Environment: NCCL_TESTS_MIN_BW, NCCL_TESTS_SPLIT_MASK, NCCL_TESTS_SPLIT, NCCL_TESTS_DEVICE,\n"
    "MEND_PERF_MEMORY (host, device or auto).\n",
    prog);
}

static const struct option longOpts[] = {
    {"nthreads", required_argument, 0, 't'},      {"ngpus", required_argument, 0, 'g'},
    {"minbytes", required_argument, 0, 'b'},      {"maxbytes", required_argument, 0, 'e'},
    {"stepbytes", required_argument, 0, 'i'},     {"stepfactor", required_argument, 0, 'f'},
    {"iters", required_argument, 0, 'n'},         {"agg_iters", required_argument, 0, 'm'},
    {"warmup_iters", required_argument, 0, 'w'},  {"run_cycles", required_argument, 0, 'N'},
    {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
    {"op", required_argument, 0, 'o'},            {"datatype", required_argument, 0, 'd'},
    {"root", required_argument, 0, 'r'},          {"blocking", required_argument, 0, 'z'},
    {"stream_null", required_argument, 0, 'y'},   {"timeout", required_argument, 0, 'T'},
    {"cudagraph", required_argument, 0, 'G'},     {"report_cputime", required_argument, 0, 'C'},
    {"average", required_argument, 0, 'a'},       {"local_register", required_argument, 0, 'R'},
    {"cta_policy", required_argument, 0, 'x'},    {"device_implementation", required_argument, 0, 'D'},
    {"device_cta_count", required_argument, 0, 'V'}, {"output_file", required_argument, 0, 'J'},
    {"report_timestamps", required_argument, 0, 'S'}, {"memory", required_argument, 0, 'M'},
    {"unalign", required_argument, 0, 'u'},       {"per_iter_timing", required_argument, 0, 'I'},
    {"per_iter_skip", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},
    {"selftest", no_argument, 0, 1000},           {0, 0, 0, 0}};

/* The memory mode by name (-M host|device, MEND_PERF_MEMORY); -1 if unknown. */
static int memModeByName(const char* a) {
  if (strcmp(a, "auto") == 0) return benchMemAuto;
  if (strcmp(a, "host") == 0) return benchMemHost;
  if (strcmp(a, "device") == 0) return benchMemDevice;
  return -1;
}

/* -M takes nccl-tests' 0/1 (memory-use line) or a memory mode; both may be given (-M 1 -M host). */
static int parseMemory(const char* a, struct benchOpts* o) {
  int mode = memModeByName(a);
  if (mode > benchMemAuto) {
    o->memMode = mode;
    return 0;
  }
  if (strcmp(a, "0") == 0 || strcmp(a, "1") == 0) {
    o->memReport = a[0] - '0';
    return 0;
  }
  fprintf(stderr, "Invalid value '%s' for -M: want 0 or 1 (memory-use line), host or device\n", a);
  return -1;
}

/* One flag; returns 0, or -1 after printing what was wrong. */
static int parseOne(struct benchOpts* o, int c, const char* a) {
  switch (c) {
    case 't': return parseInt(c, a, 1, BENCH_MAX_LOCAL, &o->nThreads);
    case 'g': return parseInt(c, a, 1, BENCH_MAX_LOCAL, &o->nGpus);
    case 'b': return parseSizeFlag(c, a, &o->minBytes);
    case 'e': return parseSizeFlag(c, a, &o->maxBytes);
    case 'i': return parseSizeFlag(c, a, &o->stepBytes);
    case 'f': return parseSizeFlag(c, a, &o->stepFactor);
    case 'n': return parseInt(c, a, 1, INT_MAX / 2, &o->iters);
    case 'm': return parseInt(c, a, 1, 1 << 20, &o->aggIters);
    case 'w': return parseInt(c, a, 0, INT_MAX / 2, &o->warmupIters);
    case 'N': return parseInt(c, a, 0, INT_MAX, &o->runCycles);
    case 'p': return parseInt(c, a, 0, 1, &o->parallelInit);
    case 'c': return parseInt(c, a, 0, 1 << 20, &o->check);
    case 'r': return parseInt(c, a, 0, INT_MAX, &o->root);
    case 'z': return parseInt(c, a, 0, 3, &o->blocking);
    case 'y': return parseInt(c, a, 0, 1, &o->streamNull);
    case 'T': return parseInt(c, a, 0, 7 * 24 * 3600, &o->timeout);
    case 'G': return parseInt(c, a, 0, 1 << 20, &o->graphLaunches);
    case 'C': return parseInt(c, a, 0, 1, &o->reportCputime);
    case 'a': return parseInt(c, a, 0, 3, &o->average);
    case 'R': return parseInt(c, a, 0, 2, &o->localRegister);
    case 'x': return parseInt(c, a, 0, 2, &o->ctaPolicy);
    case 'D': return parseInt(c, a, 0, 16, &o->deviceImpl);
    case 'V': return parseInt(c, a, 1, 1 << 16, &o->deviceCtaCount);
    case 'J': o->jsonFile = a; return 0;
    case 'S': return parseInt(c, a, 0, 1, &o->timestamps);
    case 'M': return parseMemory(a, o);
    case 'u': return parseInt(c, a, 0, 1 << 20, &o->unalign);
    case 'I': return parseInt(c, a, 0, 1, &o->perIter);
    case 'K': return parseInt(c, a, 0, INT_MAX / 2, &o->perIterSkip);
    case 'o':
      o->op = benchOpByName(a);
      if (o->op == -2) {
        fprintf(stderr, "Invalid value '%s' for -o: want sum, prod, min, max, avg, mulsum or all\n", a);
        return -1;
      }
      return 0;
    case 'd':
      o->type = strcmp(a, "all") == 0 ? -1 : benchTypeByName(a);
      if (o->type == -1 && strcmp(a, "all") != 0) {
        fprintf(stderr, "Invalid value '%s' for -d: want int8, uint8, int32, uint32, int64, uint64, "
                "half, float, double, bfloat16, f8e4m3, f8e5m2 or all\n", a);
        return -1;
      }
      return 0;
    default: return -1;
  }
}

/* Cross-flag rules and environment variables. */
static int finishOpts(struct benchOpts* o) {
  if (o->minBytes > o->maxBytes) {
    fprintf(stderr, "Invalid sizes: minbytes %zu is larger than maxbytes %zu\n", o->minBytes,
            o->maxBytes);
    return -1;
  }
  if (o->stepFactor == 0) {
    fprintf(stderr, "Invalid value 0 for -f: the factor must be at least 1\n");
    return -1;
  }
  if (o->stepFactor <= 1 && o->stepBytes == 0 && o->minBytes != o->maxBytes) {
    fprintf(stderr, "Invalid sweep: -i 0 with -f 1 would never reach maxbytes\n");
    return -1;
  }
  if (o->deviceImpl != 0) {
    fprintf(stderr, "-D %d: device-API kernels are not supported by these tools\n", o->deviceImpl);
    return -1;
  }
  if (o->perIterSkip >= o->iters && o->perIter) {
    fprintf(stderr, "Invalid -K %d: must be smaller than -n %d\n", o->perIterSkip, o->iters);
    return -1;
  }
  const char* mem = getenv("MEND_PERF_MEMORY");
  if (mem && *mem && o->memMode == benchMemAuto) {  /* -M host|device wins over the variable */
    o->memMode = memModeByName(mem);
    if (o->memMode < 0) {
      fprintf(stderr, "Invalid MEND_PERF_MEMORY '%s': want host, device or auto\n", mem);
      return -1;
    }
  }
  const char* bw = getenv("NCCL_TESTS_MIN_BW");
  if (bw && *bw) {
    char* end = NULL;
    o->minBw = strtod(bw, &end);
    if (end == bw || *end != '\0' || o->minBw < 0) {
      fprintf(stderr, "Invalid NCCL_TESTS_MIN_BW '%s': want a number of GB/s\n", bw);
      return -1;
    }
  }
  return 0;
}

int benchParseArgs(struct benchOpts* o, int argc, char** argv, const struct benchColl* coll) {
  (void)coll;
  int c, idx;
  optind = 1;
  opterr = 1;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:a:R:x:D:V:J:S:M:u:I:K:h",
                          longOpts, &idx)) != -1) {
    if (c == 'h') {
      benchUsageText(stdout, argv[0]);
      return benchHelp;
    }
    if (c == 1000) {
      o->selftest = 1;
      continue;
    }
    if (c == '?' || parseOne(o, c, optarg) != 0) {
      benchUsageText(stderr, argv[0]);
      return benchUsage;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "Unexpected argument '%s'\n", argv[optind]);
    benchUsageText(stderr, argv[0]);
    return benchUsage;
  }
  return finishOpts(o) == 0 ? benchOk : benchUsage;
}
