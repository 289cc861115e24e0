/*
 * The parameter registry: every NCCL_* and MEND_* knob is declared once, in params.def, with type,
 * default, unit and one line of doc.  Values come from the environment, then from the config file
 * (NCCL_CONF_FILE, else ~/.nccl.conf, else /etc/nccl.conf; the file never overrides the environment).
 * `mend-info --params` prints the table.  Unknown NCCL_* / MEND_* names in the environment warn once.
 *
 * For each row `MEND_PARAM_INT(Name, "ENV_NAME", default, "unit", "doc")` there is
 *   int64_t mendParamName(void);      (parsed once, cached; bad values warn and use the default)
 * and for `MEND_PARAM_STR(Name, ...)`
 *   const char* mendParamName(void);  (NULL when unset and the default is NULL)
 */
#ifndef MEND_MISC_PARAM_H_
#define MEND_MISC_PARAM_H_

#include <stdint.h>

#define MEND_PARAM_INT(name, env, def, unit, doc) int64_t mendParam##name(void);
#define MEND_PARAM_STR(name, env, def, unit, doc) const char* mendParam##name(void);
#include "misc/params.def"
#undef MEND_PARAM_INT
#undef MEND_PARAM_STR

/* One registry row, for tools and tests. */
struct mendParamInfo {
  const char* env;      /* variable name, e.g. "NCCL_BUFFSIZE" */
  int isString;         /* 1: string parameter, 0: integer */
  int64_t defInt;       /* default of an integer parameter */
  const char* defStr;   /* default of a string parameter (may be NULL) */
  const char* unit;     /* unit ("bytes", "ms", "" ...) */
  const char* doc;      /* one line of documentation */
};
int mendParamCount(void);
const struct mendParamInfo* mendParamGet(int i);
/* Raw lookup: environment first, then the config file.  NULL when unset. */
const char* mendGetEnv(const char* name);
/* Drop cached values (tests that change the environment). */
void mendParamResetCache(void);
/* The current value of row i through its cached getter (what mendParamName() returns): an integer
 * row's value (0 for a bad i or a string row), a string row's value (NULL when unset or not a string row). */
int64_t mendParamIntAt(int i);
const char* mendParamStrAt(int i);
/* Index of the row for variable `env`, or -1. */
int mendParamFind(const char* env);
/* Integer syntax of every integer parameter: optional sign, decimal or 0x hex, surrounding blanks.
 * Returns 1 and sets *out when `s` is one such number that fits in int64_t, else 0. */
int mendParamParseInt(const char* s, int64_t* out);
/* Once per process (init calls it): a line for every NCCL_* / MEND_* variable in the environment or the
 * config file that no registry row declares (INFO for NCCL_*, WARN for MEND_*). */
void mendParamCheckEnv(void);

#endif
