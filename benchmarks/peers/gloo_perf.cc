// gloo_perf: Gloo's collectives (TCP transport) measured like the Mend tools, for comparison.
//
//   mend-run -np N gloo_perf <collective> [nccl-tests flags]     (float sum only)
//   collective: allreduce (ring), allgather, broadcast, reduce_scatter (halving-doubling),
//               alltoall
// Ranks come from RANK/WORLD_SIZE; they meet through a FileStore in MEND_GLOO_STORE (default: a
// directory under /tmp named after NCCL_COMM_ID's port, which mend-run makes unique per run).
// Gloo binds to GLOO_SOCKET_IFNAME if set (e.g. rail0 on the testbed), else to 127.0.0.1.
//
// Delayed ACKs: Gloo as packaged waits up to 40 ms per message for an ACK on its request/reply
// pattern. This program sets TCP_NODELAY on every connection and re-arms TCP_QUICKACK after every
// recv (by wrapping Gloo's connect/accept/recv), as a tuned deployment would; MEND_GLOO_QUICKACK=0
// measures Gloo as shipped.
//
// In place: allreduce and broadcast pass one buffer; allgather passes the rank's slot of the
// output as input; reduce_scatter is in place by nature (its out-of-place run first copies the
// input into the output buffer; the block lands at the start of the buffer); alltoall has no in-place form in Gloo (runs out of place, #wrong
// N/A as for the other tools).
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "peer_colls.h"

namespace {

bool quickAck() {
  static int on = -1;
  if (on < 0) {
    const char* e = getenv("MEND_GLOO_QUICKACK");
    on = !(e && strcmp(e, "0") == 0);
  }
  return on;
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

// Wrappers of the socket calls libgloo makes (it reads with recv and connects with connect and
// accept): they keep its sockets free of Nagle and delayed-ACK stalls.
extern "C" ssize_t recv(int fd, void* buf, size_t len, int flags) {
  static auto fn = real<ssize_t (*)(int, void*, size_t, int)>("recv");
  ssize_t n = fn(fd, buf, len, flags);
  if (n > 0 && quickAck()) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
  }
  return n;
}

extern "C" int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  static auto fn = real<int (*)(int, const struct sockaddr*, socklen_t)>("connect");
  int rc = fn(fd, addr, len);
  if ((rc == 0 || errno == EINPROGRESS) && quickAck()) tune(fd);
  return rc;
}

extern "C" int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  static auto fn = real<int (*)(int, struct sockaddr*, socklen_t*)>("accept");
  int rc = fn(fd, addr, len);
  if (rc >= 0 && quickAck()) tune(rc);
  return rc;
}

namespace {

struct GlooCtx {
  std::shared_ptr<gloo::rendezvous::Context> ctx;  // connected full mesh
  std::chrono::milliseconds timeout;               // per-operation bound
};

const uint32_t kTagBase = 0x4d000;

int supports(void*, const struct peerColl* pc, int type, int op) {
  if (type != ncclFloat32 || (pc->desc.reduces && op != ncclSum)) {
    fprintf(stderr, "gloo_perf: only float sum (-d float -o sum) is implemented\n");
    return 0;
  }
  return 1;
}

int barrier(void* p) {
  auto* g = static_cast<GlooCtx*>(p);
  gloo::BarrierOptions opts(g->ctx);
  opts.setTimeout(g->timeout);
  gloo::barrier(opts);
  return 0;
}

int sumDoubles(void* p, double* v, int n) {
  auto* g = static_cast<GlooCtx*>(p);
  gloo::AllreduceOptions opts(g->ctx);
  opts.setOutput(v, static_cast<size_t>(n));
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
  opts.setTag(kTagBase + 99);
  opts.setTimeout(g->timeout);
  gloo::allreduce(opts);
  return 0;
}

void reduceScatter(GlooCtx* g, float* buf, const struct benchCounts* c) {
  std::vector<int> recvElems(static_cast<size_t>(g->ctx->size), static_cast<int>(c->recvCount));
  gloo::ReduceScatterHalvingDoubling<float> rs(g->ctx, std::vector<float*>{buf}, static_cast<int>(c->sendCount),
                                               recvElems);
  rs.run();
}

int runColl(GlooCtx* g, const struct peerColl* pc, void* send, void* recv, const struct benchCounts* c, int root,
            int inplace) {
  float* in = static_cast<float*>(send);
  float* out = static_cast<float*>(recv);
  if (c->paramCount == 0) return 0;  // Gloo divides by the count in places; nothing to move anyway
  switch (pc->id) {
    case peerAllReduce: {
      gloo::AllreduceOptions opts(g->ctx);
      if (!inplace) opts.setInput(in, c->paramCount);
      opts.setOutput(out, c->paramCount);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(kTagBase + 1);
      opts.setTimeout(g->timeout);
      gloo::allreduce(opts);
      return 0;
    }
    case peerAllGather: {
      gloo::AllgatherOptions opts(g->ctx);
      opts.setInput(in, c->sendCount);
      opts.setOutput(out, c->recvCount);
      opts.setTag(kTagBase + 2);
      opts.setTimeout(g->timeout);
      gloo::allgather(opts);
      return 0;
    }
    case peerBroadcast: {
      gloo::BroadcastOptions opts(g->ctx);
      if (!inplace && g->ctx->rank == root) opts.setInput(in, c->paramCount);
      opts.setOutput(out, c->paramCount);
      opts.setRoot(root);
      opts.setTag(kTagBase + 3);
      opts.setTimeout(g->timeout);
      gloo::broadcast(opts);
      return 0;
    }
    case peerReduceScatter:
      if (!inplace) memcpy(out, in, c->sendCount * sizeof(float));
      reduceScatter(g, out, c);
      return 0;
    case peerAlltoAll: {
      gloo::AlltoallOptions opts(g->ctx);
      std::vector<float> scratch;
      if (inplace) {  // no in-place form: the input is copied out first
        scratch.assign(in, in + c->sendCount);
        in = scratch.data();
      }
      opts.setInput(in, c->sendCount);
      opts.setOutput(out, c->recvCount);
      opts.setTag(kTagBase + 5);
      opts.setTimeout(g->timeout);
      gloo::alltoall(opts);
      return 0;
    }
    default:
      return -1;
  }
}

int run(void* p, const struct peerColl* pc, void* send, void* recv, const struct benchCounts* c, int type,
        int op, int root, int inplace) {
  (void)type;
  (void)op;
  try {
    return runColl(static_cast<GlooCtx*>(p), pc, send, recv, c, root, inplace);
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_perf: %s\n", e.what());
    return -1;
  }
}

// Reduce-scatter (halving-doubling) leaves rank r's block at the start of the buffer it worked on.
size_t resultOffset(void* p, const struct peerColl* pc, const struct benchCounts* c, int inplace) {
  auto* g = static_cast<GlooCtx*>(p);
  if (pc->id == peerReduceScatter) return 0;
  return inplace ? c->recvInplace * static_cast<size_t>(g->ctx->rank) : 0;
}

std::string storeDir() {
  const char* s = getenv("MEND_GLOO_STORE");
  if (s && *s) return s;
  const char* id = getenv("NCCL_COMM_ID");
  std::string tag = id && strrchr(id, ':') ? std::string(strrchr(id, ':') + 1) : std::string("default");
  return "/tmp/mend-gloo-store-" + tag;
}

}  // namespace

int main(int argc, char** argv) {
  const struct peerColl* pc = peerCollByArg(argc > 1 ? argv[1] : nullptr);
  if (!pc) return benchUsage;
  int rank, size;
  if (peerEnvRank(&rank, &size) != 0) {
    fprintf(stderr, "gloo_perf: set RANK and WORLD_SIZE (start it with mend-run -np N)\n");
    return benchUsage;
  }
  GlooCtx g;
  g.timeout = std::chrono::milliseconds(300000);
  try {
    gloo::transport::tcp::attr attr;
    const char* ifname = getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) attr.iface = ifname;
    else attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    std::string dir = storeDir();
    mkdir(dir.c_str(), 0700);
    gloo::rendezvous::FileStore fileStore(dir);
    gloo::rendezvous::PrefixStore store(pc->arg, fileStore);
    g.ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    g.ctx->setTimeout(g.timeout);
    g.ctx->connectFullMesh(store, dev);
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_perf: cannot connect: %s\n", e.what());
    return benchFailed;
  }
  char label[64];
  snprintf(label, sizeof(label), "Gloo (tcp%s), %s", quickAck() ? ", quick ACKs" : "", pc->desc.name);
  struct peerBackend be = {};
  be.label = label;
  be.rank = rank;
  be.size = size;
  be.ctx = &g;
  be.barrier = barrier;
  be.sumDoubles = sumDoubles;
  be.run = run;
  be.resultOffset = resultOffset;
  be.supports = supports;
  argv[1] = argv[0];
  int rc;
  try {
    rc = peerMain(argc - 1, argv + 1, pc, &be);
    barrier(&g);  // nobody closes its sockets while another still reads
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo_perf: %s\n", e.what());
    rc = benchFailed;
  }
  return rc;
}
