/* fuzz_tokenizer_json.c: tokenizer.json text -> a tokenizer
 * (ts_tokenizer_load_mem), then a few encodes and decodes with it.
 * Property: an error with a message, or a tokenizer that encodes fixed texts
 * (plain, special-token, long-run and non-Latin) to ids inside its vocabulary
 * that decode back without error. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/tokenizer.h"

int fuzz_tokenizer_json(const uint8_t *data, size_t size) {
    ts_tokenizer *t = NULL;
    ts_error err = {0};
    int rc = ts_tokenizer_load_mem((const char *)data, size, "tokenizer.json", &t, &err);
    if (rc) {
        if (!err.msg[0] || t) fuzz_fail("error %d without a message, or a tokenizer returned", rc);
        return 0;
    }
    static const char *const texts[] = {
        "Hello, world! 123 4567", "<|im_start|>user\nhi<|im_end|>\n", "   \t\n\n  x  ",
        "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    };
    int nv = ts_tokenizer_vocab_size(t);
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        ts_tokens ids = {0};
        if (ts_tokenizer_encode(t, texts[k], strlen(texts[k]), &ids, &err) == 0) {
            for (int i = 0; i < ids.n; i++)
                if (ids.ids[i] < 0 || ids.ids[i] >= nv) fuzz_fail("id %d outside the vocabulary of %d", ids.ids[i], nv);
            ts_text out = {0};
            if (ts_tokenizer_decode(t, ids.ids, ids.n, &out, &err)) fuzz_fail("decode of encoded ids failed: %s", err.msg);
            ts_text_free(&out);
        } else if (!err.msg[0]) {
            fuzz_fail("encode error without a message");
        }
        ts_tokens_free(&ids);
    }
    ts_tokenizer_free(t);
    return 0;
}
