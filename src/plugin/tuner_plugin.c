/* Loading tuner plugins v2..v5 and calling them through one entry point. */
#include "plugin/tuner_plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "checks.h"
#include "../ext-tuner/nccl_tuner.h"
#include "misc/param.h"

struct mendTuner {
  void* lib;            /* dlopen handle */
  int version;          /* 2..5 */
  const void* table;    /* ncclTuner_vN_t */
  void* context;        /* the plugin's per-communicator context */
};

static void* openTuner(const char* entry) {
  void* lib = dlopen(entry, RTLD_NOW | RTLD_LOCAL);
  if (lib || strchr(entry, '/')) return lib;
  char name[256];
  snprintf(name, sizeof(name), "libnccl-tuner-%s.so", entry);
  return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

static int findTuner(void* lib, const void** table) {
  static const char* syms[] = { "ncclTunerPlugin_v5", "ncclTunerPlugin_v4", "ncclTunerPlugin_v3", "ncclTunerPlugin_v2" };
  for (int i = 0; i < 4; i++)
    if ((*table = dlsym(lib, syms[i]))) return 5 - i;
  return 0;
}

static ncclResult_t initTuner(struct mendTuner* t, uint64_t commHash, int nRanks, int nNodes) {
  ncclDebugLogger_t log = (ncclDebugLogger_t)mendDebugLog;
  if (t->version == 5) {
    ncclNvlDomainInfo_v5_t nvl = { .nNvlDomains = nNodes, .minRanksPerNvlDomain = 1, .maxRanksPerNvlDomain = 1 };
    ncclTunerConstants_v5_t constants;
    memset(&constants, 0, sizeof(constants));
    return ((const ncclTuner_v5_t*)t->table)->init(&t->context, commHash, nRanks, nNodes, log, &nvl, &constants);
  }
  /* v2, v3 and v4 share init's signature and place. */
  return ((const ncclTuner_v4_t*)t->table)->init(nRanks, nNodes, log, &t->context);
}

ncclResult_t mendTunerOpen(uint64_t commHash, int nRanks, int nNodes, struct mendTuner** tuner) {
  *tuner = NULL;
  const char* spec = mendParamTunerPlugin();
  if (spec && strcasecmp(spec, "none") == 0) return ncclSuccess;
  void* lib = openTuner(spec && spec[0] ? spec : "libnccl-tuner.so");
  if (!lib && !(spec && spec[0])) {
    const char* net = mendParamNetPlugin();  /* a net plugin library may carry the tuner */
    if (net && net[0] && strcasecmp(net, "none") != 0 && !strchr(net, ',')) lib = openTuner(net);
  }
  if (!lib) {
    if (spec && spec[0]) WARN("NCCL_TUNER_PLUGIN=%s could not be loaded: %s", spec, dlerror());
    return ncclSuccess;
  }
  struct mendTuner* t = calloc(1, sizeof(*t));
  if (!t) { dlclose(lib); WARN("Out of memory for the tuner plugin"); return ncclSystemError; }
  t->lib = lib;
  t->version = findTuner(lib, &t->table);
  if (!t->version) {
    INFO(NCCL_INIT | NCCL_TUNING, "TUNER: library has no ncclTunerPlugin_v2..v5; using Mend's model");
    mendTunerClose(t);
    return ncclSuccess;
  }
  if (initTuner(t, commHash, nRanks, nNodes) != ncclSuccess) {
    WARN("TUNER/Plugin %s: init failed; using Mend's model", mendTunerName(t));
    mendTunerClose(t);
    return ncclSuccess;
  }
  INFO(NCCL_INIT | NCCL_TUNING, "TUNER/Plugin: using %s (ABI v%d)", mendTunerName(t), t->version);
  *tuner = t;
  return ncclSuccess;
}

ncclResult_t mendTunerGetCollInfo(struct mendTuner* t, int func, size_t nBytes,
                                  float costs[MEND_TUNER_NALGOS][MEND_TUNER_NPROTOS], int* nChannels) {
  if (!t) return ncclSuccess;
  int ch = 0;
  ncclResult_t res;
  if (t->version == 2) {
    /* v2 answers with one algorithm/protocol: make it the only cheap cell. */
    int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF;
    res = ((const ncclTuner_v2_t*)t->table)->getCollInfo(t->context, (ncclFunc_t)func, nBytes, 0, 0, 1, &algo,
                                                         &proto, &ch);
    if (res == ncclSuccess && algo >= 0 && algo < MEND_TUNER_NALGOS && proto >= 0 && proto < MEND_TUNER_NPROTOS &&
        costs[algo][proto] >= 0)
      costs[algo][proto] = 0.0f;
  } else if (t->version == 3) {
    res = ((const ncclTuner_v3_t*)t->table)->getCollInfo(t->context, (ncclFunc_t)func, nBytes, 1, (float**)costs,
                                                         MEND_TUNER_NALGOS, MEND_TUNER_NPROTOS, &ch);
  } else {
    /* v4 and v5 share getCollInfo. */
    res = ((const ncclTuner_v4_t*)t->table)->getCollInfo(t->context, (ncclFunc_t)func, nBytes, 1, (float**)costs,
                                                         MEND_TUNER_NALGOS, MEND_TUNER_NPROTOS, 0, &ch);
  }
  if (res != ncclSuccess) {
    WARN_SPARSE(10000, "TUNER/Plugin %s: getCollInfo failed (%d); using Mend's model", mendTunerName(t), res);
    return ncclSuccess;
  }
  if (ch > 0 && nChannels) *nChannels = ch;
  return ncclSuccess;
}

const char* mendTunerName(const struct mendTuner* t) {
  return t && t->table ? *(const char* const*)t->table : "none";
}

void mendTunerClose(struct mendTuner* t) {
  if (!t) return;
  if (t->context && t->table) {
    if (t->version == 5) ((const ncclTuner_v5_t*)t->table)->finalize(t->context);
    else ((const ncclTuner_v4_t*)t->table)->destroy(t->context);
  }
  if (t->lib) dlclose(t->lib);
  free(t);
}
