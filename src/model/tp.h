/* tp.h: tensor parallelism inside one process (issue 21): N ranks, each a
 * narrower Qwen3.5 of its own on its own backend, joined by two sums a
 * layer and a gather of the head's vocabulary pieces.
 *
 * Owns: the host implementation of the collectives (the contract, ts_comm,
 * is backend.h's), the rank threads, the dispatch of a pass to every rank
 * and its watchdog (ts_tp_run), the translation of a session buffer of
 * rank 0 to the same buffer of another rank (ts_tp_xlate).
 * Does not own: the split (engine/shard.c decides which rows and columns a
 * rank holds; shard_slice.c cuts a rank's slices), the forward (qwen35.c
 * calls the collectives), the engine and session plumbing (engine.c,
 * session.c), NCCL (src/cuda/comm.cu, when built).
 *
 * Why N narrower models: a rank's piece of a Qwen3.5 is a Qwen3.5 with
 * nq/N query heads, its KV heads, Hv/N value heads, I/N (Is/N, Im/N) FFN
 * columns and V/N head rows; bound from its slices it runs the unchanged
 * layer code and the unchanged kernels of every backend. What differs is
 * three things qwen35.c does when m->tp is set: the mixer's and the FFN's
 * outputs (row-parallel products: partial sums) are summed over the ranks,
 * and the head's rows land in rank 0's logits. So every backend op stays
 * tested by the backend tests, and the split is tested by comparing N ranks
 * with one (tests/test_tp.c).
 *
 * Why routed experts split by their intermediate (moe_tp) rather than whole
 * experts over ranks: a decode row's k experts then cost every rank the same
 * 1/N of their bytes, whatever the routing (whole experts leave a rank
 * idle when no selected expert is its own), and it needs no change to the
 * MoE kernels; whole-expert placement (shard.h's plan) pays off when rows
 * are many (prefill, verify of a batch), with an all-to-all: not built.
 *
 * Why one process with a thread a rank (not a process a GPU under a
 * launcher): the ranks share the install's mapping and the engine's API
 * (a session is one object whichever GPUs run it), NCCL's single-process
 * setup (ncclCommInitAll) needs no rendezvous, the host collectives need
 * shared memory, and a failure takes every rank down at once instead of
 * leaving the others waiting in a collective.
 *
 * Exactness: the sum is an all-gather of the ranks' partials followed by
 * one fixed order of additions (rank 0 + rank 1 + ...), the same on every
 * rank and for every row whatever the pass's rows, so the row-exactness
 * rule (backend.h) holds across ranks: a verify of M+1 rows reproduces M+1
 * decode steps bit for bit on N ranks as on one. N ranks do not reproduce
 * one rank's bits: the row-parallel products add their partials in another
 * order (tests state the tolerance).
 */
#ifndef TS_TP_H
#define TS_TP_H

#include "model/model.h"

/* Through host memory, with a barrier: any backend (reads and writes of the
 * contract), not capturable. The CPU's collective, and a device one's where
 * NCCL is absent or the ranks share a device (NCCL refuses that). */
ts_comm *ts_comm_host_new(int n);

typedef struct ts_tp ts_tp;
typedef int (*ts_tp_fn)(void *arg, int rank);

/* N ranks (1..TS_TP_MAX: one rank is the tensor-parallel path with nothing
 * split, for tests) with threads for ranks 1..; the comm (of N ranks, or
 * NULL until ts_tp_set_comm) is the tp's from then on. NULL when out of
 * memory. */
ts_tp *ts_tp_new(int n, ts_comm *comm);
void ts_tp_set_comm(ts_tp *tp, ts_comm *comm);
void ts_tp_free(ts_tp *tp);
int ts_tp_n(const ts_tp *tp);
ts_comm *ts_tp_comm(const ts_tp *tp);
/* Rank r's model (set by whoever binds it: the engine). */
void ts_tp_set_model(ts_tp *tp, int r, const ts_model *m);
const ts_model *ts_tp_model(const ts_tp *tp, int r);
/* fn(arg, r) on every rank at once, rank 0 on the calling thread; the
 * first nonzero result. */
int ts_tp_run(ts_tp *tp, ts_tp_fn fn, void *arg);

/* Session buffers across ranks: a session registers its backend buffers in
 * allocation order (the same order on every rank: the same code sizes them
 * from the same local config), so a pointer into rank 0's buffer i maps to
 * the same offset of rank r's buffer i. NULL maps to NULL; a pointer in no
 * registered buffer (host memory) to itself. */
void ts_state_register(ts_state *st, void *p, size_t bytes);
void *ts_tp_xlate(const ts_state *st0, const ts_state *str, const void *p);
/* The control fields a pass reads (tape, lazy rollback, parities) from
 * rank 0's state to the others', before a pass. */
void ts_tp_sync_control(ts_state *st0);

/* Session-level copies and fills of state buffers (the hidden rows the MTP
 * head reads, the GDN state a reset clears): on every rank when m->tp. */
void ts_state_copy(const ts_model *m, ts_state *st, float *dst, const float *src, size_t n);
void ts_state_fill(const ts_model *m, ts_state *st, float *dst, size_t n, float v);

#endif
