/* Hashing, time, checked allocation and host identity (see utils.h). */
#include "misc/utils.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "misc/debug.h"
#include "misc/fault.h"
#include "misc/param.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

uint64_t mendHash(const void* data, size_t len) {
  const unsigned char* p = data;
  uint64_t h = FNV_OFFSET;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= FNV_PRIME;
  }
  return h;
}

uint64_t mendHashCombine(uint64_t h, uint64_t v) {
  uint64_t pair[2] = {h, v};
  return mendHash(pair, sizeof(pair));
}

uint64_t mendTimeNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int64_t mendTimeMs(void) { return (int64_t)(mendTimeNs() / 1000000ULL); }

ncclResult_t mendCalloc(void** ptr, size_t n, size_t size) {
  *ptr = NULL;
  if (mendFaultCheck("host.calloc")) {
    WARN("Failed to allocate %zu x %zu bytes (injected fault host.calloc)", n, size);
    return ncclSystemError;
  }
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (p == NULL) {
    WARN("Failed to allocate %zu x %zu bytes: %m", n, size);
    return ncclSystemError;
  }
  *ptr = p;
  return ncclSuccess;
}

void mendHostName(char* buf, size_t len) {
  if (buf == NULL || len == 0) return;
  if (gethostname(buf, len) != 0) snprintf(buf, len, "unknown");
  buf[len - 1] = '\0';
  char* dot = strchr(buf, '.');
  if (dot) *dot = '\0';
}

/* The cached identity; rebuilt after mendHostIdReset. */
static pthread_mutex_t hostLock = PTHREAD_MUTEX_INITIALIZER;
static char hostId[512];     /* NCCL_HOSTID or hostname:boot_id */
static uint64_t hostHash;    /* mendHash of hostId */
static int hostReady;        /* 1 once hostId is filled (read under hostLock) */

static void readBootId(char* buf, size_t len) {
  buf[0] = '\0';
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == NULL) return;
  if (fgets(buf, (int)len, f) == NULL) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, " \t\r\n")] = '\0';
}

static void hostFill(void) {
  const char* env = mendParamHostId();
  if (env && env[0]) {
    snprintf(hostId, sizeof(hostId), "%s", env);
  } else {
    char name[256], boot[64];
    if (gethostname(name, sizeof(name)) != 0) snprintf(name, sizeof(name), "unknown");
    name[sizeof(name) - 1] = '\0';
    readBootId(boot, sizeof(boot));
    snprintf(hostId, sizeof(hostId), "%s:%s", name, boot);
  }
  hostHash = mendHash(hostId, strlen(hostId));
  hostReady = 1;
}

const char* mendHostId(void) {
  pthread_mutex_lock(&hostLock);
  if (!hostReady) hostFill();
  pthread_mutex_unlock(&hostLock);
  return hostId;
}

uint64_t mendHostHash(void) {
  pthread_mutex_lock(&hostLock);
  if (!hostReady) hostFill();
  uint64_t h = hostHash;
  pthread_mutex_unlock(&hostLock);
  return h;
}

void mendHostIdReset(void) {
  pthread_mutex_lock(&hostLock);
  hostReady = 0;
  pthread_mutex_unlock(&hostLock);
}

int mendCpusAvailable(void) {
  static _Atomic int cached;
  int n = atomic_load_explicit(&cached, memory_order_relaxed);
  if (n > 0) return n;
  cpu_set_t set;
  n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  if (n < 1) n = 1;
  atomic_store_explicit(&cached, n, memory_order_relaxed);
  return n;
}

uint64_t mendPidHash(void) {
  struct stat st;
  uint64_t ns = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
  return mendHashCombine(mendHashCombine(mendHostHash(), ns), (uint64_t)getpid());
}
