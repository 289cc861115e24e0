/*
 * Fuzz target: the health registry (resilience/health.c) fed updates from other ranks, mixed with
 * its own decisions.  Whatever arrives, every NIC keeps a known state and a finite, non-negative
 * bandwidth (a down NIC carries nothing), and the registry's epoch is the highest it applied.
 *
 * Input: the registry's shape (two bytes: ranks, devices), then updates (sizeof(struct
 * mendHealthUpdate) bytes, each preceded by a byte: 0 applies it as received, 1 decides it locally).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "resilience/health.h"

static void checkRegistry(struct mendHealth* h) {
  for (int i = 0; i < h->nRanks * h->maxDevs; i++) {
    const struct mendHealthNic* n = &h->nics[i];
    if (n->state < MEND_NIC_UP || n->state > MEND_NIC_PROBING) abort();
    if (!isfinite(n->gbps) || n->gbps < 0.0f) abort();
    if (n->state == MEND_NIC_DOWN && n->gbps != 0.0f) abort();
    if (n->epoch > h->epoch) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  int nRanks = 1 + fuzzByte(&in) % 64, maxDevs = 1 + fuzzByte(&in) % 16;
  int line[64 * 16];
  for (int i = 0; i < nRanks * maxDevs; i++) line[i] = 100000 * (1 + i % 4);
  struct mendHealth h;
  memset(&h, 0, sizeof(h));
  if (mendHealthInit(&h, nRanks, maxDevs, line) != ncclSuccess) abort();
  for (;;) {
    uint8_t how = fuzzByte(&in);
    const uint8_t* raw = fuzzTake(&in, sizeof(struct mendHealthUpdate));
    if (raw == NULL) break;
    struct mendHealthUpdate u;
    memcpy(&u, raw, sizeof(u));
    if (how & 1) mendHealthDecide(&h, &u);
    else (void)mendHealthApply(&h, &u);
    checkRegistry(&h);
    (void)mendHealthState(&h, u.rank, u.dev);
  }
  mendHealthFree(&h);
  return 0;
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  fuzzPutByte(&b, 3);
  fuzzPutByte(&b, 1);
  const struct mendHealthUpdate ups[] = {
      {.rank = 1, .dev = 0, .state = MEND_NIC_DOWN, .epoch = 1, .reporter = 1, .verdict = "local NIC down"},
      {.rank = 1, .dev = 1, .state = MEND_NIC_DEGRADED, .epoch = 2, .gbps = 40.0f, .reporter = 0},
      {.rank = 1, .dev = 0, .state = MEND_NIC_PROBING, .epoch = 3, .reporter = 2},
      {.rank = 1, .dev = 0, .state = MEND_NIC_UP, .epoch = 3, .reporter = 3},
  };
  for (size_t i = 0; i < sizeof(ups) / sizeof(ups[0]); i++) {
    fuzzPutByte(&b, i == 1);
    fuzzPut(&b, &ups[i], sizeof(ups[i]));
  }
  fuzzSeedWrite(s, b.data, b.len);
}

FUZZ_SEEDS
