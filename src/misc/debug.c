/*
 * Logging (see debug.h).  The level and mask are parsed once from NCCL_DEBUG / NCCL_DEBUG_SUBSYS
 * (through mendGetEnv, so config files apply) and published with a release store of the level,
 * after the mask, so the inline check in debug.h reads them without a lock.  Each line is formatted
 * into one buffer and written with one fwrite under debugLock, so lines from threads never mix.
 */
#include "misc/debug.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "misc/param.h"
#include "misc/utils.h"
#include "misc/version.h"

#define DEBUG_MSG_LEN 1024   /* longest message kept (longer ones are truncated) */
#define DEBUG_LINE_LEN 2048  /* message + prefix(es) */

int mendDebugLevel = -1;
uint64_t mendDebugMask;

static pthread_mutex_t debugLock = PTHREAD_MUTEX_INITIALIZER; /* file, init, last error, sparse sites */
static FILE* debugFile;              /* NCCL_DEBUG_FILE, or NULL for stdout */
static char hostName[256];           /* short hostname printed on every line */
static uint64_t epochNs;             /* time of init; TRACE lines print ms since then */
static int warnRaises;               /* NCCL_WARN_ENABLE_DEBUG_INFO: WARN raises the level to INFO */
static char lastError[DEBUG_MSG_LEN]; /* last WARN text, for ncclGetLastError */
static _Thread_local int tlsDev = -1; /* device printed in "[dev]" */
static int bannerDone;               /* version banner printed (atomic flag) */
static int cudaRuntimeVersion;       /* e.g. 12040, 0 when unknown (host mode) */

static const struct { const char* name; uint64_t flag; } subsysNames[] = {
  {"INIT", NCCL_INIT},     {"COLL", NCCL_COLL},   {"P2P", NCCL_P2P},         {"SHM", NCCL_SHM},
  {"NET", NCCL_NET},       {"GRAPH", NCCL_GRAPH}, {"TUNING", NCCL_TUNING},   {"ENV", NCCL_ENV},
  {"ALLOC", NCCL_ALLOC},   {"CALL", NCCL_CALL},   {"PROXY", NCCL_PROXY},     {"NVLS", NCCL_NVLS},
  {"BOOTSTRAP", NCCL_BOOTSTRAP}, {"REG", NCCL_REG}, {"PROFILE", NCCL_PROFILE}, {"RAS", NCCL_RAS},
  {"RESIL", MEND_RESIL},   {"ALL", ~0ULL},
};

static const char* levelNames[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};

/* Exposed for tests through mendDebugParseLevel/Subsys (declared in debug.h). */
int mendDebugParseLevel(const char* s) {
  if (s == NULL || s[0] == '\0') return NCCL_LOG_NONE;
  for (int i = 0; i < (int)(sizeof(levelNames) / sizeof(levelNames[0])); i++)
    if (strcasecmp(s, levelNames[i]) == 0) return i;
  if (s[0] >= '0' && s[0] <= '5' && s[1] == '\0') return s[0] - '0';
  return -1;
}

uint64_t mendDebugParseSubsys(const char* s, char* bad, size_t badLen) {
  if (bad && badLen) bad[0] = '\0';
  if (s == NULL) return 0;
  int invert = s[0] == '^';
  if (invert) s++;
  uint64_t mask = invert ? ~0ULL : 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    size_t i, n = sizeof(subsysNames) / sizeof(subsysNames[0]);
    for (i = 0; i < n; i++)
      if (strlen(subsysNames[i].name) == len && strncasecmp(s, subsysNames[i].name, len) == 0) break;
    if (i < n) mask = invert ? (mask & ~subsysNames[i].flag) : (mask | subsysNames[i].flag);
    else if (len && bad && badLen && bad[0] == '\0') snprintf(bad, badLen, "%.*s", (int)len, s);
    s += len;
    if (*s == ',') s++;
  }
  return mask;
}

/* Expand %h, %p and %% of NCCL_DEBUG_FILE. */
static void expandPath(const char* in, char* out, size_t len) {
  size_t o = 0;
  for (const char* p = in; *p && o + 1 < len; p++) {
    if (p[0] == '%' && p[1] == 'h') { o += snprintf(out + o, len - o, "%s", hostName); p++; }
    else if (p[0] == '%' && p[1] == 'p') { o += snprintf(out + o, len - o, "%d", (int)getpid()); p++; }
    else if (p[0] == '%' && p[1] == '%') { out[o++] = '%'; p++; }
    else out[o++] = *p;
    if (o >= len) o = len - 1;
  }
  out[o] = '\0';
}

static FILE* outFile(void) { return debugFile ? debugFile : stdout; }

/* A WARN-format line about the logging setup itself: no abort, no last-error, no level raise. */
static void setupWarn(const char* fmt, const char* a, const char* b) {
  if (mendDebugLevel < NCCL_LOG_WARN) return;
  char msg[DEBUG_MSG_LEN];
  snprintf(msg, sizeof(msg), fmt, a, b);
  pthread_mutex_lock(&debugLock);
  fprintf(outFile(), "\n%s:%d:%d [%d] %s:%d NCCL WARN %s\n", hostName, (int)getpid(), (int)syscall(SYS_gettid),
          tlsDev, "misc/debug.c", __LINE__, msg);
  fflush(outFile());
  pthread_mutex_unlock(&debugLock);
}

void mendDebugInit(void) {
  char badSubsys[64] = "", badLevel[64] = "", badFile[4096] = "";
  pthread_mutex_lock(&debugLock);
  if (__atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE) >= 0) { pthread_mutex_unlock(&debugLock); return; }
  mendHostName(hostName, sizeof(hostName));
  epochNs = mendTimeNs();
  const char* lvl = mendGetEnv("NCCL_DEBUG");
  int level = mendDebugParseLevel(lvl);
  if (level < 0) { snprintf(badLevel, sizeof(badLevel), "%s", lvl); level = NCCL_LOG_WARN; }
  const char* subsys = mendGetEnv("NCCL_DEBUG_SUBSYS");
  uint64_t mask = mendDebugParseSubsys(subsys ? subsys : "INIT,BOOTSTRAP,ENV", badSubsys, sizeof(badSubsys));
  const char* w = mendGetEnv("NCCL_WARN_ENABLE_DEBUG_INFO");
  warnRaises = w != NULL && strtol(w, NULL, 0) != 0;
  const char* fileSpec = mendGetEnv("NCCL_DEBUG_FILE");
  if (level > NCCL_LOG_VERSION && fileSpec && fileSpec[0]) {
    char path[4096];
    expandPath(fileSpec, path, sizeof(path));
    FILE* f = fopen(path, "w");
    if (f) { setvbuf(f, NULL, _IONBF, 0); debugFile = f; }
    else snprintf(badFile, sizeof(badFile), "%s", path);
  }
  __atomic_store_n(&mendDebugMask, mask, __ATOMIC_RELAXED);
  __atomic_store_n(&mendDebugLevel, level, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&debugLock);
  if (badLevel[0]) setupWarn("NCCL_DEBUG=%s is not a level (VERSION, WARN, INFO, ABORT, TRACE)%s; using WARN",
                             badLevel, "");
  if (badSubsys[0]) setupWarn("NCCL_DEBUG_SUBSYS: unknown subsystem '%s' ignored%s", badSubsys, "");
  if (badFile[0]) setupWarn("NCCL_DEBUG_FILE: cannot open '%s' (%s); logging to stdout", badFile, "open failed");
}

void mendDebugReset(void) {
  pthread_mutex_lock(&debugLock);
  if (debugFile) fclose(debugFile);
  debugFile = NULL;
  __atomic_store_n(&mendDebugLevel, -1, __ATOMIC_RELEASE);
  __atomic_store_n(&bannerDone, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&debugLock);
}

void mendDebugSetDevice(int dev) { tlsDev = dev; }

/* NCCL prints paths relative to its src/ folder. */
static const char* shortFile(const char* file) {
  if (file && strncmp(file, "src/", 4) == 0) return file + 4;
  return file ? file : "?";
}

/* Prefix of one line; returns its length. */
static int formatPrefix(char* buf, size_t len, int level, unsigned long flags, const char* file, int line) {
  int pid = (int)getpid(), tid = (int)syscall(SYS_gettid);
  if (level == NCCL_LOG_VERSION) return 0;
  if (level == NCCL_LOG_INFO)
    return snprintf(buf, len, "%s:%d:%d [%d] NCCL INFO ", hostName, pid, tid, tlsDev);
  if (level == NCCL_LOG_TRACE && flags == NCCL_CALL)
    return snprintf(buf, len, "%s:%d:%d NCCL CALL ", hostName, pid, tid);
  if (level == NCCL_LOG_TRACE) {
    double ms = (double)(mendTimeNs() - epochNs) / 1e6;
    return snprintf(buf, len, "%s:%d:%d [%d] %f %s:%d NCCL TRACE ", hostName, pid, tid, tlsDev, ms,
                    shortFile(file), line);
  }
  return snprintf(buf, len, "\n%s:%d:%d [%d] %s:%d NCCL WARN ", hostName, pid, tid, tlsDev, shortFile(file), line);
}

static int levelOn(int level, unsigned long flags) {
  int cur = __atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE);
  return cur >= level && (level <= NCCL_LOG_WARN || (__atomic_load_n(&mendDebugMask, __ATOMIC_RELAXED) & flags));
}

/* Print one formatted message (and an optional suppressed-count line), then the WARN side effects. */
static void emit(int level, unsigned long flags, const char* file, int line, const char* msg, uint64_t suppressed) {
  if (level == NCCL_LOG_ABORT) level = NCCL_LOG_WARN; /* a message at "ABORT" is a warning */
  if (level == NCCL_LOG_WARN) {
    pthread_mutex_lock(&debugLock);
    snprintf(lastError, sizeof(lastError), "%s", msg);
    pthread_mutex_unlock(&debugLock);
  }
  if (!levelOn(level, flags)) return;
  char buf[DEBUG_LINE_LEN];
  int n = formatPrefix(buf, sizeof(buf), level, flags, file, line);
  n += snprintf(buf + n, sizeof(buf) - n, "%s\n", msg);
  if (suppressed && n < (int)sizeof(buf)) {
    int p = formatPrefix(buf + n, sizeof(buf) - n, level, flags, file, line);
    if (level == NCCL_LOG_WARN && p > 0 && n + p < (int)sizeof(buf)) { memmove(buf + n, buf + n + 1, p); p--; }
    n += p;
    if (n < (int)sizeof(buf)) n += snprintf(buf + n, sizeof(buf) - n, "(%llu similar messages suppressed)\n",
                                            (unsigned long long)suppressed);
  }
  if (n >= (int)sizeof(buf)) { n = sizeof(buf) - 1; buf[n - 1] = '\n'; }
  pthread_mutex_lock(&debugLock);
  fwrite(buf, 1, (size_t)n, outFile());
  fflush(outFile());
  pthread_mutex_unlock(&debugLock);
  if (level == NCCL_LOG_WARN) {
    int cur = __atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE);
    if (cur == NCCL_LOG_ABORT) {
      fprintf(stderr, "%s:%d NCCL_DEBUG=ABORT: aborting after a WARN\n", hostName, (int)getpid());
      abort();
    }
    if (warnRaises && cur < NCCL_LOG_INFO) __atomic_store_n(&mendDebugLevel, NCCL_LOG_INFO, __ATOMIC_RELEASE);
  }
}

static void vlog(int level, unsigned long flags, const char* file, int line, uint64_t suppressed,
                 const char* fmt, va_list ap) {
  char msg[DEBUG_MSG_LEN];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  emit(level, flags, file, line, msg, suppressed);
}

void mendDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  if (__atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE) < 0) mendDebugInit();
  /* Nothing to print and nothing to remember: skip formatting (plugins call this unfiltered). */
  if (level != NCCL_LOG_WARN && level != NCCL_LOG_ABORT && !levelOn(level, flags)) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, flags, file, line, 0, fmt, ap);
  va_end(ap);
}

void mendDebugLogSparse(struct mendLogSparse* site, int64_t intervalMs, ncclDebugLogLevel level,
                        unsigned long flags, const char* file, int line, const char* fmt, ...) {
  if (__atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE) < 0) mendDebugInit();
  int64_t now = mendTimeMs();
  uint64_t dropped = 0;
  int print = 0;
  pthread_mutex_lock(&debugLock);
  if (site->lastMs == 0 || now - site->lastMs >= intervalMs) {
    print = 1;
    dropped = site->suppressed;
    site->suppressed = 0;
    site->lastMs = now ? now : 1;
  } else {
    site->suppressed++;
  }
  pthread_mutex_unlock(&debugLock);
  if (!print && level != NCCL_LOG_WARN) return;
  char msg[DEBUG_MSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (!print) { /* suppressed WARN: still the latest error */
    pthread_mutex_lock(&debugLock);
    snprintf(lastError, sizeof(lastError), "%s", msg);
    pthread_mutex_unlock(&debugLock);
    return;
  }
  emit(level, flags, file, line, msg, dropped);
}

const char* mendDebugLastError(void) { return lastError; }

void mendDebugLastErrorCopy(char* buf, size_t len) {
  pthread_mutex_lock(&debugLock);
  snprintf(buf, len, "%s", lastError);
  pthread_mutex_unlock(&debugLock);
}

/* ---- version banner ---- */

void mendVersionSetCuda(int cudartVersion) { __atomic_store_n(&cudaRuntimeVersion, cudartVersion, __ATOMIC_RELAXED); }

void mendVersionFull(char* buf, size_t len) {
  int cv = __atomic_load_n(&cudaRuntimeVersion, __ATOMIC_RELAXED);
  if (cv > 0) snprintf(buf, len, "%s+cuda%d.%d", mendVersionString(), cv / 1000, (cv % 1000) / 10);
  else snprintf(buf, len, "%s+host", mendVersionString());
}

void mendPrintVersionBanner(void) {
  if (__atomic_exchange_n(&bannerDone, 1, __ATOMIC_RELAXED)) return;
  if (__atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE) < 0) mendDebugInit();
  char v[128];
  mendVersionFull(v, sizeof(v));
  int level = __atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE);
  if (level == NCCL_LOG_VERSION || level == NCCL_LOG_WARN) {
    pthread_mutex_lock(&debugLock);
    fprintf(outFile(), "NCCL version %s\n", v);
    fflush(outFile());
    pthread_mutex_unlock(&debugLock);
  } else {
    INFO(NCCL_ALL, "NCCL version %s", v);
  }
}
