/*
 * mend-sim: a collective's time on a rail-optimised cluster, simulated by SimGrid from the programs
 * Mend's planner emits for every rank (plan_offline.h), interpreted step by step with the
 * executors' own walker (device/walk.h): every step that receives waits for its segment from the
 * peer, every step that sends queues its segment on the connector to the next one; a segment's
 * bytes travel over the sender's NIC, the rail, and the receiver's NIC.
 *
 *   mend-sim --topo FILE [-e LINE]... [--bytes N] [--replan MODE] [--latency-us L] [--goodput F]
 *            [--shm-gbps R]
 *
 * Platform (sim/README.md): per server and NIC a host and two links (up, down; line rate x goodput);
 * NIC d of one server reaches NIC d of another through rail d's leaf (non-blocking: no link of its
 * own), other NICs through a spine link; NICs of one server reach each other through the server's
 * shared-memory link.  The links carry no latency: a route's (L per NIC link, 1 us through the
 * spine or within a server) is added when a segment is delivered (routeLatency).  Zones keep the
 * platform linear in hosts: per rail a cluster (a star of its hosts' links, routed to the other
 * rails through the spine), and per server a zone of its shared-memory hosts h<s>_<d>_shm, where
 * hops within the server send and receive (a host is in one zone: a rail's cannot also be the
 * server's).
 *
 * Connectors are TCP streams: one sender actor per send connector puts its segments one after
 * another, in posting order, each with a blocking put (so at most one segment of a connector is on
 * the wire, and a stream's bytes do not share its links with themselves); the connector's receiver
 * delivers each segment to the receiving work the route's latency after its last byte left (the
 * stream's next segment is already flowing then: latency is paid once per segment's path, not
 * between segments).  The FIFO: the work queues a segment to its sender (a ring and semaphores, no
 * simulated time, no link) and blocks only while SIM_SLOTS of its segments are not yet delivered.
 *
 * NICs per hop: a connector's bytes use the NIC of its own hop.  A hop from rank a to rank b on
 * channel c between servers uses device d = mendReplanHopNic(c, a, b) at both ends (the rail
 * re-planning models; the resilient net pairs NIC i with NIC i): the connector's sender is on host
 * h<server(a)>_<d>, its receiver on h<server(b)>_<d>, and the receiver tells the receiving work
 * through a semaphore (no bytes, no link).  A hop with no NIC (d < 0) uses the work's home host,
 * the NIC of its first inter-server hop; a hop within a server, the home NIC's shared-memory host
 * (the server's shared-memory link between two works of a server; the loopback between two with
 * one home).  Works stay on their home hosts; their sends and receives overlap.
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

struct simOpts {
  struct mendOfflineTopo topo;
  size_t bytes;      /* AllReduce size */
  double latencyUs;  /* per NIC link */
  double goodput;    /* share of the line rate TCP payload gets (1448/1514 on the testbed) */
  double shmGbps;    /* a server's shared-memory link */
};

/* A send connector's FIFO: the work queues up to SIM_SLOTS segments ahead of its receiver (the
 * transport's flow control); its sender takes them in order. */
#define SIM_SLOTS 8
struct simStream {
  uint64_t bytes[SIM_SLOTS]; /* queued segments' sizes, a ring: the work writes at tail */
  int head, tail;            /* the sender reads at head */
  double sent[SIM_SLOTS];    /* when each segment's last byte left (a ring, in order) */
  int nSent, nTaken;         /* written by the sender, read by the receiver */
  sg_host_t from;            /* the sender's host */
  sg_sem_t free;             /* slots whose segment is not yet delivered (a sender's credit) */
  sg_sem_t queued;           /* segments queued and not yet taken by the sender */
  sg_sem_t landed;           /* segments whose bytes have all crossed, not yet delivered */
};

struct simWork {
  struct mendProgram* prog; /* copied from the plan */
  struct mendWorkArgs args; /* window and chunk (fitted to a slot as mendPlanResolve does) */
  int rank, channel;
  sg_host_t home;                        /* the NIC of its first inter-server hop (workNic) */
  sg_host_t hop[MEND_PROG_MAX_PEERS];    /* per connector: the host of its hop's NIC at this rank */
  int nSegs[MEND_PROG_MAX_PEERS];        /* per connector: segments it carries */
  sg_sem_t arrived[MEND_PROG_MAX_PEERS]; /* per receive connector: segments its receiver took */
  struct simStream out[MEND_PROG_MAX_PEERS]; /* per send connector: its FIFO */
};

static struct simWork* works;
static int nWorks;
static double linkLatency; /* seconds, per NIC link (up or down) */
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

/* Rail d: a SimGrid cluster (a star zone) of the hosts h<s>_<d>, each with its split-duplex
 * link (up and down, one direction each); no backbone, as the leaf is non-blocking.  Its router
 * leaf<d> is the rail's gateway to the spine. */
static void writeRail(FILE* f, int rail, int S, double gbps) {
  fprintf(f, "<cluster id=\"rail%d\" prefix=\"h\" suffix=\"_%d\" radical=\"0-%d\" speed=\"1Gf\" "
             "bw=\"%.6fGbps\" lat=\"0\" sharing_policy=\"SPLITDUPLEX\" router_id=\"leaf%d\"/>\n",
          rail, rail, S - 1, gbps, rail);
}

/* Server s: a zone of its shared-memory hosts h<s>_<d>_shm (where a hop within the server sends
 * and receives), each reaching the others over the server's shared-memory link and itself over a
 * loopback of its own.  SimGrid's default loopback is one link for the whole platform: a FATPIPE,
 * so it bounds each transfer alone at its rate, but every same-host transfer is then in one max-min
 * system, solved again at every event, and each fixed transfer rescans the link's others (512 GPUs,
 * trees: 67 % of the run).  A FATPIPE per host bounds each transfer the same and keeps the
 * systems apart (the same times to 17 digits). */
static void writeServer(FILE* f, int s, int N, double shmGbps) {
  fprintf(f, "<zone id=\"server%d\" routing=\"Full\">\n", s);
  for (int d = 0; d < N; d++) fprintf(f, "<host id=\"h%d_%d_shm\" speed=\"1Gf\"/>\n", s, d);
  fprintf(f, "<link id=\"shm%d\" bandwidth=\"%.3fGbps\" latency=\"0\"/>\n", s, shmGbps);
  for (int d = 0; d < N; d++)
    fprintf(f, "<link id=\"lo%d_%d\" bandwidth=\"%.3fGbps\" latency=\"0\" sharing_policy=\"FATPIPE\"/>\n", s, d,
            shmGbps);
  for (int d = 0; d < N; d++)
    fprintf(f, "<route src=\"h%d_%d_shm\" dst=\"h%d_%d_shm\"><link_ctn id=\"lo%d_%d\"/></route>\n", s, d, s, d, s, d);
  for (int a = 0; a < N; a++) {
    for (int b = 0; b < N; b++) {
      if (a == b) continue;
      fprintf(f, "<route src=\"h%d_%d_shm\" dst=\"h%d_%d_shm\" symmetrical=\"NO\"><link_ctn id=\"shm%d\"/></route>\n",
              s, a, s, b, s);
    }
  }
  fprintf(f, "</zone>\n");
}

/* The platform as SimGrid XML, linear in hosts: per rail a cluster of its NICs' hosts (same-rail
 * routes: up, down), the rails routed to each other through the spine (up, spine, down), and
 * apart from them, under a zone without routes, per server a zone of shared-memory hosts (shm). */
static int writePlatform(FILE* f, const struct simOpts* o) {
  const struct mendOfflineTopo* t = &o->topo;
  int S = t->nServers, N = hostNics(t);
  double gbps = (t->nicsPerServer ? t->lineGbps : 100.0f) * o->goodput;
  fprintf(f, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
             "<platform version=\"4.1\"><zone id=\"cluster\" routing=\"Full\">\n");
  for (int d = 0; d < N; d++) writeRail(f, d, S, gbps);
  fprintf(f, "<zone id=\"servers\" routing=\"None\">\n");
  for (int s = 0; s < S; s++) writeServer(f, s, N, o->shmGbps);
  fprintf(f, "</zone>\n");
  fprintf(f, "<link id=\"spine\" bandwidth=\"%.3fGbps\" latency=\"0\" sharing_policy=\"FATPIPE\"/>\n", gbps * S * N);
  for (int a = 0; a < N; a++) {
    for (int b = 0; b < N; b++) {
      if (a == b) continue;
      fprintf(f, "<zoneRoute src=\"rail%d\" dst=\"rail%d\" gw_src=\"leaf%d\" gw_dst=\"leaf%d\" symmetrical=\"NO\">"
                 "<link_ctn id=\"spine\"/></zoneRoute>\n", a, b, a, b);
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

/* The latency of the route between two hosts (the platform's links carry none: a segment is
 * delivered this long after its last byte left): up and down (and the spine), 1 us in a server.
 * A shared-memory host's name (h<s>_<d>_shm) reads as its NIC's. */
static double routeLatency(sg_host_t a, sg_host_t b) {
  int sa, da, sb, db;
  if (sscanf(sg_host_get_name(a), "h%d_%d", &sa, &da) != 2 || sscanf(sg_host_get_name(b), "h%d_%d", &sb, &db) != 2)
    return 0;
  if (sa == sb) return 1e-6;
  return 2 * linkLatency + (da == db ? 0 : 1e-6);
}

static void mailboxName(char* buf, size_t len, int channel, int connIndex, int from, int to) {
  snprintf(buf, len, "m%d_%d_%d_%d", channel, connIndex, from, to);
}

/* Queue a segment (no simulated time, no link): wait while SIM_SLOTS are outstanding. */
static void streamPost(struct simStream* q, uint64_t bytes) {
  sg_sem_acquire(q->free);
  q->bytes[q->tail] = bytes;
  q->tail = (q->tail + 1) % SIM_SLOTS;
  sg_sem_release(q->queued);
}

/* A send connector's sender, on the host of its hop's NIC: one TCP stream, so it puts the queued
 * segments one after another, in order, each a blocking put to the receiver's mailbox (over
 * latency-free links: the stream's next bytes follow its last ones), and tells the receiver when
 * the last byte left. */
static void sendMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  int peer = atoi(argv[1]);
  const struct mendProgPeer* pp = w->prog->peers + peer;
  struct simStream* q = w->out + peer;
  char name[64];
  mailboxName(name, sizeof(name), w->channel, pp->connIndex, w->rank, pp->rank);
  sg_mailbox_t box = sg_mailbox_by_name(name);
  for (int i = 0; i < w->nSegs[peer]; i++) {
    sg_sem_acquire(q->queued);
    uint64_t bytes = q->bytes[q->head];
    q->head = (q->head + 1) % SIM_SLOTS;
    sg_mailbox_put(box, q, (long)bytes);
    q->sent[q->nSent++ % SIM_SLOTS] = simgrid_get_clock();
    sg_sem_release(q->landed);
  }
}

/* A receive connector's receiver, on the host of its hop's NIC: the permanent receiver of the
 * connector's mailbox (segments flow as soon as they are sent), it takes each segment and
 * delivers it to the work the route's latency after its last byte left, freeing its FIFO slot. */
static void recvMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  int peer = atoi(argv[1]);
  const struct mendProgPeer* pp = w->prog->peers + peer;
  char name[64];
  mailboxName(name, sizeof(name), w->channel, pp->connIndex, pp->rank, w->rank);
  sg_mailbox_set_receiver(name);
  sg_barrier_wait(ready);
  sg_mailbox_t box = sg_mailbox_by_name(name);
  for (int i = 0; i < w->nSegs[peer]; i++) {
    struct simStream* q = sg_mailbox_get(box);
    sg_sem_acquire(q->landed);
    double due = q->sent[q->nTaken++ % SIM_SLOTS] + routeLatency(q->from, sg_host_self());
    if (due > simgrid_get_clock()) sg_actor_sleep_for(due - simgrid_get_clock());
    sg_sem_release(w->arrived[peer]);
    sg_sem_release(q->free);
  }
}

/* One work, on its home host: walk its program; a receive waits for its receiver to have taken
 * the peer's segment, a send queues one to the connector's sender. */
static void workMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  const struct mendProgram* p = w->prog;
  struct mendWalk walk;
  sg_barrier_wait(ready);
  mendWalkBegin(&walk, p, &w->args);
  while (!walk.done) {
    const struct mendProgStep* s = p->steps + walk.step;
    int seg = mendWalkSeg(&walk, p);
    uint64_t bytes = mendWalkSegLen(&walk, p, &w->args, seg) * w->args.typeSize;
    if (bytes > 0 && (s->op & MEND_STEP_RECV)) sg_sem_acquire(w->arrived[s->recvPeer]);
    if (bytes > 0 && (s->op & MEND_STEP_SEND)) streamPost(w->out + s->sendPeer, bytes);
    mendWalkAdvance(&walk, p, &w->args);
  }
}

/* Per connector, the segments its work sends or takes (walked once, as workMain walks). */
static void countSegs(struct simWork* w) {
  const struct mendProgram* p = w->prog;
  struct mendWalk walk;
  memset(w->nSegs, 0, sizeof(w->nSegs));
  mendWalkBegin(&walk, p, &w->args);
  while (!walk.done) {
    const struct mendProgStep* s = p->steps + walk.step;
    int has = mendWalkSegLen(&walk, p, &w->args, mendWalkSeg(&walk, p)) > 0;
    if (has && (s->op & MEND_STEP_RECV)) w->nSegs[s->recvPeer]++;
    if (has && (s->op & MEND_STEP_SEND)) w->nSegs[s->sendPeer]++;
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

/* The host of a rank's NIC on its rail, or (shm) the one where it sends and receives within its
 * server. */
static sg_host_t nicHost(struct mendOffline* off, int rank, int nic, int shm) {
  char host[48];
  snprintf(host, sizeof(host), "h%d_%d%s", mendOfflineServer(off, rank), nic, shm ? "_shm" : "");
  return sg_host_by_name(host);
}

/* A work's hosts (home, per connector its hop's), its receivers' semaphores and senders' FIFOs.
 * A hop within the server uses the home NIC's shared-memory host (the platform routes those
 * over the server's link); one between servers without a NIC, the home host. */
static int placeWork(struct mendOffline* off, struct simWork* w) {
  int homeNic = workNic(off, w);
  w->home = nicHost(off, w->rank, homeNic, 0);
  if (w->home == NULL) return -1;
  for (int i = 0; i < w->prog->nPeers; i++) {
    int d = hopNic(off, w, w->prog->peers + i);
    int local = mendOfflineServer(off, w->prog->peers[i].rank) == mendOfflineServer(off, w->rank);
    w->hop[i] = d >= 0 ? nicHost(off, w->rank, d, 0) : local ? nicHost(off, w->rank, homeNic, 1) : w->home;
    if (w->hop[i] == NULL) return -1;
    int recv = w->prog->peers[i].dir == MEND_RECV;
    w->arrived[i] = recv ? sg_sem_init(0) : NULL;
    memset(w->out + i, 0, sizeof(w->out[i]));
    if (!recv) {
      w->out[i].free = sg_sem_init(SIM_SLOTS);
      w->out[i].queued = sg_sem_init(0);
      w->out[i].landed = sg_sem_init(0);
      w->out[i].from = w->hop[i];
    }
  }
  countSegs(w);
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

/* Per connector a sender or receiver on its hop's host, then the works on their home hosts; the
 * barrier lets every receiver listen before a segment is queued, so each segment starts, on its
 * hop's route, as soon as its sender takes it. */
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
      int recv = works[i].prog->peers[j].dir == MEND_RECV;
      snprintf(peer, sizeof(peer), "%d", j);
      const char* args[] = {idx, peer, NULL};
      sg_actor_create_(recv ? "recv" : "send", works[i].hop[j], recv ? recvMain : sendMain, 2, args);
    }
    const char* args[] = {idx, NULL};
    sg_actor_create_("work", works[i].home, workMain, 1, args);
  }
  return 0;
}

/* SimGrid gives each actor an 8 MiB stack, mapped (only touched pages count) behind a guard page
 * that splits its mapping in two, so Linux's default limit of 65,530 mappings per process
 * (vm.max_map_count) holds some 30,000 actors (8,192 GPUs need 41,000).  Past that the guard
 * pages go; past the limit itself the stacks shrink to 64 KiB, taken from the heap (no mapping
 * each, but all of it touched).  An actor's stack use is 4-8 KiB: 4 KiB overflowed, 8 KiB ran,
 * both behind guard pages (a 16-server run). */
#define SIM_MAPS_SPARE 4096 /* mappings besides actors' stacks: libraries, heap, the platform */
static int stackOpts(char** opts) {
  long actors = nWorks, maxMaps = 65530;
  for (int i = 0; i < nWorks; i++) actors += works[i].prog->nPeers;
  FILE* f = fopen("/proc/sys/vm/max_map_count", "r");
  if (f != NULL) {
    if (fscanf(f, "%ld", &maxMaps) != 1) maxMaps = 65530;
    fclose(f);
  }
  int n = 0;
  if (2 * actors + SIM_MAPS_SPARE > maxMaps) opts[n++] = "--cfg=contexts/guard-size:0";
  if (actors + SIM_MAPS_SPARE > maxMaps) opts[n++] = "--cfg=contexts/stack-size:64";
  return n;
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
  struct mendOp op = {.func = MEND_FUNC_ALLREDUCE, .count = o.bytes / 4, .type = ncclFloat, .userOp = ncclSum};
  if (mendRedOpResolve(ncclSum, ncclFloat, n, &op.redop) != ncclSuccess || collectWorks(off, &op) != 0) return 1;
  struct mendReplanChoice ch;
  if (mendOfflineChoice(off, o.bytes, &ch) != ncclSuccess) return 1;
  /* CM02: max-min sharing of the links' bandwidth, no TCP correction factors (the goodput factor and
   * latencies are the platform's). */
  char loopBw[64];
  snprintf(loopBw, sizeof(loopBw), "--cfg=network/loopback-bw:%.0f", o.shmGbps * 1e9 / 8);
  char* sgArgv[8] = {argv[0], "--log=root.thresh:warning", "--cfg=network/model:CM02", loopBw,
                     "--cfg=network/loopback-lat:0", NULL};
  int sgArgc = 5 + stackOpts(sgArgv + 5);
  simgrid_init(&sgArgc, sgArgv);
  linkLatency = o.latencyUs * 1e-6;
  if (loadPlatform(&o) != 0 || startActors(off, &o) != 0) return 1;
  simgrid_run();
  double t = simgrid_get_clock();
  sg_barrier_destroy(ready);
  double busbw = n > 1 ? 2.0 * (n - 1) / n * (double)o.bytes / t / 1e9 : 0;
  printf("ranks %d works %d allreduce %zu bytes schedule %s simulated %.6f s busbw %.4f GB/s\n", n, nWorks, o.bytes,
         ch.costUs[MEND_REPLAN_BALANCE] < 0 ? "ring/tree" : mendReplanName(ch.replan), t, busbw);
  for (int i = 0; i < nWorks; i++) {
    for (int j = 0; j < works[i].prog->nPeers; j++) {
      if (works[i].arrived[j]) sg_sem_destroy(works[i].arrived[j]);
      if (works[i].out[j].free) sg_sem_destroy(works[i].out[j].free);
      if (works[i].out[j].queued) sg_sem_destroy(works[i].out[j].queued);
      if (works[i].out[j].landed) sg_sem_destroy(works[i].out[j].landed);
    }
    free(works[i].prog);
  }
  free(works);
  mendOfflineFree(off);
  return 0;
}
