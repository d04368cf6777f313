/* bind.h: the tensor binder of load.c, for the other binders of model/
 * (dflash.c binds the DFlash drafter with the same checks and the same
 * allocation accounting).
 *
 * A binder binds tensors of one set `st` under the quantization of `cfg`
 * (q_bits, q_group: the only fields it reads), adds the bytes of every bound
 * matrix to m->weight_bytes, and reports every allocation it keeps to sink;
 * dry: no tensor data is read (the memory plan's run). */
#ifndef TS_BIND_H
#define TS_BIND_H

#include "model/model.h"

typedef struct binder {
    ts_st_set *st;
    const ts_config *cfg;
    ts_error *err;
    ts_model *m;
    int dry;            /* ts_model_size: no tensor data read, nothing packed */
    int stream;         /* routed experts streamed: not packed, never read here */
    ts_bind_sink sink;  /* every allocation the model keeps, as it is made (NULL: none) */
    void *user;
    uint64_t dropped;   /* file bytes of the packed matrices, released from the mapping */
    ts_backend *dev;    /* a backend whose memory the host cannot address (CUDA): the f32
                           vectors and the prepared matrices live there; NULL: host */
} binder;

/* The one allocator of what a model keeps (host or b->dev memory, + the sink). */
void *ts_bind_keep(binder *b, size_t bytes, ts_mem_cat cat, const char *what, int backend);
/* A [rows, cols] matrix (float, or MLX-quantized with .scales/.biases). */
int ts_bind_mat(binder *b, const char *name, int64_t rows, int64_t cols, ts_weight *w);
/* A [n] vector as f32 (1 + w when add_one). */
int ts_bind_vec(binder *b, const char *name, int64_t n, int add_one, float **out);

#endif
