/*
 * Helpers for Mend's integration tests (C programs): TAP-style result lines counted by tests/run.sh,
 * a watchdog that turns a hang into a failure, and a check that the loaded libnccl.so.2 is Mend's
 * build (not NVIDIA's from the CUDA toolkit).
 */
#ifndef MEND_TEST_H_
#define MEND_TEST_H_

#include <stdio.h>
#include "nccl.h"

/* Print "ok NAME" or "not ok NAME: why" and count it. */
void mtResult(int ok, const char* name, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
#define MT_CHECK(cond, name) mtResult(!!(cond), (name), "%s (%s:%d)", #cond, __FILE__, __LINE__)
/* Kill the whole process group (exit 1 with "not ok watchdog") after `seconds`. */
void mtWatchdog(int seconds);
/* 1 when ncclGetVersion was resolved from $MEND_BUILDDIR/lib (or build/lib) and the header is Mend's. */
int mtLoadedMend(void);
/* A test program's first step: the watchdog, line-buffered stdout, and the check that the loaded
 * library is Mend's.  Returns 1 to go on; 0 after a failed result "<test>_loaded_mend". */
int mtStart(const char* test, int watchdogSeconds);
/* Exit code for main: 0 when every result passed. */
int mtExitCode(void);
/* Monotonic time in seconds. */
double mtNow(void);

#endif
