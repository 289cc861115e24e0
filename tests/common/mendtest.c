#include "mendtest.h"

#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int mtFailures;

void mtResult(int ok, const char* name, const char* fmt, ...) {
  if (ok) {
    printf("ok %s\n", name);
  } else {
    va_list ap;
    va_start(ap, fmt);
    printf("not ok %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    mtFailures++;
  }
  fflush(stdout);
}

static void onAlarm(int sig) {
  (void)sig;
  static const char msg[] = "not ok watchdog: test timed out\n";
  (void)!write(1, msg, sizeof(msg) - 1);
  _exit(1);
}

void mtWatchdog(int seconds) {
  signal(SIGALRM, onAlarm);
  alarm((unsigned)seconds);
}

int mtLoadedMend(void) {
  Dl_info info;
  if (!dladdr((void*)&ncclGetVersion, &info) || !info.dli_fname) return 0;
  char want[PATH_MAX], got[PATH_MAX];
  const char* dir = getenv("MEND_BUILDDIR");
  char lib[PATH_MAX];
  snprintf(lib, sizeof(lib), "%s/lib/libnccl.so.2", dir ? dir : "build");
  if (!realpath(lib, want) || !realpath(info.dli_fname, got)) return 0;
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 0;
  return strcmp(want, got) == 0 && strstr(NCCL_SUFFIX, "mend") != NULL;
}

int mtStart(const char* test, int watchdogSeconds) {
  mtWatchdog(watchdogSeconds);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (mtLoadedMend()) return 1;
  char name[128];
  snprintf(name, sizeof(name), "%s_loaded_mend", test);
  mtResult(0, name, "the loaded libnccl.so.2 is not Mend's build");
  return 0;
}

int mtExitCode(void) { return mtFailures ? 1 : 0; }

double mtNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
