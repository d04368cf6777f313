/* moe.c: the CPU backend's MoE FFN op (backend.h, ts_moe_args).
 *
 * Owns: routing (softmax over the experts in f32, top-k of the
 * probabilities, renormalisation), the selected experts' SwiGLU and the
 * shared expert with its sigmoid gate, and how the products are grouped
 * into pool regions.
 * Does not own: the weights (the model's, read through ts_weight), the
 * product kernels (matmul.c).
 *
 * Exactness: every product is the one ts_cpu_linear would compute for that
 * row (the batched form is tested bit-identical to one by one), rows are
 * routed one at a time, so n rows equal n one-row calls under every mode.
 */
#include <math.h>

#include "cpu/cpu.h"

/* One expert's SwiGLU on one row: gate/up in one region, silu(g) * u, down. */
static int swiglu1(const ts_cpu_ctx *cx, const ts_weight *g, const ts_weight *u, const ts_weight *d, const float *x,
                   float *gb, float *ub, float *out, int flags) {
    int rc = ts_cpu_linear_many(cx, (const ts_weight *[]){g, u}, 2, x, (float *[]){gb, ub}, 1, flags);
    if (rc) return rc;
    ts_silu_mul(gb, ub, (size_t)g->rows);
    return ts_cpu_linear(cx, d, gb, out, 1, flags);
}

/* Row li's routing: softmax in f32 over all E experts (in place), the top k
 * of the probabilities (ties to the lower id) into sel, their probabilities
 * into wsel. One function for both paths (moe routing itself, moe_route), so
 * routing first changes no bit; the CUDA routing test and the trace bench
 * call it too, as the reference. */
void ts_cpu_moe_route_row(float *li, int E, int k, int *sel, float *wsel) {
    float mx = -INFINITY;
    for (int e = 0; e < E; e++) mx = li[e] > mx ? li[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) { li[e] = expf(li[e] - mx); sum += li[e]; }
    for (int e = 0; e < E; e++) li[e] = (float)(li[e] / sum);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= sel[q] == e;
            if (!taken && (best < 0 || li[e] > li[best])) best = e;
        }
        sel[j] = best;
        wsel[j] = li[best];
    }
}

/* norm_topk: the k weights over their f32 sum, summed in pick order. */
void ts_cpu_moe_route_norm(float *w, int k) {
    float wsum = 0.f;
    for (int j = 0; j < k; j++) wsum += w[j];
    for (int j = 0; j < k; j++) w[j] = w[j] / wsum;
}

static int route(const ts_cpu_ctx *cx, ts_mode m, const ts_moe_args *a) {
    int rc = ts_cpu_linear(cx, a->router, a->u, a->logits, a->n, ts_cpu_lin_flags(m));
    if (rc) return rc;
    for (int i = 0; i < a->n; i++) {
        int sel[64];
        ts_cpu_moe_route_row(a->logits + (size_t)i * a->E, a->E, a->topk, sel, a->route_w + (size_t)i * a->topk);
        for (int j = 0; j < a->topk; j++) a->route_ids[(size_t)i * a->topk + j] = sel[j];
    }
    return 0;
}

static int moe(const ts_cpu_ctx *cx, ts_mode m, const ts_moe_args *a) {
    const int E = a->E, H = a->H, n = a->n, flags = ts_cpu_lin_flags(m);
    int rc = a->route_ids ? 0 : ts_cpu_linear(cx, a->router, a->u, a->logits, n, flags);
    if (rc) return rc;
    float *acc = a->acc, *eo = a->acc + H;
    for (int i = 0; i < n; i++) {
        const float *ui = a->u + (size_t)i * H;
        int sel[64];
        float wsel[64];
        const int k = a->topk;
        if (a->route_ids) {
            for (int j = 0; j < k; j++) {
                sel[j] = a->route_ids[(size_t)i * k + j];
                wsel[j] = a->route_w[(size_t)i * k + j];
            }
        } else {
            ts_cpu_moe_route_row(a->logits + (size_t)i * E, E, k, sel, wsel);
        }
        if (a->norm_topk) ts_cpu_moe_route_norm(wsel, k);
        for (int j = 0; j < H; j++) acc[j] = 0.f;
        float *ti = a->t + (size_t)i * H;
        if (k + 1 <= a->R && 2 * k + 3 <= TS_LINEAR_MANY_MAX) {
            /* all selected experts and the shared one in two parallel regions
             * (gate/up of all, then the downs), each product computed as in
             * the one-by-one path below: the same bits. Row j of b1/b2
             * holds expert j's gate/up, row j of b0 its output. */
            const size_t F = (size_t)a->F, B0 = (size_t)H; /* b0 rows hold >= 2H */
            const ts_weight *wv[TS_LINEAR_MANY_MAX], *dv[TS_LINEAR_MANY_MAX];
            float *yv[TS_LINEAR_MANY_MAX], *ov[TS_LINEAR_MANY_MAX];
            const float *xv[TS_LINEAR_MANY_MAX];
            float gl;
            int nw = 0;
            for (int j = 0; j <= k; j++) {
                const ts_weight *g = j < k ? &a->e_gate[sel[j]] : a->s_gate, *u = j < k ? &a->e_up[sel[j]] : a->s_up;
                wv[nw] = g, yv[nw++] = a->b1 + j * F;
                wv[nw] = u, yv[nw++] = a->b2 + j * F;
                dv[j] = j < k ? &a->e_down[sel[j]] : a->s_down;
                xv[j] = a->b1 + j * F;
                ov[j] = a->b0 + j * B0;
            }
            wv[nw] = a->s_gate_w, yv[nw++] = &gl;
            if ((rc = ts_cpu_linear_many(cx, wv, nw, ui, yv, 1, flags))) return rc;
            for (int j = 0; j <= k; j++) ts_silu_mul(a->b1 + j * F, a->b2 + j * F, (size_t)dv[j]->cols);
            if ((rc = ts_cpu_linear_batch(cx, dv, xv, ov, k + 1, flags))) return rc;
            for (int j = 0; j < k; j++)
                for (int q = 0; q < H; q++) acc[q] += wsel[j] * ov[j][q];
            float sg = ts_sigmoid(gl);
            for (int q = 0; q < H; q++) ti[q] = acc[q] + sg * ov[k][q];
            continue;
        }
        for (int j = 0; j < k; j++) {
            int e = sel[j];
            if ((rc = swiglu1(cx, &a->e_gate[e], &a->e_up[e], &a->e_down[e], ui, a->b1, a->b2, eo, flags))) return rc;
            for (int q = 0; q < H; q++) acc[q] += wsel[j] * eo[q];
        }
        /* shared expert with its scalar sigmoid gate */
        if ((rc = swiglu1(cx, a->s_gate, a->s_up, a->s_down, ui, a->b1, a->b2, eo, flags))) return rc;
        float gl;
        if ((rc = ts_cpu_linear(cx, a->s_gate_w, ui, &gl, 1, flags))) return rc;
        float sg = ts_sigmoid(gl);
        for (int q = 0; q < H; q++) ti[q] = acc[q] + sg * eo[q];
    }
    return 0;
}

void ts_cpu_moe(ts_stream *s, ts_mode m, const ts_moe_args *a) {
    if (s->err) return;
    int rc = moe(ts_cpu_stream_ctx(s), m, a);
    if (rc) ts_be_fail(s, rc, "out of memory for the kernel workspace");
}

void ts_cpu_moe_route(ts_stream *s, ts_mode m, const ts_moe_args *a) {
    if (s->err) return;
    if (a->topk > 64) { ts_be_fail(s, TS_E_UNSUPPORTED, "MoE routing: top-k above 64"); return; }
    int rc = route(ts_cpu_stream_ctx(s), m, a);
    if (rc) ts_be_fail(s, rc, "out of memory for the kernel workspace");
}
