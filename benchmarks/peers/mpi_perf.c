/* mpi_perf: Open MPI's collectives measured like the Mend tools, for comparison.
 *
 *   mpirun --allow-run-as-root --oversubscribe -np N mpi_perf <collective> [nccl-tests flags]
 *   collective: allreduce (MPI_Allreduce), allgather (MPI_Allgather), broadcast (MPI_Bcast),
 *               reduce_scatter (MPI_Reduce_scatter_block), alltoall (MPI_Alltoall)
 * In place uses MPI_IN_PLACE (MPI_Bcast is always in place; its out-of-place run copies at the
 * root first, as an out-of-place broadcast must). Types: the integer types, float, double. */
#include <mpi.h>
#include <string.h>
#include "peer_colls.h"

static MPI_Datatype mpiType(int t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpiOp(int op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

static int supports(void* ctx, const struct peerColl* pc, int type, int op) {
  (void)ctx;
  if (mpiType(type) == MPI_DATATYPE_NULL) {
    fprintf(stderr, "mpi_perf: type %s has no MPI datatype here\n", benchTypeName(type));
    return 0;
  }
  if (pc->desc.reduces && mpiOp(op) == MPI_OP_NULL) {
    fprintf(stderr, "mpi_perf: op %s has no MPI equivalent\n", benchOpName(op));
    return 0;
  }
  return 1;
}

static int run(void* ctx, const struct peerColl* pc, void* send, void* recv, const struct benchCounts* c,
               int type, int op, int root, int inplace) {
  (void)ctx;
  MPI_Datatype t = mpiType(type);
  int n = (int)c->paramCount, rank;
  const void* in = inplace ? MPI_IN_PLACE : send;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  switch (pc->id) {
    case peerAllReduce: return MPI_Allreduce(in, recv, n, t, mpiOp(op), MPI_COMM_WORLD);
    case peerAllGather: return MPI_Allgather(in, n, t, recv, n, t, MPI_COMM_WORLD);
    case peerReduceScatter: return MPI_Reduce_scatter_block(in, recv, n, t, mpiOp(op), MPI_COMM_WORLD);
    case peerAlltoAll: return MPI_Alltoall(in, n, t, recv, n, t, MPI_COMM_WORLD);
    case peerBroadcast:
      if (!inplace && rank == root) memcpy(recv, send, c->paramCount * benchTypeSize(type));
      return MPI_Bcast(recv, n, t, root, MPI_COMM_WORLD);
    default: return -1;
  }
}

/* With MPI_IN_PLACE, MPI_Reduce_scatter_block leaves the block at the start of recvbuf. */
static size_t resultOffset(void* ctx, const struct peerColl* pc, const struct benchCounts* c, int inplace) {
  (void)ctx;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!inplace || pc->id == peerReduceScatter) return 0;
  return c->recvInplace * (size_t)rank;
}

static int barrier(void* ctx) {
  (void)ctx;
  return MPI_Barrier(MPI_COMM_WORLD);
}

static int sumDoubles(void* ctx, double* v, int n) {
  (void)ctx;
  return MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const struct peerColl* pc = argc > 1 ? peerCollByArg(argv[1]) : peerCollByArg(NULL);
  if (!pc) {
    MPI_Finalize();
    return benchUsage;
  }
  char ver[MPI_MAX_LIBRARY_VERSION_STRING], label[96];
  int len = 0;
  MPI_Get_library_version(ver, &len);
  ver[strcspn(ver, ",\n")] = '\0';
  snprintf(label, sizeof(label), "%.60s, %s", ver, pc->desc.name);
  struct peerBackend be = {.label = label, .barrier = barrier, .sumDoubles = sumDoubles, .run = run,
                           .resultOffset = resultOffset, .supports = supports};
  MPI_Comm_rank(MPI_COMM_WORLD, &be.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &be.size);
  argv[1] = argv[0];  /* the flags follow the collective */
  int rc = peerMain(argc - 1, argv + 1, pc, &be);
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}
