/* spec_bench.c: cost of the speculative path relative to one decode step.
 *
 *   bench/spec/run.sh MODEL_DIR [reps] [draft M] [threads] [prompt tokens] [act bits]
 *   (builds this against build/libturbospark.a; the steps run after a prompt
 *   of that many tokens, 32 by default)
 *
 * Measures, after a short prefill, per repetition (the minimum over the
 * repetitions is reported: the machine is shared):
 *   decode        one-row ts_session_feed with nothing pending
 *   verify        ts_spec_verify of M+1 rows with nothing pending
 *   rollback      the ts_spec_rollback call, keep 1 and keep M: lazy, it only
 *                 truncates and records the kept rows (plus the kept row's
 *                 logits/hidden copy)
 *   decode after  a one-row decode right after a rollback to keep rows: it
 *                 applies the pending rows in its own GDN pass, so
 *                 (decode after) - (decode) is what the rollback really costs
 *                 when decoding follows
 *   verify after  the next verify right after a rollback (what the MTP loop
 *                 does): it applies the pending rows and writes its own
 *                 block-start snapshot; (verify after) - (verify) is the
 *                 rollback's real cost in the drafting loop
 *   eager         rollback + ts_spec_materialize: the replay done at once
 *                 (what rollback cost before it became lazy, with the
 *                 head-grouped replay)
 *   draft         one MTP head step
 * and prints the ratios the issue sets targets for: verify(4 rows) / decode
 * (target <= 1.3) and rollback / decode (target < 2%). The extra costs are
 * differences of two noisy times, so they are given twice: as the
 * difference of the minima, and as the median over repetitions of the
 * paired difference (each "after" run against the plain run of its own
 * repetition, a few ms apart).
 * Internal API (src/): this is a lab driver, not a frontend.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/kernels.h" /* ts_fp_begin */
#include "gen/spec.h"

/* The minimum over the repetitions: the machine is shared, and the least
 * disturbed run is the best estimate of the cost itself. */
static double vmin(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median over repetitions of a[r] - b[r] */
static double paired(const double *a, const double *b, int n) {
    double d[64];
    for (int i = 0; i < n; i++) d[i] = a[i] - b[i];
    qsort(d, (size_t)n, sizeof d[0], cmp_d);
    return n % 2 ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
}

static ts_session *g_s;
static ts_error g_err;
static int g_r;

static int32_t tok(int j) { return (int32_t)((g_r * 131 + j * 17 + 5) % g_s->e->model.cfg.vocab); }

static double t_decode(void) {
    int32_t t = tok(1);
    double t0 = ts_now();
    if (ts_session_feed(g_s, &t, 1, NULL, NULL, &g_err)) { fprintf(stderr, "%s\n", g_err.msg); exit(1); }
    return ts_now() - t0;
}

static double t_verify(int n) {
    int32_t blk[TS_SPEC_MAX_DRAFT + 1];
    for (int j = 0; j < n; j++) blk[j] = tok(j + 3);
    double t0 = ts_now();
    if (ts_spec_verify(g_s, blk, n, &g_err)) { fprintf(stderr, "%s\n", g_err.msg); exit(1); }
    return ts_now() - t0;
}

static double t_rollback(int keep) {
    double t0 = ts_now();
    ts_spec_rollback(g_s, keep);
    return ts_now() - t0;
}

/* The GDN state work alone, on the model's shape (all GDN layers, their
 * recurrent states in separate buffers as in a session), heads spread over
 * the kernels' pool as the forward does: the part of a pass a lazy rollback
 * adds to. Times, minimum over reps, of one pass over every GDN layer with
 * ts_gdn_step_rows:
 *   decode row, in place        what a plain decode row does
 *   decode after keep P         P + 1 rows in place in the snapshot buffer
 *                               (a decode row after a rollback keeping P)
 *   verify M+1 rows             from the snapshot into the live buffer (a
 *                               verify with nothing pending: buffers swapped)
 *   verify after keep P         P rows from the snapshot, the result written
 *                               back over it, then M+1 rows into the live
 *                               buffer (a verify after a rollback keeping P)
 *   eager replay of P rows      snapshot -> live, P rows, no new rows
 *   one-row kernel              the eager replay as main did it before the
 *                               lazy rollback: ts_gdn_step row after row
 * The differences are the lazy rollback's cost in the next pass with the
 * noise of the rest of the forward (matrix products) taken out. */
typedef struct gdn_job {
    const float **K, **Q, **V;
    float **O, *dc, *bt;
    float *src, *dst, *mid;
    int n_pre, n, dk, dv, row; /* row >= 0: the one-row kernel for that row */
    size_t hs;
} gdn_job;

static void gdn_job_head(void *ctx, int h, int nh) {
    const gdn_job *j = ctx;
    (void)nh;
    float *S = j->dst + (size_t)h * j->hs;
    const float *S_in = j->src + (size_t)h * j->hs;
    if (j->row >= 0) {
        if (j->row == 0 && S != S_in) memcpy(S, S_in, sizeof(float) * j->hs);
        ts_gdn_step(S, j->K[j->row], j->V[j->row], j->Q[j->row], j->dc[j->row], j->bt[j->row], NULL, j->dk, j->dv);
        return;
    }
    if (j->mid) {
        ts_gdn_step_rows(S, S_in, j->K, j->V, j->Q, j->dc, j->bt, NULL, j->n_pre, j->dk, j->dv);
        memcpy(j->mid + (size_t)h * j->hs, S, sizeof(float) * j->hs);
        ts_gdn_step_rows(S, S, j->K + j->n_pre, j->V + j->n_pre, j->Q + j->n_pre, j->dc, j->bt, j->O, j->n, j->dk,
                         j->dv);
    } else {
        ts_gdn_step_rows(S, S_in, j->K, j->V, j->Q, j->dc, j->bt, j->O, j->n_pre + j->n, j->dk, j->dv);
    }
}

static double gdn_pass_time(gdn_job *j, int ng, size_t ls, int Hv, float *src, float *dst, float *mid, int n_pre,
                            int n, int row) {
    double t0 = ts_now();
    for (int L = 0; L < ng; L++) {
        gdn_job jl = *j;
        jl.src = src + (size_t)L * ls;
        jl.dst = dst + (size_t)L * ls;
        jl.mid = mid ? mid + (size_t)L * ls : NULL;
        jl.n_pre = n_pre;
        jl.n = n;
        jl.row = row;
        ts_parallel_for(Hv, gdn_job_head, &jl);
    }
    return ts_now() - t0;
}

static void gdn_only(const ts_model *m, int M, int reps) {
    const ts_config *c = &m->cfg;
    const int Hv = c->Hv, dk = c->dk, dv = c->dv, ng = c->n_layers - c->n_full;
    const size_t hs = (size_t)dk * dv, ls = hs * Hv;
    float *live = malloc(sizeof(float) * ls * ng), *snap = malloc(sizeof(float) * ls * ng);
    float *kq = malloc(sizeof(float) * 2 * (size_t)M * 2 * dk), *vv = malloc(sizeof(float) * 2 * (size_t)(M + 1) * dv);
    float *o = malloc(sizeof(float) * 2 * (size_t)(M + 1) * dv);
    for (size_t i = 0; i < ls * ng; i++) live[i] = snap[i] = (float)((i * 2654435761u) % 1000) * 1e-4f;
    for (int i = 0; i < 2 * M * 2 * dk; i++) kq[i] = 0.01f * (float)(i % 17);
    for (int i = 0; i < 2 * (M + 1) * dv; i++) vv[i] = 0.02f * (float)(i % 13);
    const float *K[32], *Q[32], *Vp[32];
    float *Op[32], dc[32], bt[32];
    for (int t = 0; t < 2 * (M + 1); t++) {
        K[t] = kq + (size_t)(t % (2 * M)) * dk;
        Q[t] = K[t];
        Vp[t] = vv + (size_t)t * dv;
        Op[t] = o + (size_t)t * dv;
        dc[t] = 0.97f;
        bt[t] = 0.6f;
    }
    /* (the bench writes an output for every row, pending ones too: 512 bytes per row and head) */
    gdn_job j = {K, Q, Vp, Op, dc, bt, NULL, NULL, NULL, 0, 0, dk, dv, -1, hs};
    double best[6][TS_SPEC_MAX_DRAFT + 2];
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < TS_SPEC_MAX_DRAFT + 2; b++) best[a][b] = 1e9;
    for (int r = 0; r < reps; r++) {
        best[0][0] = TS_MIN(best[0][0], gdn_pass_time(&j, ng, ls, Hv, live, live, NULL, 0, 1, -1));
        best[2][0] = TS_MIN(best[2][0], gdn_pass_time(&j, ng, ls, Hv, snap, live, NULL, 0, M + 1, -1));
        for (int P = 1; P <= M; P++) {
            best[1][P] = TS_MIN(best[1][P], gdn_pass_time(&j, ng, ls, Hv, snap, snap, NULL, P, 1, -1));
            best[3][P] = TS_MIN(best[3][P], gdn_pass_time(&j, ng, ls, Hv, snap, live, snap, P, M + 1, -1));
            best[4][P] = TS_MIN(best[4][P], gdn_pass_time(&j, ng, ls, Hv, snap, live, NULL, P, 0, -1));
            double t = 0;
            for (int row = 0; row < P; row++) t += gdn_pass_time(&j, ng, ls, Hv, snap, live, NULL, 0, 0, row);
            best[5][P] = TS_MIN(best[5][P], t);
        }
    }
    printf("GDN state work alone (%d layers x %d heads x %dx%d, heads over the pool, min of %d):\n", ng, Hv, dk, dv, reps);
    printf("  decode row, in place                 %7.3f ms\n", best[0][0] * 1e3);
    printf("  verify %d rows (swap: from snapshot)  %7.3f ms\n", M + 1, best[2][0] * 1e3);
    for (int P = 1; P <= M; P++)
        printf("  keep %d: decode after %+7.3f ms | verify after %+7.3f ms | eager replay %7.3f ms (one-row kernel, row by row: %7.3f ms)\n",
               P, (best[1][P] - best[0][0]) * 1e3, (best[3][P] - best[2][0]) * 1e3, best[4][P] * 1e3, best[5][P] * 1e3);
    free(live);
    free(snap);
    free(kq);
    free(vv);
    free(o);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: spec_bench MODEL_DIR [reps] [draft M] [threads] [prompt tokens] [act bits]\n"); return 2; }
    /* the engine's floating-point mode (ts_generate's), also for the
     * internal calls below (verify, rollback, state passes) */
    ts_fp_begin();
    const char *dir = argv[1];
    int reps = argc > 2 ? atoi(argv[2]) : 5, M = argc > 3 ? atoi(argv[3]) : 3, nt = argc > 4 ? atoi(argv[4]) : 0;
    int np = argc > 5 ? atoi(argv[5]) : 32; /* the context the steps run at */
    int act_bits = argc > 6 ? atoi(argv[6]) : 0; /* activation precision (--act-bits) */
    if (reps < 1 || reps > 64 || M < 1 || M > TS_SPEC_MAX_DRAFT) { fprintf(stderr, "bad reps or M\n"); return 2; }
    ts_engine *e = NULL;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.n_threads = nt;
    ep.act_bits = act_bits;
    if (ts_engine_open(dir, &ep, &e, &g_err)) { fprintf(stderr, "%s\n", g_err.msg); return 1; }
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = np + 2048;
    sp.spec_draft = M;
    if (ts_session_new(e, &sp, &g_s, &g_err)) { fprintf(stderr, "%s\n", g_err.msg); return 1; }
    ts_session *s = g_s;
    const int V = e->model.cfg.vocab;
    if (np < 1 || np > 1 << 20) { fprintf(stderr, "bad prompt length\n"); return 2; }
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)np);
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)(((int64_t)i * 7919 + 11) % V);
    if (ts_session_feed(s, prompt, np, NULL, NULL, &g_err)) { fprintf(stderr, "%s\n", g_err.msg); return 1; }
    free(prompt);
    enum { DEC, VER, RB1, RBM, DEC1, DECM, VER1, VERM, EAG1, EAGM, DRAFT, DRAFTV, NQ };
    static double q[NQ][64];
    for (g_r = 0; g_r < reps; g_r++) {
        int r = g_r;
        q[DEC][r] = t_decode();
        q[VER][r] = t_verify(M + 1);
        q[RB1][r] = t_rollback(1);
        q[DEC1][r] = t_decode();        /* applies 1 pending row */
        t_verify(M + 1);
        q[RBM][r] = t_rollback(M);
        q[DECM][r] = t_decode();        /* applies M pending rows */
        t_verify(M + 1);
        t_rollback(1);
        q[VER1][r] = t_verify(M + 1);   /* applies 1 pending row, writes its snapshot */
        t_rollback(M);
        q[VERM][r] = t_verify(M + 1);   /* applies M pending rows */
        double t0 = ts_now();
        t_rollback(1);
        ts_spec_materialize(s);
        q[EAG1][r] = ts_now() - t0;
        t_verify(M + 1);
        t0 = ts_now();
        t_rollback(M);
        ts_spec_materialize(s);
        q[EAGM][r] = ts_now() - t0;
        int32_t t = tok(9);
        t0 = ts_now();
        ts_mtp_forward(&e->model, &s->st, &t, s->last_hidden, 1, s->pos - 1, s->mtp_hid, NULL, s->draft_lowp, 0);
        q[DRAFT][r] = ts_now() - t0;
        t0 = ts_now(); /* the same with the automatic drafting vocabulary */
        ts_mtp_forward(&e->model, &s->st, &t, s->last_hidden, 1, s->pos - 1, s->mtp_hid, NULL, s->draft_lowp,
                       ts_spec_draft_vocab(0, V));
        q[DRAFTV][r] = ts_now() - t0;
    }
    double m[NQ];
    for (int k = 0; k < NQ; k++) m[k] = vmin(q[k], reps);
    const double d = m[DEC], v = m[VER];
    printf("model %s, %d reps (minimum of each), draft M = %d, verify %d rows, threads %d (0 = all), context %d+\n", dir,
           reps, M, M + 1, nt, np);
    printf("decode step               %9.2f ms\n", d * 1e3);
    printf("verify %d rows             %9.2f ms   = %.2f x decode (target <= 1.3 for 4 rows)\n", M + 1, v * 1e3, v / d);
    printf("rollback call, keep 1     %9.3f ms   = %.2f%% of decode (target < 2%%)\n", m[RB1] * 1e3, 100 * m[RB1] / d);
    printf("rollback call, keep %d     %9.3f ms   = %.2f%% of decode\n", M, m[RBM] * 1e3, 100 * m[RBM] / d);
    struct { const char *what; int keep, k, base; } ex[] = {
        {"decode after keep", 1, DEC1, DEC}, {"decode after keep", M, DECM, DEC},
        {"verify after keep", 1, VER1, VER}, {"verify after keep", M, VERM, VER}};
    for (int i = 0; i < 4; i++) {
        double dm = m[ex[i].k] - m[ex[i].base], dp = paired(q[ex[i].k], q[ex[i].base], reps);
        printf("%s %d       %9.2f ms   extra: min-diff %+.3f ms = %+.2f%%, paired median %+.3f ms = %+.2f%% of decode\n",
               ex[i].what, ex[i].keep, m[ex[i].k] * 1e3, dm * 1e3, 100 * dm / d, dp * 1e3, 100 * dp / d);
    }
    printf("eager rollback, keep 1    %9.3f ms   = %.2f%% of decode\n", m[EAG1] * 1e3, 100 * m[EAG1] / d);
    printf("eager rollback, keep %d    %9.3f ms   = %.2f%% of decode\n", M, m[EAGM] * 1e3, 100 * m[EAGM] / d);
    printf("MTP draft step            %9.2f ms   = %.2f x decode\n", m[DRAFT] * 1e3, m[DRAFT] / d);
    printf("  drafting ids [0, %d)    %9.2f ms   = %.2f x decode (the automatic drafting vocabulary)\n",
           ts_spec_draft_vocab(0, V), m[DRAFTV] * 1e3, m[DRAFTV] / d);
    gdn_only(&e->model, M, 10 * reps); /* cheap: a pass is a few ms */
    ts_session_free(s);
    ts_engine_close(e);
    return 0;
}
