/* fuzz_config.c: config.json (and generation_config.json) -> ts_config.
 * Input: the config text, optionally a NUL byte and the generation config.
 * Property: an error with a message, or a config whose fields are in the
 * ranges the loader relies on. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "loader/config.h"

int fuzz_config(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    char *cfg = fuzz_strndup(data, n1);
    char *gen = nul ? fuzz_strndup(nul + 1, size - n1 - 1) : NULL;
    ts_config c;
    ts_error err = {0};
    int rc = ts_config_parse(cfg, gen, "config.json", &c, &err);
    if (rc) {
        if (!err.msg[0]) fuzz_fail("config error %d without a message", rc);
    } else {
        if (c.n_layers < 1 || c.n_layers > TS_MAX_LAYERS) fuzz_fail("n_layers %d accepted", c.n_layers);
        if (c.vocab < 1 || c.H < 1 || c.nq < 1 || c.nkv < 1 || c.nq % c.nkv || c.Hv % c.Hk)
            fuzz_fail("inconsistent sizes accepted");
        if (c.n_full < 0 || c.n_full > c.n_layers) fuzz_fail("n_full %d of %d layers", c.n_full, c.n_layers);
        if (c.rot_dim < 0 || c.rot_dim > c.head_dim || c.rot_dim % 2) fuzz_fail("rot_dim %d", c.rot_dim);
        if (c.n_eos < 0 || c.n_eos > TS_MAX_EOS) fuzz_fail("n_eos %d", c.n_eos);
        for (int i = 0; i < c.n_eos; i++)
            if (c.eos[i] < 0) fuzz_fail("negative eos id");
        if (!(c.eps > 0) || c.is_moe != !strcmp(c.model_type, "qwen3_5_moe")) fuzz_fail("eps or model type");
        if (c.is_moe && (c.topk < 1 || c.topk > c.E)) fuzz_fail("top-k %d of %d experts", c.topk, c.E);
    }
    free(cfg);
    free(gen);
    return 0;
}
