/* The topology description (topo_file.h, sim/README.md). */
#include "topo_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"

void mendSimTopoInit(struct mendOfflineTopo* t) {
  memset(t, 0, sizeof(*t));
  t->nServers = 1;
  t->gpusPerServer = 1;
}

/* Up to 3 numbers after the key; returns how many were read, -1 on a malformed one. */
static int numbers(char* rest, double* v) {
  int n = 0;
  for (char* tok = strtok(rest, " \t"); tok; tok = strtok(NULL, " \t")) {
    char* end;
    errno = 0;
    double x = strtod(tok, &end);
    if (*end != '\0' || errno != 0 || n == 3) return -1;
    v[n++] = x;
  }
  return n;
}

static int isInt(double x) { return x >= 0 && x <= 1e8 && x == (double)(long)x; }

static ncclResult_t addFault(struct mendOfflineTopo* t, double server, double nic, double gbps, const char* where,
                             int line) {
  MENDARGCHECK(t->nFaults < MEND_OFFLINE_MAX_FAULTS, ncclInvalidArgument, "%s:%d: more than %d faulty NICs", where,
               line, MEND_OFFLINE_MAX_FAULTS);
  MENDARGCHECK(isInt(server) && isInt(nic) && gbps >= 0, ncclInvalidArgument,
               "%s:%d: a fault needs a server, a NIC and a rate >= 0", where, line);
  t->faults[t->nFaults++] = (struct mendOfflineFault){.server = (int)server, .nic = (int)nic, .gbps = (float)gbps};
  return ncclSuccess;
}

static ncclResult_t parseLine(char* s, const char* where, int line, struct mendOfflineTopo* t) {
  char* hash = strchr(s, '#');
  if (hash) *hash = '\0';
  for (char* c = s; *c; c++) /* "down=3,5" reads as "down 3 5" (one word on a command line) */
    if (*c == '=' || *c == ',') *c = ' ';
  char* key = strtok(s, " \t\r");
  if (key == NULL) return ncclSuccess;
  char* rest = strtok(NULL, "\r");
  double v[3];
  int n = numbers(rest ? rest : (char*)"", v);
  MENDARGCHECK(n >= 0, ncclInvalidArgument, "%s:%d: '%s' takes numbers only", where, line, key);
  int want = strcmp(key, "down") == 0 ? 2 : strcmp(key, "degraded") == 0 ? 3 : 1;
  MENDARGCHECK(n == want, ncclInvalidArgument, "%s:%d: '%s' takes %d number(s), not %d", where, line, key, want, n);
  if (strcmp(key, "down") == 0) return addFault(t, v[0], v[1], 0, where, line);
  if (strcmp(key, "degraded") == 0) return addFault(t, v[0], v[1], v[2], where, line);
  if (strcmp(key, "gbps") == 0) {
    t->lineGbps = (float)v[0];
    return ncclSuccess;
  }
  MENDARGCHECK(isInt(v[0]), ncclInvalidArgument, "%s:%d: '%s %g' is not a count", where, line, key, v[0]);
  int x = (int)v[0];
  if (strcmp(key, "servers") == 0) t->nServers = x;
  else if (strcmp(key, "gpus") == 0) t->gpusPerServer = x;
  else if (strcmp(key, "nics") == 0) t->nicsPerServer = x;
  else if (strcmp(key, "channels") == 0) t->minChannels = t->maxChannels = x;
  else if (strcmp(key, "minchannels") == 0) t->minChannels = x;
  else if (strcmp(key, "maxchannels") == 0) t->maxChannels = x;
  else {
    WARN("%s:%d: unknown key '%s' (servers, gpus, nics, gbps, channels, minchannels, maxchannels, down, degraded)",
         where, line, key);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t mendSimTopoParse(const char* text, const char* where, struct mendOfflineTopo* t) {
  char* copy = strdup(text ? text : "");
  MENDARGCHECK(copy != NULL, ncclSystemError, "%s: out of memory", where);
  ncclResult_t res = ncclSuccess;
  int line = 1;
  for (char *s = copy, *nl; s && res == ncclSuccess; s = nl ? nl + 1 : NULL, line++) {
    nl = strpbrk(s, "\n;");
    if (nl) *nl = '\0';
    res = parseLine(s, where, line, t);
  }
  free(copy);
  return res;
}

ncclResult_t mendSimTopoRead(const char* path, struct mendOfflineTopo* t) {
  FILE* f = fopen(path, "r");
  MENDARGCHECK(f != NULL, ncclInvalidArgument, "%s: cannot open the topology: %m", path);
  char* text = NULL;
  size_t len = 0;
  ssize_t got = getdelim(&text, &len, '\0', f);
  fclose(f);
  ncclResult_t res = got < 0 ? ncclSuccess : mendSimTopoParse(text, path, t);
  free(text);
  return res;
}
