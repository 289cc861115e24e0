/*
 * mend-sim: a collective's time on a rail-optimised cluster, simulated by SimGrid from the programs
 * Mend's planner emits for every rank (plan_offline.h), interpreted step by step with the
 * executors' own walker (device/walk.h): every step that receives waits for its segment from the
 * peer, every step that sends posts its segment (asynchronously, as a FIFO slot) to the next one; a
 * segment's bytes travel over the sender's NIC, the rail, and the receiver's NIC.
 *
 *   mend-sim --topo FILE [-e LINE]... [--bytes N] [--replan MODE] [--latency-us L] [--goodput F]
 *            [--shm-gbps R]
 *
 * Platform (sim/README.md): per server and NIC a host and two links (up, down; line rate x goodput,
 * latency L); NIC d of one server reaches NIC d of another through rail d's leaf (non-blocking:
 * no link of its own), other NICs through a spine link; NICs of one server reach each other
 * through the server's shared-memory link.
 *
 * NICs per hop: a connector's bytes use the NIC of its own hop.  A hop from rank a to rank b on
 * channel c between servers uses device d = mendReplanHopNic(c, a, b) at both ends (the rail
 * re-planning models; the resilient net pairs NIC i with NIC i): the sending work moves (actor
 * migration, no simulated time) to host h<server(a)>_<d> before it posts the segment, whose route
 * is fixed when it starts; the segment goes to the connector's receiver, an actor on
 * h<server(b)>_<d> that takes it and tells the receiving work through a semaphore (no bytes, no
 * link).  A hop within a server, or one with no NIC (d < 0), uses the work's home host: the NIC of
 * its first inter-server hop (the shared-memory link between two works of a server).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/barrier.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>
#include <simgrid/semaphore.h>

#include "device/reduce.h"
#include "device/walk.h"
#include "enqueue/plan_offline.h"
#include "misc/param.h"
#include "topo_file.h"
#include "transport/transport.h"

#define SIM_SLOT_BYTES (4194304 / 8) /* NCCL_BUFFSIZE / FIFO slots: the chunk a connector carries */
#define SIM_MAX_HOSTS 4096           /* explicit routes grow as hosts^2 */

struct simOpts {
  struct mendOfflineTopo topo;
  size_t bytes;      /* AllReduce size */
  double latencyUs;  /* per NIC link */
  double goodput;    /* share of the line rate TCP payload gets (1448/1514 on the testbed) */
  double shmGbps;    /* a server's shared-memory link */
};

struct simWork {
  struct mendProgram* prog; /* copied from the plan */
  struct mendWorkArgs args; /* window and chunk (fitted to a slot as mendPlanResolve does) */
  int rank, channel;
  sg_host_t home;                        /* the NIC of its first inter-server hop (workNic) */
  sg_host_t hop[MEND_PROG_MAX_PEERS];    /* per connector: the host of its hop's NIC at this rank */
  int nRecv[MEND_PROG_MAX_PEERS];        /* per receive connector: segments it carries */
  sg_sem_t arrived[MEND_PROG_MAX_PEERS]; /* per receive connector: segments its receiver took */
};

static struct simWork* works;
static int nWorks;
static sg_bar_t ready; /* every receiver and work: no segment is posted before every receiver listens */

static int usage(const char* why) {
  fprintf(stderr, "mend-sim: %s\nusage: mend-sim --topo FILE [-e LINE]... [--bytes N] [--replan MODE] "
                  "[--latency-us L] [--goodput F] [--shm-gbps R]\n", why);
  return 2;
}

static int parseArgs(int argc, char** argv, struct simOpts* o) {
  mendSimTopoInit(&o->topo);
  o->bytes = 16 << 20;
  o->latencyUs = 10;
  o->goodput = 1448.0 / 1514.0;
  o->shmGbps = 50;
  int have = 0;
  for (int i = 1; i + 1 < argc + 1; i += 2) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char* end = NULL;
    if (v == NULL) return usage("an option lacks its value");
    if (strcmp(k, "--topo") == 0) {
      if (mendSimTopoRead(v, &o->topo) != ncclSuccess) return 2;
      have = 1;
    } else if (strcmp(k, "-e") == 0) {
      if (mendSimTopoParse(v, "-e", &o->topo) != ncclSuccess) return 2;
      have = 1;
    } else if (strcmp(k, "--bytes") == 0) {
      unsigned long long b = strtoull(v, &end, 10);
      if (*end || b < 4 || b % 4 || b > (1ull << 36)) return usage("--bytes: a multiple of 4, 4..2^36");
      o->bytes = (size_t)b;
    } else if (strcmp(k, "--replan") == 0) {
      setenv("MEND_REPLAN", v, 1);
      mendParamResetCache();
    } else if (strcmp(k, "--latency-us") == 0 || strcmp(k, "--goodput") == 0 || strcmp(k, "--shm-gbps") == 0) {
      double x = strtod(v, &end);
      if (*end || !(x >= 0 && x <= 1e6)) return usage("--latency-us / --goodput / --shm-gbps: a number >= 0");
      *(k[2] == 'l' ? &o->latencyUs : k[2] == 'g' ? &o->goodput : &o->shmGbps) = x;
    } else {
      return usage("unknown option");
    }
  }
  if (o->goodput <= 0 || o->goodput > 1 || o->shmGbps <= 0) return usage("--goodput in (0, 1], --shm-gbps > 0");
  return have ? 0 : usage("no topology (--topo FILE or -e LINE)");
}

static int hostNics(const struct mendOfflineTopo* t) { return t->nicsPerServer > 0 ? t->nicsPerServer : 1; }

/* The platform as SimGrid XML: hosts, NIC links, routes between every pair of hosts. */
static int writePlatform(FILE* f, const struct simOpts* o) {
  const struct mendOfflineTopo* t = &o->topo;
  int S = t->nServers, N = hostNics(t);
  double gbps = (t->nicsPerServer ? t->lineGbps : 100.0f) * o->goodput;
  fprintf(f, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
             "<platform version=\"4.1\"><zone id=\"cluster\" routing=\"Full\">\n");
  for (int s = 0; s < S; s++)
    for (int d = 0; d < N; d++) fprintf(f, "<host id=\"h%d_%d\" speed=\"1Gf\"/>\n", s, d);
  for (int s = 0; s < S; s++) {
    for (int d = 0; d < N; d++) {
      fprintf(f, "<link id=\"u%d_%d\" bandwidth=\"%.6fGbps\" latency=\"%.3fus\"/>\n", s, d, gbps, o->latencyUs);
      fprintf(f, "<link id=\"d%d_%d\" bandwidth=\"%.6fGbps\" latency=\"%.3fus\"/>\n", s, d, gbps, o->latencyUs);
    }
    fprintf(f, "<link id=\"shm%d\" bandwidth=\"%.3fGbps\" latency=\"1us\"/>\n", s, o->shmGbps);
  }
  fprintf(f, "<link id=\"spine\" bandwidth=\"%.3fGbps\" latency=\"1us\" sharing_policy=\"FATPIPE\"/>\n", gbps * S * N);
  for (int a = 0; a < S * N; a++) {
    for (int b = 0; b < S * N; b++) {
      int sa = a / N, da = a % N, sb = b / N, db = b % N;
      if (a == b) continue;
      fprintf(f, "<route src=\"h%d_%d\" dst=\"h%d_%d\" symmetrical=\"NO\">", sa, da, sb, db);
      if (sa == sb) fprintf(f, "<link_ctn id=\"shm%d\"/>", sa);
      else if (da == db) fprintf(f, "<link_ctn id=\"u%d_%d\"/><link_ctn id=\"d%d_%d\"/>", sa, da, sb, db);
      else fprintf(f, "<link_ctn id=\"u%d_%d\"/><link_ctn id=\"spine\"/><link_ctn id=\"d%d_%d\"/>", sa, da, sb, db);
      fprintf(f, "</route>\n");
    }
  }
  fprintf(f, "</zone></platform>\n");
  return ferror(f) ? -1 : 0;
}

static int loadPlatform(const struct simOpts* o) {
  char path[] = "/tmp/mend-sim-platformXXXXXX.xml";
  int fd = mkstemps(path, 4);
  if (fd < 0) {
    perror("mend-sim: platform file");
    return -1;
  }
  FILE* f = fdopen(fd, "w");
  int bad = f == NULL || writePlatform(f, o) != 0;
  if (f) fclose(f);
  if (!bad) simgrid_load_platform(path);
  unlink(path);
  return bad ? -1 : 0;
}

static void mailboxName(char* buf, size_t len, int channel, int connIndex, int from, int to) {
  snprintf(buf, len, "m%d_%d_%d_%d", channel, connIndex, from, to);
}

/* Sends in flight per connector: a FIFO of SIM_SLOTS slots, so a sender runs at most that far
 * ahead of its receiver (the transport's flow control). */
#define SIM_SLOTS 8
struct simFifo {
  sg_comm_t slot[MEND_PROG_MAX_PEERS][SIM_SLOTS]; /* per send connector, oldest at head */
  int head[MEND_PROG_MAX_PEERS], used[MEND_PROG_MAX_PEERS];
};

static void fifoPost(struct simFifo* f, int peer, sg_mailbox_t box, void* payload, uint64_t bytes) {
  if (f->used[peer] == SIM_SLOTS) { /* wait for the oldest slot to be consumed */
    sg_comm_wait(f->slot[peer][f->head[peer]]);
    f->head[peer] = (f->head[peer] + 1) % SIM_SLOTS;
    f->used[peer]--;
  }
  f->slot[peer][(f->head[peer] + f->used[peer]) % SIM_SLOTS] = sg_mailbox_put_async(box, payload, (long)bytes);
  f->used[peer]++;
}

static void fifoDrain(struct simFifo* f) {
  for (int p = 0; p < MEND_PROG_MAX_PEERS; p++)
    for (; f->used[p] > 0; f->used[p]--, f->head[p] = (f->head[p] + 1) % SIM_SLOTS) sg_comm_wait(f->slot[p][f->head[p]]);
}

/* A receive connector's receiver, on the host of its hop's NIC: the permanent receiver of the
 * connector's mailbox (segments flow as soon as they are posted, TCP streams), it takes each
 * segment and tells the work. */
static void recvMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  int peer = atoi(argv[1]);
  const struct mendProgPeer* pp = w->prog->peers + peer;
  char name[64];
  mailboxName(name, sizeof(name), w->channel, pp->connIndex, pp->rank, w->rank);
  sg_mailbox_set_receiver(name);
  sg_barrier_wait(ready);
  sg_mailbox_t box = sg_mailbox_by_name(name);
  for (int i = 0; i < w->nRecv[peer]; i++) {
    sg_mailbox_get(box);
    sg_sem_release(w->arrived[peer]);
  }
}

/* One work: walk its program; a receive waits for its receiver to have taken the peer's segment,
 * a send posts one from the host of the hop's NIC. */
static void workMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  const struct mendProgram* p = w->prog;
  struct mendWalk walk;
  struct simFifo fifo;
  memset(&fifo, 0, sizeof(fifo));
  char name[64];
  sg_host_t here = w->home;
  sg_barrier_wait(ready);
  mendWalkBegin(&walk, p, &w->args);
  while (!walk.done) {
    const struct mendProgStep* s = p->steps + walk.step;
    int seg = mendWalkSeg(&walk, p);
    uint64_t bytes = mendWalkSegLen(&walk, p, &w->args, seg) * w->args.typeSize;
    if (bytes > 0 && (s->op & MEND_STEP_RECV)) sg_sem_acquire(w->arrived[s->recvPeer]);
    if (bytes > 0 && (s->op & MEND_STEP_SEND)) {
      const struct mendProgPeer* pp = p->peers + s->sendPeer;
      if (w->hop[s->sendPeer] != here) sg_actor_set_host(sg_actor_self(), here = w->hop[s->sendPeer]);
      mailboxName(name, sizeof(name), w->channel, pp->connIndex, w->rank, pp->rank);
      fifoPost(&fifo, s->sendPeer, sg_mailbox_by_name(name), w, bytes);
    }
    mendWalkAdvance(&walk, p, &w->args);
  }
  fifoDrain(&fifo);
}

/* Per receive connector, the segments its work takes (walked once, as workMain walks). */
static void countRecvs(struct simWork* w) {
  const struct mendProgram* p = w->prog;
  struct mendWalk walk;
  memset(w->nRecv, 0, sizeof(w->nRecv));
  mendWalkBegin(&walk, p, &w->args);
  while (!walk.done) {
    const struct mendProgStep* s = p->steps + walk.step;
    if ((s->op & MEND_STEP_RECV) && mendWalkSegLen(&walk, p, &w->args, mendWalkSeg(&walk, p)) > 0)
      w->nRecv[s->recvPeer]++;
    mendWalkAdvance(&walk, p, &w->args);
  }
}

/* The NIC (device) a connector's hop uses, the same at both ends: -1 for a peer on this server or
 * a hop with no NIC. */
static int hopNic(struct mendOffline* off, const struct simWork* w, const struct mendProgPeer* pp) {
  const struct mendPlanView* v = mendOfflineView(off);
  const struct mendViewHealth* h = mendOfflineHealth(off);
  int me = w->rank;
  if (mendOfflineServer(off, pp->rank) == mendOfflineServer(off, me)) return -1;
  int d = pp->dir == MEND_SEND ? mendReplanHopNic(v, h, w->channel, me, pp->rank)
                               : mendReplanHopNic(v, h, w->channel, pp->rank, me);
  return d >= 0 ? d : -1;
}

/* A work's home NIC: the rail of its first hop to or from another server. */
static int workNic(struct mendOffline* off, const struct simWork* w) {
  for (int i = 0; i < w->prog->nPeers; i++) {
    int d = hopNic(off, w, w->prog->peers + i);
    if (d >= 0) return d;
  }
  return 0;
}

static sg_host_t nicHost(struct mendOffline* off, int rank, int nic) {
  char host[32];
  snprintf(host, sizeof(host), "h%d_%d", mendOfflineServer(off, rank), nic);
  return sg_host_by_name(host);
}

/* A work's hosts (home, per connector its hop's) and its receivers' semaphores. */
static int placeWork(struct mendOffline* off, struct simWork* w) {
  w->home = nicHost(off, w->rank, workNic(off, w));
  if (w->home == NULL) return -1;
  for (int i = 0; i < w->prog->nPeers; i++) {
    int d = hopNic(off, w, w->prog->peers + i);
    w->hop[i] = d >= 0 ? nicHost(off, w->rank, d) : w->home;
    if (w->hop[i] == NULL) return -1;
    w->arrived[i] = w->prog->peers[i].dir == MEND_RECV ? sg_sem_init(0) : NULL;
  }
  countRecvs(w);
  return 0;
}

/* Every rank's works, with chunks fitted to a slot as mendPlanResolve does. */
static int collectWorks(struct mendOffline* off, const struct mendOp* op) {
  int n = mendOfflineRanks(off), cap = 0;
  for (int r = 0; r < n; r++) {
    struct mendPlan* plan;
    if (mendOfflinePlan(off, r, op, &plan) != ncclSuccess) return -1;
    for (int i = 0; i < plan->nWorks; i++) {
      if (nWorks == cap) {
        cap = cap ? 2 * cap : 64;
        struct simWork* nw = realloc(works, sizeof(*works) * (size_t)cap);
        if (nw == NULL) return -1;
        works = nw;
      }
      struct simWork* w = works + nWorks++;
      const struct mendWork* src = plan->works + i;
      w->prog = malloc(src->prog->bytes);
      if (w->prog == NULL) return -1;
      memcpy(w->prog, src->prog, src->prog->bytes);
      w->args = src->args;
      w->rank = r;
      w->channel = src->channel;
      size_t slot = SIM_SLOT_BYTES / w->args.typeSize, align = w->args.alignElems;
      size_t chunk = w->args.chunkElems < slot ? w->args.chunkElems : slot;
      chunk = chunk / align * align;
      w->args.chunkElems = chunk > 0 ? chunk : align;
    }
    mendPlanFree(plan);
  }
  return 0;
}

/* Per receive connector a receiver on its hop's host, then the works on their home hosts; the
 * barrier lets every receiver listen before a segment is posted, so each segment starts, on its
 * hop's route, as it is posted. */
static int startActors(struct mendOffline* off, const struct simOpts* o) {
  char idx[16], peer[16];
  unsigned nActors = (unsigned)nWorks;
  for (int i = 0; i < nWorks; i++) {
    if (placeWork(off, works + i) != 0) return -1;
    for (int j = 0; j < works[i].prog->nPeers; j++) nActors += works[i].prog->peers[j].dir == MEND_RECV;
  }
  ready = sg_barrier_init(nActors);
  for (int i = 0; i < nWorks; i++) {
    snprintf(idx, sizeof(idx), "%d", i);
    for (int j = 0; j < works[i].prog->nPeers; j++) {
      if (works[i].prog->peers[j].dir != MEND_RECV) continue;
      snprintf(peer, sizeof(peer), "%d", j);
      const char* args[] = {idx, peer, NULL};
      sg_actor_create_("recv", works[i].hop[j], recvMain, 2, args);
    }
    const char* args[] = {idx, NULL};
    sg_actor_create_("work", works[i].home, workMain, 1, args);
  }
  return 0;
}

int main(int argc, char** argv) {
  struct simOpts o;
  memset(&o, 0, sizeof(o));
  setenv("NCCL_DEBUG", "WARN", 0); /* what is wrong with a topology is said in a WARN */
  int bad = parseArgs(argc, argv, &o);
  if (bad) return bad;
  struct mendOffline* off;
  ncclResult_t res = mendOfflineCreate(&o.topo, &off);
  if (res != ncclSuccess) return res == ncclInvalidArgument ? 2 : 1;
  int n = mendOfflineRanks(off);
  if ((long)o.topo.nServers * hostNics(&o.topo) > SIM_MAX_HOSTS) {
    fprintf(stderr, "mend-sim: %d servers x %d NICs exceed %d hosts (explicit routes)\n", o.topo.nServers,
            hostNics(&o.topo), SIM_MAX_HOSTS);
    return 2;
  }
  struct mendOp op = {.func = MEND_FUNC_ALLREDUCE, .count = o.bytes / 4, .type = ncclFloat, .userOp = ncclSum};
  if (mendRedOpResolve(ncclSum, ncclFloat, n, &op.redop) != ncclSuccess || collectWorks(off, &op) != 0) return 1;
  struct mendReplanChoice ch;
  if (mendOfflineChoice(off, o.bytes, &ch) != ncclSuccess) return 1;
  /* CM02: max-min sharing of the links' bandwidth, no TCP correction factors (the goodput factor and
   * latencies are the platform's). */
  char loopBw[64];
  snprintf(loopBw, sizeof(loopBw), "--cfg=network/loopback-bw:%.0f", o.shmGbps * 1e9 / 8);
  int sgArgc = 5;
  char* sgArgv[] = {argv[0], "--log=root.thresh:warning", "--cfg=network/model:CM02", loopBw,
                    "--cfg=network/loopback-lat:0.000001", NULL};
  simgrid_init(&sgArgc, sgArgv);
  if (loadPlatform(&o) != 0 || startActors(off, &o) != 0) return 1;
  simgrid_run();
  double t = simgrid_get_clock();
  sg_barrier_destroy(ready);
  double busbw = n > 1 ? 2.0 * (n - 1) / n * (double)o.bytes / t / 1e9 : 0;
  printf("ranks %d works %d allreduce %zu bytes schedule %s simulated %.6f s busbw %.4f GB/s\n", n, nWorks, o.bytes,
         ch.costUs[MEND_REPLAN_BALANCE] < 0 ? "ring/tree" : mendReplanName(ch.replan), t, busbw);
  for (int i = 0; i < nWorks; i++) {
    for (int j = 0; j < works[i].prog->nPeers; j++)
      if (works[i].arrived[j]) sg_sem_destroy(works[i].arrived[j]);
    free(works[i].prog);
  }
  free(works);
  mendOfflineFree(off);
  return 0;
}
