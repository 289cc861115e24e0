/*
 * Logging with NCCL's levels, subsystems and line format.
 *   NCCL_DEBUG=VERSION|WARN|INFO|ABORT|TRACE, NCCL_DEBUG_SUBSYS=INIT,NET,... or ^X, NCCL_DEBUG_FILE=%h.%p.log
 * INFO line:  host:pid:tid [dev] NCCL INFO msg
 * WARN line:  \nhost:pid:tid [dev] file:line NCCL WARN msg   (also kept for ncclGetLastError)
 * The level is read lazily on first use, so logging works before any communicator exists.
 */
#ifndef MEND_MISC_DEBUG_H_
#define MEND_MISC_DEBUG_H_

#include <stddef.h>
#include <stdint.h>

/* Levels, with the numeric values of NCCL's plugin logger (ext-net/nccl_net.h skips its copy). */
#ifndef NCCL_LOG_TYPES_DEFINED
#define NCCL_LOG_TYPES_DEFINED
typedef enum {
  NCCL_LOG_NONE = 0,    /* nothing */
  NCCL_LOG_VERSION = 1, /* version banner only */
  NCCL_LOG_WARN = 2,    /* warnings and errors */
  NCCL_LOG_INFO = 3,    /* informational, filtered by subsystem */
  NCCL_LOG_ABORT = 4,   /* like INFO, and abort() on WARN */
  NCCL_LOG_TRACE = 5    /* everything, with timestamps */
} ncclDebugLogLevel;

/* Subsystems, with NCCL's flag values. */
typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;
#endif
#define MEND_RESIL 0x10000 /* Mend's subsystem: failure detection, failover, health */

/* The plugin logger signature (ncclDebugLogger_t in NCCL's plugin headers). */
typedef void (*mendDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

extern int mendDebugLevel;             /* -1 until initialised from NCCL_DEBUG */
extern uint64_t mendDebugMask;         /* enabled subsystems */

void mendDebugInit(void);
void mendDebugLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Rate-limited INFO/WARN: at most one line per `intervalMs` for this call site (site = static state). */
struct mendLogSparse { int64_t lastMs; uint64_t suppressed; };
void mendDebugLogSparse(struct mendLogSparse* site, int64_t intervalMs, ncclDebugLogLevel level,
                        unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* The device index printed in "[dev]": the caller's CUDA device, -1 in host mode (thread-local). */
void mendDebugSetDevice(int dev);
/* Last WARN text, for ncclGetLastError. */
const char* mendDebugLastError(void);
/* Forget the parsed environment (ncclResetDebugInit). */
void mendDebugReset(void);
/* Copy of the last WARN text taken under the log lock (safe while other threads WARN). */
void mendDebugLastErrorCopy(char* buf, size_t len);
/* Parsers behind NCCL_DEBUG and NCCL_DEBUG_SUBSYS (exposed for tests and tools).
 * Level: a name (any case) or a digit 0..5; -1 when unrecognised.  Subsystems: comma list with ALL and
 * a leading ^ for "all except"; the first unknown name is copied to `bad` (may be NULL). */
int mendDebugParseLevel(const char* s);
uint64_t mendDebugParseSubsys(const char* s, char* bad, size_t badLen);

static inline int mendDebugEnabled(ncclDebugLogLevel level, unsigned long flags) {
  int lvl = __atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE);
  if (lvl < 0) {
    mendDebugInit();
    lvl = __atomic_load_n(&mendDebugLevel, __ATOMIC_ACQUIRE);
  }
  return lvl >= (int)level && (level <= NCCL_LOG_WARN || (__atomic_load_n(&mendDebugMask, __ATOMIC_RELAXED) & flags));
}

#define WARN(...) mendDebugLog(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(FLAGS, ...) do {                                                     \
    if (mendDebugEnabled(NCCL_LOG_INFO, (FLAGS)))                                 \
      mendDebugLog(NCCL_LOG_INFO, (FLAGS), __func__, __LINE__, __VA_ARGS__);      \
  } while (0)
#define TRACE(FLAGS, ...) do {                                                    \
    if (mendDebugEnabled(NCCL_LOG_TRACE, (FLAGS)))                                \
      mendDebugLog(NCCL_LOG_TRACE, (FLAGS), __func__, __LINE__, __VA_ARGS__);     \
  } while (0)
/* Once per process for this call site. */
#define WARN_ONCE(...) do {                                                       \
    static int mendOnce_;                                                         \
    if (!__atomic_exchange_n(&mendOnce_, 1, __ATOMIC_RELAXED)) WARN(__VA_ARGS__); \
  } while (0)
#define INFO_ONCE(FLAGS, ...) do {                                                \
    static int mendOnce_;                                                         \
    if (!__atomic_exchange_n(&mendOnce_, 1, __ATOMIC_RELAXED)) INFO(FLAGS, __VA_ARGS__); \
  } while (0)
/* At most once per INTERVAL_MS for this call site; the next line says how many were dropped. */
#define WARN_SPARSE(INTERVAL_MS, ...) do {                                        \
    static struct mendLogSparse mendSite_;                                        \
    mendDebugLogSparse(&mendSite_, (INTERVAL_MS), NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define INFO_SPARSE(FLAGS, INTERVAL_MS, ...) do {                                 \
    static struct mendLogSparse mendSite_;                                        \
    if (mendDebugEnabled(NCCL_LOG_INFO, (FLAGS)))                                 \
      mendDebugLogSparse(&mendSite_, (INTERVAL_MS), NCCL_LOG_INFO, (FLAGS), __func__, __LINE__, __VA_ARGS__); \
  } while (0)

#endif
