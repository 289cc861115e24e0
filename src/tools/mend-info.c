/*
 * mend-info: what this Mend build is and how it is configured.
 *   --params   every registry row: name, type, default, unit, current value, doc
 *   --env      only the parameters that are set (environment or config file)
 *   --version  the version line the library logs at startup, and the API level of its nccl.h
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "misc/param.h"
#include "misc/version.h"
#include "nccl.h"

static void usage(FILE* f) {
  fprintf(f,
          "Usage: mend-info [--params] [--env] [--version] [-h]\n"
          "  --params   print every parameter: name, type, default, unit, current value, doc\n"
          "  --env      print only the parameters set in the environment or a config file\n"
          "  --version  print the library version\n"
          "  -h         this help\n");
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

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--params") && strcmp(argv[i], "--env") && strcmp(argv[i], "--version")) {
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
    } else {
      printEnv();
    }
  }
  return 0;
}
