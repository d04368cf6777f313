/* test_determinism.c: greedy output depends on the prompt's ids alone, never
 * on a session's cache state (issue 20, item 3).
 *
 * The prefill rounds a row according to the chunk it was fed in and one-row
 * decode steps round otherwise again, so a reply continued from a previous
 * turn's state can differ from the same request prefilled cold when a near
 * tie flips. The engine cuts chunks on a grid of absolute positions
 * (ts_session_feed) and the frontends resume only from states saved at grid
 * points (tools/cli/cli_reuse.c). Checked here:
 * - in-process, on the bundled model: feeds cut at grid points, a restored
 *   grid checkpoint and a reset session that served something else all give
 *   the bits of one cold feed; a feed that starts off the grid is cut at the
 *   next grid point; the speculative prefill follows the same grid;
 * - through `turbospark serve --parallel 2`: 52 three-turn conversations
 *   (lengths spread over every offset of the 64-row grid), each reply as it
 *   comes warm (continued from the conversation's checkpoint, with other
 *   conversations served in between) equal to the reply of a server whose
 *   one session served something else just before and takes the request
 *   cold (cached_tokens 0), and through `turbospark chat` (its turns
 *   continue its session) for a subset of them.
 * On the commit before the fix (TS_BIN=its turbospark) 2 of the 156 replies
 * differ, and its chat gave other replies in 1 of the 13 conversations.
 */
#include <cjson/cJSON.h>

#include "gen_oracle.h" /* collect, on_tok */
#include "server_harness.h"
#include "ts_test.h"
#include "turbospark.h"

#define MODEL "models/default"

/* ---- in-process: the grid ----------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* Greedy continuation of what the session holds plus ids[0..n). */
static int greedy(ts_session *s, const int32_t *ids, int n, int spec, collect *out, ts_error *err) {
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.temperature = 0;
    gp.n_predict = 24;
    gp.spec_draft = spec;
    out->n = 0;
    return ts_generate(s, ids, n, &gp, on_tok, out, NULL, err);
}

TS_TEST(determinism, feed_on_the_grid) {
    ts_error err;
    ts_engine *e = NULL;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    CHECK_MSG(ts_engine_open(MODEL, &ep, &e, &err) == 0, "%s", err.msg);
    const int V = ts_engine_info(e)->vocab_size;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.checkpoint = 1;
    sp.spec_draft = 2;
    ts_session *a = NULL, *b = NULL;
    CHECK(ts_session_new(e, &sp, &a, &err) == 0 && ts_session_new(e, &sp, &b, &err) == 0);
    const int G = ts_session_grid(a);
    CHECK_MSG(G == 64, "default grid %d", G);
    enum { N = 300 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(rnd() % (uint32_t)(V - 300));
    float *ref = malloc(sizeof(float) * V);
    collect want, got;
    for (int round = 0; round < 8 && !ts_test_failed(); round++) {
        const int n = 70 + (int)(rnd() % (N - 70));
        /* cold: one feed of ids[0..n) from a fresh state */
        ts_session_reset(a);
        CHECK(ts_session_feed(a, ids, n, NULL, NULL, &err) == 0);
        memcpy(ref, ts_session_logits(a), sizeof(float) * V);
        ts_session_reset(a);
        CHECK(greedy(a, ids, n, 0, &want, &err) == 0);
        /* b first serves something else, then feeds ids in pieces cut at
         * random grid points, saving at one and restoring it after a detour */
        ts_session_reset(b);
        CHECK(greedy(b, ids + 5, 77, 0, &got, &err) == 0);
        ts_session_reset(b);
        int at = 0, saved = -1;
        while (at < n) {
            int next = (at / G + 1 + (int)(rnd() % 3)) * G;
            if (next > n) next = n;
            CHECK(ts_session_feed(b, ids + at, next - at, NULL, NULL, &err) == 0);
            at = next;
            if (at % G == 0 && saved < 0 && at < n) {
                CHECK(ts_session_save(b, &err) == 0);
                saved = at;
                const int32_t junk[3] = {11, 12, 13};
                CHECK(ts_session_feed(b, junk, 3, NULL, NULL, &err) == 0); /* a detour off the grid */
                CHECK(ts_session_restore(b, &err) == 0);
            }
        }
        CHECK_MSG(!memcmp(ref, ts_session_logits(b), sizeof(float) * V), "round %d: n %d, saved at %d: logits differ", round,
                  n, saved);
        /* the same through ts_generate after a restore, plain and drafted */
        if (saved > 0) {
            for (int spec = 0; spec <= 2; spec += 2) {
                CHECK(ts_session_restore(b, &err) == 0);
                CHECK(greedy(b, ids + saved, n - saved, spec, &got, &err) == 0);
                CHECK_MSG(got.n == want.n && !memcmp(got.ids, want.ids, sizeof(int32_t) * (size_t)got.n),
                          "round %d: resumed at %d (spec %d) the reply differs", round, saved, spec);
            }
        }
    }
    /* A feed that starts off the grid is cut at the next grid point: after
     * ids[0..a), feeding ids[a..n) in one call equals feeding it as
     * [a, next grid point) and the rest. (Chunks counted from the call's
     * start would cross the grid point instead.) The speculative prefill
     * cuts at the same points: its reply equals plain generation's. */
    for (int k = 0; k < 4 && !ts_test_failed(); k++) {
        const int off = 1 + (int)(rnd() % (G - 1)), n = off + G + 1 + (int)(rnd() % (2 * G));
        const int g1 = (off / G + 1) * G;
        ts_session_reset(a);
        ts_session_reset(b);
        CHECK(ts_session_feed(a, ids, off, NULL, NULL, &err) == 0 && ts_session_feed(b, ids, off, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(a, ids + off, n - off, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(b, ids + off, g1 - off, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(b, ids + g1, n - g1, NULL, NULL, &err) == 0);
        CHECK_MSG(!memcmp(ts_session_logits(a), ts_session_logits(b), sizeof(float) * V),
                  "a feed from %d to %d is not cut at %d", off, n, g1);
        ts_session_reset(a);
        ts_session_reset(b);
        CHECK(ts_session_feed(a, ids, off, NULL, NULL, &err) == 0 && ts_session_feed(b, ids, off, NULL, NULL, &err) == 0);
        CHECK(greedy(a, ids + off, n - off, 0, &want, &err) == 0);
        CHECK(greedy(b, ids + off, n - off, 2, &got, &err) == 0);
        CHECK_MSG(got.n == want.n && !memcmp(got.ids, want.ids, sizeof(int32_t) * (size_t)got.n),
                  "from %d: the drafted reply differs from the plain one", off);
    }
    free(ref);
    ts_session_free(a);
    ts_session_free(b);
    ts_engine_close(e);
}

/* ---- the server and the chat CLI ------------------------------------------------ */

/* The default model's server (server_harness.h), --parallel P. */
static int server_start(server *s, const char *parallel) {
    return server_spawn(s, MODEL, (const char *const[]){"--parallel", parallel, NULL});
}

/* The parsed JSON of a 200 response, else NULL. */
static cJSON *post(int port, const char *path, const char *body) {
    int status;
    cJSON *j = http_post(port, path, body, &status);
    if (status != 200) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int num_at(const cJSON *j, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, a), b);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* The reply of a chat completion (malloc'd), its prompt and cached tokens. */
static char *chat_reply(int port, const cJSON *msgs, int *n_prompt, int *cached) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddItemToObject(req, "messages", cJSON_Duplicate(msgs, 1));
    cJSON_AddNumberToObject(req, "max_tokens", 16);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddFalseToObject(cJSON_AddObjectToObject(req, "chat_template_kwargs"), "enable_thinking");
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    cJSON *j = post(port, "/v1/chat/completions", body);
    free(body);
    char *out = NULL;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "message"),
        "content");
    if (cJSON_IsString(c)) out = strdup(c->valuestring);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    *n_prompt = num_at(j, "usage", "prompt_tokens");
    *cached = num_at(u, "prompt_tokens_details", "cached_tokens");
    cJSON_Delete(j);
    return out;
}

static const char *const WORDS[] = {"the", "king", "said", "unto", "him", "go", "and", "let", "us", "see", "what",
                                    "a", "tree", "is", "why", "sky", "blue", "tell", "me", "more", "about", "city",
                                    "river", "water", "light", "over", "house", "long", "ago", "there", "was", "once"};

/* n words from WORDS, space-separated, into buf. */
static void words(char *buf, size_t cap, int n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o + 16 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? " " : "", WORDS[rnd() % (sizeof WORDS / sizeof WORDS[0])]);
}

/* 52 conversations (156 replies) in the suite; under the sanitizers, where
 * both servers and chat run ten times slower, 16 (the sanitizer build checks
 * memory, the plain build the replies). */
#if defined(__SANITIZE_ADDRESS__)
#define TS_DET_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_DET_SANITIZED 1
#endif
#endif
#ifdef TS_DET_SANITIZED
enum { N_CONV = 16, N_TURN = 3 };
#else
enum { N_CONV = 52, N_TURN = 3 };
#endif

typedef struct {
    cJSON *msgs;          /* the conversation, replies as the warm server gave them */
    char user[N_TURN][512];
    int has_system;
    char *reply[N_TURN];  /* warm */
} conv;

TS_TEST(determinism, replies_cold_warm_and_across_sessions) {
    g_rng = 0x2545f4914f6cdd1dull;
    static conv cv[N_CONV];
    memset(cv, 0, sizeof cv);
    for (int c = 0; c < N_CONV; c++) {
        cv[c].msgs = cJSON_CreateArray();
        /* system messages (or first messages) of 20 to 110 words spread the
         * conversations' lengths over every offset of the grid */
        cv[c].has_system = c % 4 != 0;
        if (cv[c].has_system) {
            char sys[1024];
            words(sys, sizeof sys, 20 + (int)(rnd() % 90));
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", sys);
            cJSON_AddItemToArray(cv[c].msgs, m);
        }
        for (int t = 0; t < N_TURN; t++)
            words(cv[c].user[t], sizeof cv[c].user[t], (t || cv[c].has_system ? 2 : 40) + (int)(rnd() % 40));
    }
    server w, k;
    CHECK_MSG(server_start(&w, "2") == 0, "the server did not start");
    if (server_start(&k, "1")) {
        server_stop(&w);
        CHECK_MSG(0, "the second server did not start");
    }
    int n_req = 0, n_warm = 0, n_diff = 0, n_off_grid = 0, residues[64] = {0}, cached_seen[8] = {0};
    char first_diff[2048] = "";
    /* Two conversations at a time, turn by turn, so each session serves the
     * other conversation and unrelated completions in between. */
    for (int c0 = 0; c0 < N_CONV; c0 += 2)
        for (int t = 0; t < N_TURN; t++)
            for (int c = c0; c < c0 + 2; c++) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "user");
                cJSON_AddStringToObject(m, "content", cv[c].user[t]);
                cJSON_AddItemToArray(cv[c].msgs, m);
                int np = 0, cached = 0, np2 = 0, cached2 = 0;
                char *warm = chat_reply(w.port, cv[c].msgs, &np, &cached);
                /* the other server's only session serves something else
                 * first, then takes this request cold */
                char other[2048];
                words(other, sizeof other, 60 + (int)(rnd() % 60));
                char *body = NULL;
                {
                    cJSON *r = cJSON_CreateObject();
                    cJSON_AddStringToObject(r, "prompt", other);
                    cJSON_AddNumberToObject(r, "max_tokens", 2);
                    body = cJSON_PrintUnformatted(r);
                    cJSON_Delete(r);
                }
                cJSON_Delete(post(k.port, "/v1/completions", body));
                if (t == 1) cJSON_Delete(post(w.port, "/v1/completions", body));
                free(body);
                char *cold = chat_reply(k.port, cv[c].msgs, &np2, &cached2);
                if (!warm || !cold) {
                    free(warm);
                    free(cold);
                    server_stop(&w);
                    server_stop(&k);
                    CHECK_MSG(0, "conversation %d turn %d: no reply", c, t);
                }
                n_req++;
                n_warm += cached > 0;
                residues[np % 64] = 1;
                if (cached > 0 && cached / 64 < 8) cached_seen[cached / 64] = 1;
                n_off_grid += cached % 64 != 0 || cached2 != 0 || np != np2; /* reuse off the grid, or not cold */
                if (strcmp(warm, cold)) {
                    if (!n_diff++)
                        snprintf(first_diff, sizeof first_diff, "conversation %d turn %d (%d prompt tokens, %d cached): "
                                 "warm '%s', cold '%s'", c, t, np, cached, warm, cold);
                }
                cv[c].reply[t] = warm;
                free(cold);
                m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "assistant");
                cJSON_AddStringToObject(m, "content", warm);
                cJSON_AddItemToArray(cv[c].msgs, m);
            }
    CHECK_MSG(server_stop(&w) == 0 && server_stop(&k) == 0, "a server did not exit cleanly");
    CHECK_MSG(n_diff == 0, "%d of %d replies differ: first %s", n_diff, n_req, first_diff);
    CHECK_MSG(n_off_grid == 0, "%d of %d requests resumed off the grid or were not cold on the other server", n_off_grid,
              n_req);
    int nres = 0, ncached = 0;
    for (int i = 0; i < 64; i++) nres += residues[i];
    for (int i = 1; i < 8; i++) ncached += cached_seen[i];
    /* the test means something: most later turns resumed, at several grid
     * points, and the prompts ended at most offsets of the grid */
    CHECK_MSG(n_warm >= N_CONV * 3 / 4 && n_req - N_CONV - n_warm >= N_CONV * 3 / 4,
              "%d of %d requests resumed from a checkpoint, %d later turns did not", n_warm, n_req, n_req - N_CONV - n_warm);
    CHECK_MSG(ncached >= (N_CONV >= 52 ? 3 : 2) && nres >= (N_CONV >= 52 ? 40 : 20),
              "%d distinct checkpoints, %d distinct prompt offsets", ncached, nres);

    /* `turbospark chat`: the conversations without a system message, one
     * after another in one process (/reset between), each turn continuing
     * the session; its transcript must be the replies above. */
    char in[512], script[65536] = "", want[65536] = "";
    snprintf(in, sizeof in, "%s/det_chat.txt", ts_test_tmpdir());
    size_t so = 0, wo = 0;
    int n_chat = 0;
    for (int c = 0; c < N_CONV; c++) {
        if (cv[c].has_system) continue;
        n_chat++;
        for (int t = 0; t < N_TURN; t++) {
            so += (size_t)snprintf(script + so, sizeof script - so, "%s\n", cv[c].user[t]);
            /* readline echoes each line read from a pipe */
            wo += (size_t)snprintf(want + wo, sizeof want - wo, "%s\n%s\n", cv[c].user[t], cv[c].reply[t]);
        }
        so += (size_t)snprintf(script + so, sizeof script - so, "/reset\n");
        wo += (size_t)snprintf(want + wo, sizeof want - wo, "/reset\n");
    }
    FILE *f = fopen(in, "w");
    CHECK(f);
    fputs(script, f);
    fclose(f);
    static char got[65536];
    int rc = ts_test_sh(got, sizeof got, "%s chat -m %s --no-think -n 16 < %s 2>/dev/null", ts_test_bin(), MODEL, in);
    CHECK_MSG(rc == 0, "chat exited %d", rc);
    for (int c = 0; c < N_CONV; c++)
        for (int t = 0; t < N_TURN; t++) free(cv[c].reply[t]);
    for (int c = 0; c < N_CONV; c++) cJSON_Delete(cv[c].msgs);
    CHECK_MSG(n_chat >= N_CONV / 4 && !strcmp(got, want), "%d conversations through chat:\n%s\nwant:\n%s", n_chat, got, want);
}

/* Plain greedy decoding feeds a token and takes its argmax with one wait
 * (ts_session_step): the same ids and the same session afterwards as
 * ts_session_feed + argmax, on the bundled model and the MoE fixture
 * (gen_oracle.h's one_wait_same; cuda_engine.one_wait_step on the GPU). */
TS_TEST(determinism, one_wait_step_same_as_feed) {
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    const char *dirs[] = {MODEL, "tests/fixtures/tiny-moe"};
    for (int d = 0; d < 2; d++) {
        ts_error err;
        ts_engine *e = NULL;
        ts_engine_params ep;
        ts_engine_params_default(&ep);
        CHECK_MSG(ts_engine_open(dirs[d], &ep, &e, &err) == 0, "%s", err.msg);
        int32_t p[9];
        for (int i = 0; i < 9; i++) p[i] = pr[i] % ts_engine_info(e)->vocab_size;
        CHECK_MSG(one_wait_same(e, p, 9) == 0, "%s", dirs[d]);
        ts_engine_close(e);
    }
}
