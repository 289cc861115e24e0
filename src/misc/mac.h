/*
 * Keyed hashing for proving a shared secret on the wire without sending it: SipHash-2-4 (a 64-bit
 * pseudo-random function of a 128-bit key, Aumasson and Bernstein 2012), incremental, plus key
 * derivation and random bytes.  Used by the bootstrap to authenticate connections against the job
 * secret carried in the unique id (docs/bootstrap.md).
 */
#ifndef MEND_MISC_MAC_H_
#define MEND_MISC_MAC_H_

#include <stddef.h>
#include <stdint.h>

#define MEND_MAC_KEY_BYTES 16  /* SipHash key */

/* An incremental MAC computation. */
struct mendMac {
  uint64_t v[4];   /* SipHash state */
  uint64_t tail;   /* bytes not yet absorbed (little-endian, up to 7) */
  uint64_t len;    /* bytes absorbed so far */
};

void mendMacInit(struct mendMac* m, const uint8_t key[MEND_MAC_KEY_BYTES]);
void mendMacUpdate(struct mendMac* m, const void* data, size_t len);
uint64_t mendMacFinal(struct mendMac* m);
/* One-shot MAC of `len` bytes. */
uint64_t mendMac(const uint8_t key[MEND_MAC_KEY_BYTES], const void* data, size_t len);
/* A new key from `key` (NULL: a fixed public key) and `len` bytes of context: two MACs of the context
 * with different final bytes.  With key NULL this maps a passphrase to a key (it is as strong as the
 * passphrase). */
void mendMacDeriveKey(const uint8_t* key, const void* data, size_t len, uint8_t out[MEND_MAC_KEY_BYTES]);
/* `n` random bytes from the kernel (getrandom); falls back to a time/pid hash, returns 0 then. */
int mendRandomBytes(void* buf, size_t n);

#endif
