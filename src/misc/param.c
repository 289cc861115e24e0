/*
 * The parameter registry (see param.h).  params.def is expanded three times: into an index enum,
 * into the table of rows, and into one getter per row.  A getter parses its variable once; the value
 * is published with a release store of its ready flag, so later calls from any thread are one
 * acquire load.  Config files are read once into a private table (not setenv, which is not
 * thread-safe); the environment always wins over them.
 */
#include "misc/param.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "misc/debug.h"
#include "misc/utils.h"

extern char** environ;

enum {
#define MEND_PARAM_INT(name, env, def, unit, doc) PIDX_##name,
#define MEND_PARAM_STR(name, env, def, unit, doc) PIDX_##name,
#include "misc/params.def"
#undef MEND_PARAM_INT
#undef MEND_PARAM_STR
  PCOUNT
};

static const struct mendParamInfo table[PCOUNT] = {
#define MEND_PARAM_INT(name, env, def, unit, doc) {env, 0, (int64_t)(def), NULL, unit, doc},
#define MEND_PARAM_STR(name, env, def, unit, doc) {env, 1, 0, def, unit, doc},
#include "misc/params.def"
#undef MEND_PARAM_INT
#undef MEND_PARAM_STR
};

int mendParamCount(void) { return PCOUNT; }
const struct mendParamInfo* mendParamGet(int i) { return i >= 0 && i < PCOUNT ? &table[i] : NULL; }

int mendParamFind(const char* env) {
  for (int i = 0; i < PCOUNT; i++)
    if (strcmp(table[i].env, env) == 0) return i;
  return -1;
}

/* ---- config files ---- */

struct confEntry {
  char* name;  /* variable name */
  char* value; /* its value, blanks trimmed */
};
static pthread_mutex_t confLock = PTHREAD_MUTEX_INITIALIZER;
static int confLoaded;             /* 1 once conf/nconf are final (atomic) */
/* Memory replaced by mendParamResetCache: a caller may still hold a value pointer, so it is never
 * freed, only kept reachable here (so leak checkers stay quiet).  Only tests reset. */
struct retired {
  struct retired* next; /* older entry */
  void* mem;            /* the retired block */
};
static struct retired* graveyard;
static void retire(void* mem) {
  struct retired* r = malloc(sizeof(*r));
  if (r == NULL || mem == NULL) { free(r); return; }
  r->mem = mem;
  r->next = graveyard;
  graveyard = r;
}

static struct confEntry* conf;     /* entries of every file read; earlier ones win */
static int nconf, confCap;         /* used and allocated entries */

static char* trim(char* s) {
  while (isspace((unsigned char)*s)) s++;
  char* e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

static const char* confFind(const char* name) {
  for (int i = 0; i < nconf; i++)
    if (strcmp(conf[i].name, name) == 0) return conf[i].value;
  return NULL;
}

/* Add the VAR=value lines of `path`; a missing file is normal and silent. */
static void confReadFile(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return;
  char* line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) != -1) {
    char* s = trim(line);
    char* eq = strchr(s, '=');
    if (s[0] == '#' || eq == NULL) continue;
    *eq = '\0';
    char *name = trim(s), *value = trim(eq + 1);
    if (name[0] == '\0' || confFind(name)) continue;
    if (nconf == confCap) {
      int ncap = confCap ? confCap * 2 : 16;
      struct confEntry* n = realloc(conf, (size_t)ncap * sizeof(*n));
      if (n == NULL) break;
      conf = n;
      confCap = ncap;
    }
    char *dn = strdup(name), *dv = strdup(value);
    if (!dn || !dv) { free(dn); free(dv); break; }
    conf[nconf].name = dn;
    conf[nconf].value = dv;
    nconf++;
  }
  free(line);
  fclose(f);
}

static void confLoad(void) {
  pthread_mutex_lock(&confLock);
  if (!__atomic_load_n(&confLoaded, __ATOMIC_ACQUIRE)) {
    char path[4096];
    const char* user = getenv("NCCL_CONF_FILE");
    if (user && user[0]) {
      confReadFile(user);
    } else {
      const char* home = getenv("HOME");
      struct passwd pw, *pwp = NULL;
      char pwbuf[1024];
      if ((home == NULL || home[0] == '\0') && getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp)
        home = pwp->pw_dir;
      if (home && home[0]) {
        snprintf(path, sizeof(path), "%s/.nccl.conf", home);
        confReadFile(path);
      }
    }
    confReadFile("/etc/nccl.conf");
    __atomic_store_n(&confLoaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&confLock);
}

const char* mendGetEnv(const char* name) {
  if (name == NULL) return NULL;
  const char* v = getenv(name);
  if (v) return v;
  if (!__atomic_load_n(&confLoaded, __ATOMIC_ACQUIRE)) confLoad();
  return confFind(name);
}

/* ---- typed, cached getters ---- */

static pthread_mutex_t cacheLock = PTHREAD_MUTEX_INITIALIZER;
static int cacheReady[PCOUNT];        /* 1 once the slot holds the parsed value (atomic) */
static int64_t cacheInt[PCOUNT];      /* value of an integer row */
static const char* cacheStr[PCOUNT];  /* value of a string row (owned copy, or the default) */
static int cacheOwned[PCOUNT];        /* 1 when cacheStr[i] is a copy this file allocated */

int mendParamParseInt(const char* s, int64_t* out) {
  if (s == NULL) return 0;
  while (isspace((unsigned char)*s)) s++;
  int neg = *s == '-';
  if (*s == '-' || *s == '+') s++;
  int base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) { base = 16; s += 2; }
  if (base == 16 ? !isxdigit((unsigned char)*s) : !isdigit((unsigned char)*s)) return 0;
  errno = 0;
  char* end;
  unsigned long long u = strtoull(s, &end, base);
  if (errno == ERANGE) return 0;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return 0;
  if (!neg && u > (unsigned long long)INT64_MAX) return 0;
  if (neg && u > (unsigned long long)INT64_MAX + 1ULL) return 0;
  *out = neg ? (int64_t)(0ULL - u) : (int64_t)u;
  return 1;
}

static const char* sourceOf(const char* env) { return getenv(env) ? "environment" : "config file"; }

static int64_t intGet(int i) {
  if (__atomic_load_n(&cacheReady[i], __ATOMIC_ACQUIRE)) return cacheInt[i];
  const struct mendParamInfo* p = &table[i];
  const char* s = mendGetEnv(p->env);
  int64_t v = p->defInt;
  int set = s != NULL && s[0] != '\0', bad = set && !mendParamParseInt(s, &v);
  if (bad) v = p->defInt;
  int first = 0;
  pthread_mutex_lock(&cacheLock);
  if (!__atomic_load_n(&cacheReady[i], __ATOMIC_ACQUIRE)) {
    cacheInt[i] = v;
    __atomic_store_n(&cacheReady[i], 1, __ATOMIC_RELEASE);
    first = 1;
  }
  v = cacheInt[i];
  pthread_mutex_unlock(&cacheLock);
  if (first && bad)
    WARN("Invalid value '%s' for %s (expected an integer, decimal or 0x hex); using the default %lld", s, p->env,
         (long long)v);
  else if (first && set)
    INFO(NCCL_ENV, "%s set by %s to %lld", p->env, sourceOf(p->env), (long long)v);
  return v;
}

static const char* strGet(int i) {
  if (__atomic_load_n(&cacheReady[i], __ATOMIC_ACQUIRE)) return cacheStr[i];
  const struct mendParamInfo* p = &table[i];
  const char* s = mendGetEnv(p->env);
  int set = s != NULL && s[0] != '\0';
  /* The copy outlives environment changes; replaced copies are not freed (a caller may hold them). */
  const char* v = set ? strdup(s) : p->defStr;
  if (set && v == NULL) v = p->defStr;
  int first = 0;
  pthread_mutex_lock(&cacheLock);
  if (!__atomic_load_n(&cacheReady[i], __ATOMIC_ACQUIRE)) {
    cacheStr[i] = v;
    cacheOwned[i] = v != p->defStr;
    __atomic_store_n(&cacheReady[i], 1, __ATOMIC_RELEASE);
    first = 1;
  } else if (set && v != p->defStr) {
    free((void*)v);
  }
  v = cacheStr[i];
  pthread_mutex_unlock(&cacheLock);
  int secret = strcmp(p->unit, "secret") == 0;  /* logs never show a secret */
  if (first && set) INFO(NCCL_ENV, "%s set by %s to %s", p->env, sourceOf(p->env), secret ? "(hidden)" : v);
  return v;
}

int64_t mendParamIntAt(int i) { return i >= 0 && i < PCOUNT && !table[i].isString ? intGet(i) : 0; }
const char* mendParamStrAt(int i) { return i >= 0 && i < PCOUNT && table[i].isString ? strGet(i) : NULL; }

#define MEND_PARAM_INT(name, env, def, unit, doc) int64_t mendParam##name(void) { return intGet(PIDX_##name); }
#define MEND_PARAM_STR(name, env, def, unit, doc) const char* mendParam##name(void) { return strGet(PIDX_##name); }
#include "misc/params.def"
#undef MEND_PARAM_INT
#undef MEND_PARAM_STR

/* ---- unknown variables ---- */

static int checkDone; /* mendParamCheckEnv ran (atomic) */

/* Families Mend leaves alone without a row each, and the test runner's own variables. */
static const char* quietPrefixes[] = {"NCCL_IB_", "NCCL_NVLS_", "NCCL_COLLNET_", "NCCL_RAS_", "NCCL_TESTS_",
                                      "NCCL_PROFILE", "MEND_TEST_", "MEND_BUILDDIR"};

static void checkName(const char* name, const char* where) {
  int nccl = strncmp(name, "NCCL_", 5) == 0, mend = strncmp(name, "MEND_", 5) == 0;
  if (!(nccl || mend) || mendParamFind(name) >= 0) return;
  for (size_t k = 0; k < sizeof(quietPrefixes) / sizeof(quietPrefixes[0]); k++)
    if (strncmp(name, quietPrefixes[k], strlen(quietPrefixes[k])) == 0) return;
  if (mend) WARN("%s is set (%s) but is not a Mend parameter; ignored (mend-info --params lists them)", name, where);
  else INFO(NCCL_ENV, "%s is set (%s) but Mend does not use it; ignored", name, where);
}

void mendParamCheckEnv(void) {
  if (__atomic_exchange_n(&checkDone, 1, __ATOMIC_ACQ_REL)) return;
  for (char** e = environ; e && *e; e++) {
    char name[256];
    size_t len = strcspn(*e, "=");
    if (len == 0 || len >= sizeof(name)) continue;
    memcpy(name, *e, len);
    name[len] = '\0';
    checkName(name, "environment");
  }
  if (!__atomic_load_n(&confLoaded, __ATOMIC_ACQUIRE)) confLoad();
  for (int i = 0; i < nconf; i++)
    if (getenv(conf[i].name) == NULL) checkName(conf[i].name, "config file");
}

void mendParamResetCache(void) {
  pthread_mutex_lock(&cacheLock);
  pthread_mutex_lock(&confLock); /* also guards the graveyard */
  for (int i = 0; i < PCOUNT; i++) {
    __atomic_store_n(&cacheReady[i], 0, __ATOMIC_RELEASE);
    if (cacheOwned[i]) retire((void*)cacheStr[i]);
    cacheOwned[i] = 0;
  }
  pthread_mutex_unlock(&cacheLock);
  for (int i = 0; i < nconf; i++) {
    retire(conf[i].name);
    retire(conf[i].value);
  }
  retire(conf);
  conf = NULL;
  nconf = confCap = 0;
  __atomic_store_n(&confLoaded, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&confLock);
  __atomic_store_n(&checkDone, 0, __ATOMIC_RELEASE);
  mendHostIdReset();
}
