/* generate.c: the token loop behind ts_generate: prefill, then decode one
 * token at a time (greedy or sampled), stopping at a stop id, the token
 * budget or the callback's request. Speculative decoding plugs in here.
 * The loop allocates nothing: the session holds every buffer.
 */
#include <math.h>

#include "model/spec.h"

void ts_gen_params_default(ts_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->n_predict = 128;
    p->top_p = 1.0f;
    p->repeat_penalty = 1.0f;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int is_stop(const ts_gen_params *p, int32_t id) {
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] == id) return 1;
    return 0;
}

int ts_generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_token_cb cb,
                void *user, ts_gen_stats *stats, ts_error *err) {
    ts_gen_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!p) return ts_fail(err, TS_E_ARG, "no generation parameters");
    if (p->spec_draft) return ts_spec_generate(s, prompt, n_prompt, p, cb, user, stats, err);
    if (p->temperature != 0.0f) return ts_fail(err, TS_E_UNSUPPORTED, "sampling is not built yet (use temperature 0)");
    const int V = s->e->model.cfg.vocab;
    double t0 = ts_now();
    int rc = ts_session_feed(s, prompt, n_prompt, NULL, NULL, err);
    if (rc) return rc;
    stats->n_prompt = n_prompt;
    stats->t_prefill = ts_now() - t0;
    t0 = ts_now();
    for (int i = 0; i < p->n_predict; i++) {
        int32_t id = argmax(ts_session_logits(s), V);
        stats->n_gen++;
        int stop = cb ? cb(user, id) : 0;
        if (stop || is_stop(p, id) || i + 1 == p->n_predict) break;
        if (ts_session_pos(s) >= ts_session_n_ctx(s)) break; /* context full: stop cleanly */
        if ((rc = ts_session_feed(s, &id, 1, NULL, NULL, err))) break;
    }
    stats->t_decode = ts_now() - t0;
    return rc;
}
