/* d2d_bw: what one GPU can do on its own, as the yardstick for the perf tools' device-mode numbers
 * (built only when the build has nvcc).
 *
 *   d2d_bw [-d device] [-b 1K] [-e 1G] [-f 2] [-n copies] [-w warmup] [-l launches]
 *
 * Copy bandwidth: cudaMemcpyAsync device to device on one stream, n copies per size timed with
 * CUDA events; the bandwidth counts the bytes read plus the bytes written (2 x size per copy),
 * i.e. the memory traffic, so it compares with the memory's rated bandwidth.
 * Launch latency: an empty kernel (nvcc-compiled, d2d_kernel.cu), launched l times back to back
 * (per launch: the rate launches go through, the host's cost or the GPU's, whichever is slower)
 * and launched then waited for l times (per round trip: what a small call costs at best);
 * cudaMemsetAsync of 4 bytes is timed the same way. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>

cudaError_t d2dLaunchEmpty(cudaStream_t stream);  /* d2d_kernel.cu */

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "d2d_bw: CUDA failure %s:%d '%s' in %s\n", __FILE__, __LINE__,                 \
              cudaGetErrorString(e_), #call);                                                        \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

struct opts {
  int device;         /* -d: GPU index */
  size_t minBytes;    /* -b */
  size_t maxBytes;    /* -e */
  size_t factor;      /* -f: size step factor */
  int copies;         /* -n: timed copies per size */
  int warmup;         /* -w: untimed copies per size */
  int launches;       /* -l: launches per latency measurement */
};

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Bytes with an optional K, M or G suffix (binary units); 0 if valid. */
static int parseSize(const char* text, size_t* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || v < 1) return -1;
  double unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') unit = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') unit = 1024.0 * 1024 * 1024, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0' || v * unit > 1e15) return -1;
  *out = (size_t)(v * unit);
  return 0;
}

static int parseCount(const char* text, int lo, int* out) {
  char* end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > 1000000) return -1;
  *out = (int)v;
  return 0;
}

static void usage(FILE* f) {
  fprintf(f, "usage: d2d_bw [-d device (0)] [-b minbytes (1K)] [-e maxbytes (1G)] [-f factor (2)] "
          "[-n copies per size (20)] [-w warmup copies (3)] [-l launches (1000)]\n");
}

static int parseArgs(int argc, char** argv, struct opts* o) {
  *o = (struct opts){.minBytes = 1024, .maxBytes = 1u << 30, .factor = 2, .copies = 20, .warmup = 3,
                     .launches = 1000};
  int c;
  while ((c = getopt(argc, argv, "d:b:e:f:n:w:l:h")) != -1) {
    int bad = 0;
    switch (c) {
      case 'd': bad = parseCount(optarg, 0, &o->device); break;
      case 'b': bad = parseSize(optarg, &o->minBytes); break;
      case 'e': bad = parseSize(optarg, &o->maxBytes); break;
      case 'f': bad = parseSize(optarg, &o->factor) || o->factor < 2; break;
      case 'n': bad = parseCount(optarg, 1, &o->copies); break;
      case 'w': bad = parseCount(optarg, 0, &o->warmup); break;
      case 'l': bad = parseCount(optarg, 1, &o->launches); break;
      case 'h': usage(stdout); exit(0);
      default: bad = 1;
    }
    if (bad) {
      fprintf(stderr, "d2d_bw: invalid value for -%c\n", c == '?' ? optopt : c);
      usage(stderr);
      return -1;
    }
  }
  if (optind < argc || o->minBytes > o->maxBytes) {
    usage(stderr);
    return -1;
  }
  return 0;
}

static void header(const struct opts* o) {
  struct cudaDeviceProp p;
  int runtime = 0, driver = 0;
  CHECK(cudaGetDeviceProperties(&p, o->device));
  CHECK(cudaRuntimeGetVersion(&runtime));
  CHECK(cudaDriverGetVersion(&driver));
  printf("# d2d_bw: GPU %d [%04x:%02x:%02x] %s, %.1f GiB, CUDA runtime %d, driver %d\n", o->device,
         p.pciDomainID, p.pciBusID, p.pciDeviceID, p.name, p.totalGlobalMem / 1073741824.0, runtime, driver);
  printf("# device-to-device cudaMemcpyAsync, %d copies per size after %d warm-up copies, timed with "
         "CUDA events;\n# bandwidth = (bytes read + bytes written) / time = 2 x size / time; sizes whose "
         "source and\n# destination fit in the %d MiB L2 cache can beat the memory's rate\n",
         o->copies, o->warmup, p.l2CacheSize >> 20);
  printf("# %12s  %10s  %10s\n", "size (B)", "time (us)", "bw (GB/s)");
}

static void copySweep(const struct opts* o, cudaStream_t s) {
  void *src = NULL, *dst = NULL;
  CHECK(cudaMalloc(&src, o->maxBytes));
  CHECK(cudaMalloc(&dst, o->maxBytes));
  CHECK(cudaMemset(src, 1, o->maxBytes));
  CHECK(cudaMemset(dst, 0, o->maxBytes));
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (size_t size = o->minBytes; size <= o->maxBytes; size *= o->factor) {
    for (int i = 0; i < o->warmup; i++) CHECK(cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaEventRecord(start, s));
    for (int i = 0; i < o->copies; i++) CHECK(cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaEventRecord(stop, s));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    double sec = ms / 1e3 / o->copies;
    printf("  %12zu  %10.2f  %10.2f\n", size, sec * 1e6, 2.0 * (double)size / sec / 1e9);
    if (size > o->maxBytes / o->factor) break;
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
}

/* Microseconds per operation: back to back (then one wait), and each one waited for. */
static void timeLaunches(const struct opts* o, cudaStream_t s, int memset4, void* buf, double* rate,
                         double* roundTrip) {
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 10; i++) CHECK(memset4 ? cudaMemsetAsync(buf, 0, 4, s) : d2dLaunchEmpty(s));
    CHECK(cudaStreamSynchronize(s));
    double t0 = nowSec();
    for (int i = 0; i < o->launches; i++) {
      CHECK(memset4 ? cudaMemsetAsync(buf, 0, 4, s) : d2dLaunchEmpty(s));
      if (pass == 1) CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaStreamSynchronize(s));
    *(pass == 0 ? rate : roundTrip) = (nowSec() - t0) / o->launches * 1e6;
  }
}

int main(int argc, char** argv) {
  struct opts o;
  if (parseArgs(argc, argv, &o) != 0) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    fprintf(stderr, "d2d_bw: no GPU (cudaGetDeviceCount: %s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 1;
  }
  if (o.device >= n) {
    fprintf(stderr, "d2d_bw: -d %d, but there are %d GPU(s)\n", o.device, n);
    return 2;
  }
  CHECK(cudaSetDevice(o.device));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  header(&o);
  copySweep(&o, s);
  void* buf = NULL;
  CHECK(cudaMalloc(&buf, 4));
  double kRate, kTrip, mRate, mTrip;
  timeLaunches(&o, s, 0, buf, &kRate, &kTrip);
  timeLaunches(&o, s, 1, buf, &mRate, &mTrip);
  printf("# empty kernel <<<1,1>>>  : %.2f us per launch back to back, %.2f us launch + "
         "cudaStreamSynchronize (%d each)\n", kRate, kTrip, o.launches);
  printf("# cudaMemsetAsync of 4 B : %.2f us per call back to back, %.2f us call + "
         "cudaStreamSynchronize (%d each)\n", mRate, mTrip, o.launches);
  CHECK(cudaFree(buf));
  CHECK(cudaStreamDestroy(s));
  return 0;
}
