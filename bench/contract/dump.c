/* dump.c: bit-identity harness for the backend refactor (bench/contract/compare.sh).
 *
 * Owns: writing, for one model directory and one activation precision, every
 * output the refactor must not change to one binary file: prefill logits (one
 * chunk, and chunks of 5 rows), token-by-token logits and hiddens, the MTP
 * head's logits, greedy ids with and without MTP drafting (drafts 1..8),
 * sampled ids (plain and drafted), and ids continued from a restored
 * checkpoint. Uses the public API only, so the same file builds against the
 * old library and the new one; compare.sh compares the two files with cmp.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turbospark.h"

static FILE *out;
static void put(const char *tag, const void *p, size_t bytes) {
    fprintf(out, "%s %zu\n", tag, bytes);
    fwrite(p, 1, bytes, out);
}

static int die(const char *what, const ts_error *e) {
    fprintf(stderr, "dump: %s: %s\n", what, e->msg);
    return 1;
}

static int32_t gen_ids[256];
static int n_gen_ids;
static int on_tok(void *u, int32_t id) {
    (void)u;
    if (n_gen_ids < 256) gen_ids[n_gen_ids++] = id;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: dump DIR ACT_BITS OUT\n"); return 2; }
    ts_error err = {0};
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.act_bits = atoi(argv[2]);
    ep.n_threads = 2;
    ts_engine *e;
    if (ts_engine_open(argv[1], &ep, &e, &err)) return die("open", &err);
    out = fopen(argv[3], "wb");
    if (!out) return 1;
    const ts_model_info *in = ts_engine_info(e);
    const int V = in->vocab_size, H = in->hidden_size;
    enum { N = 40 };
    int32_t ids[N];
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((r >> 33) % (uint64_t)V); }
    float *lg = malloc(sizeof(float) * (size_t)N * V), *hid = malloc(sizeof(float) * (size_t)N * H);
    float *mlg = malloc(sizeof(float) * (size_t)N * V);
    ts_session_params sp;
    ts_session *s;
    /* prefill: one chunk, then chunks of 5 rows */
    for (int rows = 64; rows >= 5; rows = rows == 64 ? 5 : 0) {
        ts_session_params_default(&sp);
        sp.max_rows = rows;
        sp.mtp = in->has_mtp;
        if (ts_session_new(e, &sp, &s, &err)) return die("session", &err);
        if (ts_session_feed(s, ids, N, lg, hid, &err)) return die("feed", &err);
        put("prefill_logits", lg, sizeof(float) * (size_t)N * V);
        put("prefill_hidden", hid, sizeof(float) * (size_t)N * H);
        if (in->has_mtp) {
            if (ts_session_mtp(s, ids + 1, hid, N - 1, 0, NULL, mlg, &err)) return die("mtp", &err);
            put("mtp_logits", mlg, sizeof(float) * (size_t)(N - 1) * V);
        }
        ts_session_free(s);
    }
    /* token by token */
    ts_session_params_default(&sp);
    sp.mtp = in->has_mtp;
    if (ts_session_new(e, &sp, &s, &err)) return die("session", &err);
    for (int i = 0; i < N; i++) {
        if (ts_session_feed(s, ids + i, 1, NULL, NULL, &err)) return die("feed1", &err);
        put("tok_logits", ts_session_logits(s), sizeof(float) * V);
        put("tok_hidden", ts_session_hidden(s), sizeof(float) * H);
    }
    ts_session_free(s);
    /* generation: greedy plain, greedy drafted 1..8, sampled plain and drafted */
    for (int samp = 0; samp < 2; samp++)
        for (int M = 0; M <= (in->has_mtp ? 8 : 0); M++) {
            ts_session_params_default(&sp);
            sp.spec_draft = M;
            sp.max_rows = 16;
            if (ts_session_new(e, &sp, &s, &err)) return die("session", &err);
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 48;
            gp.spec_draft = M;
            if (samp) { gp.temperature = 0.8f; gp.seed = 7; }
            n_gen_ids = 0;
            if (ts_generate(s, ids, 20, &gp, on_tok, NULL, NULL, &err)) return die("generate", &err);
            char tag[64];
            snprintf(tag, sizeof tag, "gen_samp%d_draft%d", samp, M);
            put(tag, gen_ids, sizeof(int32_t) * (size_t)n_gen_ids);
            ts_session_free(s);
        }
    /* checkpoint: save after a prompt, generate, restore, generate again */
    ts_session_params_default(&sp);
    sp.checkpoint = 1;
    sp.spec_draft = in->has_mtp ? 3 : 0;
    if (ts_session_new(e, &sp, &s, &err)) return die("session", &err);
    if (ts_session_feed(s, ids, 12, NULL, NULL, &err)) return die("feed", &err);
    if (ts_session_save(s, &err)) return die("save", &err);
    for (int k = 0; k < 2; k++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 24;
        gp.spec_draft = sp.spec_draft;
        n_gen_ids = 0;
        if (ts_generate(s, ids + 12, 8, &gp, on_tok, NULL, NULL, &err)) return die("generate", &err);
        put("ckpt_gen", gen_ids, sizeof(int32_t) * (size_t)n_gen_ids);
        if (ts_session_restore(s, &err)) return die("restore", &err);
    }
    ts_session_free(s);
    fclose(out);
    free(lg); free(hid); free(mlg);
    ts_engine_close(e);
    return 0;
}
