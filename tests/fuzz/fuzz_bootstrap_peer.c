/*
 * Fuzz target: what a rank's bootstrap reads from the network besides the root: the listener's
 * challenge (read by every connector), and an incoming peer connection as the receiver thread reads
 * it (bootstrap.c readRx): the handshake, then message headers and payloads, buffered up to a bound.
 *
 * Input: a flags byte, the challenge, the handshake, then headers (each followed by its payload)
 * until the input ends.  Flag 1 signs the handshake with the network key (a proven peer: the header
 * stream behind it gets fuzzed too).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_wire.h"
#include "fuzz.h"

#define FUZZ_RANKS 8                      /* the network's size */
#define FUZZ_RANK 2                       /* this rank */
#define FUZZ_MAX_BUFFERED (64u << 10)     /* unreceived bytes kept per peer (MEND_BOOTSTRAP_MAX_BUFFERED) */

static const uint64_t fuzzMagic = 0x7065657266757a7aULL;
static const uint8_t fuzzKey[MEND_MAC_KEY_BYTES] = "fuzz-network-k";
static const uint8_t fuzzNonce[MEND_BS_NONCE_BYTES] = "peer-challenge!";

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  struct fuzzIn in = {.p = data, .left = size};
  uint8_t flags = fuzzByte(&in);
  const uint8_t* ch = fuzzTake(&in, sizeof(struct mendBsChallenge));
  if (ch == NULL) return 0;
  uint8_t nonce[MEND_BS_NONCE_BYTES];
  (void)mendBsChallengeParse(ch, sizeof(struct mendBsChallenge), nonce);

  const uint8_t* raw = fuzzTake(&in, sizeof(struct mendBsHandshake));
  if (raw == NULL) return 0;
  struct mendBsHandshake hs;
  memcpy(&hs, raw, sizeof(hs));
  if (flags & 1) hs.mac = mendBsHandshakeMac(fuzzKey, fuzzNonce, &hs);
  int peer = mendBsHandshakeParse(&hs, sizeof(hs), FUZZ_RANK, fuzzMagic, fuzzKey, FUZZ_RANKS, fuzzNonce);
  if (peer < 0) return 0;
  if (peer >= FUZZ_RANKS) abort();  /* a rank outside the network passed */

  /* The header stream: payloads are copied into buffers of the announced size, as readRx does. */
  const size_t maxMsg = MEND_BS_MSG_BASE + (size_t)FUZZ_RANKS * 64;
  size_t buffered = 0;
  for (;;) {
    const uint8_t* hp = fuzzTake(&in, sizeof(struct mendBsHeader));
    if (hp == NULL) break;
    struct mendBsHeader hdr;
    int kind = mendBsHeaderParse(hp, sizeof(hdr), maxMsg, &hdr);
    if (kind != MEND_BS_DATA) break;  /* BYE, or a corrupt stream: the link is dropped */
    if (hdr.size > maxMsg) abort();
    if (buffered + hdr.size > FUZZ_MAX_BUFFERED) break;  /* the bound readRx enforces */
    const uint8_t* payload = fuzzTake(&in, (size_t)hdr.size);
    if (payload == NULL) break;
    char* m = malloc((size_t)hdr.size + 1);
    if (m == NULL) abort();
    memcpy(m, payload, (size_t)hdr.size);
    buffered += (size_t)hdr.size;
    free(m);
  }
  return 0;
}

void fuzzSeeds(struct fuzzSeeds* s) {
  struct fuzzBuf b = {.len = 0};
  fuzzPutByte(&b, 0);
  struct mendBsChallenge c = {.magic = MEND_BS_CHALLENGE_MAGIC};
  memcpy(c.nonce, fuzzNonce, sizeof(c.nonce));
  fuzzPut(&b, &c, sizeof(c));
  struct mendBsHandshake hs = {.magic = fuzzMagic ^ MEND_BS_HANDSHAKE_MAGIC, .rank = 5, .nRanks = FUZZ_RANKS};
  hs.mac = mendBsHandshakeMac(fuzzKey, fuzzNonce, &hs);
  fuzzPut(&b, &hs, sizeof(hs));
  const char* words[] = {"allgather step", "", "split"};
  for (int i = 0; i < 3; i++) {
    struct mendBsHeader h = {.type = MEND_BS_DATA, .tag = i, .size = strlen(words[i])};
    fuzzPut(&b, &h, sizeof(h));
    fuzzPut(&b, words[i], strlen(words[i]));
  }
  struct mendBsHeader bye = {.type = MEND_BS_BYE};
  fuzzPut(&b, &bye, sizeof(bye));
  fuzzSeedWrite(s, b.data, b.len);
  /* The same from a stranger that cannot prove the key, and a header announcing too much. */
  size_t at = 1 + sizeof(c) + offsetof(struct mendBsHandshake, mac);
  b.data[at] ^= 1;
  fuzzSeedWrite(s, b.data, b.len);
  b.data[at] ^= 1;
  at = 1 + sizeof(c) + sizeof(hs);
  struct mendBsHeader big = {.type = MEND_BS_DATA, .size = (uint64_t)1 << 30};
  memcpy(b.data + at, &big, sizeof(big));
  fuzzSeedWrite(s, b.data, b.len);
}

FUZZ_SEEDS
