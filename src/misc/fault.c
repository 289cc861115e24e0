/* Fault injection: a small table of armed sites, guarded by one mutex (only reached when armed). */
#include "misc/fault.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "misc/debug.h"
#include "misc/param.h"

#define FAULT_MAX_SITES 32
#define FAULT_SITE_LEN 48

struct faultSite {
  char name[FAULT_SITE_LEN]; /* site name, e.g. "socket.connect" */
  long nth;                  /* the call (1-based) that fails */
  int sticky;                /* 1: every call from nth on fails */
  long calls;                /* calls seen since armed */
  long fired;                /* calls made to fail */
};

int mendFaultState = -1;
static pthread_mutex_t faultLock = PTHREAD_MUTEX_INITIALIZER;
static struct faultSite sites[FAULT_MAX_SITES];
static int nsites;

static struct faultSite* findSite(const char* name) {
  for (int i = 0; i < nsites; i++)
    if (strcmp(sites[i].name, name) == 0) return &sites[i];
  return NULL;
}

/* Add or re-arm a site; caller holds faultLock.  Returns 0 when the table is full or bad. */
static int armSite(const char* name, size_t len, long nth, int sticky) {
  if (len == 0 || len >= FAULT_SITE_LEN || nth < 1) return 0;
  char key[FAULT_SITE_LEN];
  memcpy(key, name, len);
  key[len] = '\0';
  struct faultSite* s = findSite(key);
  if (s == NULL) {
    if (nsites == FAULT_MAX_SITES) return 0;
    s = &sites[nsites++];
    memcpy(s->name, key, len + 1);
  }
  s->nth = nth;
  s->sticky = sticky;
  s->calls = 0;
  s->fired = 0;
  return 1;
}

/* Parse "site:N[+],..."; caller holds faultLock.  Returns the first bad entry or NULL. */
static const char* parseSpec(const char* spec) {
  const char* p = spec;
  while (*p) {
    const char* end = p + strcspn(p, ",");
    const char* colon = memchr(p, ':', (size_t)(end - p));
    if (end == p) { p = *end ? end + 1 : end; continue; }
    if (colon == NULL) return p;
    char* num_end;
    long nth = strtol(colon + 1, &num_end, 10);
    int sticky = 0;
    if (num_end < end && *num_end == '+') { sticky = 1; num_end++; }
    if (num_end != end || num_end == colon + 1) return p;
    if (!armSite(p, (size_t)(colon - p), nth, sticky)) return p;
    p = *end ? end + 1 : end;
  }
  return NULL;
}

/* First use: read MEND_FAULT_INJECT.  The WARN happens after the lock is dropped. */
static void loadEnv(void) {
  const char* bad = NULL;
  const char* spec = mendParamFaultInject();
  int armed = 0;
  pthread_mutex_lock(&faultLock);
  if (__atomic_load_n(&mendFaultState, __ATOMIC_ACQUIRE) < 0) {
    if (spec && spec[0]) bad = parseSpec(spec);
    armed = nsites > 0;
    __atomic_store_n(&mendFaultState, armed, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&faultLock);
  if (bad) WARN("MEND_FAULT_INJECT: cannot parse '%s' (expected site:N or site:N+, comma separated; "
                "at most %d sites of < %d chars)", bad, FAULT_MAX_SITES, FAULT_SITE_LEN);
  if (armed) INFO(NCCL_ENV, "MEND_FAULT_INJECT set to %s", spec);
}

int mendFaultCheckSlow(const char* site) {
  if (__atomic_load_n(&mendFaultState, __ATOMIC_ACQUIRE) < 0) loadEnv();
  int fail = 0;
  long calls = 0;
  pthread_mutex_lock(&faultLock);
  struct faultSite* s = findSite(site);
  if (s) {
    calls = ++s->calls;
    fail = calls == s->nth || (s->sticky && calls > s->nth);
    if (fail) s->fired++;
  }
  pthread_mutex_unlock(&faultLock);
  if (fail) INFO(NCCL_ALL, "Fault injection: failing call %ld at site %s", calls, site);
  return fail;
}

void mendFaultSet(const char* site, int nth, int sticky) {
  if (__atomic_load_n(&mendFaultState, __ATOMIC_ACQUIRE) < 0) loadEnv();
  pthread_mutex_lock(&faultLock);
  int ok = site != NULL && armSite(site, strlen(site), nth, sticky);
  if (nsites > 0) __atomic_store_n(&mendFaultState, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&faultLock);
  if (!ok) WARN("mendFaultSet: cannot arm site '%s' at call %d", site ? site : "(null)", nth);
}

void mendFaultClear(void) {
  pthread_mutex_lock(&faultLock);
  nsites = 0;
  __atomic_store_n(&mendFaultState, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&faultLock);
}

void mendFaultReload(void) {
  pthread_mutex_lock(&faultLock);
  nsites = 0;
  __atomic_store_n(&mendFaultState, -1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&faultLock);
}

long mendFaultCalls(const char* site) {
  pthread_mutex_lock(&faultLock);
  struct faultSite* s = findSite(site);
  long n = s ? s->calls : 0;
  pthread_mutex_unlock(&faultLock);
  return n;
}
