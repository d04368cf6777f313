/* test_cli.c: black-box tests of the turbospark command line (design.md's
 * contract): run --print-ids, logits (main and MTP head) against the
 * transformers references, and clear errors with non-zero exits. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "turbospark.h"
#include "ts_test.h"

static char g_out[1 << 16];

static int ids_string(const ts_st_set *ref, const char *name, char *buf, size_t cap, int n) {
    const ts_st_tensor *t = ts_st_find(ref, name);
    const int32_t *v = t->data;
    if (n <= 0 || n > t->shape[0]) n = (int)t->shape[0];
    size_t o = 0;
    for (int i = 0; i < n && o < cap; i++) o += snprintf(buf + o, cap - o, "%s%d", i ? "," : "", v[i]);
    return n;
}

TS_TEST(cli, run_greedy_ids_match_reference) {
    const char *fx[] = {"tiny-dense", "tiny-moe"};
    for (int k = 0; k < 2; k++) {
        char path[256], prompt[8192], greedy[4096];
        snprintf(path, sizeof path, "tests/fixtures/%s/reference.safetensors", fx[k]);
        ts_st_set *ref = NULL;
        ts_error err;
        CHECK(ts_st_open_file(path, &ref, &err) == 0);
        ids_string(ref, "prompt_ids", prompt, sizeof prompt, 0);
        int n = ids_string(ref, "greedy_ids", greedy, sizeof greedy, 0);
        ts_st_close(ref);
        int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/%s --ids %s -n %d --print-ids 2>/dev/null",
                            ts_test_bin(), fx[k], prompt, n);
        CHECK_MSG(rc == 0, "exit %d: %s", rc, g_out);
        char *nl = strchr(g_out, '\n');
        if (nl) *nl = 0;
        CHECK_MSG(!strcmp(g_out, greedy), "%s: got %s\nwant %s", fx[k], g_out, greedy);
    }
}

static float file_vs_ref(const char *file, const ts_st_set *ref, const char *name, size_t rows, size_t V) {
    FILE *f = fopen(file, "rb");
    if (!f) return INFINITY;
    float *buf = malloc(sizeof(float) * rows * V);
    size_t got = fread(buf, sizeof(float) * V, rows, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    float m = got == rows && !extra ? 0 : INFINITY;
    const float *r = ts_st_find(ref, name)->data;
    for (size_t i = 0; i < rows * V && m < INFINITY; i++) m = fmaxf(m, fabsf(buf[i] - r[i]));
    free(buf);
    return m;
}

TS_TEST(cli, logits_main_and_mtp) {
    ts_st_set *ref = NULL;
    ts_error err;
    CHECK(ts_st_open_file("tests/fixtures/tiny-moe/reference.safetensors", &ref, &err) == 0);
    char prompt[8192], file[512];
    int T = ids_string(ref, "prompt_ids", prompt, sizeof prompt, 0);
    snprintf(file, sizeof file, "%s/logits.bin", ts_test_tmpdir());
    int rc = ts_test_sh(g_out, sizeof g_out, "%s logits -m tests/fixtures/tiny-moe --ids %s -o %s", ts_test_bin(), prompt, file);
    CHECK_MSG(rc == 0, "%s", g_out);
    float e = file_vs_ref(file, ref, "prompt_logits", T, 2048);
    CHECK_MSG(e < 1e-3f, "main logits err %g", e);
    rc = ts_test_sh(g_out, sizeof g_out, "%s logits -m tests/fixtures/tiny-moe --ids %s -o %s --head mtp", ts_test_bin(), prompt, file);
    CHECK_MSG(rc == 0, "%s", g_out);
    e = file_vs_ref(file, ref, "mtp_logits", T - 1, 2048);
    CHECK_MSG(e < 1e-3f, "mtp logits err %g", e);
    ts_st_close(ref);
}

TS_TEST(cli, errors_are_clear) {
    const char *bin = ts_test_bin();
    struct { const char *args; const char *want; } cases[] = {
        {"run -m tests/fixtures/tiny-dense --ids 1,2,5000 -n 2", "token id 5000"},
        {"run -m tests/fixtures/tiny-dense --ids 1,x,3 -n 2", "not a list of token ids"},
        {"run -m tests/fixtures/nope --ids 1 -n 2", "nope/config.json"},
        {"run -m tests/fixtures/tiny-dense --ids 1,2,3,4,5 --ctx 4 -n 2", "context limit of 4"},
        {"run -m tests/fixtures/tiny-dense --bogus", "unknown or incomplete argument '--bogus'"},
        {"logits -m tests/fixtures/tiny-dense --ids 1,2 -o /dev/null --head side", "--head must be main or mtp"},
        {"logits -m tests/fixtures/tiny-dense --ids 1,2 -o /nonexistent-dir/x.bin", "cannot write /nonexistent-dir/x.bin"},
        {"frobnicate", "unknown command 'frobnicate'"},
        {"run -m tests/fixtures/tiny-dense --ids 1 -n 1 --act-bits 12", "bad value '12' for --act-bits"},
        {"perplexity -m tests/fixtures/tiny-dense -f /dev/null --act-bits 4", "bad value '4' for --act-bits (use 8, 16 or 24)"},
        {"bench -m tests/fixtures/tiny-dense --act-bits x", "bad value 'x' for --act-bits (use 8, 16 or 24)"},
        {"logits -m tests/fixtures/tiny-dense --ids 1 -o /dev/null --act-bits 32", "bad value '32' for --act-bits (use 8, 16 or 24)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = ts_test_sh(g_out, sizeof g_out, "%s %s", bin, cases[i].args);
        CHECK_MSG(rc != 0 && rc < 128, "'%s' exited %d", cases[i].args, rc);
        CHECK_MSG(strstr(g_out, cases[i].want), "'%s' printed: %s", cases[i].args, g_out);
    }
}

TS_TEST(cli, verbose_reports_unused_tensors) {
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/tiny-dense --ids 1 -n 1 -v", ts_test_bin());
    CHECK_MSG(rc == 0, "%s", g_out);
    CHECK_MSG(strstr(g_out, "0 unused"), "%s", g_out);
}

/* chat with MTP drafting: the conversation (every reply, over turns that
 * continue the session and after a reset) prints exactly what plain chat
 * prints, and each turn reports its drafting statistics; bad drafting flags
 * are refused. (Whether a turn continues the session or re-feeds the
 * conversation is chat's own choice, the same with and without drafting;
 * drafting on a continued session is tested in spec.continued_session.) */
TS_TEST(cli, chat_with_drafting) {
    char plain[8192], spec[8192], err[2048];
    const char *in = "printf 'Hello there\\nTell me more\\n/reset\\nHello there\\n'";
    CHECK(ts_test_sh(plain, sizeof plain, "%s | %s chat -m models/default -n 24 2>/dev/null", in, ts_test_bin()) == 0);
    CHECK(ts_test_sh(spec, sizeof spec, "%s | %s chat -m models/default -n 24 --spec mtp --draft 3 2>/dev/null", in,
                     ts_test_bin()) == 0);
    CHECK_MSG(strlen(plain) > 20 && !strcmp(plain, spec), "plain:\n%s\ndrafted:\n%s", plain, spec);
    CHECK(ts_test_sh(spec, sizeof spec, "%s | %s chat -m models/default -n 24 --spec mtp --draft 3 2>&1 >/dev/null", in,
                     ts_test_bin()) == 0);
    int lines = 0;
    for (const char *p = spec; (p = strstr(p, "[spec mtp --draft 3")); p++) lines++;
    CHECK_MSG(lines == 3, "expected a drafting line per turn: %s", spec);
    const char *bad[] = {"--draft 2", "--spec mtp --draft 9", "--spec eagle", "-n x", "--spec mtp --draft-p-min 2"};
    for (int i = 0; i < 5; i++) {
        int rc = ts_test_sh(err, sizeof err, "echo hi | %s chat -m models/default %s 2>&1", ts_test_bin(), bad[i]);
        CHECK_MSG(rc == 2 && strstr(err, "turbospark chat:"), "'%s' gave rc %d: %s", bad[i], rc, err);
    }
}

/* TURBOSPARK_MTP_DRAFT=M: without --draft, M drafts a block, MTP drafting
 * on even without --spec; the flags win; 0: off; a bad value is refused
 * naming the variable. Output identical to plain greedy in every case. */
TS_TEST(cli, mtp_draft_from_the_environment) {
    char plain[4096], out[4096], err[4096];
    const char *run = "run -m models/default -p 'The river' -n 24";
    CHECK(ts_test_sh(plain, sizeof plain, "%s %s 2>/dev/null", ts_test_bin(), run) == 0);
    static const struct { const char *env, *flags, *want; } cases[] = {
        {"2", "", "[spec mtp --draft 2"},
        {"2", "--draft 4 --spec mtp", "[spec mtp --draft 4"},
        {"5", "--spec mtp", "[spec mtp --draft 5"},
        {"0", "", NULL},
        {"0", "--spec mtp", "[spec mtp --draft 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(ts_test_sh(out, sizeof out, "TURBOSPARK_MTP_DRAFT=%s %s %s %s 2>/dev/null", cases[i].env, ts_test_bin(), run,
                         cases[i].flags) == 0);
        CHECK_MSG(!strcmp(out, plain), "TURBOSPARK_MTP_DRAFT=%s %s: output differs from plain greedy", cases[i].env,
                  cases[i].flags);
        CHECK(ts_test_sh(err, sizeof err, "TURBOSPARK_MTP_DRAFT=%s %s %s %s 2>&1 >/dev/null", cases[i].env, ts_test_bin(),
                         run, cases[i].flags) == 0);
        if (cases[i].want) CHECK_MSG(strstr(err, cases[i].want), "TURBOSPARK_MTP_DRAFT=%s %s: %s", cases[i].env, cases[i].flags, err);
        else CHECK_MSG(!strstr(err, "[spec"), "TURBOSPARK_MTP_DRAFT=0 drafted: %s", err);
    }
    static const char *bad[] = {"x", "9", "-1", "2x"};
    for (int i = 0; i < 4; i++) {
        const int rc = ts_test_sh(err, sizeof err, "TURBOSPARK_MTP_DRAFT=%s %s %s 2>&1", bad[i], ts_test_bin(), run);
        CHECK_MSG(rc == 2 && strstr(err, "TURBOSPARK_MTP_DRAFT"), "TURBOSPARK_MTP_DRAFT=%s: rc %d: %s", bad[i], rc, err);
    }
}

/* chat's checkpoint: each turn returns to the state saved at the last
 * prefill grid point (64 rows) of the previous turn's history, so later
 * turns report a multiple of 64 tokens as cached and feed only the rest,
 * not the whole conversation again: the third turn feeds fewer tokens than
 * the first two turns fed together, which the whole conversation exceeds. */
TS_TEST(cli, chat_reuses_history) {
    char err[4096];
    int rc = ts_test_sh(err, sizeof err, "printf 'Hello there\\nTell me more\\nAnd then?\\n' | %s chat -m models/default "
                        "-n 24 --system 'You are a storyteller. You tell long stories about kings and queens, rivers "
                        "and cities, old houses by the water and the people who lived in them a long time ago, and you "
                        "always answer in plain English sentences, one after another, until the story is done.' "
                        "2>&1 >/dev/null", ts_test_bin());
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    int n[3] = {0, 0, 0}, c[3] = {0, 0, 0}, k = 0;
    for (const char *p = err; k < 3 && (p = strstr(p, "[prompt ")); p++, k++)
        CHECK_MSG(sscanf(p, "[prompt %d new tokens (%d cached)", &n[k], &c[k]) == 2, "%s", p);
    CHECK_MSG(k == 3 && n[0] > 0 && n[1] > 0 && n[2] > 0 && n[2] < n[0] + n[1], "new tokens per turn %d, %d, %d: %s",
              n[0], n[1], n[2], err);
    CHECK_MSG(c[0] == 0 && c[1] >= 64 && c[1] % 64 == 0 && c[2] >= c[1] && c[2] % 64 == 0, "cached %d, %d, %d: %s", c[0],
              c[1], c[2], err);
}

/* Seeded sampling through the CLI: the same seed repeats, other seeds differ. */
TS_TEST(cli, seeded_sampling_repeats) {
    char a[4096], b[4096], c[4096];
    const char *fmt = "%s run -m tests/fixtures/tiny-dense --ids 5,6,7 -n 24 --temp 1.0 --top-p 0.95 --seed %d 2>/dev/null";
    CHECK(ts_test_sh(a, sizeof a, fmt, ts_test_bin(), 7) == 0);
    CHECK(ts_test_sh(b, sizeof b, fmt, ts_test_bin(), 7) == 0);
    CHECK(ts_test_sh(c, sizeof c, fmt, ts_test_bin(), 8) == 0);
    CHECK_MSG(!strcmp(a, b), "same seed differs: %s vs %s", a, b);
    CHECK_MSG(strcmp(a, c), "seeds 7 and 8 gave the same 24 tokens: %s", a);
    CHECK(strchr(a, ','));
}

/* A text model: tiny-dense with the server tests' small tokenizer and the
 * Qwen3.5 template (its text is noise, but every id is real). */
static const char *text_model(void) {
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/textm", ts_test_tmpdir());
        ts_test_sh(g_out, sizeof g_out, "mkdir -p %s && cp tests/fixtures/tiny-dense/* %s/ && "
                   "cp tests/fixtures/server/tokenizer.json tests/fixtures/server/chat_template.jinja %s/",
                   dir, dir, dir);
    }
    return dir;
}

TS_TEST(cli, run_text_prompt_streams_and_reports) {
    const char *m = text_model();
    char ids[4096], text[4096];
    /* the text printed equals the decode of the ids printed */
    CHECK(ts_test_sh(ids, sizeof ids, "%s run -m %s -p 'Hello world' -n 12 --print-ids 2>/dev/null", ts_test_bin(), m) == 0);
    char *nl = strchr(ids, '\n');
    if (nl) *nl = 0;
    CHECK(ts_test_sh(text, sizeof text, "%s run -m %s -p 'Hello world' -n 12 2>/dev/null", ts_test_bin(), m) == 0);
    /* stream-decode the ids in-process: the CLI must print exactly that */
    ts_tokenizer *tok = NULL;
    ts_detok *dt = NULL;
    ts_error err;
    CHECK(ts_tokenizer_load(m, &tok, &err) == 0 && ts_detok_new(tok, &dt, &err) == 0);
    char dec[4096];
    size_t dl = 0;
    for (char *p = ids; *p;) {
        int32_t id = (int32_t)strtol(p, &p, 10);
        if (*p == ',') p++;
        const char *t;
        size_t n;
        CHECK(ts_detok_push(dt, id, &t, &n, &err) == 0);
        memcpy(dec + dl, t, n);
        dl += n;
    }
    const char *t;
    size_t n;
    ts_detok_flush(dt, &t, &n);
    memcpy(dec + dl, t, n);
    dl += n;
    dec[dl++] = '\n';
    dec[dl] = 0;
    ts_detok_free(dt);
    ts_tokenizer_free(tok);
    CHECK_MSG(!strcmp(text, dec), "streamed text '%s' != decoded ids '%s'", text, dec);
    /* one statistics line on stderr */
    CHECK(ts_test_sh(g_out, sizeof g_out, "%s run -m %s -p 'Hello world' -n 12 2>&1 >/dev/null", ts_test_bin(), m) == 0);
    int np = 0, ng = 0;
    CHECK_MSG(sscanf(g_out, "[prompt %d tokens, generated %d tokens; prefill", &np, &ng) == 2 && np > 0 && ng == 12 &&
              strstr(g_out, "decode"), "%s", g_out);
    /* invalid UTF-8 in the prompt is a clear error */
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m %s -p \"$(printf 'ab\\377')\" -n 2", ts_test_bin(), m);
    CHECK_MSG(rc == 1 && strstr(g_out, "UTF-8"), "rc %d: %s", rc, g_out);
}

/* run --logprobs N: a JSON line per token whose ids are --print-ids' ids,
 * whose text joins to the streamed text (the tiny model's text is ASCII
 * noise, so every token is whole UTF-8), with N alternatives, greedy's
 * token first among them; --logit-bias forces or bans; bad values refused. */
TS_TEST(cli, run_logprobs_and_logit_bias) {
    const char *m = text_model();
    char ids[4096], text[4096];
    static char lines[1 << 16];
    CHECK(ts_test_sh(ids, sizeof ids, "%s run -m %s -p 'Hello world' -n 10 --print-ids 2>/dev/null", ts_test_bin(), m) == 0);
    CHECK(ts_test_sh(text, sizeof text, "%s run -m %s -p 'Hello world' -n 10 2>/dev/null", ts_test_bin(), m) == 0);
    CHECK(ts_test_sh(lines, sizeof lines, "%s run -m %s -p 'Hello world' -n 10 --logprobs 3 2>/dev/null", ts_test_bin(), m) == 0);
    char got_ids[4096] = "", joined[4096] = "";
    int n = 0;
    for (char *l = strtok(lines, "\n"); l; l = strtok(NULL, "\n"), n++) {
        cJSON *j = cJSON_Parse(l), *top = cJSON_GetObjectItem(j, "top");
        CHECK_MSG(j && cJSON_IsArray(top) && cJSON_GetArraySize(top) == 3, "line %d: %s", n, l);
        const int id = cJSON_GetObjectItem(j, "id")->valueint;
        const double lp = cJSON_GetObjectItem(j, "logprob")->valuedouble;
        cJSON *t0 = cJSON_GetArrayItem(top, 0), *t2 = cJSON_GetArrayItem(top, 2);
        CHECK_MSG(lp <= 0 && cJSON_GetObjectItem(t0, "id")->valueint == id &&
                  cJSON_GetObjectItem(t0, "logprob")->valuedouble == lp &&
                  cJSON_GetObjectItem(t2, "logprob")->valuedouble <= lp, "line %d: %s", n, l);
        snprintf(got_ids + strlen(got_ids), sizeof got_ids - strlen(got_ids), "%s%d", n ? "," : "", id);
        const char *tk = cJSON_GetObjectItem(j, "token")->valuestring;
        if (!strncmp(tk, "bytes:", 6)) /* a token that is not whole UTF-8: its bytes as \xNN */
            for (const char *q = tk + 6; q[0] == '\\' && q[1] == 'x'; q += 4) {
                unsigned v;
                CHECK(sscanf(q + 2, "%2x", &v) == 1);
                size_t L = strlen(joined);
                joined[L] = (char)v, joined[L + 1] = 0;
            }
        else snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s", tk);
        cJSON_Delete(j);
    }
    char *nl = strchr(ids, '\n');
    if (nl) *nl = 0;
    nl = strrchr(text, '\n');
    if (nl) *nl = 0;
    CHECK_MSG(n == 10 && !strcmp(got_ids, ids), "--logprobs ids %s, --print-ids %s", got_ids, ids);
    /* the joined bytes are the ids' bytes (the streamed text differs where
     * they are not UTF-8: U+FFFD there) */
    ts_tokenizer *tok = NULL;
    ts_error err;
    ts_text dec = {0};
    int32_t idv[16];
    int ni = 0;
    for (char *p = ids; *p && ni < 16;) {
        idv[ni++] = (int32_t)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    CHECK(ts_tokenizer_load(m, &tok, &err) == 0 && ts_tokenizer_decode(tok, idv, ni, &dec, &err) == 0);
    CHECK_MSG(dec.len == strlen(joined) && !memcmp(dec.s, joined, dec.len), "tokens join to '%s', the ids' bytes are '%s'",
              joined, dec.s);
    CHECK(text[0]);
    ts_text_free(&dec);
    ts_tokenizer_free(tok);
    /* +100 on the greedy reply's second token: every token is it */
    int first = 0, second = 0;
    CHECK(sscanf(ids, "%d,%d", &first, &second) == 2);
    const int force = first == second ? first + 1 : second;
    CHECK(ts_test_sh(g_out, sizeof g_out, "%s run -m %s -p 'Hello world' -n 4 --print-ids --logit-bias %d=100 2>/dev/null",
                     ts_test_bin(), m, force) == 0);
    char want[128];
    snprintf(want, sizeof want, "%d,%d,%d,%d\n", force, force, force, force);
    CHECK_MSG(!strcmp(g_out, want), "forced %d: %s", force, g_out);
    /* -100 on the first: it never comes */
    CHECK(ts_test_sh(g_out, sizeof g_out, "%s run -m %s -p 'Hello world' -n 6 --print-ids --logit-bias 5=0,%d=-100 2>/dev/null",
                     ts_test_bin(), m, first) == 0);
    for (char *p = g_out; *p;) {
        CHECK_MSG(strtol(p, &p, 10) != first, "banned %d came: %s", first, g_out);
        if (*p) p++;
    }
    static const char *bad[] = {"--logit-bias 5=101", "--logit-bias x=1", "--logit-bias 5", "--logit-bias 5=1,",
                                "--logprobs 21", "--logprobs 2 --print-ids"};
    for (int i = 0; i < 6; i++) {
        int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m %s -p 'Hello' -n 2 %s", ts_test_bin(), m, bad[i]);
        CHECK_MSG(rc == 2, "'%s': rc %d: %s", bad[i], rc, g_out);
    }
    /* an id outside the vocabulary: the engine names it */
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m %s -p 'Hello' -n 2 --logit-bias 99999999=1", ts_test_bin(), m);
    CHECK_MSG(rc == 1 && strstr(g_out, "99999999"), "rc %d: %s", rc, g_out);
}

/* run --json: every reply that ended before its budget (a stop id after a
 * complete text) is one JSON object (cJSON parses it, an object); greedy on
 * the bundled model ends so, and so do some sampled seeds. */
TS_TEST(cli, run_json_object) {
    int done = 0;
    for (int seed = 0; seed <= 6; seed++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s run -p 'Write a JSON object describing a cat:' -n 160 --json %s%d 2>&1",
                 ts_test_bin(), seed ? "--temp 0.8 --seed " : "--seed ", seed);
        CHECK(ts_test_sh(g_out, sizeof g_out, "%s", cmd) == 0);
        char *stats = strstr(g_out, "\n[prompt ");
        int np = 0, ng = 0;
        CHECK_MSG(stats && sscanf(stats + 1, "[prompt %d tokens, generated %d tokens", &np, &ng) == 2, "%s", g_out);
        *stats = 0;
        if (ng >= 160) continue; /* the budget cut it: a prefix, not checked here (test_constraint does) */
        cJSON *j = cJSON_Parse(g_out);
        CHECK_MSG(j && cJSON_IsObject(j), "seed %d: '%s' is not one JSON object", seed, g_out);
        cJSON_Delete(j);
        done++;
    }
    CHECK_MSG(done >= 2, "only %d of 7 replies ended before the budget", done);
    /* without a tokenizer there is nothing to constrain by */
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --json", ts_test_bin());
    CHECK_MSG(rc == 1 && strstr(g_out, "tokenizer"), "rc %d: %s", rc, g_out);
}

/* run --json-schema FILE: a reply that ended before its budget validates
 * against the schema (the independent validator of
 * tests/fuzz/schema_valid.c); greedy MTP prints the same text; a schema
 * the constraint cannot enforce is refused before the model loads, naming
 * the keyword and its path; --json and --json-schema together are refused.
 * chat --json-schema: each turn's reply validates. */
#include "fuzz/fuzz.h"

TS_TEST(cli, run_json_schema) {
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
        "\"age\":{\"type\":\"integer\"},\"colors\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"black\"]},"
        "\"maxItems\":2}},\"required\":[\"name\",\"colors\"]}";
    char path[600], bad[600];
    snprintf(path, sizeof path, "%s/cat.schema.json", ts_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.schema.json", ts_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(schema, f);
    fclose(f);
    f = fopen(bad, "w");
    CHECK(f);
    fputs("{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date\"}}}", f);
    fclose(f);
    cJSON *js = cJSON_Parse(schema);
    int done = 0;
    static char greedy[sizeof g_out];
    for (int seed = 0; seed <= 4; seed++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s run -p 'A cat as JSON:' -n 400 --json-schema %s %s%d 2>&1", ts_test_bin(), path,
                 seed ? "--temp 0.8 --seed " : "--seed ", seed);
        CHECK(ts_test_sh(g_out, sizeof g_out, "%s", cmd) == 0);
        char *stats = strstr(g_out, "\n[prompt ");
        int np = 0, ng = 0;
        CHECK_MSG(stats && sscanf(stats + 1, "[prompt %d tokens, generated %d tokens", &np, &ng) == 2, "%s", g_out);
        *stats = 0;
        if (!seed) snprintf(greedy, sizeof greedy, "%s", g_out);
        if (ng >= 400) continue; /* the budget cut it (test_schema checks prefixes) */
        cJSON *j = cJSON_Parse(g_out);
        CHECK_MSG(j && fuzz_schema_valid(js, js, j, 0) == 1, "seed %d: '%s' does not validate", seed, g_out);
        cJSON_Delete(j);
        done++;
    }
    cJSON_Delete(js);
    CHECK_MSG(done >= 2, "only %d of 5 replies ended before the budget", done);
    CHECK(ts_test_sh(g_out, sizeof g_out, "%s run -p 'A cat as JSON:' -n 400 --json-schema %s --seed 0 --spec mtp --draft 2 2>/dev/null",
                     ts_test_bin(), path) == 0);
    CHECK_MSG(!strncmp(g_out, greedy, strlen(greedy)), "--spec mtp printed '%s', plain '%s'", g_out, greedy);
    /* refused before loading anything: the keyword and its path */
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -p 'x' -n 4 --json-schema %s", ts_test_bin(), bad);
    CHECK_MSG(rc == 1 && strstr(g_out, "'format' at #/properties/when is not supported") && strstr(g_out, bad), "rc %d: %s",
              rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s run -p 'x' -n 4 --json-schema %s/none.json", ts_test_bin(), ts_test_tmpdir());
    CHECK_MSG(rc == 1 && strstr(g_out, "cannot read"), "rc %d: %s", rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s run -p 'x' -n 4 --json --json-schema %s", ts_test_bin(), path);
    CHECK_MSG(rc == 2 && strstr(g_out, "not both"), "rc %d: %s", rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s run --help", ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(g_out, "--json-schema FILE"), "%s", g_out);
    /* chat: every turn's reply validates (each follows the echo of its line) */
    rc = ts_test_sh(g_out, sizeof g_out, "printf 'A cat\\nAnother cat\\n' | %s chat --no-think -n 600 --json-schema %s 2>/dev/null",
                    ts_test_bin(), path);
    CHECK_MSG(rc == 0, "chat: rc %d: %s", rc, g_out);
    js = cJSON_Parse(schema);
    static const char *const said[] = {"A cat\n", "Another cat\n"};
    int turns = 0;
    for (int k = 0; k < 2; k++) {
        const char *p = strstr(g_out, said[k]);
        cJSON *j = p ? cJSON_ParseWithOpts(p + strlen(said[k]), NULL, 0) : NULL;
        turns += j && fuzz_schema_valid(js, js, j, 0) == 1;
        cJSON_Delete(j);
    }
    cJSON_Delete(js);
    CHECK_MSG(turns == 2, "%d of 2 chat replies validate: %s", turns, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "echo hi | %s chat --json-schema %s", ts_test_bin(), bad);
    CHECK_MSG(rc == 1 && strstr(g_out, "'format' at #/properties/when"), "chat: rc %d: %s", rc, g_out);
}

TS_TEST(cli, run_chat_uses_the_template) {
    const char *m = text_model();
    char a[4096], b[4096], req[600];
    /* --chat --no-think must equal the ids of the template rendering fed as a prompt */
    snprintf(req, sizeof req, "%s/req.json", ts_test_tmpdir());
    FILE *f = fopen(req, "w");
    fputs("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi there\"}],"
          "\"chat_template_kwargs\":{\"enable_thinking\":false}}", f);
    fclose(f);
    CHECK(ts_test_sh(a, sizeof a, "%s run -m %s --chat --system 'Be brief.' --no-think -p 'Hi there' -n 8 --print-ids 2>/dev/null",
                     ts_test_bin(), m) == 0);
    CHECK(ts_test_sh(b, sizeof b, "%s template -m %s --request %s > %s.txt && %s run -m %s -f %s.txt -n 8 --print-ids 2>/dev/null",
                     ts_test_bin(), m, req, req, ts_test_bin(), m, req) == 0);
    CHECK_MSG(!strcmp(a, b) && strchr(a, ','), "--chat gave %s, the rendered prompt gave %s", a, b);
}

TS_TEST(cli, interactive_chat_turns) {
    const char *m = text_model();
    /* two turns and a reset through stdin; each turn prints a stats line.
     * (This noise model's replies do not re-tokenize to the ids it generated,
     * so the second turn may re-feed the whole conversation: only its being
     * longer than nothing is asserted.) */
    int rc = ts_test_sh(g_out, sizeof g_out, "printf 'Hello\\nHow are you\\n/reset\\nHello\\n/quit\\n' | %s chat -m %s --no-think -n 6",
                        ts_test_bin(), m);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, g_out);
    int turns = 0;
    for (const char *p = g_out; (p = strstr(p, "[prompt ")); p++) turns++;
    CHECK_MSG(turns == 3, "expected 3 stats lines: %s", g_out);
    CHECK_MSG(strstr(g_out, "(conversation reset)"), "%s", g_out);
    int n1 = 0, n2 = 0, n3 = 0;
    const char *p = strstr(g_out, "[prompt ");
    sscanf(p, "[prompt %d", &n1);
    p = strstr(p + 1, "[prompt ");
    sscanf(p, "[prompt %d", &n2);
    p = strstr(p + 1, "[prompt ");
    sscanf(p, "[prompt %d", &n3);
    CHECK_MSG(n1 > 0 && n3 == n1, "first turn %d tokens, after reset %d", n1, n3);
    CHECK_MSG(n2 > 0, "second turn fed %d new tokens", n2);
}

/* ---- first contact (issue 20, item 7) ---------------------------------------- */

/* A bare `turbospark` prints the commands (it used to generate text). */
TS_TEST(cli, bare_prints_usage) {
    char err[4096];
    int rc = ts_test_sh(g_out, sizeof g_out, "%s 2>/dev/null", ts_test_bin());
    CHECK_MSG(rc == 0, "exit %d: %s", rc, g_out);
    static const char *cmds[] = {"run", "chat", "serve", "bench", "plan", "logits", "perplexity", "convert", "synth",
                                 "tokenize", "template"};
    CHECK_MSG(strstr(g_out, "usage: turbospark COMMAND") && strstr(g_out, "TURBOSPARK_MODEL"), "%s", g_out);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", cmds[i]);
        CHECK_MSG(strstr(g_out, line), "'%s' is not listed: %s", cmds[i], g_out);
    }
    rc = ts_test_sh(err, sizeof err, "%s 2>&1 >/dev/null", ts_test_bin());
    CHECK_MSG(rc == 0 && !strstr(err, "[prompt"), "a bare turbospark generated: %s", err);
}

/* Every command's --help goes to stdout, exits 0 and lists every option its
 * parser takes (the lists below are read off each parser). */
TS_TEST(cli, help_lists_options) {
    static const struct { const char *cmd; const char *opts; } t[] = {
        {"run", "-m -p -f --ids --chat --system --no-think -n --temp --top-k --top-p --min-p --seed --repeat-penalty "
                "--presence-penalty --frequency-penalty --ctx --chunk --threads --act-bits --kernels --spec --draft "
                "--draft-vocab --draft-p-min --print-ids -v"},
        {"chat", "-m --system --no-think -n --temp --top-k --seed --ctx --chunk --threads --act-bits --kernels --spec "
                 "--draft --draft-vocab --draft-p-min /reset /quit"},
        {"serve", "-m --host --port --ctx --chunk --parallel --queue --max-tokens-limit --api-key --threads --act-bits "
                  "--kernels --spec --draft --draft-vocab --draft-p-min -v"},
        {"bench", "-m --prompt --gen --runs --json --bw-mib --ctx --ids-file --threads --act-bits --kernels --spec --draft "
                  "--draft-vocab --draft-p-min --accept median"},
        {"plan", "-m --ctx --chunk --spec --draft --checkpoint"},
        {"logits", "-m --ids -o --head --threads --act-bits --kernels --chunk"},
        {"perplexity", "-m -f --text --window --mtp --json --threads --act-bits --kernels --chunk"},
        {"convert", "--bits --group --quiet"},
        {"synth", "--shape --out --bits --group --seed --quiet"},
        {"tokenize", "-t -m -p -f --jsonl --decode"},
        {"template", "-m --template --request"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char err[1024];
        int rc = ts_test_sh(g_out, sizeof g_out, "%s %s --help 2>/dev/null", ts_test_bin(), t[i].cmd);
        CHECK_MSG(rc == 0 && !strncmp(g_out, "usage: turbospark ", 18), "%s --help: exit %d: %s", t[i].cmd, rc, g_out);
        ts_test_sh(err, sizeof err, "%s %s --help 2>&1 >/dev/null", ts_test_bin(), t[i].cmd);
        CHECK_MSG(!err[0], "%s --help wrote to stderr: %s", t[i].cmd, err);
        char opts[512];
        snprintf(opts, sizeof opts, "%s", t[i].opts);
        for (char *o = strtok(opts, " "); o; o = strtok(NULL, " ")) {
            char a[64], b[64], c[64];
            snprintf(a, sizeof a, " %s ", o);  /* an option is a word of its own */
            snprintf(b, sizeof b, " %s,", o);
            snprintf(c, sizeof c, " %s\n", o);
            CHECK_MSG(strstr(g_out, a) || strstr(g_out, b) || strstr(g_out, c), "%s --help does not list %s:\n%s",
                      t[i].cmd, o, g_out);
        }
    }
}

/* Without -m outside the repository: the error says where the model was
 * looked for and names TURBOSPARK_MODEL, which works. */
TS_TEST(cli, no_model_says_where_it_looked) {
    char dir[600], cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd));
    snprintf(dir, sizeof dir, "%s/away", ts_test_tmpdir());
    CHECK(ts_test_sh(g_out, sizeof g_out, "mkdir -p %s/bin && cp %s %s/bin/turbospark", dir, ts_test_bin(), dir) == 0);
    int rc = ts_test_sh(g_out, sizeof g_out, "cd %s && env -u TURBOSPARK_MODEL bin/turbospark run -p hi -n 2", dir);
    char want1[700], want2[700];
    snprintf(want1, sizeof want1, "%s/models/default", dir);
    snprintf(want2, sizeof want2, "%s/bin/../models/default", dir);
    CHECK_MSG(rc == 2 && strstr(g_out, "no model: pass -m DIR or set TURBOSPARK_MODEL") && strstr(g_out, want1) &&
              strstr(g_out, want2), "rc %d: %s", rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "cd %s && TURBOSPARK_MODEL=%s/models/default bin/turbospark run --ids 5 -n 2 --print-ids",
                    dir, cwd);
    CHECK_MSG(rc == 0 && strstr(g_out, "[prompt 1 token,"), "rc %d: %s", rc, g_out);
    /* the binary in the repository finds the bundled model from anywhere */
    rc = ts_test_sh(g_out, sizeof g_out, "cd %s && env -u TURBOSPARK_MODEL %s/%s run --ids 5 -n 2 --print-ids", dir, cwd,
                    ts_test_bin());
    CHECK_MSG(ts_test_bin()[0] == '/' || (rc == 0 && strstr(g_out, "[prompt 1 token,")), "rc %d: %s", rc, g_out);
}

/* "median of R" is the median: for an even R the mean of the two middle
 * runs (it used to print the larger of two). */
TS_TEST(cli, bench_median_is_the_median) {
    for (int runs = 2; runs <= 4; runs += 2) {
        int rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m tests/fixtures/tiny-dense --prompt 16 --gen 8 --runs %d "
                            "--bw-mib 1 2>&1", ts_test_bin(), runs);
        CHECK_MSG(rc == 0, "rc %d: %s", rc, g_out);
        static const char *const lines[] = {"prefill ", "decode "};
        for (int k = 0; k < 2; k++) {
            const char *p = strstr(g_out, lines[k]);
            double med, lo, hi;
            int n, r;
            CHECK_MSG(p && sscanf(p + strlen(lines[k]), "%d tokens: %lf tok/s (median of %d; min %lf, max %lf)", &n, &med,
                                  &r, &lo, &hi) == 5 && r == runs, "%s", g_out);
            /* printed to 0.1: for 2 runs the mean of both; for 4 strictly inside */
            if (runs == 2) CHECK_MSG(fabs(med - 0.5 * (lo + hi)) <= 0.1, "median %.1f of min %.1f max %.1f", med, lo, hi);
            else CHECK_MSG(med >= lo && med <= hi && (hi - lo < 0.3 || med < hi), "median %.1f of min %.1f max %.1f", med, lo, hi);
        }
    }
}

/* bench --ctx: the session's context as a server's (the caches and the
 * attention split are sized by it), reported in the JSON; less than the
 * prompt and --gen need is refused with both numbers. */
TS_TEST(cli, bench_ctx) {
    int rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m tests/fixtures/tiny-dense --prompt 16 --gen 8 --runs 1 "
                        "--bw-mib 1 --ctx 300 --json 2>&1", ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(g_out, "\"n_ctx\": 300,"), "rc %d: %s", rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m tests/fixtures/tiny-dense --prompt 16 --gen 8 --runs 1 "
                    "--bw-mib 1 --json 2>&1", ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(g_out, "\"n_ctx\": 32,"), "rc %d: %s", rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m tests/fixtures/tiny-dense --prompt 16 --gen 8 --runs 1 "
                    "--bw-mib 1 --ctx 20 2>&1", ts_test_bin());
    CHECK_MSG(rc == 2 && strstr(g_out, "--ctx 20 is less than the 32 tokens"), "rc %d: %s", rc, g_out);
}

/* bench --accept: the drafts are planted so that position j is accepted
 * with the given probability; the measured acceptance by position matches
 * it (about 280 blocks: 4 standard deviations of the worst position are
 * ~0.12), the output is still plain greedy's, and lists that cannot be
 * acceptances (increasing, outside [0, 1]) or --accept without --spec are
 * refused. */
TS_TEST(cli, bench_forced_accept) {
    int rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m tests/fixtures/tiny-dense --prompt 16 --gen 400 --runs 2 "
                        "--bw-mib 1 --spec mtp --draft 3 --accept 0.8,0.6,0.5 --json 2>&1", ts_test_bin());
    CHECK_MSG(rc == 0, "rc %d: %s", rc, g_out);
    const char *p = strstr(g_out, "\"accept_by_position\": [");
    double a[3];
    CHECK_MSG(p && sscanf(p + strlen("\"accept_by_position\": ["), "%lf, %lf, %lf", &a[0], &a[1], &a[2]) == 3, "%s", g_out);
    const double want[3] = {0.8, 0.6, 0.5};
    for (int j = 0; j < 3; j++)
        CHECK_MSG(fabs(a[j] - want[j]) < 0.12, "position %d accepted %.3f, forced %.2f: %s", j + 1, a[j], want[j], g_out);
    CHECK_MSG(strstr(g_out, "\"identical\": true") && strstr(g_out, "\"forced_accept\": [0.800, 0.600, 0.500]"), "%s",
              g_out);
    static const char *const bad[] = {"--spec mtp --accept 0.5,0.6", "--spec mtp --accept 1.5", "--spec mtp --accept x",
                                      "--accept 0.5"};
    for (int k = 0; k < 4; k++) {
        rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m tests/fixtures/tiny-dense --prompt 16 --gen 8 --runs 1 "
                        "--bw-mib 1 %s 2>&1", ts_test_bin(), bad[k]);
        CHECK_MSG(rc == 2 && strstr(g_out, "--accept"), "%s: rc %d: %s", bad[k], rc, g_out);
    }
}

/* bench --ids-file skips '#' lines (the held-out windows' file): the
 * windows' ids follow one another, so --prompt 12 takes both 6-id windows
 * of the commented file as it takes the bare list's 12 ids. */
TS_TEST(cli, bench_ids_file_comments) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/ids_plain.txt", ts_test_tmpdir());
    snprintf(b, sizeof b, "%s/ids_comments.txt", ts_test_tmpdir());
    FILE *f = fopen(a, "w"), *g = fopen(b, "w");
    CHECK(f && g);
    if (!f || !g) return;
    fputs("11,5,301,42,7,99,250,3,18,64,120,9\n", f);
    fputs("# windows\n# doc 1, with commas and digits 1,2,3\n11,5,301,42,7,99\n# doc 2\n250,3,18,64,120,9\n", g);
    fclose(f), fclose(g);
    char oa[4096], ob[4096];
    int ra = ts_test_sh(oa, sizeof oa, "%s bench -m tests/fixtures/tiny-dense --prompt 12 --gen 4 --runs 1 --bw-mib 1 "
                        "--ids-file %s --json 2>&1", ts_test_bin(), a);
    int rb = ts_test_sh(ob, sizeof ob, "%s bench -m tests/fixtures/tiny-dense --prompt 12 --gen 4 --runs 1 --bw-mib 1 "
                        "--ids-file %s --json 2>&1", ts_test_bin(), b);
    CHECK_MSG(ra == 0 && rb == 0, "rc %d %d: %s / %s", ra, rb, oa, ob);
    CHECK_MSG(strstr(oa, "\"prompt\": 12,") && strstr(ob, "\"prompt\": 12,"), "%s / %s", oa, ob);
}

/* One count, one word: "prompt 1 token", "generated 1 token". */
TS_TEST(cli, stats_line_singular) {
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/tiny-dense --ids 5 -n 1 --print-ids 2>&1 >/dev/null",
                        ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(g_out, "[prompt 1 token, generated 1 token; "), "%s", g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/tiny-dense --ids 5,6 -n 2 --print-ids 2>&1 >/dev/null",
                    ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(g_out, "[prompt 2 tokens, generated 2 tokens; "), "%s", g_out);
}

/* The engine options the commands share go through one parser: the same
 * value is refused the same way by every command that takes it (perplexity
 * used to read --threads x as 0, bench and logits spelled their own
 * errors), and an unknown kernel is an error. */
TS_TEST(cli, engine_options_one_parser) {
    static const char *cmds[] = {"run --ids 1 -n 1", "chat", "serve --port 0", "bench", "logits --ids 1 -o /dev/null",
                                 "perplexity -f /dev/null"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char name[32], want[128];
        sscanf(cmds[i], "%31s", name);
        static const char *bad[][2] = {{"--threads x", "bad value 'x' for --threads"},
                                       {"--act-bits 7", "bad value '7' for --act-bits (use 8, 16 or 24)"},
                                       {"--chunk 0", "bad value '0' for --chunk"},
                                       {"--kernels nope", "--kernels 'nope': use auto, avx512, avx2, generic or ref"},
                                       {"--threads", "--threads needs a value"}};
        for (int k = 0; k < 5; k++) {
            if (k == 2 && !strcmp(name, "bench")) continue; /* bench sets its own chunk (its prompt) */
            int rc = ts_test_sh(g_out, sizeof g_out, "echo | %s %s -m tests/fixtures/tiny-dense %s", ts_test_bin(), cmds[i],
                                bad[k][0]);
            snprintf(want, sizeof want, "turbospark %s: %s", name, bad[k][1]);
            CHECK_MSG(rc == 2 && strstr(g_out, want), "'%s %s' exited %d: %s", cmds[i], bad[k][0], rc, g_out);
        }
    }
    int rc = ts_test_sh(g_out, sizeof g_out, "%s plan -m tests/fixtures/tiny-dense --ctx x", ts_test_bin());
    CHECK_MSG(rc == 2 && strstr(g_out, "turbospark plan: bad value 'x' for --ctx"), "plan --ctx x: %d %s", rc, g_out);
}
