/* alltoall_perf: ncclAlltoAll, measured and checked like nccl-tests' tool
 * of the same name. The collective is described in common/colls.c. */
#include "bench.h"

int main(int argc, char** argv) { return benchMain(argc, argv, &benchCollAlltoAll); }
