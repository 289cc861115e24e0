/*
 * The cost model's constants: built in, or measured by `mend-info --calibrate` and read from
 * MEND_CALIB_FILE.  The file is configuration, not something a peer sent, but it is still checked
 * value by value: a bad line makes the whole file ignored with a WARN naming it, never half-applied.
 */
#include "enqueue/calib.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "misc/param.h"

static const char* kindNames[MEND_CALIB_KINDS] = {"p2p", "shm", "net"};

void mendCalibDefaults(struct mendCalib* c) {
  /* The reference machine (PERF notes in src/enqueue/README.md): memcpy 10-15 GB/s, TCP loopback
   * 2.6-3 GB/s, a thread wake-up about 30 us, float c = a + b 9.4 GB/s; the hand-off between two
   * ranks on one CPU as `mend-info --calibrate` measured it there, 2026-11-25). */
  static const struct mendKindCost builtIn[MEND_CALIB_KINDS] = {
    {.alphaUs = 1.0, .bwChannel = 5.0, .bwMax = 8.0},
    {.alphaUs = 3.0, .bwChannel = 3.0, .bwMax = 6.0},
    {.alphaUs = 25.0, .bwChannel = 1.0, .bwMax = 2.5},
  };
  memset(c, 0, sizeof(*c));
  memcpy(c->kind, builtIn, sizeof(builtIn));
  c->reduceGBs = 9.4;
  c->handoffUs = 1.85;
}

/* The field `key` names, with its allowed range; NULL when the key is unknown. */
static double* fieldOf(struct mendCalib* c, const char* key, double* lo, double* hi) {
  if (strcmp(key, "reduce_gbs") == 0) {
    *lo = 0.001, *hi = 10000;
    return &c->reduceGBs;
  }
  if (strcmp(key, "handoff_us") == 0) {
    *lo = 0.001, *hi = 1e6;
    return &c->handoffUs;
  }
  for (int k = 0; k < MEND_CALIB_KINDS; k++) {
    size_t n = strlen(kindNames[k]);
    if (strncmp(key, kindNames[k], n) != 0 || key[n] != '.') continue;
    const char* f = key + n + 1;
    *lo = 0.001, *hi = 10000; /* GB/s */
    if (strcmp(f, "alpha_us") == 0) {
      *hi = 1e6;
      return &c->kind[k].alphaUs;
    }
    if (strcmp(f, "bw_channel_gbs") == 0) return &c->kind[k].bwChannel;
    if (strcmp(f, "bw_max_gbs") == 0) return &c->kind[k].bwMax;
  }
  return NULL;
}

/* One `key value` line into c; -1 with err otherwise. */
static int parseLine(char* line, int lineNo, struct mendCalib* c, char* err, size_t errLen) {
  char* save = NULL;
  char* key = strtok_r(line, " \t\r", &save);
  if (key == NULL || key[0] == '#') return 0;
  char* val = strtok_r(NULL, " \t\r", &save);
  char* extra = strtok_r(NULL, " \t\r", &save);
  double lo, hi;
  double* field = fieldOf(c, key, &lo, &hi);
  if (field == NULL) {
    snprintf(err, errLen, "line %d: unknown key '%s'", lineNo, key);
    return -1;
  }
  char* end = NULL;
  errno = 0;
  double v = val ? strtod(val, &end) : NAN;
  if (val == NULL || *end != '\0' || errno != 0 || !isfinite(v) || v < lo || v > hi || (extra && extra[0] != '#')) {
    snprintf(err, errLen, "line %d: %s needs one number in [%g, %g], got '%s'", lineNo, key, lo, hi,
             val ? val : "");
    return -1;
  }
  *field = v;
  return 0;
}

/* All channels together move at least what one does: 0, or -1 with err naming the kind. */
static int checkOrder(const struct mendCalib* c, char* err, size_t errLen) {
  for (int k = 0; k < MEND_CALIB_KINDS; k++) {
    if (c->kind[k].bwMax < c->kind[k].bwChannel) {
      snprintf(err, errLen, "%s.bw_max_gbs %g is below %s.bw_channel_gbs %g", kindNames[k], c->kind[k].bwMax,
               kindNames[k], c->kind[k].bwChannel);
      return -1;
    }
  }
  return 0;
}

int mendCalibParse(const char* text, struct mendCalib* out, char* err, size_t errLen) {
  struct mendCalib c = *out;
  size_t len = strlen(text);
  char* copy = malloc(len + 1);
  if (copy == NULL) {
    snprintf(err, errLen, "out of memory");
    return -1;
  }
  memcpy(copy, text, len + 1);
  int lineNo = 0, rc = 0;
  /* Split lines by hand (strtok_r would skip empty lines and miscount). */
  for (char* p = copy; p && rc == 0;) {
    char* nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    lineNo++;
    rc = parseLine(p, lineNo, &c, err, errLen);
    p = nl ? nl + 1 : NULL;
  }
  free(copy);
  if (rc == 0) rc = checkOrder(&c, err, errLen);
  if (rc == 0) *out = c;
  return rc;
}

void mendCalibWrite(FILE* f, const struct mendCalib* c) {
  for (int k = 0; k < MEND_CALIB_KINDS; k++) {
    fprintf(f, "%s.alpha_us %.3f\n%s.bw_channel_gbs %.3f\n%s.bw_max_gbs %.3f\n", kindNames[k], c->kind[k].alphaUs,
            kindNames[k], c->kind[k].bwChannel, kindNames[k], c->kind[k].bwMax);
  }
  fprintf(f, "reduce_gbs %.3f\nhandoff_us %.3f\n", c->reduceGBs, c->handoffUs);
}

int mendCalibCheck(const struct mendCalib* in, char* err, size_t errLen) {
  struct mendCalib c = *in; /* fieldOf hands out pointers into it */
  char key[32];
  for (int i = -2; i < MEND_CALIB_KINDS * 3; i++) {
    static const char* fields[3] = {"alpha_us", "bw_channel_gbs", "bw_max_gbs"};
    if (i == -2) snprintf(key, sizeof(key), "handoff_us");
    else if (i < 0) snprintf(key, sizeof(key), "reduce_gbs");
    else snprintf(key, sizeof(key), "%s.%s", kindNames[i / 3], fields[i % 3]);
    double lo, hi, *v = fieldOf(&c, key, &lo, &hi);
    if (v == NULL || !isfinite(*v) || *v < lo || *v > hi) {
      snprintf(err, errLen, "%s %g is not a number in [%g, %g]", key, v ? *v : NAN, lo, hi);
      return -1;
    }
  }
  return checkOrder(&c, err, errLen);
}

int mendCalibEqual(const struct mendCalib* a, const struct mendCalib* b) {
  if (a->reduceGBs != b->reduceGBs || a->handoffUs != b->handoffUs) return 0;
  for (int k = 0; k < MEND_CALIB_KINDS; k++) {
    const struct mendKindCost *x = a->kind + k, *y = b->kind + k;
    if (x->alphaUs != y->alphaUs || x->bwChannel != y->bwChannel || x->bwMax != y->bwMax) return 0;
  }
  return 1;
}

static struct mendCalib loaded;
static pthread_once_t loadOnce = PTHREAD_ONCE_INIT;

/* The whole file, NUL-terminated (at most 64 KiB: a calibration is a dozen lines). */
static char* readSmallFile(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return NULL;
  char* buf = malloc(65536);
  size_t n = buf ? fread(buf, 1, 65535, f) : 0;
  int tooBig = buf && n == 65535 && fgetc(f) != EOF;
  fclose(f);
  if (buf == NULL || tooBig) {
    free(buf);
    errno = EFBIG;
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

int mendCalibLoad(const char* path, struct mendCalib* c) {
  mendCalibDefaults(c);
  if (path == NULL || path[0] == '\0') return 0;
  char* text = readSmallFile(path);
  if (text == NULL) {
    WARN("MEND_CALIB_FILE=%s: cannot read it (%s); the cost model keeps its built-in constants", path,
         strerror(errno));
    return -1;
  }
  char err[256];
  int rc = mendCalibParse(text, c, err, sizeof(err));
  if (rc != 0) WARN("MEND_CALIB_FILE=%s: %s; the cost model keeps its built-in constants", path, err);
  else c->fromFile = 1;
  free(text);
  return rc;
}

static void load(void) {
  mendCalibLoad(mendParamCalibFile(), &loaded);
}

const struct mendCalib* mendCalibGet(void) {
  pthread_once(&loadOnce, load);
  return &loaded;
}

void mendCalibDescribe(const struct mendCalib* c, char* buf, size_t len) {
  const char* from = c->fromFile == MEND_CALIB_RANK0      ? "rank 0's, which differ from this rank's"
                     : c->fromFile == MEND_CALIB_MEASURED ? "measured at init by rank 0's process"
                     : c->fromFile                        ? mendParamCalibFile()
                                                          : "built in";
  size_t at = (size_t)snprintf(buf, len, "Cost model constants (%s):", from);
  for (int k = 0; k < MEND_CALIB_KINDS && at < len; k++) {
    at += (size_t)snprintf(buf + at, len - at, " %s alpha %.2f us bw %.2f/%.2f GB/s;", kindNames[k],
                           c->kind[k].alphaUs, c->kind[k].bwChannel, c->kind[k].bwMax);
  }
  if (at < len) snprintf(buf + at, len - at, " reduce %.2f GB/s; hand-off %.2f us", c->reduceGBs, c->handoffUs);
}
