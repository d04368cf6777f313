/* gen_oracle.h: what the generation tests share. A token collector for
 * ts_generate's callback (test_spec.c, test_dflash.c, test_cuda_engine.c,
 * test_poison.c, test_determinism.c), and for the speculative-decoding tests
 * (test_spec.c for MTP on the CPU, test_cuda_engine.c on the GPU,
 * test_dflash.c for DFlash) a planted drafter that proposes the plain greedy
 * output with random corruptions, so that every acceptance and rollback
 * length occurs, and the MTP session and generation they run it in; a
 * fixture copied without its MTP head. */
#ifndef TS_GEN_ORACLE_H
#define TS_GEN_ORACLE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "ts_test.h"

typedef struct {
    int32_t ids[4096];
    int n;
} collect;

static inline int on_tok(void *u, int32_t id) {
    collect *c = u;
    if (c->n < 4096) c->ids[c->n++] = id;
    return 0;
}

typedef struct {
    const int32_t *ref; /* plain greedy output */
    int n_ref, T;       /* its length, the prompt length */
    uint64_t lcg;
    int n_calls;
} oracle;

/* the session's draft override (ts_session_override_drafts): m drafts for
 * the rows after position pos */
static inline void oracle_drafts(void *user, int pos, int m, int32_t *d) {
    oracle *o = user;
    o->n_calls++;
    for (int j = 0; j < m; j++) {
        int i = pos - o->T + 1 + j; /* generated index of draft j */
        int32_t t = i < o->n_ref ? o->ref[i] : 0;
        o->lcg = o->lcg * 6364136223846793005ull + 1442695040888963407ull;
        if ((o->lcg >> 33) % 8 == 0) t = (t + 1) % 7; /* corrupt: small ids exist in every vocab */
        d[j] = t;
    }
}

/* A session of n_ctx tokens drafting `draft` MTP tokens a block (0: none);
 * a failure fails the test (NULL). */
static inline ts_session *oracle_session(ts_engine *e, int n_ctx, int draft) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.spec_draft = draft;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) ts_test_fail(__FILE__, __LINE__, "session (draft %d): %s", draft, err.msg);
    return s;
}

/* Greedy generation of n_pred tokens after the prompt, drafting M (0:
 * plain), into c; the oracle's drafts when orc is given; st filled. 0 or the
 * error, which fails the test. */
static inline int oracle_generate(ts_engine *e, const int32_t *prompt, int T, int n_ctx, int n_pred, int M, oracle *orc,
                                  collect *c, ts_gen_stats *st) {
    ts_session *s = oracle_session(e, n_ctx, M);
    if (!s) return -1;
    if (orc) ts_session_override_drafts(s, oracle_drafts, orc);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n_pred;
    gp.spec_draft = M;
    c->n = 0;
    ts_error err = {0};
    int rc = ts_generate(s, prompt, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "generate (draft %d): %s", M, err.msg);
    ts_session_free(s);
    return rc;
}

/* Plain greedy generation through ts_session_step (one wait for the device
 * a token) against ts_session_feed + the backend's argmax
 * (TS_STEP_ONE_WAIT=0), on engine e: the same ids, ended by the token budget
 * and by a stop id, and the session after each in the same state (its
 * position, the last row's logits and final hidden bit for bit, and the same
 * ids when it goes on). 0, or a failure of the test. */
static inline int one_wait_same(ts_engine *e, const int32_t *prompt, int T) {
    const ts_model_info *mi = ts_engine_info(e);
    const int V = mi->vocab_size, H = mi->hidden_size;
    static float lg[2][1 << 20], hd[2][1 << 14];
    if (V > (1 << 20) || H > (1 << 14)) ts_test_fail(__FILE__, __LINE__, "a vocabulary or hidden size beyond the test's buffers");
    collect c[2][2], cont[2][2];
    int pos[2][2];
    int32_t stop = -1;
    int n_stop = 0; /* the plain run's ids up to its first new id from the 11th on */
    for (int end = 0; end < 2; end++)
        for (int w = 0; w < 2; w++) {
            if (w) setenv("TS_STEP_ONE_WAIT", "0", 1);
            ts_session *s = oracle_session(e, 256, 0);
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 40;
            if (end) gp.stop_ids = &stop, gp.n_stop = 1;
            ts_error err = {0};
            c[end][w].n = 0;
            int rc = ts_generate(s, prompt, T, &gp, on_tok, &c[end][w], NULL, &err);
            pos[end][w] = ts_session_pos(s);
            const float *l = ts_session_logits(s), *h = ts_session_hidden(s);
            if (!rc && l && h) memcpy(lg[w], l, sizeof(float) * (size_t)V), memcpy(hd[w], h, sizeof(float) * (size_t)H);
            /* go on: the last id fed, 12 more */
            gp.n_predict = 12, gp.stop_ids = NULL, gp.n_stop = 0;
            cont[end][w].n = 0;
            if (!rc) rc = ts_generate(s, &c[end][w].ids[c[end][w].n - 1], 1, &gp, on_tok, &cont[end][w], NULL, &err);
            unsetenv("TS_STEP_ONE_WAIT");
            ts_session_free(s);
            if (rc || !l || !h) { ts_test_fail(__FILE__, __LINE__, "generation: %s", rc ? err.msg : "no logits"); return -1; }
            for (int k = 10; !end && !w && k < c[0][0].n && stop < 0; k++) {
                int seen = 0;
                for (int j = 0; j < k; j++) seen |= c[0][0].ids[j] == c[0][0].ids[k];
                if (!seen) stop = c[0][0].ids[k], n_stop = k + 1;
            }
            if (w == 1) {
                const collect *a = &c[end][0], *b = &c[end][1];
                if (a->n != b->n || memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n) || pos[end][0] != pos[end][1] ||
                    cont[end][0].n != cont[end][1].n ||
                    memcmp(cont[end][0].ids, cont[end][1].ids, sizeof(int32_t) * (size_t)cont[end][0].n)) {
                    ts_test_fail(__FILE__, __LINE__, "one wait a token (%s): %d ids, position %d, %d more; feed + argmax: %d, %d, %d",
                                 end ? "stop id" : "budget", a->n, pos[end][0], cont[end][0].n, b->n, pos[end][1], cont[end][1].n);
                    return -1;
                }
                if (memcmp(lg[0], lg[1], sizeof(float) * (size_t)V) || memcmp(hd[0], hd[1], sizeof(float) * (size_t)H)) {
                    ts_test_fail(__FILE__, __LINE__, "one wait a token (%s): the last row's logits or hidden differ", end ? "stop id" : "budget");
                    return -1;
                }
            }
        }
    if (n_stop < 11 || c[1][0].n != n_stop || c[0][0].n != 40) {
        ts_test_fail(__FILE__, __LINE__, "the runs ended after %d and %d ids (40 and %d expected)", c[0][0].n, c[1][0].n,
                     n_stop);
        return -1;
    }
    return 0;
}

/* ---- run-ahead decoding (gen/generate.c's ahead_loop) ---- */

typedef struct {
    int32_t ids[512];
    int n, stop_at; /* the callback asks to stop at the stop_at-th id (0: never) */
} ahead_col;

static inline int ahead_tok(void *u, int32_t id) {
    ahead_col *c = u;
    if (c->n < 512) c->ids[c->n++] = id;
    return c->stop_at && c->n == c->stop_at;
}

/* A session of n_ctx tokens, run-ahead as asked (1 on, -1 off), with the
 * n-gram verify buffers of `ngram` drafts (0: none). NULL fails the test. */
static inline ts_session *ahead_session(ts_engine *e, int n_ctx, int ahead, int ngram) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.ahead = ahead;
    sp.ngram_draft = ngram;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) ts_test_fail(__FILE__, __LINE__, "session (ahead %d): %s", ahead, err.msg);
    return s;
}

/* Run-ahead greedy decoding (session params ahead = 1) against plain
 * (ahead = -1) on engine e, with and without a drafting session's buffers
 * (n-gram, 4: the pairs are the drafter's snapshots then), for every way a
 * generation ends: the budget (40, 1 and 2 ids), a stop id (at the 11th id
 * or later, at the first and at the second), the callback's stop and the
 * context limit. Each pair of runs: the same ids, position, last logits and
 * hidden bit for bit, and the same continuation (12 more ids from the last
 * id, and the logits after them): a step queued past a stop and not undone,
 * or undone wrongly, shows in one of those. check (may be NULL): a further
 * comparison of the two sessions after the generation (the CPU's raw
 * state: test_ahead.c), nonzero on a difference. 0, or a failure of the
 * test. */
static inline int ahead_same(ts_engine *e, const int32_t *prompt, int T,
                             int (*check)(const ts_session *a, const ts_session *b)) {
    const ts_model_info *mi = ts_engine_info(e);
    const int V = mi->vocab_size, H = mi->hidden_size;
    static float lg[2][1 << 20], hd[2][1 << 14], lc[2][1 << 20];
    if (V > (1 << 20) || H > (1 << 14)) { ts_test_fail(__FILE__, __LINE__, "sizes beyond the test's buffers"); return -1; }
    /* the ways to end: n_predict, n_ctx, stop id (-1 none; -2 the 11th-or-later
     * first new id of the budget run, -3 its first id, -4 its second), callback stop */
    static const struct { int n_pred, n_ctx, stop, cb_stop; const char *what; } W[] = {
        {40, 256, -1, 0, "budget 40"}, {1, 256, -1, 0, "budget 1"}, {2, 256, -1, 0, "budget 2"},
        {40, 256, -2, 0, "stop id"},   {40, 256, -3, 0, "stop id first"}, {40, 256, -4, 0, "stop id second"},
        {40, 256, -1, 17, "callback stop"}, {100, 0, -1, 0, "context limit"}};
    int32_t ref[40];
    int n_ref = 0;
    for (int ng = 0; ng <= 4; ng += 4)
        for (size_t w = 0; w < sizeof W / sizeof W[0]; w++) {
            ahead_col c[2], cont[2];
            int pos[2];
            int32_t stop = -1;
            if (W[w].stop == -2)
                for (int k = 10; k < n_ref && stop < 0; k++) {
                    int seen = 0;
                    for (int j = 0; j < k; j++) seen |= ref[j] == ref[k];
                    if (!seen) stop = ref[k];
                }
            if (W[w].stop == -3) stop = ref[0];
            if (W[w].stop == -4) { /* the second id, unless it is the first too */
                stop = ref[1];
                if (stop == ref[0]) continue;
            }
            if (W[w].stop < -1 && stop < 0) { ts_test_fail(__FILE__, __LINE__, "no stop id for '%s'", W[w].what); return -1; }
            ts_session *ss[2] = {NULL, NULL};
            int rc = 0;
            ts_error err = {0};
            for (int r = 0; r < 2 && !rc; r++) {
                ts_session *s = ss[r] = ahead_session(e, W[w].n_ctx ? W[w].n_ctx : T + 21, r ? -1 : 1, ng);
                if (!s) { rc = -1; break; }
                ts_gen_params gp;
                ts_gen_params_default(&gp);
                gp.n_predict = W[w].n_pred;
                if (stop >= 0) gp.stop_ids = &stop, gp.n_stop = 1;
                c[r].n = 0, c[r].stop_at = W[w].cb_stop;
                rc = ts_generate(s, prompt, T, &gp, ahead_tok, &c[r], NULL, &err);
                pos[r] = ts_session_pos(s);
                const float *l = ts_session_logits(s), *h = ts_session_hidden(s);
                if (!rc && (!l || !h)) rc = -1, snprintf(err.msg, sizeof err.msg, "no logits or hidden");
                if (!rc) memcpy(lg[r], l, sizeof(float) * (size_t)V), memcpy(hd[r], h, sizeof(float) * (size_t)H);
            }
            if (!rc && check && check(ss[0], ss[1])) {
                ts_test_fail(__FILE__, __LINE__, "%s (ngram %d): the sessions' states differ", W[w].what, ng);
                rc = -1;
            }
            /* go on from the last id: 12 more, where the context has room */
            for (int r = 0; r < 2 && !rc; r++) {
                ts_gen_params gp;
                ts_gen_params_default(&gp);
                gp.n_predict = 12;
                cont[r].n = 0, cont[r].stop_at = 0;
                if (c[r].n && ts_session_pos(ss[r]) + 1 < ts_session_n_ctx(ss[r])) {
                    rc = ts_generate(ss[r], &c[r].ids[c[r].n - 1], 1, &gp, ahead_tok, &cont[r], NULL, &err);
                    const float *l2 = ts_session_logits(ss[r]);
                    if (!rc && l2) memcpy(lc[r], l2, sizeof(float) * (size_t)V);
                }
            }
            ts_session_free(ss[0]);
            ts_session_free(ss[1]);
            if (rc) {
                ts_test_fail(__FILE__, __LINE__, "%s (ngram %d): %s", W[w].what, ng, err.msg);
                return -1;
            }
            if (w == 0 && ng == 0) {
                n_ref = c[0].n;
                memcpy(ref, c[0].ids, sizeof(int32_t) * (size_t)n_ref);
            }
            if (c[0].n != c[1].n || memcmp(c[0].ids, c[1].ids, sizeof(int32_t) * (size_t)c[0].n) || pos[0] != pos[1] ||
                cont[0].n != cont[1].n || memcmp(cont[0].ids, cont[1].ids, sizeof(int32_t) * (size_t)cont[0].n)) {
                ts_test_fail(__FILE__, __LINE__, "%s (ngram %d): ahead %d ids, position %d, %d more; plain %d, %d, %d", W[w].what,
                             ng, c[0].n, pos[0], cont[0].n, c[1].n, pos[1], cont[1].n);
                return -1;
            }
            if (memcmp(lg[0], lg[1], sizeof(float) * (size_t)V) || memcmp(hd[0], hd[1], sizeof(float) * (size_t)H) ||
                (cont[0].n && memcmp(lc[0], lc[1], sizeof(float) * (size_t)V))) {
                ts_test_fail(__FILE__, __LINE__, "%s (ngram %d): the last logits or hidden differ", W[w].what, ng);
                return -1;
            }
            const int want = W[w].stop == -3 ? 1 : W[w].stop == -4 ? 2 : W[w].cb_stop ? W[w].cb_stop : -1;
            if ((want > 0 && c[0].n != want) || (W[w].n_pred < 40 && c[0].n != W[w].n_pred) ||
                (!W[w].n_ctx && pos[0] != T + 21) || (W[w].stop == -2 && (c[0].n < 11 || c[0].n >= 40))) {
                ts_test_fail(__FILE__, __LINE__, "%s (ngram %d): ended after %d ids at position %d", W[w].what, ng, c[0].n, pos[0]);
                return -1;
            }
        }
    return 0;
}

/* MTP drafts chained on the device (mtp_draft.c's mtp_propose_chain, taken
 * where the session runs ahead) against one draft at a time (ahead = -1)
 * on engine e (a trained MTP head: the default model), M = 2..4: the same
 * drafts, so the same ids, blocks and acceptance (most drafts accepted, so
 * a wrong draft shows). 0, or a failure of the test. */
static inline int mtp_chain_same(ts_engine *e) {
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    for (int M = 2; M <= 4; M++) {
        ts_gen_stats st[2];
        collect c[2];
        for (int r = 0; r < 2; r++) {
            ts_session_params sp;
            ts_session_params_default(&sp);
            sp.n_ctx = 256;
            sp.spec_draft = M;
            sp.ahead = r ? -1 : 1;
            ts_session *s = NULL;
            ts_error err = {0};
            int rc = ts_session_new(e, &sp, &s, &err);
            if (!rc) {
                ts_gen_params gp;
                ts_gen_params_default(&gp);
                gp.n_predict = 64;
                gp.spec_draft = M;
                c[r].n = 0;
                rc = ts_generate(s, pr, 9, &gp, on_tok, &c[r], &st[r], &err);
            }
            ts_session_free(s);
            if (rc) { ts_test_fail(__FILE__, __LINE__, "M=%d (ahead %d): %s", M, r ? -1 : 1, err.msg); return -1; }
        }
        if (c[0].n != c[1].n || memcmp(c[0].ids, c[1].ids, sizeof(int32_t) * (size_t)c[0].n) ||
            st[0].n_blocks != st[1].n_blocks || st[0].n_drafted != st[1].n_drafted ||
            st[0].n_accepted != st[1].n_accepted || st[0].n_accepted <= st[0].n_blocks / 2) {
            ts_test_fail(__FILE__, __LINE__, "M=%d: chained %d ids, %d blocks, %d of %d drafts accepted; one at a time %d, %d, "
                         "%d of %d", M, c[0].n, st[0].n_blocks, st[0].n_accepted, st[0].n_drafted, c[1].n, st[1].n_blocks,
                         st[1].n_accepted, st[1].n_drafted);
            return -1;
        }
        fprintf(stderr, "  M=%d: %d blocks, %d of %d drafts accepted, chained and one at a time\n", M, st[0].n_blocks,
                st[0].n_accepted, st[0].n_drafted);
    }
    return 0;
}

/* Copy a fixture without its mtp.* tensors (a checkpoint with no MTP head:
 * test_spec.c, test_ngram.c): the header entries are dropped (the data
 * stays, unreferenced) and the index loses them too. 0 or -1. */
static inline int fx_copy_without_mtp(const char *src, const char *dst) {
    char out[4096];
    if (ts_test_sh(out, sizeof out, "rm -rf %s && cp -r %s %s", dst, src, dst)) return -1;
    const char *py =
        "import json,struct,sys,glob,os\n"
        "d=sys.argv[1]\n"
        "for f in glob.glob(d+'/model*.safetensors'):\n"
        "  b=open(f,'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n])\n"
        "  h={k:v for k,v in h.items() if not k.startswith('mtp.')}\n"
        "  hs=json.dumps(h).encode(); hs+=b' '*((8-len(hs)%8)%8)\n"
        "  open(f,'wb').write(struct.pack('<Q',len(hs))+hs+b[8+n:])\n"
        "ix=d+'/model.safetensors.index.json'\n"
        "if os.path.exists(ix):\n"
        "  j=json.load(open(ix)); j['weight_map']={k:v for k,v in j['weight_map'].items() if not k.startswith('mtp.')}\n"
        "  json.dump(j,open(ix,'w'))\n";
    char path[512];
    snprintf(path, sizeof path, "%s/strip_mtp.py", ts_test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(py, f);
    fclose(f);
    return ts_test_sh(out, sizeof out, "python3 %s %s", path, dst);
}

/* every other draft wrong from a position-dependent point (a drafts
 * override): rollbacks of every length */
static inline void bad_drafts(void *user, int pos, int m, int32_t *d) {
    (void)user;
    for (int j = 0; j < m; j++)
        if ((pos + j) % 3 == 0) d[j] = (d[j] + 1) % 7;
}

/* DFlash drafting on engine e (a drafter opened with it): greedy with
 * forced rejections, then sampled, 40 ids each into c. test_poison.c and
 * test_graphs.c run it on their backends against the plain CPU engine. */
static inline int dflash_timeline(ts_engine *e, collect *c) {
    ts_error err = {0};
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.max_rows = 7;
    sp.dflash_block = 6;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    const int V = ts_engine_info(e)->vocab_size;
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = (i * 37 + 5) % V;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 40;
    gp.dflash_block = 6;
    ts_session_override_drafts(s, bad_drafts, NULL);
    c->n = 0;
    int rc = ts_generate(s, prompt, 20, &gp, on_tok, c, NULL, &err);
    ts_session_reset(s);
    gp.temperature = 0.9f;
    gp.seed = 5;
    ts_session_override_drafts(s, NULL, NULL);
    if (!rc) rc = ts_generate(s, prompt, 20, &gp, on_tok, c, NULL, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ts_session_free(s);
    return rc;
}

#endif
