/*
 * ncclConfig_t acceptance, following NCCL's rules (ABI facts 3.3) so that programs built with an
 * older or newer nccl.h keep working:
 *   1. start from our own initializer;  2. copy min(caller size, our size) bytes;  3. check the magic;
 *   4. reset fields the caller's header version did not have;  5. validate;  6. apply defaults;
 *   7. let NCCL_* environment variables override.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "init.h"
#include "misc/debug.h"
#include "misc/param.h"

#define UNDEF NCCL_CONFIG_UNDEF_INT
#define CONFIG_MAGIC 0xcafebeefu
#define CGA_MAX 8

static int isBool(int v) { return v == 0 || v == 1; }

/* Step 4: a header older than the version that added a field left garbage or nothing there. */
static void resetByVersion(ncclConfig_t* c) {
  unsigned v = c->version;
  if (v < NCCL_VERSION(2, 14, 0)) c->blocking = UNDEF;
  if (v < NCCL_VERSION(2, 17, 0)) {
    c->cgaClusterSize = UNDEF;
    c->minCTAs = UNDEF;
    c->maxCTAs = UNDEF;
    c->netName = NULL;
  }
  if (v < NCCL_VERSION(2, 25, 0)) c->trafficClass = UNDEF;
  if (v < NCCL_VERSION(2, 27, 0)) {
    c->collnetEnable = UNDEF;
    c->CTAPolicy = UNDEF;
    c->shrinkShare = UNDEF;
    c->nvlsCTAs = UNDEF;
  }
  if (v < NCCL_VERSION(2, 28, 0)) {
    c->nChannelsPerNetPeer = UNDEF;
    c->nvlinkCentricSched = UNDEF;
  }
  if (v < NCCL_VERSION(2, 29, 0)) {
    c->graphUsageMode = UNDEF;
    c->numRmaCtx = UNDEF;
  }
  if (v < NCCL_VERSION(2, 30, 0)) {
    c->maxP2pPeers = UNDEF;
    c->graphStreamOrdering = UNDEF;
  }
}

#define CHECK_FIELD(cond, field, value)                                                    \
  MENDARGCHECK(cond, ncclInvalidArgument, "Invalid config: %s = %d (%s)", field, (value), #cond)

/* Step 5. */
static ncclResult_t validate(const ncclConfig_t* c) {
  CHECK_FIELD(c->blocking == UNDEF || isBool(c->blocking), "blocking", c->blocking);
  CHECK_FIELD(c->cgaClusterSize == UNDEF || c->cgaClusterSize >= 0, "cgaClusterSize", c->cgaClusterSize);
  CHECK_FIELD(c->minCTAs == UNDEF || c->minCTAs > 0, "minCTAs", c->minCTAs);
  CHECK_FIELD(c->maxCTAs == UNDEF || c->maxCTAs > 0, "maxCTAs", c->maxCTAs);
  CHECK_FIELD(c->minCTAs == UNDEF || c->maxCTAs == UNDEF || c->minCTAs <= c->maxCTAs, "minCTAs", c->minCTAs);
  CHECK_FIELD(c->splitShare == UNDEF || isBool(c->splitShare), "splitShare", c->splitShare);
  CHECK_FIELD(c->shrinkShare == UNDEF || isBool(c->shrinkShare), "shrinkShare", c->shrinkShare);
  CHECK_FIELD(c->collnetEnable == UNDEF || isBool(c->collnetEnable), "collnetEnable", c->collnetEnable);
  CHECK_FIELD(c->nvlinkCentricSched == UNDEF || isBool(c->nvlinkCentricSched), "nvlinkCentricSched",
              c->nvlinkCentricSched);
  CHECK_FIELD(c->CTAPolicy == UNDEF || (c->CTAPolicy >= 0 && c->CTAPolicy <= NCCL_CTA_POLICY_ZERO), "CTAPolicy",
              c->CTAPolicy);
  CHECK_FIELD(c->nvlsCTAs == UNDEF || c->nvlsCTAs > 0, "nvlsCTAs", c->nvlsCTAs);
  CHECK_FIELD(c->nChannelsPerNetPeer == UNDEF || (c->nChannelsPerNetPeer > 0 && c->nChannelsPerNetPeer <= MEND_MAXCHANNELS),
              "nChannelsPerNetPeer", c->nChannelsPerNetPeer);
  /* 2.29/2.30 fields: the facts give no ranges; only values that cannot mean anything are refused. */
  CHECK_FIELD(c->graphUsageMode == UNDEF || c->graphUsageMode >= 0, "graphUsageMode", c->graphUsageMode);
  CHECK_FIELD(c->numRmaCtx == UNDEF || c->numRmaCtx > 0, "numRmaCtx", c->numRmaCtx);
  CHECK_FIELD(c->maxP2pPeers == UNDEF || c->maxP2pPeers > 0, "maxP2pPeers", c->maxP2pPeers);
  CHECK_FIELD(c->graphStreamOrdering == UNDEF || c->graphStreamOrdering >= 0, "graphStreamOrdering",
              c->graphStreamOrdering);
  return ncclSuccess;
}

static int orDefault(int v, int def) { return v == UNDEF ? def : v; }

/* Step 6, into our parsed form. */
static void applyDefaults(const ncclConfig_t* c, struct mendConfig* out) {
  memset(out, 0, sizeof(*out));
  out->blocking = orDefault(c->blocking, 1);
  out->cgaClusterSize = orDefault(c->cgaClusterSize, 4);
  out->minCTAs = orDefault(c->minCTAs, 1);
  out->maxCTAs = orDefault(c->maxCTAs, MEND_MAXCHANNELS);
  if (c->netName) snprintf(out->netNameBuf, sizeof(out->netNameBuf), "%s", c->netName);
  out->splitShare = orDefault(c->splitShare, 0);
  out->trafficClass = c->trafficClass;
  if (c->commName) snprintf(out->commName, sizeof(out->commName), "%s", c->commName);
  out->collnetEnable = orDefault(c->collnetEnable, 0);
  out->CTAPolicy = orDefault(c->CTAPolicy, NCCL_CTA_POLICY_DEFAULT);
  out->shrinkShare = orDefault(c->shrinkShare, 0);
  out->nvlsCTAs = c->nvlsCTAs;
  out->nChannelsPerNetPeer = c->nChannelsPerNetPeer;
  out->nvlinkCentricSched = orDefault(c->nvlinkCentricSched, 0);
  out->graphUsageMode = c->graphUsageMode;
  out->numRmaCtx = c->numRmaCtx;
  out->maxP2pPeers = c->maxP2pPeers;
  out->graphStreamOrdering = c->graphStreamOrdering;
}

/* One integer override: applied when set and valid, else a warning and the config value stays. */
static void envInt(int64_t env, const char* name, int* field, int ok) {
  if (env == UNDEF) return;
  if (!ok) {
    WARN("Ignoring %s=%lld: invalid value", name, (long long)env);
    return;
  }
  INFO(NCCL_ENV, "%s set by environment to %lld", name, (long long)env);
  *field = (int)env;
}

/* Step 7. */
static void envOverride(struct mendConfig* c) {
  int64_t v;
  v = mendParamCommBlocking();
  envInt(v, "NCCL_COMM_BLOCKING", &c->blocking, isBool((int)v));
  v = mendParamCgaClusterSize();
  envInt(v, "NCCL_CGA_CLUSTER_SIZE", &c->cgaClusterSize, v >= 0 && v <= INT32_MAX);
  v = mendParamMinCtas();
  envInt(v, "NCCL_MIN_CTAS", &c->minCTAs, v > 0 && v <= INT32_MAX);
  v = mendParamMaxCtas();
  envInt(v, "NCCL_MAX_CTAS", &c->maxCTAs, v > 0 && v <= INT32_MAX);
  v = mendParamCommSplitShareResources();
  envInt(v, "NCCL_COMM_SPLIT_SHARE_RESOURCES", &c->splitShare, isBool((int)v));
  v = mendParamCommShrinkShareResources();
  envInt(v, "NCCL_COMM_SHRINK_SHARE_RESOURCES", &c->shrinkShare, isBool((int)v));
  v = mendParamCollnetEnable();
  envInt(v, "NCCL_COLLNET_ENABLE", &c->collnetEnable, isBool((int)v));
  v = mendParamCtaPolicy();
  envInt(v, "NCCL_CTA_POLICY", &c->CTAPolicy, v >= 0 && v <= NCCL_CTA_POLICY_ZERO);
  v = mendParamNvlsNchannels();
  envInt(v, "NCCL_NVLS_NCHANNELS", &c->nvlsCTAs, v > 0 && v <= INT32_MAX);
  v = mendParamNchannelsPerNetPeer();
  envInt(v, "NCCL_NCHANNELS_PER_NET_PEER", &c->nChannelsPerNetPeer, v > 0 && v <= MEND_MAXCHANNELS);
  v = mendParamNvlinkUtilCentricSchedEnable();
  envInt(v, "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", &c->nvlinkCentricSched, isBool((int)v));
  const char* net = mendParamNet();
  if (net && *net) snprintf(c->netNameBuf, sizeof(c->netNameBuf), "%s", net);
}

/* Limits applied last, whoever set the values. */
static void clampLimits(struct mendConfig* c) {
  if (c->cgaClusterSize > CGA_MAX) {
    INFO(NCCL_INIT, "cgaClusterSize %d capped at %d", c->cgaClusterSize, CGA_MAX);
    c->cgaClusterSize = CGA_MAX;
  }
  if (c->maxCTAs > MEND_MAXCHANNELS) {
    INFO(NCCL_INIT, "maxCTAs %d capped at %d", c->maxCTAs, MEND_MAXCHANNELS);
    c->maxCTAs = MEND_MAXCHANNELS;
  }
  if (c->minCTAs > c->maxCTAs) {
    INFO(NCCL_INIT, "minCTAs %d above maxCTAs %d: using %d", c->minCTAs, c->maxCTAs, c->maxCTAs);
    c->minCTAs = c->maxCTAs;
  }
  c->netName = c->netNameBuf[0] ? c->netNameBuf : NULL;  /* never points into another struct */
}

ncclResult_t mendConfigParse(const ncclConfig_t* user, const struct mendConfig* parent, struct mendConfig* out) {
  if (out == NULL) return ncclInvalidArgument;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  if (user == NULL && parent != NULL) {
    *out = *parent;
    clampLimits(out);
    return ncclSuccess;
  }
  if (user != NULL) {
    /* size and magic sit at the same offsets in every version. */
    if (user->magic != CONFIG_MAGIC) {
      WARN("Invalid config: magic 0x%x, the config was not initialized via NCCL_CONFIG_INITIALIZER", user->magic);
      return ncclInvalidArgument;
    }
    size_t size = user->size < sizeof(c) ? user->size : sizeof(c);
    if (size < offsetof(ncclConfig_t, blocking)) {
      WARN("Invalid config: size %zu is smaller than any ncclConfig_t", user->size);
      return ncclInvalidArgument;
    }
    memcpy(&c, user, size);
    if (user->size > sizeof(c))
      INFO(NCCL_INIT, "Config of %zu bytes from a newer nccl.h: fields past %zu bytes are ignored", user->size,
           sizeof(c));
    resetByVersion(&c);
    MENDCHECK(validate(&c));
  }
  applyDefaults(&c, out);
  envOverride(out);
  clampLimits(out);
  return ncclSuccess;
}
