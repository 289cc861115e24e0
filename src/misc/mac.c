/*
 * SipHash-2-4, written from the specification (https://www.aumasson.jp/siphash/siphash.pdf): two
 * compression rounds per 8-byte word, four finalisation rounds.  Test vectors in
 * tests/unit/test_bootstrap_abuse.cc.
 */
#include "misc/mac.h"

#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "misc/utils.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];  /* little-endian on every host */
  return v;
}

static void rounds(uint64_t* v, int n) {
  for (int i = 0; i < n; i++) {
    v[0] += v[1]; v[1] = ROTL(v[1], 13); v[1] ^= v[0]; v[0] = ROTL(v[0], 32);
    v[2] += v[3]; v[3] = ROTL(v[3], 16); v[3] ^= v[2];
    v[0] += v[3]; v[3] = ROTL(v[3], 21); v[3] ^= v[0];
    v[2] += v[1]; v[1] = ROTL(v[1], 17); v[1] ^= v[2]; v[2] = ROTL(v[2], 32);
  }
}

static void absorb(struct mendMac* m, uint64_t word) {
  m->v[3] ^= word;
  rounds(m->v, 2);
  m->v[0] ^= word;
}

void mendMacInit(struct mendMac* m, const uint8_t key[MEND_MAC_KEY_BYTES]) {
  uint64_t k0 = load64(key), k1 = load64(key + 8);
  m->v[0] = k0 ^ 0x736f6d6570736575ULL;
  m->v[1] = k1 ^ 0x646f72616e646f6dULL;
  m->v[2] = k0 ^ 0x6c7967656e657261ULL;
  m->v[3] = k1 ^ 0x7465646279746573ULL;
  m->tail = 0;
  m->len = 0;
}

void mendMacUpdate(struct mendMac* m, const void* data, size_t len) {
  const uint8_t* p = data;
  for (size_t i = 0; i < len; i++) {
    m->tail |= (uint64_t)p[i] << (8 * (m->len & 7));
    m->len++;
    if ((m->len & 7) == 0) {
      absorb(m, m->tail);
      m->tail = 0;
    }
  }
}

uint64_t mendMacFinal(struct mendMac* m) {
  absorb(m, m->tail | (m->len << 56));
  m->v[2] ^= 0xff;
  rounds(m->v, 4);
  return m->v[0] ^ m->v[1] ^ m->v[2] ^ m->v[3];
}

uint64_t mendMac(const uint8_t key[MEND_MAC_KEY_BYTES], const void* data, size_t len) {
  struct mendMac m;
  mendMacInit(&m, key);
  mendMacUpdate(&m, data, len);
  return mendMacFinal(&m);
}

void mendMacDeriveKey(const uint8_t* key, const void* data, size_t len, uint8_t out[MEND_MAC_KEY_BYTES]) {
  static const uint8_t fixed[MEND_MAC_KEY_BYTES] = "mend-derive-key";  /* public: only spreads the input */
  for (uint8_t half = 0; half < 2; half++) {
    struct mendMac m;
    mendMacInit(&m, key ? key : fixed);
    mendMacUpdate(&m, data, len);
    mendMacUpdate(&m, &half, 1);
    uint64_t v = mendMacFinal(&m);
    memcpy(out + 8 * half, &v, 8);
  }
}

int mendRandomBytes(void* buf, size_t n) {
  uint8_t* p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got == n) return 1;
  for (size_t i = got; i < n; i++) {
    uint64_t v = mendHashCombine(mendHashCombine(mendTimeNs(), (uint64_t)getpid()), i);
    p[i] = (uint8_t)(v >> 24);
  }
  return 0;
}
