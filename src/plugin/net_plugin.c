/*
 * Loading external net plugins and adapting ABI v8..v11 to mendNet_t.  Only one external plugin is
 * active per process (as NCCL: once one is chosen the others are dropped), so the adapters keep
 * the chosen table in file-level state.
 */
#include "plugin/net_plugin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "checks.h"
#include "../ext-net/nccl_net.h"
#include "misc/param.h"

static pthread_mutex_t pluginLock = PTHREAD_MUTEX_INITIALIZER;
static int pluginLoaded;          /* load attempted */
static void* pluginLib;           /* dlopen handle, NULL when none */
static int pluginVersion;         /* 8..11, 0 when none */
static const void* pluginTable;   /* ncclNet_vN_t of pluginVersion */
static mendNet_t pluginAdapter;   /* the adapter handed out */

#define V8 ((const ncclNet_v8_t*)pluginTable)
#define V9 ((const ncclNet_v9_t*)pluginTable)
#define V10 ((const ncclNet_v10_t*)pluginTable)
#define V11 ((const ncclNet_v11_t*)pluginTable)
/* Members common to every version sit at the same place in v9/v10/v11 after the signature changes,
 * but not in v8; pick through the version. */
#define PICK(member) (pluginVersion == 11 ? (void*)V11->member : pluginVersion == 10 ? (void*)V10->member \
                      : pluginVersion == 9 ? (void*)V9->member : (void*)V8->member)

static ncclResult_t adInit(void** ctx, uint64_t commId, mendDebugLogger_t logger) {
  ncclDebugLogger_t log = (ncclDebugLogger_t)logger;
  *ctx = NULL;
  switch (pluginVersion) {
    case 11: {
      ncclNetCommConfig_v11_t config = { .trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF };
      return V11->init(ctx, commId, &config, log, NULL);
    }
    case 10: return V10->init(log, NULL);
    case 9: return V9->init(log);
    default: return V8->init(log);
  }
}

static ncclResult_t adDevices(int* ndev) {
  return ((ncclResult_t (*)(int*))PICK(devices))(ndev);
}

static ncclResult_t adGetProperties(int dev, struct mendNetProperties* p) {
  memset(p, 0, sizeof(*p));
  if (pluginVersion == 8) {
    ncclNetProperties_v8_t q;
    MENDCHECK(V8->getProperties(dev, &q));
    *p = (struct mendNetProperties){ .name = q.name, .pciPath = q.pciPath, .guid = q.guid,
      .ptrSupport = q.ptrSupport, .regIsGlobal = q.regIsGlobal, .speed = q.speed, .port = q.port,
      .latency = q.latency, .maxComms = q.maxComms, .maxRecvs = q.maxRecvs,
      .maxP2pBytes = MAX_NET_SIZE, .maxCollBytes = MAX_NET_SIZE };
    return ncclSuccess;
  }
  ncclNetProperties_v11_t q;
  memset(&q, 0, sizeof(q));
  /* v9/v10 properties are a prefix of v11's. */
  if (pluginVersion == 11) MENDCHECK(V11->getProperties(dev, &q));
  else if (pluginVersion == 10) MENDCHECK(V10->getProperties(dev, (ncclNetProperties_v10_t*)&q));
  else MENDCHECK(V9->getProperties(dev, (ncclNetProperties_v9_t*)&q));
  *p = (struct mendNetProperties){ .name = q.name, .pciPath = q.pciPath, .guid = q.guid,
    .ptrSupport = q.ptrSupport, .regIsGlobal = q.regIsGlobal, .forceFlush = q.forceFlush, .speed = q.speed,
    .port = q.port, .latency = q.latency, .maxComms = q.maxComms, .maxRecvs = q.maxRecvs,
    .maxP2pBytes = q.maxP2pBytes, .maxCollBytes = q.maxCollBytes };
  return ncclSuccess;
}

static ncclResult_t adListen(void* ctx, int dev, void* handle, void** listenComm) {
  if (pluginVersion == 11) return V11->listen(ctx, dev, handle, listenComm);
  return ((ncclResult_t (*)(int, void*, void**))PICK(listen))(dev, handle, listenComm);
}

static ncclResult_t adConnect(void* ctx, int dev, void* handle, void** sendComm) {
  void* devComm = NULL;
  switch (pluginVersion) {
    case 11: return V11->connect(ctx, dev, handle, sendComm, (ncclNetDeviceHandle_v11_t**)&devComm);
    case 10: {
      ncclNetCommConfig_v10_t config = { .trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF };
      return V10->connect(dev, &config, handle, sendComm, (ncclNetDeviceHandle_v10_t**)&devComm);
    }
    case 9: return V9->connect(dev, handle, sendComm, (ncclNetDeviceHandle_v9_t**)&devComm);
    default: return V8->connect(dev, handle, sendComm, (ncclNetDeviceHandle_v8_t**)&devComm);
  }
}

static ncclResult_t adAccept(void* listenComm, void** recvComm) {
  void* devComm = NULL;
  return ((ncclResult_t (*)(void*, void**, void**))PICK(accept))(listenComm, recvComm, &devComm);
}

static ncclResult_t adRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return ((ncclResult_t (*)(void*, void*, size_t, int, void**))PICK(regMr))(comm, data, size, type, mhandle);
}

static ncclResult_t adDeregMr(void* comm, void* mhandle) {
  return ((ncclResult_t (*)(void*, void*))PICK(deregMr))(comm, mhandle);
}

static ncclResult_t adIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  switch (pluginVersion) {
    case 11: return V11->isend(sendComm, data, size, tag, mhandle, NULL, request);
    case 10: return V10->isend(sendComm, data, size, tag, mhandle, NULL, request);
    case 9: return V9->isend(sendComm, data, size, tag, mhandle, request);
    default:
      if (size > (size_t)MAX_NET_SIZE) {
        WARN("Net plugin v8: send of %zu bytes exceeds the plugin's %ld-byte limit", size, (long)MAX_NET_SIZE);
        return ncclInvalidArgument;
      }
      return V8->isend(sendComm, data, (int)size, tag, mhandle, request);
  }
}

static ncclResult_t adIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** request) {
  switch (pluginVersion) {
    case 11: return V11->irecv(recvComm, n, data, sizes, tags, mhandles, NULL, request);
    case 10: return V10->irecv(recvComm, n, data, sizes, tags, mhandles, NULL, request);
    case 9: return V9->irecv(recvComm, n, data, sizes, tags, mhandles, request);
    default: {
      int isizes[NCCL_NET_MAX_REQUESTS];
      if (n > NCCL_NET_MAX_REQUESTS) return ncclInvalidArgument;
      for (int i = 0; i < n; i++) isizes[i] = sizes[i] > (size_t)MAX_NET_SIZE ? (int)MAX_NET_SIZE : (int)sizes[i];
      return V8->irecv(recvComm, n, data, isizes, tags, mhandles, request);
    }
  }
}

static ncclResult_t adIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return ((ncclResult_t (*)(void*, int, void**, int*, void**, void**))PICK(iflush))(recvComm, n, data, sizes,
                                                                                      mhandles, request);
}

static ncclResult_t adTest(void* request, int* done, int* sizes) {
  return ((ncclResult_t (*)(void*, int*, int*))PICK(test))(request, done, sizes);
}
static ncclResult_t adCloseSend(void* c) { return ((ncclResult_t (*)(void*))PICK(closeSend))(c); }
static ncclResult_t adCloseRecv(void* c) { return ((ncclResult_t (*)(void*))PICK(closeRecv))(c); }
static ncclResult_t adCloseListen(void* c) { return ((ncclResult_t (*)(void*))PICK(closeListen))(c); }
static ncclResult_t adFinalize(void* ctx) {
  return (pluginVersion == 11 && V11->finalize) ? V11->finalize(ctx) : ncclSuccess;
}

/* Find the newest table the library exports. */
static int findTable(void* lib, const void** table) {
  static const char* syms[] = { "ncclNetPlugin_v11", "ncclNetPlugin_v10", "ncclNetPlugin_v9", "ncclNetPlugin_v8" };
  for (int i = 0; i < 4; i++) {
    *table = dlsym(lib, syms[i]);
    if (*table) return 11 - i;
  }
  return 0;
}

static void* openOne(const char* entry) {
  if (strcmp(entry, "STATIC_PLUGIN") == 0) return dlopen(NULL, RTLD_NOW | RTLD_LOCAL);
  void* lib = dlopen(entry, RTLD_NOW | RTLD_LOCAL);
  if (lib || strchr(entry, '/') || (strncmp(entry, "lib", 3) == 0 && strstr(entry, ".so"))) return lib;
  char name[256];
  snprintf(name, sizeof(name), "libnccl-net-%s.so", entry);
  return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

/* Try one library: keep it when it exports a table whose name matches `want` (or any, when NULL). */
static int tryLibrary(const char* entry, const char* want) {
  void* lib = openOne(entry);
  if (!lib) {
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: could not load %s: %s", entry, dlerror());
    return 0;
  }
  const void* table = NULL;
  int version = findTable(lib, &table);
  const char* name = version ? *(const char* const*)table : NULL;
  if (!version || (want && (!name || strcasecmp(name, want) != 0))) {
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: %s has %s", entry, version ? "another name" : "no ncclNetPlugin_v8..v11");
    dlclose(lib);
    return 0;
  }
  pluginLib = lib;
  pluginTable = table;
  pluginVersion = version;
  INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: loaded %s (%s, ABI v%d)", entry, name, version);
  return 1;
}

static void loadPlugins(const char* want) {
  const char* spec = mendParamNetPlugin();
  if (spec && strcasecmp(spec, "none") == 0) return;
  if (!spec || !spec[0]) {
    tryLibrary("libnccl-net.so", want);
    return;
  }
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", spec);
  int tried = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && tried < 14; tok = strtok_r(NULL, ",", &save), tried++)
    if (tryLibrary(tok, want)) return;
}

static void fillAdapter(void) {
  pluginAdapter = (mendNet_t){ .name = *(const char* const*)pluginTable, .init = adInit, .devices = adDevices,
    .getProperties = adGetProperties, .listen = adListen, .connect = adConnect, .accept = adAccept,
    .regMr = adRegMr, .deregMr = adDeregMr, .isend = adIsend, .irecv = adIrecv, .iflush = adIflush,
    .test = adTest, .closeSend = adCloseSend, .closeRecv = adCloseRecv, .closeListen = adCloseListen,
    .finalize = adFinalize };
}

ncclResult_t mendNetSelect(const char* name, const mendNet_t** net) {
  if (name && !name[0]) name = NULL;
  pthread_mutex_lock(&pluginLock);
  if (!pluginLoaded) {
    pluginLoaded = 1;
    /* A request for the built-in Socket Net never loads plugins. */
    if (!name || strcasecmp(name, mendNetSocket.name) != 0) loadPlugins(name);
    if (pluginVersion) fillAdapter();
  }
  pthread_mutex_unlock(&pluginLock);
  if (pluginVersion && (!name || strcasecmp(name, pluginAdapter.name) == 0)) {
    *net = &pluginAdapter;
    return ncclSuccess;
  }
  if (!name || strcasecmp(name, mendNetSocket.name) == 0) {
    *net = &mendNetSocket;
    return ncclSuccess;
  }
  WARN("NCCL_NET/netName '%s' not found: available nets are %s%s%s", name, mendNetSocket.name,
       pluginVersion ? " and " : "", pluginVersion ? pluginAdapter.name : "");
  return ncclInvalidUsage;
}

int mendNetPluginVersion(void) { return pluginVersion; }

void mendNetPluginReset(void) {
  pthread_mutex_lock(&pluginLock);
  if (pluginLib) dlclose(pluginLib);
  pluginLib = NULL;
  pluginTable = NULL;
  pluginVersion = 0;
  pluginLoaded = 0;
  pthread_mutex_unlock(&pluginLock);
}
