/*
 * mend-sim: a collective's time on a rail-optimised cluster, simulated by SimGrid from the programs
 * Mend's planner emits for every rank (plan_offline.h), interpreted step by step with the
 * executors' own walker (device/walk.h): every step that receives waits for its segment from the
 * peer, every step that sends queues its segment on the connector to the next one; a segment's
 * bytes travel over the sender's NIC, the rail, and the receiver's NIC.
 *
 *   mend-sim --topo FILE [-e LINE]... [--bytes N] [--replan MODE] [--latency-us L] [--goodput F]
 *            [--shm-gbps R] [--direct 0|1]
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
 * another, in posting order, each waited for (so at most one segment of a connector is on the wire,
 * and a stream's bytes do not share its links with themselves); the receiving work gets each one and
 * waits the route's latency after its last byte left (the stream's next segment is already flowing
 * then: latency is paid once per segment's path, not between segments).  The FIFO: the work queues
 * a segment to its sender (a ring, no simulated time, no link) and blocks only while SIM_SLOTS of
 * its segments are not yet delivered.
 *
 * NICs per hop: a connector's bytes use the NIC of its own hop.  A hop from rank a to rank b on
 * channel c between servers uses device d = mendReplanHopNic(c, a, b) at both ends (the rail
 * re-planning models; the resilient net pairs NIC i with NIC i): the connector's sender is on host
 * h<server(a)>_<d>, and its mailbox's permanent receiver is the anchor of h<server(b)>_<d>, an actor
 * per host that streams land on, which does nothing else: a segment's transfer then runs from the
 * sender's host to the anchor's as soon as it is put, and the receiving work, on its home host, only
 * takes it.  A hop with no NIC (d < 0) uses the work's home host, the NIC of its first inter-server
 * hop; a hop within a server, the home NIC's shared-memory host (the server's shared-memory link
 * between two works of a server; the host's loopback between two with one home).  Works stay on
 * their home hosts; their sends and receives overlap.
 *
 * Cost: per segment one transfer and, where someone waits, a semaphore; the actors are the works,
 * the senders and the anchors.  Before, a receiver actor per receive connector took each segment,
 * slept out the latency and woke the work (13 SimGrid calls a segment, now 5-7).  SimGrid ends a
 * transfer due within 1 ns of any event at that event (surf/precision): with fewer sleeps there are
 * fewer events, and a few transfers end up to ~2 ns later than they did (sim/RESULTS.md).  A stream
 * whose ends share a shared-memory host (a hop within a server between two works of one home) has
 * no sender and no transfer: its times are computed when a segment is queued (streamPostDirect).
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
#include <simgrid/link.h>
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
  int direct;        /* streams within one shared-memory host timed without transfers (streamPostDirect) */
};

/* A send connector: an ordered stream (TCP) with a SIM_SLOTS-slot FIFO.  Its work queues segments
 * and blocks only while SIM_SLOTS of them are not yet delivered (the transport's flow control); its
 * sender takes them in order and puts each to the stream's mailbox; the receiving work gets them and
 * waits out the route's latency after each one's last byte left.  Who waits sets a flag and takes a
 * semaphore; the other side releases it only then, so a segment nobody waits for costs no call. */
#define SIM_SLOTS 8
struct simStream {
  uint64_t bytes[SIM_SLOTS]; /* queued segments' sizes, a ring: the work writes at tail */
  int head, tail;            /* the sender reads at head */
  int nPosted;               /* segments the work queued */
  int nStarted;              /* segments the sender put in the mailbox (their bytes flow) */
  int nSent;                 /* segments whose last byte left */
  double sent[SIM_SLOTS];    /* when segment i's last byte left, at i % SIM_SLOTS (landedAt) */
  double latency;            /* of the route: a segment is delivered this long after it left */
  int direct;                /* both ends on one shared-memory host: timed here, no transfer (streamPost) */
  double rate;               /* direct: that host's loopback, bytes per second */
  double lastLeft;           /* direct: when the last queued segment's last byte leaves */
  double* landing;           /* direct: when each queued segment not yet taken lands, a ring ... */
  int landHead, landCount, landCap; /* ... from landHead, grown as the sender runs ahead */
  sg_host_t to;              /* the host of the hop's NIC at the receiving end */
  int toHost;                /* its index (hostIndex) */
  char box[32];              /* the mailbox's name */
  int senderWaits, recvWaits, postWaits; /* who blocks on the semaphore of the same name */
  sg_sem_t senderWake;       /* the sender: a segment was queued */
  sg_sem_t recvWake;         /* the receiving work: a segment was put */
  sg_sem_t postWake;         /* the sending work: a segment's last byte left (a slot may free) */
};

struct simWork {
  struct mendProgram* prog; /* copied from the plan */
  struct mendWorkArgs args; /* window and chunk (fitted to a slot as mendPlanResolve does) */
  int rank, channel;
  sg_host_t home;                        /* the NIC of its first inter-server hop (workNic) */
  sg_host_t hop[MEND_PROG_MAX_PEERS];    /* per connector: the host of its hop's NIC at this rank */
  int hopHost[MEND_PROG_MAX_PEERS];      /* per connector: that host's index (hostIndex) */
  int nSegs[MEND_PROG_MAX_PEERS];        /* per connector: segments it carries */
  struct simStream out[MEND_PROG_MAX_PEERS]; /* per send connector: its stream */
  struct simStream* in[MEND_PROG_MAX_PEERS]; /* per receive connector: the peer's stream to it */
  int taken[MEND_PROG_MAX_PEERS];        /* per receive connector: segments it took */
  double clock;                          /* its own time, at or past SimGrid's (workMain) */
  int homeNic;                           /* its home host's NIC (homeNics) */
};

static struct simWork* works;
static int nWorks;
static int hostNicsN;      /* NICs per server (hostIndex) */
static double linkLatency; /* seconds, per NIC link (up or down) */
static int directOn;       /* --direct */
/* The streams by the host they land on (hostIndex): per host one anchor, the permanent receiver of
 * their mailboxes, so that a segment's bytes flow as soon as it is put, to that host. */
static struct simStream** landing;
static int* landingStart; /* [nHosts + 1]: host h's streams are landing[landingStart[h] ..] */
static int nHosts;
static sg_bar_t ready;    /* anchors and senders: no segment is put before its mailbox has its receiver */

static int usage(const char* why) {
  fprintf(stderr, "mend-sim: %s\nusage: mend-sim --topo FILE [-e LINE]... [--bytes N] [--replan MODE] "
                  "[--latency-us L] [--goodput F] [--shm-gbps R] [--direct 0|1]\n", why);
  return 2;
}

static int parseArgs(int argc, char** argv, struct simOpts* o) {
  mendSimTopoInit(&o->topo);
  o->bytes = 16 << 20;
  o->latencyUs = 10;
  o->goodput = 1448.0 / 1514.0;
  o->shmGbps = 50;
  o->direct = 1;
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
    } else if (strcmp(k, "--direct") == 0) {
      if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) return usage("--direct: 0 or 1");
      o->direct = v[0] == '1';
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

/* A host's index: per server and NIC, its NIC's host and its shared-memory host. */
static int hostIndex(int server, int nic, int shm) { return (server * hostNicsN + nic) * 2 + shm; }

/* The latency of the route between two hosts (the platform's links carry none: a segment is
 * delivered this long after its last byte left): up and down (and the spine), 1 us in a server.
 * A shared-memory host counts as its NIC's. */
static double routeLatency(int a, int b) {
  int sa = a / 2 / hostNicsN, da = a / 2 % hostNicsN, sb = b / 2 / hostNicsN, db = b / 2 % hostNicsN;
  if (sa == sb) return 1e-6;
  return 2 * linkLatency + (da == db ? 0 : 1e-6);
}

static void sleepUntil(double due) {
  double now = simgrid_get_clock();
  if (due > now) sg_actor_sleep_for(due - now);
}

/* When segment i of a stream is delivered (its last byte left, plus the route's latency), once it
 * has left.  sent[] keeps the last SIM_SLOTS; an older segment was delivered before now: segment
 * i + SIM_SLOTS has left, so it was queued, which waited for segment i's delivery. */
static double landedAt(const struct simStream* q, int i) {
  return q->nSent - i <= SIM_SLOTS ? q->sent[i % SIM_SLOTS] + q->latency : 0;
}

static void wake(int* waits, sg_sem_t sem) {
  if (*waits) {
    *waits = 0;
    sg_sem_release(sem);
  }
}

/* A work's time: at least SimGrid's clock, past it while the work ran ahead through direct streams. */
static void caughtUp(struct simWork* w) {
  double now = simgrid_get_clock();
  if (now > w->clock) w->clock = now;
}

static void later(struct simWork* w, double t) {
  if (t > w->clock) w->clock = t;
}

/* A stream whose two ends share a shared-memory host crosses only that host's loopback, a FATPIPE
 * on which no other transfer changes its rate: its sender would start each segment when it is
 * queued or when the one before has left, whichever is later, and the segment's last byte would
 * leave its size / rate after that.  So it is timed here, when queued, with no sender, mailbox or
 * transfer (in a healthy cluster with a rank per GPU, 7 of every 8 ring hops), and in the works'
 * own clocks: queueing and taking such a segment (once queued) moves the work's clock, not
 * SimGrid's, so a work runs ahead through a server's hops with no sleep and no event.  It catches
 * SimGrid's clock up before anything SimGrid times (a stream with a transfer, its end).  The same
 * times as the transfers (to SimGrid's event precision, 1 ns), at a fraction of the cost. */
static int landingPush(struct simStream* q, double t) {
  if (q->landCount == q->landCap) {
    int cap = q->landCap ? 2 * q->landCap : 16;
    double* ring = malloc(sizeof(*ring) * (size_t)cap);
    if (ring == NULL) return -1;
    for (int k = 0; k < q->landCount; k++) ring[k] = q->landing[(q->landHead + k) % q->landCap];
    free(q->landing);
    q->landing = ring;
    q->landHead = 0;
    q->landCap = cap;
  }
  q->landing[(q->landHead + q->landCount++) % q->landCap] = t;
  return 0;
}

static void streamPostDirect(struct simWork* w, struct simStream* q, uint64_t bytes) {
  int oldest = q->nPosted - SIM_SLOTS;
  if (oldest >= 0) later(w, q->sent[oldest % SIM_SLOTS] + q->latency); /* a slot is free once it landed */
  double start = q->lastLeft > w->clock ? q->lastLeft : w->clock;
  q->lastLeft = start + (double)bytes / q->rate;
  q->sent[q->nPosted % SIM_SLOTS] = q->lastLeft;
  if (landingPush(q, q->lastLeft + q->latency) != 0) {
    fprintf(stderr, "mend-sim: out of memory\n");
    exit(1);
  }
  q->nPosted++;
  q->nStarted = q->nSent = q->nPosted;
  wake(&q->recvWaits, q->recvWake);
}

/* Queue a segment (no simulated time, no link): wait while SIM_SLOTS are not yet delivered. */
static void streamPost(struct simWork* w, struct simStream* q, uint64_t bytes) {
  if (q->direct) {
    streamPostDirect(w, q, bytes);
    return;
  }
  sleepUntil(w->clock); /* its sender starts the segment at SimGrid's clock */
  int oldest = q->nPosted - SIM_SLOTS;
  if (oldest >= 0) {
    while (q->nSent <= oldest) {
      q->postWaits = 1;
      sg_sem_acquire(q->postWake);
    }
    sleepUntil(landedAt(q, oldest));
  }
  q->bytes[q->tail] = bytes;
  q->tail = (q->tail + 1) % SIM_SLOTS;
  q->nPosted++;
  wake(&q->senderWaits, q->senderWake);
  caughtUp(w);
}

/* Take segment i of a stream: the work's clock moves to when it is delivered.  It is got only once
 * put: a get posted first would make the getter, on the work's home host, the transfer's receiver. */
static void streamTake(struct simWork* w, struct simStream* q, int i, sg_mailbox_t box) {
  while (q->nStarted <= i) {
    q->recvWaits = 1;
    sg_sem_acquire(q->recvWake);
  }
  caughtUp(w);
  if (q->direct) {
    later(w, q->landing[q->landHead]);
    q->landHead = (q->landHead + 1) % q->landCap;
    q->landCount--;
    return;
  }
  sg_mailbox_get(box); /* returns once the segment's last byte left */
  caughtUp(w);
  later(w, q->nSent > i ? landedAt(q, i) : simgrid_get_clock() + q->latency);
}

/* A send connector's sender, on the host of its hop's NIC: one TCP stream, so it puts the queued
 * segments one after another, in order, each waited for (over latency-free links: the stream's
 * next bytes follow its last ones), and notes when each one's last byte left. */
static void sendMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  int peer = atoi(argv[1]);
  struct simStream* q = w->out + peer;
  sg_mailbox_t box = sg_mailbox_by_name(q->box);
  sg_barrier_wait(ready);
  for (int i = 0; i < w->nSegs[peer]; i++) {
    while (q->nPosted == i) {
      q->senderWaits = 1;
      sg_sem_acquire(q->senderWake);
    }
    uint64_t bytes = q->bytes[q->head];
    q->head = (q->head + 1) % SIM_SLOTS;
    sg_comm_t c = sg_mailbox_put_async(box, q, (long)bytes);
    q->nStarted = i + 1;
    wake(&q->recvWaits, q->recvWake);
    sg_comm_wait(c);
    q->sent[i % SIM_SLOTS] = simgrid_get_clock();
    q->nSent = i + 1;
    wake(&q->postWaits, q->postWake);
  }
}

/* A host's anchor: the permanent receiver of the mailboxes of the streams that land there (their
 * bytes then flow as soon as they are put, to this host); it takes no part after that. */
static void anchorMain(int argc, char** argv) {
  int h = atoi(argv[0]);
  for (int i = landingStart[h]; i < landingStart[h + 1]; i++) sg_mailbox_set_receiver(landing[i]->box);
  sg_barrier_wait(ready);
  sg_actor_daemonize(sg_actor_self());
  sg_sem_t never = sg_sem_init(0);
  sg_sem_acquire(never); /* killed when the last work ends */
}

/* One work, on its home host: walk its program; a receive waits until the peer's segment is
 * delivered, a send queues one to the connector's sender. */
static void workMain(int argc, char** argv) {
  struct simWork* w = works + atoi(argv[0]);
  const struct mendProgram* p = w->prog;
  sg_mailbox_t box[MEND_PROG_MAX_PEERS];
  for (int i = 0; i < p->nPeers; i++) box[i] = w->in[i] && !w->in[i]->direct ? sg_mailbox_by_name(w->in[i]->box) : NULL;
  struct mendWalk walk;
  w->clock = simgrid_get_clock();
  mendWalkBegin(&walk, p, &w->args);
  while (!walk.done) {
    const struct mendProgStep* s = p->steps + walk.step;
    int seg = mendWalkSeg(&walk, p);
    uint64_t bytes = mendWalkSegLen(&walk, p, &w->args, seg) * w->args.typeSize;
    if (bytes > 0 && (s->op & MEND_STEP_RECV))
      streamTake(w, w->in[s->recvPeer], w->taken[s->recvPeer]++, box[s->recvPeer]);
    if (bytes > 0 && (s->op & MEND_STEP_SEND)) streamPost(w, w->out + s->sendPeer, bytes);
    mendWalkAdvance(&walk, p, &w->args);
  }
  sleepUntil(w->clock); /* the run ends when the last work's clock does */
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

/* A work's home NIC: the rail of its first hop to or from another server; -1 for none. */
static int workNic(struct mendOffline* off, const struct simWork* w) {
  for (int i = 0; i < w->prog->nPeers; i++) {
    int d = hopNic(off, w, w->prog->peers + i);
    if (d >= 0) return d;
  }
  return -1;
}

/* Every work's home NIC.  One with no hop to another server (with a rank per GPU, the ring's
 * ranks inside a server) takes the home of a work of its server and channel that has one, else NIC
 * 0: the hops of a channel inside a server then share one shared-memory host, whose loopback
 * bounds each alone (as NVLink ports do), where a home of NIC 0 put the hops to and from the
 * channel's boundary ranks on the server's shared link, one for all channels. */
static int homeNics(struct mendOffline* off, int nServers) {
  int nCh = 1;
  for (int i = 0; i < nWorks; i++) nCh = works[i].channel + 1 > nCh ? works[i].channel + 1 : nCh;
  int* first = malloc(sizeof(*first) * (size_t)nServers * (size_t)nCh);
  if (first == NULL) return -1;
  for (size_t k = 0; k < (size_t)nServers * (size_t)nCh; k++) first[k] = -1;
  for (int i = 0; i < nWorks; i++) {
    struct simWork* w = works + i;
    size_t k = (size_t)mendOfflineServer(off, w->rank) * (size_t)nCh + (size_t)w->channel;
    w->homeNic = workNic(off, w);
    if (w->homeNic >= 0 && first[k] < 0) first[k] = w->homeNic;
  }
  for (int i = 0; i < nWorks; i++) {
    struct simWork* w = works + i;
    size_t k = (size_t)mendOfflineServer(off, w->rank) * (size_t)nCh + (size_t)w->channel;
    if (w->homeNic < 0) w->homeNic = first[k] >= 0 ? first[k] : 0;
  }
  free(first);
  return 0;
}

/* The host of a rank's NIC on its rail, or (shm) the one where it sends and receives within its
 * server. */
static sg_host_t nicHost(struct mendOffline* off, int rank, int nic, int shm) {
  char host[48];
  snprintf(host, sizeof(host), "h%d_%d%s", mendOfflineServer(off, rank), nic, shm ? "_shm" : "");
  return sg_host_by_name(host);
}

/* A work's hosts (home, per connector its hop's) and its senders' streams.  A hop within the server
 * uses the home NIC's shared-memory host (the platform routes those over the server's link); one
 * between servers without a NIC, the home host. */
static int placeWork(struct mendOffline* off, struct simWork* w, int index) {
  int homeNic = w->homeNic, server = mendOfflineServer(off, w->rank);
  w->home = nicHost(off, w->rank, homeNic, 0);
  if (w->home == NULL) return -1;
  for (int i = 0; i < w->prog->nPeers; i++) {
    int d = hopNic(off, w, w->prog->peers + i);
    int local = d < 0 && mendOfflineServer(off, w->prog->peers[i].rank) == server;
    w->hop[i] = nicHost(off, w->rank, d >= 0 ? d : homeNic, local);
    w->hopHost[i] = hostIndex(server, d >= 0 ? d : homeNic, local);
    if (w->hop[i] == NULL) return -1;
    struct simStream* q = w->out + i;
    memset(q, 0, sizeof(*q));
    w->in[i] = NULL;
    w->taken[i] = 0;
    if (w->prog->peers[i].dir == MEND_SEND) {
      snprintf(q->box, sizeof(q->box), "w%d_%d", index, i);
      q->senderWake = sg_sem_init(0);
      q->recvWake = sg_sem_init(0);
      q->postWake = sg_sem_init(0);
    }
  }
  countSegs(w);
  return 0;
}

/* A send connector by what names it on both sides: channel, connector index, from and to rank. */
struct simConnKey {
  int channel, connIndex, from, to;
  int work, peer; /* the sending work and its connector */
};

static int connKeyCmp(const void* a, const void* b) {
  const struct simConnKey *x = a, *y = b;
  if (x->channel != y->channel) return x->channel < y->channel ? -1 : 1;
  if (x->connIndex != y->connIndex) return x->connIndex < y->connIndex ? -1 : 1;
  if (x->from != y->from) return x->from < y->from ? -1 : 1;
  return x->to < y->to ? -1 : x->to > y->to;
}

/* The send connectors, sorted by what names them. */
static struct simConnKey* sendKeys(size_t* n) {
  size_t cap = 1;
  for (int i = 0; i < nWorks; i++) cap += (size_t)works[i].prog->nPeers;
  struct simConnKey* keys = malloc(sizeof(*keys) * cap);
  if (keys == NULL) return NULL;
  *n = 0;
  for (int i = 0; i < nWorks; i++) {
    const struct simWork* w = works + i;
    for (int j = 0; j < w->prog->nPeers; j++) {
      const struct mendProgPeer* pp = w->prog->peers + j;
      if (pp->dir == MEND_SEND) keys[(*n)++] = (struct simConnKey){w->channel, pp->connIndex, w->rank, pp->rank, i, j};
    }
  }
  qsort(keys, *n, sizeof(*keys), connKeyCmp);
  return keys;
}

/* Join every receive connector to its peer's send connector (the stream's far end: its host, the
 * route's latency); both must carry the same segments. */
static int linkStreams(void) {
  size_t nSend;
  struct simConnKey* keys = sendKeys(&nSend);
  if (keys == NULL) return -1;
  int bad = 0;
  for (int i = 0; i < nWorks && !bad; i++) {
    struct simWork* w = works + i;
    for (int j = 0; j < w->prog->nPeers && !bad; j++) {
      const struct mendProgPeer* pp = w->prog->peers + j;
      if (pp->dir != MEND_RECV) continue;
      struct simConnKey key = {w->channel, pp->connIndex, pp->rank, w->rank, 0, 0};
      const struct simConnKey* k = bsearch(&key, keys, nSend, sizeof(*keys), connKeyCmp);
      bad = k == NULL || works[k->work].nSegs[k->peer] != w->nSegs[j];
      if (bad) {
        fprintf(stderr, "mend-sim: rank %d channel %d: no sender of its %d segments from rank %d\n", w->rank,
                w->channel, w->nSegs[j], pp->rank);
        break;
      }
      struct simStream* q = works[k->work].out + k->peer;
      q->to = w->hop[j];
      q->toHost = w->hopHost[j];
      q->latency = routeLatency(works[k->work].hopHost[k->peer], w->hopHost[j]);
      q->direct = directOn && works[k->work].hopHost[k->peer] == w->hopHost[j] && w->hopHost[j] % 2 == 1;
      if (q->direct) {
        char lo[48];
        snprintf(lo, sizeof(lo), "lo%d_%d", w->hopHost[j] / 2 / hostNicsN, w->hopHost[j] / 2 % hostNicsN);
        sg_link_t link = sg_link_by_name(lo);
        q->rate = link ? sg_link_get_bandwidth(link) : 0;
        bad = !(q->rate > 0);
        if (bad) fprintf(stderr, "mend-sim: no loopback %s for rank %d's stream from rank %d\n", lo, w->rank, pp->rank);
      }
      w->in[j] = q;
    }
  }
  free(keys);
  return bad ? -1 : 0;
}

/* The streams by the host they land on (landing, landingStart); direct ones have no anchor. */
static int indexLanding(int nServers) {
  nHosts = nServers * hostNicsN * 2;
  landingStart = calloc((size_t)nHosts + 1, sizeof(*landingStart));
  int n = 0;
  for (int i = 0; i < nWorks; i++)
    for (int j = 0; j < works[i].prog->nPeers; j++) n += works[i].prog->peers[j].dir == MEND_SEND && !works[i].out[j].direct;
  landing = malloc(sizeof(*landing) * (size_t)(n ? n : 1));
  if (landingStart == NULL || landing == NULL) return -1;
  for (int i = 0; i < nWorks; i++) {
    for (int j = 0; j < works[i].prog->nPeers; j++) {
      if (works[i].prog->peers[j].dir != MEND_SEND) continue;
      if (works[i].out[j].to == NULL) {
        fprintf(stderr, "mend-sim: rank %d channel %d: no receiver for its segments to rank %d\n", works[i].rank,
                works[i].channel, works[i].prog->peers[j].rank);
        return -1;
      }
      if (!works[i].out[j].direct) landingStart[works[i].out[j].toHost + 1]++;
    }
  }
  for (int h = 0; h < nHosts; h++) landingStart[h + 1] += landingStart[h];
  int* at = malloc(sizeof(*at) * (size_t)(nHosts ? nHosts : 1));
  if (at == NULL) return -1;
  memcpy(at, landingStart, sizeof(*at) * (size_t)nHosts);
  for (int i = 0; i < nWorks; i++)
    for (int j = 0; j < works[i].prog->nPeers; j++)
      if (works[i].prog->peers[j].dir == MEND_SEND && !works[i].out[j].direct)
        landing[at[works[i].out[j].toHost]++] = works[i].out + j;
  free(at);
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

/* Per host that streams land on an anchor, per send connector but direct ones a sender on its hop's host, then the
 * works on their home hosts; the barrier lets every anchor listen before a segment is put. */
static int startActors(struct mendOffline* off, const struct simOpts* o) {
  char idx[16], peer[16];
  if (homeNics(off, o->topo.nServers) != 0) return -1;
  for (int i = 0; i < nWorks; i++)
    if (placeWork(off, works + i, i) != 0) return -1;
  if (linkStreams() != 0 || indexLanding(o->topo.nServers) != 0) return -1;
  unsigned nWait = (unsigned)(landingStart[nHosts]);
  for (int h = 0; h < nHosts; h++) nWait += landingStart[h + 1] > landingStart[h];
  ready = sg_barrier_init(nWait);
  for (int h = 0; h < nHosts; h++) {
    if (landingStart[h + 1] == landingStart[h]) continue;
    snprintf(idx, sizeof(idx), "%d", h);
    const char* args[] = {idx, NULL};
    sg_actor_create_("anchor", landing[landingStart[h]]->to, anchorMain, 1, args);
  }
  for (int i = 0; i < nWorks; i++) {
    snprintf(idx, sizeof(idx), "%d", i);
    for (int j = 0; j < works[i].prog->nPeers; j++) {
      if (works[i].prog->peers[j].dir != MEND_SEND || works[i].out[j].direct) continue;
      snprintf(peer, sizeof(peer), "%d", j);
      const char* args[] = {idx, peer, NULL};
      sg_actor_create_("send", works[i].hop[j], sendMain, 2, args);
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
  for (int i = 0; i < nWorks; i++) actors += works[i].prog->nPeers; /* senders, and anchors at most */
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
  directOn = o.direct;
  hostNicsN = hostNics(&o.topo);
  if (loadPlatform(&o) != 0 || startActors(off, &o) != 0) return 1;
  simgrid_run();
  double t = simgrid_get_clock();
  sg_barrier_destroy(ready);
  double busbw = n > 1 ? 2.0 * (n - 1) / n * (double)o.bytes / t / 1e9 : 0;
  printf("ranks %d works %d allreduce %zu bytes schedule %s simulated %.6f s busbw %.4f GB/s\n", n, nWorks, o.bytes,
         ch.costUs[MEND_REPLAN_BALANCE] < 0 ? "ring/tree" : mendReplanName(ch.replan), t, busbw);
  for (int i = 0; i < nWorks; i++) {
    for (int j = 0; j < works[i].prog->nPeers; j++) {
      if (works[i].prog->peers[j].dir != MEND_SEND) continue;
      sg_sem_destroy(works[i].out[j].senderWake);
      sg_sem_destroy(works[i].out[j].recvWake);
      sg_sem_destroy(works[i].out[j].postWake);
      free(works[i].out[j].landing);
    }
    free(works[i].prog);
  }
  free(works);
  free(landing);
  free(landingStart);
  mendOfflineFree(off);
  return 0;
}
