/* The empty kernel that d2d_bw launches to time a bare kernel launch, behind a C launcher so the
 * tool itself stays C. */
#include <cuda_runtime.h>

__global__ void d2dEmptyKernel(void) {}

extern "C" cudaError_t d2dLaunchEmpty(cudaStream_t stream) {
  d2dEmptyKernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}
