/*
 * Walking a program: where each step's segment lies and how a work moves from one repetition,
 * step, loop iteration and phase to the next.  One header, compiled into every executor (the host
 * engine in C, the CUDA kernel under nvcc as __host__ __device__, and the same kernel source built
 * for the CPU), so the schedule the tests check on the host is the one the GPU runs.
 * Program semantics are in enqueue/program.h; a walk reads only the program and the work's
 * arguments, and all ranks compute the same segment lengths.
 */
#ifndef MEND_DEVICE_WALK_H_
#define MEND_DEVICE_WALK_H_

#include <stddef.h>
#include <stdint.h>

#include "device/dtypes.h" /* MEND_HD */
#include "device/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

MEND_HD void mendWalkLoopBegin(struct mendWalk* w, const struct mendProgram* p, const struct mendWorkArgs* a) {
  const struct mendProgPhase* ph = p->phases + w->phase;
  uint64_t left = a->count - w->loopBase, chunk = a->chunkElems;
  uint64_t per = ph->layout == MEND_LAYOUT_CHUNKED
                     ? mendAlignUp(mendDivUp(left, ph->loopSegs), a->alignElems) : left;
  w->eff = per < chunk ? per : chunk;
}

/* Start a work; a work with nothing to do is done at once. */
MEND_HD void mendWalkBegin(struct mendWalk* w, const struct mendProgram* p, const struct mendWorkArgs* a) {
  w->phase = 0;
  w->rep = 0;
  w->loopBase = 0;
  w->eff = 0;
  w->done = a->count == 0 || p->nPhases == 0;
  w->step = w->done ? 0 : p->phases[0].firstStep;
  if (!w->done) mendWalkLoopBegin(w, p, a);
}

/* Segment of the current repetition of the current step. */
MEND_HD int mendWalkSeg(const struct mendWalk* w, const struct mendProgram* p) {
  const struct mendProgStep* s = p->steps + w->step;
  int64_t segs = p->phases[w->phase].loopSegs;
  return (int)(((int64_t)s->seg + (int64_t)w->rep * s->segDelta) % segs);
}

/* Elements of segment `seg` in the current loop iteration (0: every rank skips it). */
MEND_HD uint64_t mendWalkSegLen(const struct mendWalk* w, const struct mendProgram* p, const struct mendWorkArgs* a,
                                int seg) {
  uint64_t left = a->count - w->loopBase;
  if (p->phases[w->phase].layout == MEND_LAYOUT_BLOCKED) return w->eff;
  uint64_t start = (uint64_t)seg * w->eff;
  if (start >= left) return 0;
  return left - start < w->eff ? left - start : w->eff;
}

/* Address of segment `seg` in buffer `buf` (enum mendBufId).  segMap: the program's segment map
 * (NULL: identity); passed apart because an executor may keep the program's fixed part elsewhere. */
MEND_HD char* mendWalkBufAt(const struct mendWalk* w, const struct mendProgram* p, const int32_t* segMap,
                            const struct mendWorkArgs* a, int buf, int seg) {
  uint64_t el = a->offset + w->loopBase;
  if (p->phases[w->phase].layout == MEND_LAYOUT_CHUNKED) {
    el += (uint64_t)seg * w->eff;
  } else {
    uint64_t block = segMap ? (uint64_t)segMap[seg] : (uint64_t)seg;
    el += block * a->blockStride[buf];
  }
  return (char*)a->buf[buf] + el * a->typeSize;
}

/* Move to the next repetition / step / loop iteration / phase; sets done at the end. */
MEND_HD void mendWalkAdvance(struct mendWalk* w, const struct mendProgram* p, const struct mendWorkArgs* a) {
  if (++w->rep < p->steps[w->step].repeat) return;
  w->rep = 0;
  const struct mendProgPhase* ph = p->phases + w->phase;
  if (++w->step < ph->firstStep + ph->nSteps) return;
  w->loopBase += ph->layout == MEND_LAYOUT_CHUNKED ? w->eff * ph->loopSegs : w->eff;
  if (w->loopBase >= a->count) {
    w->loopBase = 0;
    if (++w->phase == p->nPhases) {
      w->done = 1;
      return;
    }
  }
  w->step = p->phases[w->phase].firstStep;
  mendWalkLoopBegin(w, p, a);
}

#ifdef __cplusplus
}
#endif

#endif
