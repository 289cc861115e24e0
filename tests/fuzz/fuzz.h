/*
 * Shared by the fuzz targets (libFuzzer, see README.md): reading an input as a sequence of fields,
 * and writing seeds.  A target defines LLVMFuzzerTestOneInput and fuzzSeeds(); run.sh sets
 * MEND_FUZZ_SEED_DIR and the target's LLVMFuzzerInitialize (FUZZ_SEEDS below) writes its seeds there
 * before libFuzzer reads the corpus, so seeds always match the structs of this build.
 */
#ifndef MEND_TESTS_FUZZ_H_
#define MEND_TESTS_FUZZ_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An input being consumed front to back. */
struct fuzzIn {
  const uint8_t* p;  /* next byte */
  size_t left;       /* bytes left */
};

/* The next n bytes (NULL when fewer are left: the input ends there). */
static inline const uint8_t* fuzzTake(struct fuzzIn* in, size_t n) {
  if (in->left < n) return NULL;
  const uint8_t* p = in->p;
  in->p += n;
  in->left -= n;
  return p;
}

/* The next byte, or 0 when the input is exhausted. */
static inline uint8_t fuzzByte(struct fuzzIn* in) {
  const uint8_t* p = fuzzTake(in, 1);
  return p ? *p : 0;
}

/* Seed writing: one file per call in MEND_FUZZ_SEED_DIR, named <dir>/seed-<n>. */
struct fuzzSeeds {
  const char* dir;  /* target directory */
  int n;            /* seeds written */
};

static inline void fuzzSeedWrite(struct fuzzSeeds* s, const void* data, size_t len) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/seed-%03d", s->dir, s->n++);
  FILE* f = fopen(path, "wb");
  if (f == NULL) {
    fprintf(stderr, "fuzz: cannot write %s\n", path);
    exit(1);
  }
  if (len > 0 && fwrite(data, 1, len, f) != len) {
    fprintf(stderr, "fuzz: short write to %s\n", path);
    exit(1);
  }
  fclose(f);
}

/* A growing seed: fields appended in order. */
struct fuzzBuf {
  uint8_t data[8192];  /* bytes */
  size_t len;          /* used */
};

static inline void fuzzPut(struct fuzzBuf* b, const void* p, size_t n) {
  if (b->len + n > sizeof(b->data)) {
    fprintf(stderr, "fuzz: seed larger than %zu bytes\n", sizeof(b->data));
    exit(1);
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

static inline void fuzzPutByte(struct fuzzBuf* b, uint8_t v) { fuzzPut(b, &v, 1); }

/* Each target defines this: write its seeds. */
void fuzzSeeds(struct fuzzSeeds* s);

int LLVMFuzzerInitialize(int* argc, char*** argv);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#define FUZZ_SEEDS                                               \
  int LLVMFuzzerInitialize(int* argc, char*** argv) {            \
    (void)argc;                                                  \
    (void)argv;                                                  \
    const char* dir = getenv("MEND_FUZZ_SEED_DIR");              \
    if (dir && *dir) {                                           \
      struct fuzzSeeds s = {.dir = dir, .n = 0};                 \
      fuzzSeeds(&s);                                             \
    }                                                            \
    return 0;                                                    \
  }

#endif
