// GPU fault fixtures for the sandbox classifier tests (tests/sandbox/test_gpu_faults.py).
// Usage: fault ok|illegal|trap|spin   (spin: a kernel that never finishes, for the hang test)
// Prints CUDA errors the way CUDA programs usually do ("CUDA error: <string> (<name>)") and exits 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

__global__ void fill(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3;
}

__global__ void illegal(int *out) {
  int *bad = reinterpret_cast<int *>(0xdead0000ull + 4096ull * 1024ull * 1024ull);
  bad[threadIdx.x] = out[0];  // far outside any allocation
}

__global__ void trap(int *out) {
  if (threadIdx.x == 0) out[0] = 1;
  __trap();
}

__global__ void spin(volatile int *flag) {
  while (flag[0] == 0) {
  }
}

static int check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: CUDA error: %s (%s)\n", what, cudaGetErrorString(err), cudaGetErrorName(err));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "ok";
  int dev = 0;
  cudaDeviceProp prop;
  if (check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties")) return 1;
  std::printf("device: %s sm_%d%d\n", prop.name, prop.major, prop.minor);
  cudaFuncAttributes attr;
  const void *fn = std::strcmp(mode, "illegal") == 0 ? (const void *)illegal
                   : std::strcmp(mode, "trap") == 0  ? (const void *)trap
                                                     : (const void *)fill;
  if (check(cudaFuncGetAttributes(&attr, fn), "cudaFuncGetAttributes")) return 1;
  int cc = prop.major * 10 + prop.minor;
  std::printf("kernel: binaryVersion=%d ptxVersion=%d\n", attr.binaryVersion, attr.ptxVersion);
  if (attr.ptxVersion > 0 && attr.ptxVersion < cc && attr.binaryVersion == cc)
    std::printf("note: kernel JIT-compiled from PTX compute_%d for sm_%d (no SASS for this GPU)\n",
                attr.ptxVersion, cc);
  const int n = 1024;
  int *d = nullptr;
  if (check(cudaMalloc(&d, n * sizeof(int)), "cudaMalloc")) return 1;
  if (check(cudaMemset(d, 0, n * sizeof(int)), "cudaMemset")) return 1;
  if (std::strcmp(mode, "spin") == 0) {
    std::printf("launching a kernel that never finishes\n");
    std::fflush(stdout);
    spin<<<1, 1>>>(d);
  } else if (std::strcmp(mode, "illegal") == 0) illegal<<<1, 32>>>(d);
  else if (std::strcmp(mode, "trap") == 0) trap<<<1, 32>>>(d);
  else fill<<<(n + 255) / 256, 256>>>(d, n);
  if (check(cudaGetLastError(), "launch")) return 1;
  if (check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
  int h[n];
  if (check(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  for (int i = 0; i < n; ++i)
    if (h[i] != i * 3) {
      std::fprintf(stderr, "wrong output at %d: %d\n", i, h[i]);
      return 2;
    }
  std::printf("fixture ok\n");
  return 0;
}
