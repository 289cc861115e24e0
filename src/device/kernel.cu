/*
 * The device executor: one CTA per lane (kernel.h) interprets the lane's works with the shared
 * program walker (walk.h).  Per step, thread 0 waits for the input slot to be full and the output
 * slot to be free (polling the FIFO counters with system-scope acquires, looking at the abort and
 * error flags every `abortSpins` polls), the CTA moves and reduces the data with every thread
 * (16-byte packs where the pointers allow, the element arithmetic of dtypes.h), the CTA meets at
 * a barrier, and thread 0 fences at system scope and posts the slot (bytes, then tail with a
 * release; head likewise).
 *
 * The same source is compiled twice: by nvcc into the fatbin that the library embeds, and by the
 * host C++ compiler against kernel_sync.h's shim as the kernel-cpu executor that the test suite
 * runs on machines without a GPU.
 */
#include "device/kernel.h"
#include "device/kernel_sync.h"
#include "device/opsig.h"
#include "device/walk.h"

/* What a CTA keeps in shared memory for the work it runs. */
struct KShared {
  struct mendDevWork w;                        /* the work (arguments, connectors) */
  uint64_t prog[(sizeof(struct mendProgram) + 7) / 8]; /* the program's fixed part */
  uint64_t mine[MEND_PROG_MAX_PEERS];          /* recv: our head; send: our tail */
  uint64_t seen[MEND_PROG_MAX_PEERS];          /* recv: the producer's tail; send: the consumer's head */
  char* in;                                    /* this step's received slot */
  char* out;                                   /* this step's slot to post */
  uint64_t scalar;                             /* PreMulSum scalar bytes */
  int32_t stop;                                /* 1: leave (abort or error) */
  uint32_t sigDone;                            /* bit i: the signature went or was checked on conns[i] */
};

/* Per-call constants of the element loops. */
struct KArgs {
  uint64_t scalar; /* PreMulSum scalar bytes */
  uint32_t nRanks; /* SUM_POSTDIV divisor */
  int32_t pre;     /* apply the pre-multiplication to the local operand */
  int32_t post;    /* apply the division to the result */
};

/* ---- element arithmetic per datatype (dtypes.h) ---- */

#define KOPS(Tag, Ty)                                                        \
  struct KOps##Tag {                                                         \
    typedef Ty T;                                                            \
    static KDEV_MEMBER T sum(T a, T b) { return mendSum##Tag(a, b); }        \
    static KDEV_MEMBER T prod(T a, T b) { return mendProd##Tag(a, b); }      \
    static KDEV_MEMBER T max(T a, T b) { return mendMax##Tag(a, b); }        \
    static KDEV_MEMBER T min(T a, T b) { return mendMin##Tag(a, b); }        \
    static KDEV_MEMBER T div(T a, uint32_t n) { return mendDiv##Tag(a, n); } \
  };
#if defined(__CUDACC__)
#define KDEV_MEMBER __device__ __forceinline__
#else
#define KDEV_MEMBER inline
#endif
KOPS(I8, int8_t)
KOPS(U8, uint8_t)
KOPS(I32, int32_t)
KOPS(U32, uint32_t)
KOPS(I64, int64_t)
KOPS(U64, uint64_t)
KOPS(F16, uint16_t)
KOPS(F32, float)
KOPS(F64, double)
KOPS(Bf16, uint16_t)
KOPS(E4m3, uint8_t)
KOPS(E5m2, uint8_t)

template <class O, int KIND>
KDEV typename O::T kCombine(typename O::T a, typename O::T b, const KArgs& k) {
  typedef typename O::T T;
  if (KIND == MEND_RED_SUM) return O::sum(a, b);
  if (KIND == MEND_RED_PROD) return O::prod(a, b);
  if (KIND == MEND_RED_MAX) return O::max(a, b);
  if (KIND == MEND_RED_MIN) return O::min(a, b);
  if (KIND == MEND_RED_PREMULSUM) {
    T s;
    memcpy(&s, &k.scalar, sizeof s);
    return O::sum(k.pre ? O::prod(a, s) : a, b);
  }
  T r = O::sum(a, b); /* SUM_POSTDIV */
  return k.post ? O::div(r, k.nRanks) : r;
}

/* A copy's element function: the pre-multiplication or the final division, else identity. */
template <class O, int KIND>
KDEV typename O::T kUnary(typename O::T a, const KArgs& k) {
  typedef typename O::T T;
  if (KIND == MEND_RED_PREMULSUM && k.pre) {
    T s;
    memcpy(&s, &k.scalar, sizeof s);
    return O::prod(a, s);
  }
  if (KIND == MEND_RED_SUM_POSTDIV && k.post) return O::div(a, k.nRanks);
  return a;
}

/* Packs in flight per thread: enough independent loads to cover memory latency. */
#define KUNROLL 2
#if defined(__CUDACC__)
#define KPRAGMA_UNROLL _Pragma("unroll")
#else
#define KPRAGMA_UNROLL
#endif

/* d0[i] (and d1[i]) = RED ? combine(a[i], b[i]) : unary(a[i]), for n elements, all threads; 16-byte
 * packs, KUNROLL of them loaded before any is used, where every pointer is 16-byte aligned. */
template <class O, int KIND, int RED>
KDEV void kLoop(const KGrp& g, char* d0, char* d1, const char* a, const char* b, uint64_t n, const KArgs& k) {
  typedef typename O::T T;
  const uint32_t V = 16 / sizeof(T);
  uint64_t nv = 0;
  if ((((uintptr_t)d0 | (uintptr_t)d1 | (uintptr_t)a | (uintptr_t)b) & 15) == 0) nv = n / V;
  const uint64_t stride = (uint64_t)g.n;
  for (uint64_t base = g.tid; base < nv; base += stride * KUNROLL) {
    KPack pa[KUNROLL], pb[KUNROLL];
    KPRAGMA_UNROLL
    for (int u = 0; u < KUNROLL; u++) {
      uint64_t i = base + u * stride;
      if (i < nv) pa[u] = kLoadPack(a + i * 16);
      if (RED && i < nv) pb[u] = kLoadPack(b + i * 16);
    }
    KPRAGMA_UNROLL
    for (int u = 0; u < KUNROLL; u++) {
      uint64_t i = base + u * stride;
      if (i < nv) {
        union { KPack p; T t[16 / sizeof(T)]; } xa, xb, xr;
        xa.p = pa[u];
        if (RED) xb.p = pb[u];
        KPRAGMA_UNROLL
        for (uint32_t j = 0; j < V; j++)
          xr.t[j] = RED ? kCombine<O, KIND>(xa.t[j], xb.t[j], k) : kUnary<O, KIND>(xa.t[j], k);
        if (d0) kStorePack(d0 + i * 16, xr.p);
        if (d1) kStorePack(d1 + i * 16, xr.p);
      }
    }
  }
  for (uint64_t i = nv * V + g.tid; i < n; i += g.n) {
    T x = kLoad((const T*)a + i);
    T r = RED ? kCombine<O, KIND>(x, kLoad((const T*)b + i), k) : kUnary<O, KIND>(x, k);
    if (d0) ((T*)d0)[i] = r;
    if (d1) ((T*)d1)[i] = r;
  }
}

template <class O, int RED>
KDEV void kByKind(const KGrp& g, int kind, char* d0, char* d1, const char* a, const char* b, uint64_t n, const KArgs& k) {
  switch (kind) {
    case MEND_RED_SUM: kLoop<O, MEND_RED_SUM, RED>(g, d0, d1, a, b, n, k); break;
    case MEND_RED_PROD: kLoop<O, MEND_RED_PROD, RED>(g, d0, d1, a, b, n, k); break;
    case MEND_RED_MAX: kLoop<O, MEND_RED_MAX, RED>(g, d0, d1, a, b, n, k); break;
    case MEND_RED_MIN: kLoop<O, MEND_RED_MIN, RED>(g, d0, d1, a, b, n, k); break;
    case MEND_RED_PREMULSUM: kLoop<O, MEND_RED_PREMULSUM, RED>(g, d0, d1, a, b, n, k); break;
    default: kLoop<O, MEND_RED_SUM_POSTDIV, RED>(g, d0, d1, a, b, n, k); break;
  }
}

template <int RED>
KDEV void kTyped(const KGrp& g, int type, int kind, char* d0, char* d1, const char* a, const char* b, uint64_t n, const KArgs& k) {
  switch (type) {
    case ncclInt8: kByKind<KOpsI8, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclUint8: kByKind<KOpsU8, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclInt32: kByKind<KOpsI32, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclUint32: kByKind<KOpsU32, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclInt64: kByKind<KOpsI64, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclUint64: kByKind<KOpsU64, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclFloat16: kByKind<KOpsF16, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclFloat32: kByKind<KOpsF32, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclFloat64: kByKind<KOpsF64, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclBfloat16: kByKind<KOpsBf16, RED>(g, kind, d0, d1, a, b, n, k); break;
    case ncclFloat8e4m3: kByKind<KOpsE4m3, RED>(g, kind, d0, d1, a, b, n, k); break;
    default: kByKind<KOpsE5m2, RED>(g, kind, d0, d1, a, b, n, k); break;
  }
}

/* Plain byte copy to one or two destinations (no element function applies). */
KDEV void kCopyBytes(const KGrp& g, char* d0, char* d1, const char* a, uint64_t bytes) {
  uint64_t nv = 0;
  if ((((uintptr_t)d0 | (uintptr_t)d1 | (uintptr_t)a) & 15) == 0) nv = bytes / 16;
  const uint64_t stride = (uint64_t)g.n;
  for (uint64_t base = g.tid; base < nv; base += stride * KUNROLL) {
    KPack p[KUNROLL];
    KPRAGMA_UNROLL
    for (int u = 0; u < KUNROLL; u++)
      if (base + u * stride < nv) p[u] = kLoadPack(a + (base + u * stride) * 16);
    KPRAGMA_UNROLL
    for (int u = 0; u < KUNROLL; u++) {
      uint64_t i = base + u * stride;
      if (i < nv && d0) kStorePack(d0 + i * 16, p[u]);
      if (i < nv && d1) kStorePack(d1 + i * 16, p[u]);
    }
  }
  for (uint64_t i = nv * 16 + g.tid; i < bytes; i += g.n) {
    char c = kLoad(a + i);
    if (d0) d0[i] = c;
    if (d1) d1[i] = c;
  }
}

/* ---- one step ---- */

/* The data movement of a step whose slots are ready (the host engine's moveData, fused: a result
 * goes to dst and to the output slot in one pass). */
KDEV void kMove(const KGrp& g, const KShared* sh, const struct mendWalk* wk, const struct mendProgStep* s, int seg, uint64_t n) {
  const struct mendDevWork* w = &sh->w;
  const struct mendProgram* p = (const struct mendProgram*)sh->prog;
  const int32_t* segMap = p->nSegMap ? w->prog->segMap : NULL;
  char* src = s->src != MEND_BUF_NONE ? mendWalkBufAt(wk, p, segMap, &w->args, s->src, seg) : NULL;
  char* dst = (s->op & MEND_STEP_COPY) ? mendWalkBufAt(wk, p, segMap, &w->args, s->dst, seg) : NULL;
  char* in = (s->op & MEND_STEP_RECV) ? sh->in : NULL;
  char* out = (s->op & MEND_STEP_SEND) ? sh->out : NULL;
  const struct mendRedOp* op = &w->args.redop;
  KArgs k = {sh->scalar, (uint32_t)op->nRanks, (s->flags & MEND_STEP_PREOP) != 0, (s->flags & MEND_STEP_POSTOP) != 0};
  if (s->op & MEND_STEP_REDUCE) {
    kTyped<1>(g, op->type, op->kind, dst ? dst : out, dst ? out : NULL, src, in, n, k);
    return;
  }
  const char* from = in ? in : src;
  int fn = (op->kind == MEND_RED_PREMULSUM && k.pre) || (op->kind == MEND_RED_SUM_POSTDIV && k.post);
  char* d0 = (dst && (dst != from || fn)) ? dst : NULL;
  if (!d0 && !out) return;
  if (fn) kTyped<0>(g, op->type, op->kind, d0, out, from, NULL, n, k);
  else kCopyBytes(g, d0, out, from, n * w->args.typeSize);
}

/* First error of the communicator wins; the others only stop. */
KDEV void kFail(const struct mendDevLaunch* L, KShared* sh, int32_t code, uint32_t lane, uint32_t work, int32_t peer,
                uint64_t want, uint64_t got) {
  struct mendDevState* st = L->state;
  if (kCas32(&st->error, 0, code) == 0) {
    st->errLane = (int32_t)lane;
    st->errWork = (int32_t)work;
    st->errPeer = peer;
    st->errWant = want;
    st->errGot = got;
    kFenceSys();
  }
  kRunStop();
  sh->stop = 1;
}

/* The first slot of a work from c (opsig.h) must end with our signature; else the ranks run different
 * operations: record both signatures and fail.  1 when it matches. */
KDEV int kSigCheck(const struct mendDevLaunch* L, KShared* sh, const struct mendDevConn* c, const char* in,
                   uint64_t got, uint32_t lane, uint32_t work) {
  int64_t off = mendOpSigOffset(got, c->slotBytes);
  union mendOpSigWords mine, theirs;
  mine.s = sh->w.args.sig;
  for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) theirs.w[i] = off >= 0 ? kLoadVol64((const uint64_t*)(in + off) + i) : 0;
  if (off >= 0 && mendOpSigSame(&mine.s, &theirs.s)) return 1;
  struct mendDevState* st = L->state;
  if (kCas32(&st->error, 0, ncclInvalidUsage) == 0) {
    for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) {
      st->errSigMine[i] = mine.w[i];
      st->errSigPeer[i] = theirs.w[i];
    }
    st->errSig = 1;
    st->errChannel = sh->w.channel;
    st->errLane = (int32_t)lane;
    st->errWork = (int32_t)work;
    st->errPeer = c->peer;
    st->errGot = got;
    kFenceSys();
  }
  kRunStop();
  sh->stop = 1;
  return 0;
}

KDEV int kStopped(const struct mendDevLaunch* L) {
  return kLoadVol32(&L->state->abortFlag) != 0 || kLoadVol32(&L->state->error) != 0 || kRunStopped();
}

/* Thread 0: wait until step s can run; sets sh->in/out, or sh->stop. */
KDEV void kWaitSlots(const struct mendDevLaunch* L, KShared* sh, const struct mendProgStep* s, uint64_t bytes,
                     uint32_t lane, uint32_t work) {
  uint32_t spins = 0, every = L->abortSpins ? L->abortSpins : 1;
  if (s->op & MEND_STEP_RECV) {
    const struct mendDevConn* c = sh->w.conns + s->recvPeer;
    int first = sh->w.args.sig.magic != 0 && !(sh->sigDone >> s->recvPeer & 1);
    for (;;) {
      uint64_t head = sh->mine[s->recvPeer];
      while (sh->seen[s->recvPeer] <= head) {
        sh->seen[s->recvPeer] = kLoadAcq(&c->fifo->tail);
        if (sh->seen[s->recvPeer] > head) break;
        if (++spins % every == 0 && kStopped(L)) { sh->stop = 1; return; }
        kPause();
      }
      uint32_t slot = (uint32_t)(head % (uint64_t)c->nSlots);
      uint64_t got = kLoadVol64(&c->fifo->bytes[slot]), want = bytes;
      char* in = c->buff + (uint64_t)slot * c->slotBytes;
      if (first) {
        if (!kSigCheck(L, sh, c, in, got, lane, work)) return;
        want = mendOpSigFramed(bytes, c->slotBytes);
        if (want == 0) { /* the signature came alone: take it, then wait for the data */
          if (got != MEND_OPSIG_BYTES) {
            kFail(L, sh, ncclInvalidUsage, lane, work, c->peer, MEND_OPSIG_BYTES, got);
            return;
          }
          sh->sigDone |= 1u << s->recvPeer;
          kStoreRel(&c->fifo->head, ++sh->mine[s->recvPeer]);
          first = 0;
          continue;
        }
      }
      if (got != want) {
        kFail(L, sh, ncclInvalidUsage, lane, work, c->peer, want, got);
        return;
      }
      sh->in = in;
      break;
    }
  }
  if (s->op & MEND_STEP_SEND) {
    const struct mendDevConn* c = sh->w.conns + s->sendPeer;
    int alone = sh->w.args.sig.magic != 0 && !(sh->sigDone >> s->sendPeer & 1) &&
                mendOpSigFramed(bytes, c->slotBytes) == 0;
    for (;;) {
      uint64_t tail = sh->mine[s->sendPeer];
      while (tail - sh->seen[s->sendPeer] >= (uint64_t)c->nSlots) {
        sh->seen[s->sendPeer] = kLoadAcq(&c->fifo->head);
        if (tail - sh->seen[s->sendPeer] < (uint64_t)c->nSlots) break;
        if (++spins % every == 0 && kStopped(L)) { sh->stop = 1; return; }
        kPause();
      }
      char* out = c->buff + (tail % (uint64_t)c->nSlots) * c->slotBytes;
      if (alone) { /* a full first slot: the signature goes alone, in a slot before the data */
        union mendOpSigWords sig;
        sig.s = sh->w.args.sig;
        for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++) kStoreVol64((uint64_t*)out + i, sig.w[i]);
        kStoreVol64(&c->fifo->bytes[tail % (uint64_t)c->nSlots], MEND_OPSIG_BYTES);
        kStoreRel(&c->fifo->tail, tail + 1);
        sh->mine[s->sendPeer] = tail + 1;
        sh->sigDone |= 1u << s->sendPeer;
        alone = 0;
        continue;
      }
      sh->out = out;
      break;
    }
  }
}

/* Thread 0: post the step's slots (bytes before tail; head after the data was read). */
KDEV void kPost(KShared* sh, const struct mendProgStep* s, uint64_t bytes) {
  if (s->op & MEND_STEP_SEND) {
    const struct mendDevConn* c = sh->w.conns + s->sendPeer;
    uint64_t tail = sh->mine[s->sendPeer], posted = bytes;
    if (sh->w.args.sig.magic != 0 && !(sh->sigDone >> s->sendPeer & 1)) { /* the signature behind the data */
      union mendOpSigWords sig;
      sig.s = sh->w.args.sig;
      posted = mendOpSigFramed(bytes, c->slotBytes);
      for (int i = 0; i < MEND_OPSIG_BYTES / 8; i++)
        kStoreVol64((uint64_t*)(sh->out + posted - MEND_OPSIG_BYTES) + i, sig.w[i]);
      sh->sigDone |= 1u << s->sendPeer;
    }
    kStoreVol64(&c->fifo->bytes[tail % (uint64_t)c->nSlots], posted);
    kStoreRel(&c->fifo->tail, tail + 1);
    sh->mine[s->sendPeer] = tail + 1;
  }
  if (s->op & MEND_STEP_RECV) {
    const struct mendDevConn* c = sh->w.conns + s->recvPeer;
    sh->sigDone |= 1u << s->recvPeer;
    kStoreRel(&c->fifo->head, ++sh->mine[s->recvPeer]);
  }
}

/* ---- a work, a lane ---- */

/* Load work `wi` into shared memory (every thread), then thread 0 reads the connectors' counters. */
KDEV void kLoadWork(const KGrp& g, const struct mendDevLaunch* L, KShared* sh, uint32_t wi) {
  const uint64_t* from = (const uint64_t*)(L->works + wi);
  uint64_t* to = (uint64_t*)&sh->w;
  for (uint32_t i = g.tid; i < sizeof(struct mendDevWork) / 8; i += g.n) to[i] = from[i];
  kSync(g);
  const uint64_t* prog = (const uint64_t*)sh->w.prog;
  for (uint32_t i = g.tid; i < sizeof(sh->prog) / 8; i += g.n) sh->prog[i] = prog[i];
  kSync(g);
  if (g.tid == 0) {
    const struct mendProgram* p = (const struct mendProgram*)sh->prog;
    for (int i = 0; i < p->nPeers; i++) {
      const struct mendDevConn* c = sh->w.conns + i;
      int recv = p->peers[i].dir == 1; /* MEND_RECV */
      sh->mine[i] = kLoadAcq(recv ? &c->fifo->head : &c->fifo->tail);
      sh->seen[i] = kLoadAcq(recv ? &c->fifo->tail : &c->fifo->head);
    }
    const struct mendRedOp* op = &sh->w.args.redop;
    sh->scalar = op->scalar;
    if (op->kind == MEND_RED_PREMULSUM && op->scalarPtr) {
      sh->scalar = 0;
      for (uint32_t b = 0; b < sh->w.args.typeSize && b < 8; b++)
        ((char*)&sh->scalar)[b] = ((const char*)op->scalarPtr)[b];
    }
    sh->stop = 0;
    sh->sigDone = 0;
  }
  kSync(g);
}

KDEV void kRunLane(const KGrp& g, const struct mendDevLaunch* L, uint32_t lane, KShared* sh) {
  for (uint32_t wi = L->laneStart[lane]; wi < L->laneStart[lane + 1]; wi++) {
    kLoadWork(g, L, sh, wi);
    const struct mendProgram* p = (const struct mendProgram*)sh->prog;
    struct mendWalk wk;
    mendWalkBegin(&wk, p, &sh->w.args);
    while (!wk.done) {
      const struct mendProgStep* s = p->steps + wk.step;
      int seg = mendWalkSeg(&wk, p);
      uint64_t n = mendWalkSegLen(&wk, p, &sh->w.args, seg);
      if (n) {
        uint64_t bytes = n * sh->w.args.typeSize;
        if (g.tid == 0) kWaitSlots(L, sh, s, bytes, lane, wi);
        kSync(g);
        if (sh->stop) return;
        kMove(g, sh, &wk, s, seg, n);
        kSync(g); /* every thread's writes are ordered before thread 0's fence (cumulative) */
        if (g.tid == 0) {
          kFenceSys();
          kPost(sh, s, bytes);
        }
      }
      mendWalkAdvance(&wk, p, &sh->w.args);
    }
    kSync(g); /* thread 0's last post is done before the next work overwrites shared memory */
  }
}

#if defined(__CUDACC__)

extern "C" __global__ void __launch_bounds__(MEND_KERNEL_MAX_THREADS, 1) mendKernel(struct mendDevLaunch launch) {
  __shared__ KShared sh[MEND_KERNEL_MAX_GROUPS];
  uint32_t per = launch.lanesPerCta ? launch.lanesPerCta : 1, n = blockDim.x / per / 32 * 32;
  uint32_t grp = threadIdx.x / n, lane = blockIdx.x * per + grp;
  if (grp >= per || lane >= launch.nLanes) return; /* spare warps: no barrier names them */
  KGrp g = {threadIdx.x % n, n, grp + 1};
  kRunLane(g, &launch, lane, sh + grp);
}

#else /* ---- the kernel-cpu executor ---- */

#include <pthread.h>
#include <stdlib.h>
#include <ucontext.h>

/* Sanitizers lose track of a stack switched under them (ASan's fake stacks, TSan's per-thread
 * state): their builds run every CTA thread as an OS thread. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define K_CPU_FIBERS 0
#else
#define K_CPU_FIBERS 1
#endif
#define K_FIBER_STACK (256u << 10)

/* A fiber's saved context and the switch between two.  x86-64: the callee-saved registers pushed
 * on the fiber's own stack and its stack pointer kept (swapcontext also saves and restores the
 * signal mask, a system call each way: 38 % of the cycles of a kernel-cpu run); elsewhere
 * ucontext. */
#if defined(__x86_64__)
typedef void* KCtx;
extern "C" void mendKCtxSwitch(KCtx* from, KCtx to);
__asm__(".text\n"
        ".globl mendKCtxSwitch\n"
        ".hidden mendKCtxSwitch\n"
        ".type mendKCtxSwitch,@function\n"
        "mendKCtxSwitch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size mendKCtxSwitch,.-mendKCtxSwitch\n");
#define K_SWITCH(from, to) mendKCtxSwitch((from), *(to))
#else
typedef ucontext_t KCtx;
#define K_SWITCH(from, to) swapcontext((from), (to))
#endif

__thread uint32_t kTidTls;
__thread struct kCta* kCtaTls;

struct kWorker;

/* One CTA thread: an OS thread of its own, or a fiber that a worker runs. */
struct kCpuThread {
  const struct mendDevLaunch* launch; /* what to run */
  struct kCta* cta;                   /* its CTA */
  uint32_t lane, tid;                 /* which lane, which thread of the CTA */
  pthread_t thread;                   /* the host thread (no workers) */
  int started;                        /* must be joined */
  KCtx ctx;                           /* the fiber (workers) */
  char* stack;                        /* its stack */
  int done;                           /* the fiber returned */
};

/* An OS thread that runs fibers in turn; a fiber runs until it waits (a barrier, a FIFO poll) and
 * then yields to the next, so a waiting CTA thread costs one context switch, not a time slice. */
struct kWorker {
  struct kCpuThread** fibers; /* its fibers: whole CTAs, so barrier partners share the worker */
  uint32_t n;                 /* how many */
  KCtx home;                  /* the worker's own context, where fibers yield to */
  pthread_t thread;           /* the OS thread */
  int started;                /* must be joined */
  volatile int32_t* gate;     /* 0 until every worker exists; 1: run; -1: leave at once */
};

static __thread struct kWorker* kWorkerTls;    /* NULL on an OS thread per CTA thread */
static __thread struct kCpuThread* kFiberTls;  /* the fiber the worker runs */

void kCpuYield(void) {
  struct kWorker* w = kWorkerTls;
  if (w == NULL) {
    sched_yield();
    return;
  }
  K_SWITCH(&kFiberTls->ctx, &w->home);
}

static void kCpuRunThread(struct kCpuThread* t) {
  kTidTls = t->tid;
  kCtaTls = t->cta;
  int32_t gate;
  while ((gate = kLoadVol32(&t->cta->gate)) == 0) kCpuYield();
  if (gate < 0) return; /* a sibling thread could not be started: the CTA cannot run */
  KGrp g = {t->tid, t->cta->nThreads, 0};
  kRunLane(g, t->launch, t->lane, (KShared*)t->cta->shared);
}

static void* kCpuMain(void* arg) {
  kCpuRunThread((struct kCpuThread*)arg);
  return NULL;
}

/* A fiber's first instructions; it never returns: its last switch leaves it for good. */
static void kFiberMain(void) {
  struct kCpuThread* t = kFiberTls;
  kCpuRunThread(t);
  t->done = 1;
  K_SWITCH(&t->ctx, &kWorkerTls->home);
  abort(); /* never resumed */
}

static void* kWorkerMain(void* arg) {
  struct kWorker* w = (struct kWorker*)arg;
  int32_t gate;
  while ((gate = kLoadVol32(w->gate)) == 0) sched_yield();
  if (gate < 0) return NULL; /* another worker could not be made: no fiber runs */
  kWorkerTls = w;
  for (uint32_t left = w->n; left > 0;) {
    for (uint32_t i = 0; i < w->n; i++) {
      struct kCpuThread* t = w->fibers[i];
      if (t->done) continue;
      kFiberTls = t;
      kTidTls = t->tid; /* the fiber's place, read again after every yield */
      kCtaTls = t->cta;
      K_SWITCH(&w->home, &t->ctx);
      left -= t->done;
    }
    sched_yield(); /* a round where every fiber waits must not hold a CPU that another worker needs */
  }
  kWorkerTls = NULL;
  return NULL;
}

/* CTA l of launch L and its nt threads, before they run. */
static void kCtaSetup(const struct mendDevLaunch* L, uint32_t lane, struct kCta* cta, KShared* shared,
                      struct kCpuThread* th, uint32_t nt, volatile int32_t* runStop) {
  cta->nThreads = nt;
  cta->runStop = runStop;
  cta->shared = shared;
  for (uint32_t i = 0; i < nt; i++) {
    th[i].launch = L;
    th[i].cta = cta;
    th[i].lane = lane;
    th[i].tid = i;
  }
}

/* Start every thread of CTA l of launch L; a CTA missing a thread would wait forever at its
 * barrier, so it does not run, and the error stops the lanes that wait on it. */
static void kCpuStartCta(const struct mendDevLaunch* L, uint32_t lane, struct kCta* cta, KShared* shared,
                         struct kCpuThread* th, uint32_t nt, volatile int32_t* runStop) {
  kCtaSetup(L, lane, cta, shared, th, nt, runStop);
  for (uint32_t i = 0; i < nt; i++) {
    struct kCpuThread* t = th + i;
    t->started = pthread_create(&t->thread, NULL, kCpuMain, t) == 0;
    if (!t->started) cta->gate = -1;
  }
  if (cta->gate < 0) {
    kCas32(&L->state->error, 0, ncclSystemError);
    __atomic_store_n(runStop, 1, __ATOMIC_RELEASE);
  }
  else __atomic_store_n(&cta->gate, 1, __ATOMIC_RELEASE);
}

/* Make t a fiber of worker w (getcontext returns twice: kept apart from any loop). */
static __attribute__((noinline)) int kMakeFiber(struct kCpuThread* t, struct kWorker* w) {
  t->stack = (char*)malloc(K_FIBER_STACK);
  if (t->stack == NULL) return 0;
#if defined(__x86_64__)
  /* What mendKCtxSwitch pops: six registers, then kFiberMain as the return address, in a slot
   * 16-byte aligned, so kFiberMain starts as if called (stack pointer 8 mod 16). */
  void** sp = (void**)(((uintptr_t)t->stack + K_FIBER_STACK) & ~(uintptr_t)15);
  *--sp = NULL;
  *--sp = (void*)kFiberMain;
  for (int i = 0; i < 6; i++) *--sp = NULL;
  t->ctx = sp;
#else
  if (getcontext(&t->ctx) != 0) return 0;
  t->ctx.uc_stack.ss_sp = t->stack;
  t->ctx.uc_stack.ss_size = K_FIBER_STACK;
  t->ctx.uc_link = NULL; /* kFiberMain never returns */
  makecontext(&t->ctx, kFiberMain, 0);
#endif
  w->fibers[w->n++] = t;
  return 1;
}

/* Make CTA l's threads fibers of worker w (all of a CTA on one worker); 0 when memory ran out. */
static int kFiberCta(const struct mendDevLaunch* L, uint32_t lane, struct kCta* cta, KShared* shared,
                     struct kCpuThread* th, uint32_t nt, volatile int32_t* runStop, struct kWorker* w) {
  kCtaSetup(L, lane, cta, shared, th, nt, runStop);
  cta->gate = 1;
  for (uint32_t i = 0; i < nt; i++)
    if (!kMakeFiber(th + i, w)) return 0;
  return 1;
}

/* Every CTA thread as a fiber of nw workers; 0 (no fiber ran) when something could not be made. */
static int kCpuRunFibers(const struct mendDevLaunch* launches, int n, struct kCta* ctas, KShared* shared,
                         struct kCpuThread* th, uint32_t nl, uint32_t nt, uint32_t nw, volatile int32_t* runStop) {
  struct kWorker* w = (struct kWorker*)calloc(nw, sizeof(struct kWorker));
  struct kCpuThread** slots = (struct kCpuThread**)calloc((size_t)nl * nt + 1, sizeof(struct kCpuThread*));
  int ok = w != NULL && slots != NULL;
  for (uint32_t i = 0, at = 0; ok && i < nw; i++) { /* worker i takes CTAs i, i + nw, ... */
    w[i].fibers = slots + at;
    at += ((nl - i + nw - 1) / nw) * nt;
  }
  uint32_t c = 0;
  for (int i = 0; ok && i < n; i++)
    for (uint32_t l = 0; ok && l < launches[i].nLanes; l++, c++)
      ok = kFiberCta(launches + i, l, ctas + c, shared + c, th + (size_t)c * nt, nt, runStop, w + c % nw);
  volatile int32_t gate = 0;
  for (uint32_t i = 0; ok && i < nw; i++) {
    w[i].gate = &gate;
    w[i].started = pthread_create(&w[i].thread, NULL, kWorkerMain, w + i) == 0;
    ok = w[i].started;
  }
  __atomic_store_n(&gate, ok ? 1 : -1, __ATOMIC_RELEASE);
  for (uint32_t i = 0; w && i < nw; i++)
    if (w[i].started) pthread_join(w[i].thread, NULL);
  for (size_t i = 0; i < (size_t)nl * nt; i++) free(th[i].stack);
  free(slots);
  free(w);
  return ok;
}

extern "C" void mendKernelCpuRun(const struct mendDevLaunch* launches, int n, int threadsPerCta, int workers) {
  uint32_t nt = threadsPerCta > 0 ? (uint32_t)threadsPerCta : 1, nl = 0;
  for (int i = 0; i < n; i++) nl += launches[i].nLanes;
  struct kCta* ctas = (struct kCta*)calloc(nl + 1, sizeof(struct kCta));
  KShared* shared = (KShared*)calloc(nl + 1, sizeof(KShared));
  struct kCpuThread* th = (struct kCpuThread*)calloc((size_t)nl * nt + 1, sizeof(struct kCpuThread));
  volatile int32_t runStop = 0;
  if (workers < 0) { /* automatic: the CPUs this process may run on */
    cpu_set_t set;
    workers = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 2;
  }
  uint32_t nw = workers > 0 && K_CPU_FIBERS ? (uint32_t)workers : 0;
  if (nw > nl) nw = nl;
  if (!ctas || !shared || !th || (nw > 0 && !kCpuRunFibers(launches, n, ctas, shared, th, nl, nt, nw, &runStop))) {
    for (int i = 0; i < n; i++) kCas32(&launches[i].state->error, 0, ncclSystemError); /* nothing ran */
  } else if (nw == 0) {
    uint32_t c = 0;
    for (int i = 0; i < n; i++)
      for (uint32_t l = 0; l < launches[i].nLanes; l++, c++)
        kCpuStartCta(launches + i, l, ctas + c, shared + c, th + (size_t)c * nt, nt, &runStop);
    for (size_t i = 0; i < (size_t)nl * nt; i++)
      if (th[i].started) pthread_join(th[i].thread, NULL);
  }
  free(th);
  free(shared);
  free(ctas);
}

#endif
