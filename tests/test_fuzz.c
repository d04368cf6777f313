/* test_fuzz.c: the fuzz harnesses' smoke run (group fuzz).
 *
 * Replays every file of tests/fuzz/corpus/NAME/ (the seeds and every input
 * a fuzzing run found a bug with) through harness fuzz_NAME, in the normal
 * build and under `make asan`: the regressions stay fixed without libFuzzer.
 * Then a few hundred deterministic mutations of the seeds (byte flips,
 * truncations, splices), so that a change which breaks a harness's property
 * on nearby inputs shows up here too. A broken property aborts (fuzz_fail
 * names the input); a test fails if a corpus directory is missing or empty.
 */
#include <dirent.h>
#include <stdint.h>

#include "fuzz/fuzz.h"
#include "ts_test.h"

#define MAX_FILES 4096

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every file of the target's corpus, in name order; returns the count. */
static int corpus(const char *name, char **paths, int cap) {
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        if (de->d_name[0] == '.') continue;
        size_t l = strlen(dir) + strlen(de->d_name) + 2;
        paths[n] = malloc(l);
        snprintf(paths[n], l, "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(d);
    qsort(paths, n, sizeof paths[0], cmp_names);
    return n;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return b;
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void replay(const fuzz_target *t, int n_mutations) {
    char **paths = malloc(sizeof(char *) * MAX_FILES);
    int n = corpus(t->name, paths, MAX_FILES);
    CHECK_MSG(n > 0, "tests/fuzz/corpus/%s is missing or empty", t->name);
    size_t *lens = malloc(sizeof(size_t) * n);
    uint8_t **bufs = malloc(sizeof(uint8_t *) * n);
    for (int i = 0; i < n; i++) {
        bufs[i] = slurp(paths[i], &lens[i]);
        CHECK_MSG(bufs[i], "cannot read %s", paths[i]);
        fuzz_current = paths[i];
        t->fn(bufs[i], lens[i]);
    }
    /* deterministic mutations: flip bytes, cut, splice two seeds */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    char what[600];
    for (int m = 0; m < n_mutations; m++) {
        int a = (int)(rng(&s) % (uint64_t)n), b = (int)(rng(&s) % (uint64_t)n);
        size_t la = lens[a], cut = la ? rng(&s) % (la + 1) : 0, lb = lens[b], from = lb ? rng(&s) % (lb + 1) : 0;
        size_t len = cut + (lb - from);
        uint8_t *x = malloc(len ? len : 1);
        memcpy(x, bufs[a], cut);
        memcpy(x + cut, bufs[b] + from, lb - from);
        for (int k = (int)(rng(&s) % 4); k > 0 && len; k--) x[rng(&s) % len] ^= (uint8_t)(1u << (rng(&s) % 8));
        snprintf(what, sizeof what, "mutation %d (%s[:%zu] + %s[%zu:], flipped)", m, paths[a], cut, paths[b], from);
        fuzz_current = what;
        t->fn(x, len);
        free(x);
    }
    fuzz_current = NULL;
    for (int i = 0; i < n; i++) free(bufs[i]), free(paths[i]);
    free(bufs), free(lens), free(paths);
}

#define FUZZ_TEST(NAME, MUT)                                   \
    TS_TEST(fuzz, NAME) {                                      \
        for (int i = 0; i < fuzz_n_targets; i++)               \
            if (!strcmp(fuzz_targets[i].name, #NAME)) {        \
                replay(&fuzz_targets[i], MUT);                 \
                return;                                        \
            }                                                  \
        CHECK_MSG(0, "no fuzz target named %s", #NAME);        \
    }

FUZZ_TEST(server, 200)
FUZZ_TEST(chat, 200)
FUZZ_TEST(template, 300)
FUZZ_TEST(tokenizer, 300)
FUZZ_TEST(tokenizer_json, 100)
FUZZ_TEST(safetensors, 300)
FUZZ_TEST(config, 300)
FUZZ_TEST(reply, 300)
FUZZ_TEST(dflash_config, 300)
FUZZ_TEST(size, 300)
FUZZ_TEST(json_fsm, 400)
FUZZ_TEST(json_schema, 300)

/* ---- the rules the fuzzing checks, each on the input that broke it ------------ */

#include "loader/config.h"
#include "loader/safetensors.h"
#include "text/tokenizer.h"
#include "turbospark.h"

static int st_refused(const char *header, size_t data_bytes, const char *want) {
    size_t hl = strlen(header), n = 8 + hl + data_bytes;
    uint8_t *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    ts_st_set *s = NULL;
    ts_error err = {0};
    int rc = ts_st_open_mem(b, n, "t.safetensors", &s, &err);
    ts_st_close(s);
    free(b);
    return rc != 0 && strstr(err.msg, want) != NULL;
}

/* Shapes and offsets are range-checked before the casts and products: a zero
 * dim used to let [1e15, 1e15, 0] through, and ts_st_numel's int64 product
 * then overflowed; fractional offsets were truncated. */
TS_TEST(fuzz, rule_safetensors_numbers) {
    CHECK(st_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1e15,1e15,0],\"data_offsets\":[0,0]}}", 0, "malformed shape"));
    CHECK(st_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", 0,
                     "malformed shape"));
    CHECK(st_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", 8, "malformed shape"));
    CHECK(st_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}}", 8, "malformed shape"));
    CHECK(!st_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,0],\"data_offsets\":[0,0]}}", 0, ""));
}

static int tok_refused(const char *json, const char *want) {
    ts_tokenizer *t = NULL;
    ts_error err = {0};
    int rc = ts_tokenizer_load_mem(json, strlen(json), "tokenizer.json", &t, &err);
    ts_tokenizer_free(t);
    return rc != 0 && strstr(err.msg, want) != NULL;
}

/* The Split regex goes to PCRE2 with PCRE2_NO_UTF_CHECK: it is validated
 * first. Sequences nest with a limit. */
TS_TEST(fuzz, rule_tokenizer_checks) {
    const char *head = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]},\"pre_tokenizer\":";
    char buf[8192];
    snprintf(buf, sizeof buf, "%s{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\xc0\xaf|\xed\xa0\x80\"},\"behavior\":\"Isolated\"}}",
             head);
    CHECK(tok_refused(buf, "regex is not valid UTF-8"));
    snprintf(buf, sizeof buf, "%s{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a|\xc3\xa9\"},\"behavior\":\"Isolated\"}}", head);
    CHECK(!tok_refused(buf, ""));
    size_t o = (size_t)snprintf(buf, sizeof buf, "%s", head);
    for (int i = 0; i < 20; i++) o += (size_t)snprintf(buf + o, sizeof buf - o, "{\"type\":\"Sequence\",\"pretokenizers\":[");
    o += (size_t)snprintf(buf + o, sizeof buf - o, "{\"type\":\"ByteLevel\"}");
    for (int i = 0; i < 20; i++) o += (size_t)snprintf(buf + o, sizeof buf - o, "]}");
    snprintf(buf + o, sizeof buf - o, "}");
    CHECK(tok_refused(buf, "nested more than"));
}

/* extra: fields ahead of the base ones (cJSON reads the first of a repeated key) */
static int cfg_refused(const char *extra, const char *want) {
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{%s%s\"model_type\":\"qwen3_5\",\"vocab_size\":64,\"hidden_size\":32,\"num_hidden_layers\":2,"
             "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"intermediate_size\":64}", extra, *extra ? "," : "");
    ts_config c;
    ts_error err = {0};
    int rc = ts_config_parse(buf, NULL, "config.json", &c, &err);
    return rc != 0 && strstr(err.msg, want) != NULL;
}

/* Numbers from config.json are range-checked before a cast (eps to float,
 * eos ids to int) and before the loader's int products (heads * head size). */
TS_TEST(fuzz, rule_config_numbers) {
    CHECK(!cfg_refused("", ""));
    CHECK(cfg_refused("\"rms_norm_eps\":1e-300", "rms_norm_eps"));
    CHECK(cfg_refused("\"rms_norm_eps\":1e300", "rms_norm_eps"));
    CHECK(cfg_refused("\"head_dim\":1e300", "must be an integer in"));
    CHECK(cfg_refused("\"num_key_value_heads\":1,\"num_attention_heads\":65536,\"head_dim\":65536", "exceed"));
    CHECK(cfg_refused("\"linear_num_value_heads\":16384,\"linear_value_head_dim\":16384,\"linear_num_key_heads\":1",
                      "exceed"));
    CHECK(!cfg_refused("\"eos_token_id\":[1e300,-1,[[[[2]]]],3]", ""));
}

/* Comparing values nested deeper than the evaluator's limit is a LimitError,
 * not a stack overflow: a template builds a list 500,000 levels deep
 * within its step budget, then compares it. */
TS_TEST(fuzz, rule_jinja_value_depth) {
    static const char src[] =
        "{%- set ns = namespace(x=[]) -%}{%- for i in range(100) -%}{%- for j in range(5000) -%}"
        "{%- set ns.x = [ns.x] -%}{%- endfor -%}{%- endfor -%}{{ ns.x == ns.x }}";
    static const char *const uses[] = {"{{ ns.x == ns.x }}", "{{ ns.x < ns.x }}", "{{ ns.x in [ns.x] }}",
                                       "{{ [ns.x, ns.x] | unique | list | length }}"};
    for (size_t u = 0; u < sizeof uses / sizeof uses[0]; u++) {
        char text[512];
        snprintf(text, sizeof text, "%.*s%s", (int)(strstr(src, "{{") - src), src, uses[u]);
        ts_chat_template *t = NULL;
        ts_error err = {0};
        CHECK(ts_chat_template_parse(text, strlen(text), &t, &err) == 0);
        char *out = NULL;
        int rc = ts_chat_render_json(t, "{\"messages\":[]}", 15, &out, NULL, &err);
        ts_chat_text_free(out);
        ts_chat_template_free(t);
        CHECK_MSG(rc != 0 && strstr(err.msg, "nested too deeply"), "%s: rc %d, %s", uses[u], rc, err.msg);
    }
}

/* A left-associative chain parses into a tree as deep as it is long; the
 * tree walk is bounded (a LimitError), where 20,000 terms overflowed the
 * stack. And an empty sequence repeated a huge number of times is empty at
 * once (the fuzzer's timeout: () * 92 ** 9 looped 4.7e17 times). */
TS_TEST(fuzz, rule_jinja_chain_depth) {
    static const char *const unit[] = {" + 1", "|lower", ".a", "[0]", "()", " and 1"};
    for (size_t u = 0; u < sizeof unit / sizeof unit[0]; u++) {
        size_t k = strlen(unit[u]), n = 300000;
        char *text = malloc(k * n + 64);
        size_t o = (size_t)sprintf(text, "{{ x");
        for (size_t i = 0; i < n; i++) memcpy(text + o, unit[u], k), o += k;
        o += (size_t)sprintf(text + o, " }}");
        ts_chat_template *t = NULL;
        ts_error err = {0};
        int rc = ts_chat_template_parse(text, o, &t, &err);
        free(text);
        CHECK_MSG(rc == 0, "'%s' chain: %s", unit[u], err.msg);
        char *out = NULL;
        rc = ts_chat_render_json(t, "{\"messages\":[],\"x\":1}", 21, &out, NULL, &err);
        ts_chat_text_free(out);
        ts_chat_template_free(t);
        CHECK_MSG(rc != 0 && strstr(err.msg, "nested too deeply"), "'%s' chain: rc %d, %s", unit[u], rc, err.msg);
    }
    static const char rep[] = "{{ (() * 92 ** 9) | length }}{{ ('' * 9223372036854775807) | length }}";
    ts_chat_template *t = NULL;
    ts_error err = {0};
    CHECK(ts_chat_template_parse(rep, sizeof rep - 1, &t, &err) == 0);
    char *out = NULL;
    int rc = ts_chat_render_json(t, "{\"messages\":[]}", 15, &out, NULL, &err);
    CHECK_MSG(rc == 0 && out && !strcmp(out, "00"), "rc %d, %s", rc, rc ? err.msg : out);
    ts_chat_text_free(out);
    ts_chat_template_free(t);
}
