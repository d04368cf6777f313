/* comm.cu: the collectives of tensor parallelism (backend.h, ts_comm) over
 * NCCL, one communicator a device, for the CUDA backend's streams.
 *
 * Owns: loading NCCL at run time, the communicators (ncclCommInitAll: one
 * process, one thread a rank), the all-gather + fixed-order sum that is the
 * engine's all-reduce, the head's gather to rank 0, their device buffers.
 *
 * Why dlopen and no link: a CUDA build must run where NCCL is not
 * installed (one GPU needs none; issue 16 asks that whatever the build
 * links beyond the CUDA runtime be static or listed), so NCCL is looked for
 * when --gpus asks for it: libnccl.so.2 on the loader's path, or the file
 * $TS_NCCL_LIB names. The few declarations below are NCCL's stable C ABI
 * (nccl.h, 2.x): result and type enums as ints, opaque communicators.
 *
 * Why all-gather + sum instead of ncclAllReduce: NCCL's reduction order for
 * an element depends on the algorithm, the channel and the element's place
 * in the message, so a row's sum could change with the pass's row count;
 * then a verify of M+1 rows would not reproduce M+1 decode steps (the
 * row-exactness rule, backend.h). Gathering every rank's partials and adding
 * them in rank order gives each element one order whatever the message, the
 * same on every rank, and the same bits as the host collective (model/tp.c).
 * The cost is N times the bytes of a reduce-scatter + all-gather; at decode
 * that is N * H * 4 bytes a sum (32 KB for H = 4096 on 2 GPUs): latency,
 * not bandwidth, is what such a message costs either way.
 *
 * Streams and graphs: every call is enqueued on the rank's own stream, so
 * it is ordered with the rank's kernels and can be captured (NCCL supports
 * stream capture); buffers are reserved at session creation, before any
 * capture, and never move while a graph may hold them (a larger reserve
 * keeps the old buffers until the comm is destroyed).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"

extern "C" {
#include "backend.h"
}

typedef int ncclResult_t;           /* ncclSuccess = 0 */
typedef struct ncclComm *ncclComm_t;
enum { NCCL_FLOAT32 = 7 };          /* ncclFloat32 */

typedef struct {
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*all_gather)(const void *, void *, size_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*send)(const void *, size_t, int, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, int, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*abort)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*version)(int *);
} nccl_api;

struct old_buf { void *p; int dev; size_t bytes; struct old_buf *next; };

typedef struct {
    int n;
    void *lib;
    nccl_api f;
    ncclComm_t comm[TS_TP_MAX];
    int dev[TS_TP_MAX];
    float *gbuf[TS_TP_MAX]; /* [n, cap_rows * H]: every rank's partials */
    float *stage;                 /* rank 0: [cap_rows, V] the other ranks' head pieces */
    size_t gbytes, sbytes;        /* their sizes (counted: ts_mem_account) */
    int cap_rows;
    int64_t H, V;
    struct old_buf *old;          /* buffers a captured graph may still hold */
    volatile int aborted;         /* n_abort ran: the communicators are gone */
} ncomm;

/* x[i] = g[0][i] + g[1][i] + ... in rank order (plain adds: no contraction
 * can change them) */
__global__ void k_sum_ranks(float *__restrict__ x, const float *__restrict__ g, int n, size_t count) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float s = g[i];
        for (int q = 1; q < n; q++) s += g[(size_t)q * count + i];
        x[i] = s;
    }
}

/* a backend's device, a stream's CUDA stream (backend.cu) */
extern "C" int tsc_backend_device(ts_backend *be);
extern "C" cudaStream_t tsc_stream_of(ts_stream *s);

/* device memory outside the backends' allocators, counted all the same */
static void *dmalloc(int dev, size_t bytes) {
    void *p = NULL;
    cudaSetDevice(dev);
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, (int64_t)bytes);
    return p;
}
static void dfree(int dev, void *p, size_t bytes) {
    if (!p) return;
    cudaSetDevice(dev);
    cudaFree(p);
    ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, -(int64_t)bytes);
}

static void nfail(ts_stream *s, ncomm *h, ncclResult_t r, const char *what) {
    char m[256];
    snprintf(m, sizeof m, "NCCL %s: %s", what, h->f.error_string ? h->f.error_string(r) : "error");
    ts_be_fail(s, TS_E_IO, m);
}

static void n_stopped(ts_stream *s) {
    ts_be_fail(s, TS_E_IO, "tensor parallelism: NCCL was stopped after a pass ran past TS_TP_TIMEOUT_S (a GPU stuck "
                           "or failed); this engine's ranks are stopped");
}

static void n_allreduce(ts_comm *c, int rank, ts_stream *s, float *x, size_t count) {
    ncomm *h = (ncomm *)c->impl;
    if (s->err) return;
    if (h->aborted) { n_stopped(s); return; }
    if (count > (size_t)h->cap_rows * (size_t)h->H) {
        ts_be_fail(s, TS_E_ARG, "tensor parallelism: a sum of more rows than the collectives reserved");
        return;
    }
    cudaStream_t cs = tsc_stream_of(s);
    ncclResult_t r = h->f.all_gather(x, h->gbuf[rank], count, NCCL_FLOAT32, h->comm[rank], cs);
    if (r) { nfail(s, h, r, "all-gather"); return; }
    const int blocks = (int)((count + 255) / 256 < 1024 ? (count + 255) / 256 : 1024);
    k_sum_ranks<<<blocks > 0 ? blocks : 1, 256, 0, cs>>>(x, h->gbuf[rank], h->n, count);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ts_be_fail(s, TS_E_IO, cudaGetErrorString(e));
}

static void n_gather_cols(ts_comm *c, int rank, ts_stream *s, const float *src, int64_t rows, const int64_t *lo,
                          const int64_t *cols, float *dst, int64_t ld_dst) {
    ncomm *h = (ncomm *)c->impl;
    if (s->err) return;
    if (h->aborted) { n_stopped(s); return; }
    if (rows > h->cap_rows) {
        ts_be_fail(s, TS_E_ARG, "tensor parallelism: a head of more rows than the collectives reserved");
        return;
    }
    cudaStream_t cs = tsc_stream_of(s);
    ncclResult_t r = h->f.group_start();
    int64_t off = 0;
    for (int q = 1; q < h->n && !r; q++) {
        const size_t cnt = (size_t)(rows * cols[q]);
        if (!cnt) continue;
        if (rank == 0) r = h->f.recv(h->stage + off, cnt, NCCL_FLOAT32, q, h->comm[0], cs);
        else if (rank == q) r = h->f.send(src, cnt, NCCL_FLOAT32, 0, h->comm[q], cs);
        off += rows * cols[q];
    }
    ncclResult_t r2 = h->f.group_end();
    if (r || r2) { nfail(s, h, r ? r : r2, "gather of the head"); return; }
    if (rank) return;
    cudaError_t e = cudaSuccess;
    if (rows > 0 && cols[0] > 0)
        e = cudaMemcpy2DAsync(dst + lo[0], (size_t)ld_dst * 4, src, (size_t)cols[0] * 4, (size_t)cols[0] * 4,
                              (size_t)rows, cudaMemcpyDeviceToDevice, cs);
    off = 0;
    for (int q = 1; q < h->n && e == cudaSuccess; q++) {
        if (rows <= 0 || cols[q] <= 0) continue;
        e = cudaMemcpy2DAsync(dst + lo[q], (size_t)ld_dst * 4, h->stage + off, (size_t)cols[q] * 4, (size_t)cols[q] * 4,
                              (size_t)rows, cudaMemcpyDeviceToDevice, cs);
        off += rows * cols[q];
    }
    if (e != cudaSuccess) ts_be_fail(s, TS_E_IO, cudaGetErrorString(e));
}

static int n_reserve(ts_comm *c, int rows, int64_t H, int64_t V) {
    ncomm *h = (ncomm *)c->impl;
    if (rows <= h->cap_rows && H <= h->H && V <= h->V) return 0;
    const int R = rows > h->cap_rows ? rows : h->cap_rows;
    H = H > h->H ? H : h->H;
    V = V > h->V ? V : h->V;
    const size_t gb = sizeof(float) * (size_t)h->n * (size_t)R * (size_t)H, sb = sizeof(float) * (size_t)R * (size_t)V;
    float *g[TS_TP_MAX] = {0}, *stage = NULL;
    int ok = 1;
    for (int q = 0; q < h->n && ok; q++) ok = (g[q] = (float *)dmalloc(h->dev[q], gb)) != NULL;
    if (ok) ok = (stage = (float *)dmalloc(h->dev[0], sb)) != NULL;
    if (!ok) {
        for (int q = 0; q < h->n; q++) dfree(h->dev[q], g[q], gb);
        return TS_E_NOMEM;
    }
    /* the old buffers stay until destroy: a captured graph may hold them */
    for (int q = 0; q <= h->n; q++) {
        void *p = q < h->n ? (void *)h->gbuf[q] : (void *)h->stage;
        if (!p) continue;
        struct old_buf *o = (struct old_buf *)malloc(sizeof *o);
        if (!o) continue; /* (then it is leaked, not freed under a graph) */
        o->p = p, o->dev = h->dev[q < h->n ? q : 0], o->bytes = q < h->n ? h->gbytes : h->sbytes, o->next = h->old;
        h->old = o;
    }
    for (int q = 0; q < h->n; q++) h->gbuf[q] = g[q];
    h->stage = stage;
    h->gbytes = gb, h->sbytes = sb;
    h->cap_rows = R, h->H = H, h->V = V;
    return 0;
}

/* ncclCommAbort stops the communicators' kernels in flight (a stream
 * waiting on them then completes with an error) and frees them */
static void n_abort(ts_comm *c) {
    ncomm *h = (ncomm *)c->impl;
    if (h->aborted) return;
    h->aborted = 1;
    for (int q = 0; q < h->n; q++)
        if (h->comm[q] && h->f.abort) {
            h->f.abort(h->comm[q]);
            h->comm[q] = NULL;
        }
}

static void n_destroy(ts_comm *c) {
    if (!c) return;
    ncomm *h = (ncomm *)c->impl;
    if (h) {
        for (int q = 0; q < h->n; q++) {
            cudaSetDevice(h->dev[q]);
            if (!h->aborted) cudaDeviceSynchronize();
            if (h->comm[q] && h->f.destroy) h->f.destroy(h->comm[q]);
            dfree(h->dev[q], h->gbuf[q], h->gbytes);
        }
        dfree(h->dev[0], h->stage, h->sbytes);
        while (h->old) {
            struct old_buf *o = h->old;
            h->old = o->next;
            dfree(o->dev, o->p, o->bytes);
            free(o);
        }
        if (h->lib) dlclose(h->lib);
        free(h);
    }
    free(c);
}


extern "C" int ts_cuda_comm_nccl(ts_backend *const *be, int n, ts_comm **out, ts_error *err) {
    *out = NULL;
    if (n < 1 || n > TS_TP_MAX) return ts_fail(err, TS_E_ARG, "NCCL: %d ranks (1 to %d)", n, TS_TP_MAX);
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* no NVLink multicast, ever (the device notes) */
    const char *path = getenv("TS_NCCL_LIB");
    void *lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return ts_fail(err, TS_E_UNSUPPORTED, "NCCL is not installed or not found (%s): --gpus needs libnccl.so.2 on the "
                       "loader's path, or TS_NCCL_LIB=/path/to/libnccl.so.2", dlerror());
    ncomm *h = (ncomm *)calloc(1, sizeof *h);
    ts_comm *c = (ts_comm *)calloc(1, sizeof *c);
    if (!h || !c) {
        free(h), free(c), dlclose(lib);
        return ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    h->n = n;
    h->lib = lib;
#define SYM(field, name) (*(void **)&h->f.field = dlsym(lib, name))
    SYM(init_all, "ncclCommInitAll");
    SYM(all_gather, "ncclAllGather");
    SYM(send, "ncclSend");
    SYM(recv, "ncclRecv");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
    SYM(destroy, "ncclCommDestroy");
    SYM(abort, "ncclCommAbort");
    SYM(error_string, "ncclGetErrorString");
    SYM(version, "ncclGetVersion");
#undef SYM
    c->n = n;
    c->name = "nccl";
    c->capturable = 1;
    c->allreduce = n_allreduce;
    c->gather_cols = n_gather_cols;
    c->reserve = n_reserve;
    c->abort = n_abort;
    c->destroy = n_destroy;
    c->impl = h;
    if (!h->f.init_all || !h->f.all_gather || !h->f.send || !h->f.recv || !h->f.group_start || !h->f.group_end ||
        !h->f.destroy) {
        n_destroy(c);
        return ts_fail(err, TS_E_UNSUPPORTED, "NCCL: %s lacks ncclCommInitAll/AllGather/Send/Recv (NCCL 2.7 or newer needed)",
                       path && *path ? path : "libnccl.so.2");
    }
    for (int q = 0; q < n; q++) {
        h->dev[q] = tsc_backend_device(be[q]);
        for (int p = 0; p < q; p++)
            if (h->dev[p] == h->dev[q]) {
                n_destroy(c);
                return ts_fail(err, TS_E_UNSUPPORTED, "NCCL: ranks %d and %d are both on CUDA device %d (NCCL takes one "
                               "rank a device; TS_TP_COMM=host runs them through host memory)", p, q, h->dev[q]);
            }
    }
    ncclResult_t r = h->f.init_all(h->comm, n, h->dev);
    if (r) {
        char m[256];
        snprintf(m, sizeof m, "%s", h->f.error_string ? h->f.error_string(r) : "error");
        memset(h->comm, 0, sizeof h->comm);
        n_destroy(c);
        return ts_fail(err, TS_E_IO, "NCCL: cannot set up the communicators of %d devices: %s", n, m);
    }
    *out = c;
    return 0;
}
