/* test_loader.c: the loader on good alternative layouts and on bad input.
 *
 * Bad input must give a clear error that names the problem (file, tensor,
 * field) and never crash; alternative layouts (flat config, "model." prefix,
 * full_attention_interval instead of layer_types, legacy rope fields) must
 * load to the same logits as the released layout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine.h"
#include "st_write.h"
#include "ts_test.h"

#define FIX "tests/fixtures/tiny-dense"

static int open_err(const char *dir, ts_error *err) {
    ts_engine *e = NULL;
    memset(err, 0, sizeof *err);
    int rc = ts_engine_open(dir, NULL, &e, err);
    ts_engine_close(e);
    return rc;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(data, 1, n, f); fclose(f); }
}

/* A one-file safetensors with the given header text and `data_len` zero bytes. */
static void write_st(const char *path, const char *hdr, size_t data_len) {
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(hdr);
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(hdr, 1, n, f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

static int st_err(const char *hdr, size_t data_len, ts_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", ts_test_tmpdir());
    write_st(path, hdr, data_len);
    ts_st_set *s = NULL;
    memset(err, 0, sizeof *err);
    int rc = ts_st_open_file(path, &s, err);
    ts_st_close(s);
    return rc;
}

TS_TEST(loader, safetensors_bad_headers) {
    ts_error err;
    CHECK(st_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &err) == 0);
    CHECK(st_err("not json at all", 0, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "not a JSON object"), "%s", err.msg);
    CHECK(st_err("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "unknown dtype 'Q7'") && strstr(err.msg, "'a'"), "%s", err.msg);
    CHECK(st_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "run past the end"), "%s", err.msg);
    CHECK(st_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "need 12"), "%s", err.msg);
    CHECK(st_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "overlapping"), "%s", err.msg);
    CHECK(st_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, &err) == TS_E_FORMAT);
    CHECK(st_err("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "data_offsets"), "%s", err.msg);
    /* header length larger than the file */
    char path[512];
    snprintf(path, sizeof path, "%s/short.safetensors", ts_test_tmpdir());
    unsigned char b[12] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    write_file(path, b, sizeof b);
    ts_st_set *s = NULL;
    CHECK(ts_st_open_file(path, &s, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "runs past the end"), "%s", err.msg);
    write_file(path, b, 3);
    CHECK(ts_st_open_file(path, &s, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "truncated"), "%s", err.msg);
}

/* Random mutations of a real header: never crash, always a clean result. */
TS_TEST(loader, safetensors_header_fuzz) {
    char *txt = NULL;
    size_t len = 0;
    ts_error err;
    CHECK(ts_read_file(FIX "/model-00001-of-00002.safetensors", &txt, &len, &err) == 0);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)txt[i];
    size_t keep = 8 + hl + 4096 < len ? 8 + hl + 4096 : len;
    char path[512];
    snprintf(path, sizeof path, "%s/fuzz.safetensors", ts_test_tmpdir());
    unsigned seed = 12345;
    int ok = 0, bad = 0;
    for (int it = 0; it < 300; it++) {
        char *m = malloc(keep);
        memcpy(m, txt, keep);
        int nmut = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 4;
        for (int k = 0; k < nmut; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % (hl + 8);
            seed = seed * 1103515245u + 12345u;
            m[pos] = (char)(seed >> 16);
        }
        write_file(path, m, keep);
        free(m);
        ts_st_set *s = NULL;
        if (ts_st_open_file(path, &s, &err) == 0) ok++;
        else { bad++; CHECK(err.msg[0] != 0); }
        ts_st_close(s);
    }
    ts_free(txt);
    CHECK(bad > 0); /* the header was cut short of its data, so most mutations fail */
    (void)ok;
}

/* Copy the fixture into tmp/name with the weights rewritten through `rename`. */
static const char *with_weights(const char *name, st_rename_fn fn, void *user) {
    static char dst[512];
    snprintf(dst, sizeof dst, "%s/%s", ts_test_tmpdir(), name);
    if (st_copy_configs(FIX, dst) != 0) return NULL;
    ts_st_set *s = NULL;
    ts_error err;
    if (ts_st_open_dir(FIX, &s, &err)) return NULL;
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dst);
    int rc = st_write_set(s, p, fn, user);
    ts_st_close(s);
    return rc ? NULL : dst;
}

static const char *drop_one(const char *n, char *buf, size_t cap, void *user) {
    return strcmp(n, (const char *)user) ? n : NULL;
}

static const char *swap_qk(const char *n, char *buf, size_t cap, void *user) {
    const char *a = "model.language_model.layers.3.self_attn.q_proj.weight";
    const char *b = "model.language_model.layers.3.self_attn.k_proj.weight";
    if (!strcmp(n, a)) return b;
    if (!strcmp(n, b)) return a;
    return n;
}

TS_TEST(loader, missing_and_misshaped_tensors) {
    ts_error err;
    const char *gone = "model.language_model.layers.2.linear_attn.in_proj_z.weight";
    const char *d = with_weights("drop", drop_one, (void *)gone);
    CHECK(d);
    CHECK(open_err(d, &err) == TS_E_MODEL);
    CHECK_MSG(strstr(err.msg, "missing tensor") && strstr(err.msg, gone), "%s", err.msg);
    d = with_weights("swap", swap_qk, NULL);
    CHECK(d);
    CHECK(open_err(d, &err) == TS_E_MODEL);
    CHECK_MSG(strstr(err.msg, "q_proj.weight") && strstr(err.msg, "expected shape [512, 128]") &&
              strstr(err.msg, "found [128, 128]"), "%s", err.msg);
    /* an untied checkpoint without lm_head */
    d = with_weights("nohead", drop_one, (void *)"lm_head.weight");
    CHECK(open_err(d, &err) == TS_E_MODEL);
    CHECK_MSG(strstr(err.msg, "lm_head.weight"), "%s", err.msg);
}

TS_TEST(loader, bad_files_and_configs) {
    ts_error err;
    CHECK(open_err("tests/fixtures/does-not-exist", &err) == TS_E_IO);
    CHECK_MSG(strstr(err.msg, "does-not-exist/config.json"), "%s", err.msg);
    char d[512], out[4096];
    snprintf(d, sizeof d, "%s/cfg", ts_test_tmpdir());
    CHECK(ts_test_sh(out, sizeof out, "mkdir -p %s && cp " FIX "/*.safetensors " FIX "/*.json %s/", d, d) == 0);
    /* config missing a required field */
    CHECK(ts_test_sh(out, sizeof out, "sed -i 's/\"hidden_size\"/\"hidden_sizeX\"/g' %s/config.json", d) == 0);
    CHECK(open_err(d, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "\"hidden_size\"") && strstr(err.msg, "config.json"), "%s", err.msg);
    /* malformed JSON */
    CHECK(ts_test_sh(out, sizeof out, "echo '{\"text_config\": {' > %s/config.json", d) == 0);
    CHECK(open_err(d, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "malformed JSON"), "%s", err.msg);
    /* layer_types of the wrong length */
    CHECK(ts_test_sh(out, sizeof out, "cp " FIX "/config.json %s/ && sed -i 's/\"num_hidden_layers\": 8/\"num_hidden_layers\": 9/' %s/config.json", d, d) == 0);
    CHECK(open_err(d, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "layer_types has 8 entries"), "%s", err.msg);
    /* unsupported model type */
    CHECK(ts_test_sh(out, sizeof out, "cp " FIX "/config.json %s/ && sed -i 's/qwen3_5_text/llama/' %s/config.json", d, d) == 0);
    CHECK(open_err(d, &err) == TS_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "llama"), "%s", err.msg);
    /* truncated shard */
    CHECK(ts_test_sh(out, sizeof out, "cp " FIX "/config.json %s/ && truncate -s 1000000 %s/model-00002-of-00002.safetensors", d, d) == 0);
    CHECK(open_err(d, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "model-00002-of-00002.safetensors") && strstr(err.msg, "run past the end"), "%s", err.msg);
    /* a shard the index names is missing */
    CHECK(ts_test_sh(out, sizeof out, "rm %s/model-00002-of-00002.safetensors", d) == 0);
    CHECK(open_err(d, &err) == TS_E_IO);
    CHECK_MSG(strstr(err.msg, "model-00002-of-00002.safetensors"), "%s", err.msg);
}

/* Rename to the text-only prefix "model." and hoist text_config to the top,
 * with full_attention_interval instead of layer_types and legacy rope fields:
 * the logits must not change. */
static const char *to_text_prefix(const char *n, char *buf, size_t cap, void *user) {
    const char *p = "model.language_model.";
    if (!strncmp(n, p, strlen(p))) { snprintf(buf, cap, "model.%s", n + strlen(p)); return buf; }
    if (!strncmp(n, "model.visual.", 13)) return NULL;
    return n;
}

TS_TEST(loader, alternative_layouts) {
    const char *d = with_weights("flat", to_text_prefix, NULL);
    CHECK(d);
    char out[4096];
    const char *flat =
        "{\"model_type\":\"qwen3_5_text\",\"vocab_size\":2048,\"hidden_size\":128,\"intermediate_size\":384,"
        "\"num_hidden_layers\":8,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64,"
        "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":32,"
        "\"linear_value_head_dim\":64,\"linear_conv_kernel_dim\":4,\"full_attention_interval\":4,"
        "\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":false,\"rope_theta\":10000000.0,"
        "\"partial_rotary_factor\":0.25}";
    CHECK(ts_test_sh(out, sizeof out, "printf '%%s' '%s' > %s/config.json", flat, d) == 0);
    ts_error err = {0};
    ts_engine *a = NULL, *b = NULL;
    CHECK_MSG(ts_engine_open(FIX, NULL, &a, &err) == 0, "%s", err.msg);
    CHECK_MSG(ts_engine_open(d, NULL, &b, &err) == 0, "%s", err.msg);
    CHECK(ts_engine_info(b)->has_mtp);
    CHECK(ts_engine_info(b)->n_full_attn_layers == 2);
    int32_t ids[5] = {5, 77, 1000, 3, 2047};
    int V = ts_engine_info(a)->vocab_size;
    float *la = malloc(sizeof(float) * 5 * V), *lb = malloc(sizeof(float) * 5 * V);
    ts_session *sa = NULL, *sb = NULL;
    CHECK(ts_session_new(a, NULL, &sa, &err) == 0);
    CHECK(ts_session_new(b, NULL, &sb, &err) == 0);
    CHECK(ts_session_feed(sa, ids, 5, la, NULL, &err) == 0);
    CHECK(ts_session_feed(sb, ids, 5, lb, NULL, &err) == 0);
    CHECK(memcmp(la, lb, sizeof(float) * 5 * V) == 0);
    free(la);
    free(lb);
    ts_session_free(sa);
    ts_session_free(sb);
    ts_engine_close(a);
    ts_engine_close(b);
}

TS_TEST(loader, session_limits) {
    ts_error err = {0};
    ts_engine *e = NULL;
    CHECK(ts_engine_open(FIX, NULL, &e, &err) == 0);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 8;
    ts_session *s = NULL;
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    int32_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK(ts_session_feed(s, ids, 9, NULL, NULL, &err) == TS_E_CONTEXT);
    CHECK_MSG(strstr(err.msg, "context limit of 8"), "%s", err.msg);
    CHECK(ts_session_pos(s) == 0); /* nothing was fed: no lost work */
    CHECK(ts_session_feed(s, ids, 8, NULL, NULL, &err) == 0);
    CHECK(ts_session_feed(s, ids, 1, NULL, NULL, &err) == TS_E_CONTEXT);
    int32_t bad = 2048;
    ts_session_reset(s);
    CHECK(ts_session_feed(s, &bad, 1, NULL, NULL, &err) == TS_E_ARG);
    CHECK_MSG(strstr(err.msg, "token id 2048") && strstr(err.msg, "outside the vocabulary"), "%s", err.msg);
    bad = -1;
    CHECK(ts_session_feed(s, &bad, 1, NULL, NULL, &err) == TS_E_ARG);
    ts_session_free(s);
    /* allocation failure is a clean error */
    ts_mem_fail_after(3);
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_NOMEM);
    ts_mem_fail_after(0);
    CHECK(s == NULL);
    ts_engine_close(e);
}
