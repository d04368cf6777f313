/* fuzz_dflash_config.c: a DFlash drafter's config.json -> ts_dflash_cfg.
 * Input: one byte choosing the target it is checked against (none, as
 * convert does, or one of three target configs), then the config text.
 * Property: an error with a message, or a config whose fields are in the
 * ranges the binder and the forward rely on (positive sizes, head counts
 * that divide, rotary dims even and within the head, taps inside the target,
 * a mask id inside the vocabulary, products far from int overflow) and that
 * agrees with the target it was checked against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "model/dflash.h"

static const ts_config *target(unsigned k, ts_config *c) {
    static const struct { int H, vocab, n_layers, q_bits, q_group; } T[3] = {
        {64, 256, 8, 0, 0}, {2048, 248320, 24, 4, 64}, {64, 256, 2, 8, 32}};
    if (k % 4 == 0) return NULL;
    memset(c, 0, sizeof *c);
    c->H = T[k % 4 - 1].H;
    c->vocab = T[k % 4 - 1].vocab;
    c->n_layers = T[k % 4 - 1].n_layers;
    c->q_bits = T[k % 4 - 1].q_bits;
    c->q_group = T[k % 4 - 1].q_group;
    return c;
}

int fuzz_dflash_config(const uint8_t *data, size_t size) {
    if (!size) return 0;
    ts_config tc;
    const ts_config *tg = target(data[0], &tc);
    char *txt = fuzz_strndup(data + 1, size - 1);
    ts_dflash_cfg c;
    ts_error err = {0};
    int rc = ts_dflash_config_parse(txt, "config.json", tg, &c, &err);
    if (rc) {
        if (!err.msg[0]) fuzz_fail("dflash config error %d without a message", rc);
    } else {
        if (c.H < 1 || c.nq < 1 || c.nkv < 1 || c.D < 1 || c.I < 1 || c.vocab < 1 || c.nq % c.nkv)
            fuzz_fail("inconsistent sizes accepted");
        if (c.n_layers < 1 || c.n_layers > TS_DFLASH_MAX_LAYERS) fuzz_fail("n_layers %d accepted", c.n_layers);
        if (c.rot < 2 || c.rot > c.D || c.rot % 2) fuzz_fail("rot %d of head_dim %d", c.rot, c.D);
        if (!(c.eps > 0) || !isfinite(c.eps) || !(c.theta > 0) || !isfinite(c.theta)) fuzz_fail("eps %g / theta %g", c.eps, c.theta);
        if (c.block < 2) fuzz_fail("block_size %d", c.block);
        if (c.mask_id < 0 || c.mask_id >= c.vocab) fuzz_fail("mask id %d of %d", c.mask_id, c.vocab);
        if (c.n_taps < 1 || c.n_taps > TS_DFLASH_MAX_TAPS) fuzz_fail("n_taps %d", c.n_taps);
        for (int t = 0; t < c.n_taps; t++)
            if (c.taps[t] < 0 || c.taps[t] >= c.n_target_layers) fuzz_fail("tap %d of %d layers", c.taps[t], c.n_target_layers);
        if (c.q_bits && ((c.q_bits != 4 && c.q_bits != 8) || c.q_group < 8)) fuzz_fail("quantization %d/%d", c.q_bits, c.q_group);
        if (ts_dflash_max_cols(&c) > (1 << 28) || (int64_t)c.nkv * c.D > (1 << 28)) fuzz_fail("widths past 2^28");
        if (tg && (c.H != tg->H || c.vocab != tg->vocab || c.n_target_layers != tg->n_layers))
            fuzz_fail("a drafter not matching its target accepted");
        if (tg && tg->q_bits && c.q_bits && c.q_group != tg->q_group) fuzz_fail("quantization group differs from the target's");
    }
    free(txt);
    return 0;
}
