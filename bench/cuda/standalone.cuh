/* standalone.cuh: what the single-file GPU probes (readbw.cu, syncfloor.cu,
 * l2ahead.cu, ringfloor.cu: built alone with nvcc, outside the library)
 * share: a CUDA call checked (the error named, then exit), the device opened
 * with a stream, and a timing of f() on a stream: the median of 7 runs
 * after 2 warm-ups, in ms. Their 16-byte
 * streaming loads stay typed where they are (readbw.cu's over void *,
 * chain9b.cuh's over uint4): one shared untyped form changed syncfloor's
 * kernels' code (session 26). */
#ifndef TS_BENCH_CUDA_STANDALONE_CUH
#define TS_BENCH_CUDA_STANDALONE_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                           \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

template <typename F>
static float time_ms(F f, cudaStream_t st = 0) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float t[7];
    for (int r = -2; r < 7; r++) {
        CK(cudaEventRecord(a, st));
        f();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 0) t[r] = ms;
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    qsort(t, 7, sizeof t[0], cmpf);
    return t[3];
}

/* the probe's device (selected), its properties and a non-blocking stream */
static void open_device(int dev, cudaDeviceProp &pr, cudaStream_t &st) {
    CK(cudaSetDevice(dev));
    CK(cudaGetDeviceProperties(&pr, dev));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
}

#endif
