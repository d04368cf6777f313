/* test_train.c: the assets of the bundled default model that live in the repo (tools/train/).
 *
 * Owns: checks that the default model's tokenizer (tools/train/tokenizer/tokenizer.json, trained by
 * tools/train/bpe_train.py) loads in the engine and encodes exactly as the reference Hugging Face
 * tokenizers library does (goldens in tests/fixtures/train/, made by tools/train/make_goldens.js), and
 * that the held-out windows of the perplexity protocol (tools/train/heldout.ids, heldout_eval.py) are
 * well formed and decode.
 * Does not: load the model weights (not in the repo) or test the tokenizer algorithm in depth
 * (test_tokenizer.c does, on the Qwen vocabularies).
 * Invariants checked: BPE vocabulary 12224 ids + 33 added tokens at 12224..12256 in the Qwen3.5
 * order; <|endoftext|> = 12224, <|im_end|> = 12226; heldout.ids = 16 windows x 512 ids < 12257.
 */
#include "ts_test.h"
#include "../include/turbospark.h"
#include "../src/ts_int.h"

#define TRAIN_TOK "tools/train/tokenizer/tokenizer.json"
#define TRAIN_IDS "tools/train/heldout.ids"

static ts_tokenizer *train_tok(void) {
    static ts_tokenizer *t;
    static int tried;
    if (!tried) {
        ts_error err;
        tried = 1;
        if (ts_tokenizer_load(TRAIN_TOK, &t, &err)) fprintf(stderr, "  load %s: %s\n", TRAIN_TOK, err.msg);
    }
    return t;
}

TS_TEST(train, tokenizer_ids) {
    ts_tokenizer *t = train_tok();
    CHECK(t != NULL);
    CHECK_MSG(ts_tokenizer_vocab_size(t) == 12257, "vocab size %d", ts_tokenizer_vocab_size(t));
    CHECK(ts_tokenizer_token_id(t, "<|endoftext|>") == 12224);
    CHECK(ts_tokenizer_token_id(t, "<|im_start|>") == 12225);
    CHECK(ts_tokenizer_token_id(t, "<|im_end|>") == 12226);
    CHECK(ts_tokenizer_token_id(t, "<think>") == 12248);
    CHECK(ts_tokenizer_token_id(t, "<|audio_pad|>") == 12256);
    CHECK(ts_tokenizer_is_special(t, 12226) == 1);
    CHECK(ts_tokenizer_is_special(t, 12248) == 0);      /* <think>: added, not special (as in Qwen) */
    CHECK(ts_tokenizer_token_id(t, "Ġthe") >= 256);      /* a merge, not a byte */
    CHECK(ts_tokenizer_token_id(t, "!") == 0);          /* GPT-2 byte order */
}

static int parse_ids(const char *s, size_t n, int32_t **out) {
    int cap = 1024, k = 0;
    int32_t *v = malloc(sizeof *v * (size_t)cap);
    const char *p = s, *e = s + n;
    while (p < e) {
        while (p < e && (*p < '0' || *p > '9')) p++;
        if (p >= e) break;
        long x = 0;
        while (p < e && *p >= '0' && *p <= '9') x = x * 10 + (*p++ - '0');
        if (k == cap) v = realloc(v, sizeof *v * (size_t)(cap *= 2));
        v[k++] = (int32_t)x;
    }
    *out = v;
    return k;
}

TS_TEST(train, tokenizer_goldens) {
    ts_tokenizer *t = train_tok();
    CHECK(t != NULL);
    char list[4096];
    CHECK(ts_test_sh(list, sizeof list, "ls tests/fixtures/train/*.txt") == 0);
    int n_files = 0;
    ts_tokens v = {0};
    ts_text dec = {0};
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char *text = NULL, *ids_s = NULL, idp[600];
        size_t tn, in;
        ts_error err;
        CHECK_MSG(ts_read_file(line, &text, &tn, &err) == 0, "%s", err.msg);
        snprintf(idp, sizeof idp, "%.*s.ids", (int)(strlen(line) - 4), line);
        CHECK_MSG(ts_read_file(idp, &ids_s, &in, &err) == 0, "%s", err.msg);
        int32_t *exp;
        int n_exp = parse_ids(ids_s, in, &exp);
        v.n = 0;
        int rc = ts_tokenizer_encode(t, text, tn, &v, &err);
        int i = 0;
        while (!rc && i < v.n && i < n_exp && v.ids[i] == exp[i]) i++;
        int ok = !rc && v.n == n_exp && i == n_exp;
        if (!ok)
            fprintf(stderr, "  %s: %s first difference at token %d (got %d, expected %d tokens)\n", line,
                    rc ? err.msg : "", i, v.n, n_exp);
        /* The held-out texts are NFC already, so decode must give them back; the chat case is not
         * (it holds a decomposed é on purpose). */
        int roundtrip = 1;
        if (ok && !strstr(line, "-chat")) {
            dec.len = 0;
            roundtrip = ts_tokenizer_decode(t, exp, n_exp, &dec, &err) == 0 && dec.len == tn &&
                        memcmp(dec.s, text, tn) == 0;
        }
        free(exp);
        ts_free(text);
        ts_free(ids_s);
        CHECK_MSG(ok, "%s: encode differs from the reference", line);
        CHECK_MSG(roundtrip, "%s: decode does not give the text back", line);
        n_files++;
    }
    ts_tokens_free(&v);
    ts_text_free(&dec);
    CHECK_MSG(n_files == 7, "%d golden files", n_files);
}

TS_TEST(train, heldout_ids) {
    ts_tokenizer *t = train_tok();
    CHECK(t != NULL);
    char *s;
    size_t n;
    ts_error err;
    CHECK_MSG(ts_read_file(TRAIN_IDS, &s, &n, &err) == 0, "%s", err.msg);
    int windows = 0, bad = 0;
    ts_text dec = {0};
    const char *p = s, *e = s + n;
    while (p < e) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const char *le = nl ? nl : e;
        if (le > p && *p != '#') {
            int32_t *ids;
            int k = parse_ids(p, (size_t)(le - p), &ids);
            for (int i = 0; i < k; i++) bad += ids[i] < 0 || ids[i] >= 12257;
            dec.len = 0;
            bad += k != 512 || ts_tokenizer_decode(t, ids, k, &dec, &err) != 0 || dec.len < 1000;
            free(ids);
            windows++;
        }
        p = le + 1;
    }
    ts_text_free(&dec);
    ts_free(s);
    CHECK_MSG(windows == 16, "%d windows", windows);
    CHECK_MSG(bad == 0, "%d bad ids or windows", bad);
}
