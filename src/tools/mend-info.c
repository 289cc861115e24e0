/*
 * mend-info: what this Mend build is and how it is configured.
 *   --params   every registry row: name, type, default, unit, current value, doc
 *   --env      only the parameters that are set (environment or config file)
 *   --version  the version line the library logs at startup, and the API level of its nccl.h
 *   --reduce-bw  host reduction throughput per datatype and op, baseline and vector loops
 *   --ras      who is late in a running job (mend_info_ras.c)
 *   --calibrate  measure the cost model's constants (mend_info_calib.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/dtypes.h"
#include "device/reduce.h"
#include "mend_info_calib.h"
#include "mend_info_ras.h"
#include "misc/param.h"
#include "misc/version.h"
#include "nccl.h"

static void usage(FILE* f) {
  fprintf(f,
          "Usage: mend-info [--params] [--env] [--version] [--reduce-bw] [-h] | --ras ...\n"
          "  --params   print every parameter: name, type, default, unit, current value, doc\n"
          "  --env      print only the parameters set in the environment or a config file\n"
          "  --version  print the library version\n"
          "  --reduce-bw  host reduction throughput (GB/s of one input, and its ratio to float's) per\n"
          "             datatype and op, on 1 MiB (in cache, a chunk) and 64 MiB buffers, with the\n"
          "             baseline and the vector loops (MEND_REDUCE_VEC picks what collectives use)\n"
          "  -h         this help\n");
  mendInfoRasUsage(f);
  mendInfoCalibUsage(f);
}

static void defaultText(const struct mendParamInfo* p, char* buf, size_t len) {
  if (p->isString) snprintf(buf, len, "%s", p->defStr ? p->defStr : "-");
  else snprintf(buf, len, "%lld", (long long)p->defInt);
}

static const char* valueText(const struct mendParamInfo* p) {
  const char* v = mendGetEnv(p->env);
  if (v && strcmp(p->unit, "secret") == 0) return "(set)";  /* never print a secret */
  return v ? v : "-";
}

static void printParams(void) {
  int n = mendParamCount();
  int wName = 4, wDef = 7, wUnit = 4, wVal = 5;
  char def[256];
  for (int i = 0; i < n; i++) {
    const struct mendParamInfo* p = mendParamGet(i);
    defaultText(p, def, sizeof(def));
    if ((int)strlen(p->env) > wName) wName = (int)strlen(p->env);
    if ((int)strlen(def) > wDef) wDef = (int)strlen(def);
    if ((int)strlen(p->unit) > wUnit) wUnit = (int)strlen(p->unit);
    if ((int)strlen(valueText(p)) > wVal) wVal = (int)strlen(valueText(p));
  }
  printf("%-*s  %-4s  %-*s  %-*s  %-*s  %s\n", wName, "NAME", "TYPE", wDef, "DEFAULT", wUnit, "UNIT", wVal, "VALUE",
         "DOC");
  for (int i = 0; i < n; i++) {
    const struct mendParamInfo* p = mendParamGet(i);
    defaultText(p, def, sizeof(def));
    printf("%-*s  %-4s  %-*s  %-*s  %-*s  %s\n", wName, p->env, p->isString ? "str" : "int", wDef, def, wUnit,
           p->unit[0] ? p->unit : "-", wVal, valueText(p), p->doc);
  }
}

static void printEnv(void) {
  for (int i = 0; i < mendParamCount(); i++) {
    const struct mendParamInfo* p = mendParamGet(i);
    const char* v = mendGetEnv(p->env);
    if (v) printf("%s=%s  (%s)\n", p->env, valueText(p), getenv(p->env) ? "environment" : "config file");
  }
}

static double nowSec(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GB/s of one input buffer of `bytes` reduced into another (dst = local op peer), for 0.2 s. */
static double reduceRate(int vec, ncclDataType_t type, ncclRedOp_t op, char* d, const char* a, const char* b,
                         size_t bytes) {
  struct mendRedOp r;
  if (mendRedOpResolve(op, type, 2, &r) != ncclSuccess) return 0;
  size_t n = bytes / mendTypeSize(type);
  int flags = op == ncclAvg ? MEND_RED_PREOP : 0;
  mendReduceWith(vec, &r, d, a, b, n, flags); /* first touch, tables */
  double t0 = nowSec(), t1;
  long it = 0;
  do {
    mendReduceWith(vec, &r, d, a, b, n, flags);
    it++;
    t1 = nowSec();
  } while (t1 - t0 < 0.2);
  return (double)bytes * (double)it / (t1 - t0) / 1e9;
}

/* Values in [0.5, 1.5) in `type`: normal numbers whose sums, products and averages stay normal
 * (denormal operands would time the CPU's slow path, not the loops). */
static void fillOperands(ncclDataType_t type, char* buf, size_t bytes) {
  size_t n = bytes / mendTypeSize(type);
  for (size_t i = 0; i < n; i++) {
    float v = 0.5f + (float)(rand() & 0xffff) / 65536.0f;
    switch (type) {
      case ncclFloat32: memcpy(buf + 4 * i, &v, 4); break;
      case ncclFloat16: { uint16_t h = mendFloatToHalf(v); memcpy(buf + 2 * i, &h, 2); } break;
      case ncclBfloat16: { uint16_t h = mendFloatToBf16(v); memcpy(buf + 2 * i, &h, 2); } break;
      case ncclFloat8e4m3: buf[i] = (char)mendFloatToE4m3(v); break;
      default: buf[i] = (char)mendFloatToE5m2(v); break;
    }
  }
}

static int reduceBw(void) {
  static const ncclDataType_t types[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclAvg};
  static const size_t sizes[] = {1 << 20, 64 << 20};
  char *a = malloc(sizes[1]), *b = malloc(sizes[1]), *d = malloc(sizes[1]);
  if (!a || !b || !d) {
    fprintf(stderr, "mend-info: out of memory for 3 x 64 MiB\n");
    return 1;
  }
  printf("# host reductions: GB/s of one input (dst = a op b); x float: ratio to float's GB/s, same op, size, loops\n");
  printf("# vector loops: %s on this CPU (collectives use %s: MEND_REDUCE_VEC=%s)\n",
         mendReduceVecAvailable() ? mendReduceSetName(mendReduceVecAvailable()) : "none",
         mendReduceSetName(mendReduceVec()), mendReduceVec() ? "1" : "0");
  printf("%-8s %-5s %8s %10s %10s %9s %9s\n", "type", "op", "size", "baseline", "vector", "x float", "elem G/s");
  for (size_t s = 0; s < 2; s++) {
    for (size_t o = 0; o < 4; o++) {
      double fl = 0;
      for (size_t t = 0; t < 5; t++) {
        fillOperands(types[t], a, sizes[1]);
        fillOperands(types[t], b, sizes[1]);
        double base = reduceRate(0, types[t], ops[o], d, a, b, sizes[s]);
        double vec = reduceRate(mendReduceVecAvailable(), types[t], ops[o], d, a, b, sizes[s]);
        double best = vec > base ? vec : base;
        if (t == 0) fl = best;
        printf("%-8s %-5s %6zuMi %10.2f %10.2f %9.2f %9.2f\n", mendTypeName(types[t]), mendOpName(ops[o]),
               sizes[s] >> 20, base, vec, fl > 0 ? best / fl : 0, best / (double)mendTypeSize(types[t]));
      }
    }
  }
  free(a);
  free(b);
  free(d);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--ras") == 0) return mendInfoRas(argc - 2, argv + 2); /* its own options follow */
  if (strcmp(argv[1], "--calibrate") == 0) return mendInfoCalib(argc - 2, argv + 2);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--params") && strcmp(argv[i], "--env") && strcmp(argv[i], "--version") &&
        strcmp(argv[i], "--reduce-bw")) {
      fprintf(stderr, "mend-info: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--version") == 0) {
      char v[128];
      mendVersionFull(v, sizeof(v));
      int code = 0;
      ncclGetVersion(&code);
      printf("NCCL version %s (code %d), Mend %s\n", v, code, MEND_VERSION);
      printf("API level: NCCL %d.%d.%d (nccl.h and exports of that release; unsupported calls return "
             "ncclInvalidUsage with a WARN)\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    } else if (strcmp(argv[i], "--params") == 0) {
      printParams();
    } else if (strcmp(argv[i], "--reduce-bw") == 0) {
      if (reduceBw() != 0) return 1;
    } else {
      printEnv();
    }
  }
  return 0;
}
