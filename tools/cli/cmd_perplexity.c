/* cmd_perplexity.c: `turbospark perplexity [-m DIR] -f IDS_FILE [--mtp] [--json] [engine options]`
 * and `turbospark perplexity [-m DIR] --text FILE [--window N] [--json]`.
 *
 * --text: llama.cpp's protocol, so that a figure compares with its
 * llama-perplexity on the same file (wikitext's wiki.test.raw, say): the
 * text tokenized whole with the checkpoint's tokenizer, cut into windows of
 * N ids (512 unless --window; the remainder dropped), each scored from an
 * empty state on its second half only (ids N/2 + 1 .. N - 1, each given all
 * before it in its window); the estimate's standard error as llama.cpp
 * gives it.
 *
 * The held-out protocol of tools/train/heldout_eval.py, in the engine: each
 * line of IDS_FILE (comma-separated ids; '#' lines are comments) is one
 * window, scored from an empty state. Perplexity = exp(mean over positions
 * 1..n-1 of -log softmax(logits[i-1])[ids[i]]), the library's log-softmax
 * over the full row (ts_session_score / ts_logprobs_row). With --mtp, the
 * MTP head's row i (token ids[i+1], hidden i, position i) is scored against
 * ids[i+2]: top-1 accuracy, and agreement with
 * the main head's argmax at i+1 (the first-position acceptance of greedy
 * MTP drafting on this text).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* -log p(target) of a row of logits: the library's entry (ts_logprobs_row,
 * as ts_session_score makes it without --mtp), so both paths sum the same */
static double nll(const float *row, int V, int target) {
    ts_logprob e;
    ts_error err;
    return ts_logprobs_row(row, V, target, 0, &e, &err) ? NAN : -(double)e.logprob;
}

#define PPL_OPTS (CLI_OPT_ENGINE | CLI_OPT_CHUNK)

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark perplexity [-m DIR] -f IDS_FILE [--mtp] [--json] [options]\n"
               "       turbospark perplexity [-m DIR] --text FILE [--window N] [--json] [options]\n"
               "  -f IDS_FILE         one window of comma-separated ids per line ('#' lines: comments),\n"
               "                      each scored from an empty state\n"
               "  --text FILE         a text, tokenized, in windows of N ids each scored on its second\n"
               "                      half (llama.cpp's llama-perplexity protocol: comparable figures)\n"
               "  --window N          --text's window (default 512)\n"
               "  --mtp               also score the MTP head (top-1, agreement with the main head)\n"
               "  --json              one JSON object instead of the text report\n");
    cli_engine_help(f, PPL_OPTS);
}

/* --text: see the file's comment. 0, or 1 after printing an error. */
static int text_perplexity(ts_engine *e, const cli_engine *eo, const char *model, const char *path, int W, int json) {
    ts_error err = {0};
    size_t len;
    char *txt = cli_read_file_len(path, &len);
    if (!txt) { fprintf(stderr, "turbospark perplexity: cannot read %s\n", path); return 1; }
    ts_tokenizer *tok = NULL;
    ts_tokens t = {0};
    if (ts_tokenizer_load(model, &tok, &err) || ts_tokenizer_encode(tok, txt, len, &t, &err)) {
        fprintf(stderr, "turbospark perplexity: %s: %s\n", path, err.msg);
        ts_tokenizer_free(tok);
        free(txt);
        return 1;
    }
    free(txt);
    ts_tokenizer_free(tok);
    const int windows = W > 0 ? t.n / W : 0;
    if (windows < 1) {
        fprintf(stderr, "turbospark perplexity: %s is %d tokens, less than one window of %d (--window N)\n", path, t.n, W);
        ts_tokens_free(&t);
        return 1;
    }
    ts_session_params sp;
    ts_session_params_default(&sp);
    cli_engine_apply(eo, NULL, &sp, NULL);
    sp.n_ctx = W;
    ts_session *s = NULL;
    ts_logprob *lps = malloc(sizeof(ts_logprob) * (size_t)W);
    if (!lps || ts_session_new(e, &sp, &s, &err)) {
        fprintf(stderr, "turbospark perplexity: %s\n", err.msg[0] ? err.msg : "out of memory");
        free(lps);
        ts_tokens_free(&t);
        return 1;
    }
    double sum = 0, sum2 = 0;
    long n = 0;
    int rc = 0;
    const int first = W / 2; /* entries first .. W-2: ids first+1 .. W-1 */
    const int tty = isatty(2);
    for (int w = 0; w < windows && !rc; w++) {
        ts_session_reset(s);
        if (ts_session_score(s, t.ids + (size_t)w * W, W, 0, lps, &err)) {
            fprintf(stderr, "turbospark perplexity: window %d: %s\n", w, err.msg);
            rc = 1;
            break;
        }
        for (int i = first; i < W - 1; i++) {
            const double v = -(double)lps[i].logprob;
            sum += v, sum2 += v * v, n++;
        }
        if (tty) /* llama-perplexity prints its running estimate too: a long text is not a hang */
            fprintf(stderr, "\r[%d/%d] perplexity so far %.4f", w + 1, windows, exp(sum / (double)n));
    }
    if (tty) fprintf(stderr, "\n");
    if (!rc && n == 0) { fprintf(stderr, "turbospark perplexity: a window of %d scores nothing\n", W); rc = 1; }
    if (!rc) {
        const double mean = sum / (double)n, var = sum2 / (double)n - mean * mean, ppl = exp(mean);
        const double se = n > 1 && var > 0 ? ppl * sqrt(var / (double)(n - 1)) : 0;
        if (json)
            printf("{\"windows\": %d, \"window\": %d, \"tokens\": %d, \"tokens_scored\": %ld, \"ppl\": %.6f, "
                   "\"ppl_stderr\": %.6f}\n", windows, W, t.n, n, ppl, se);
        else
            printf("%d tokens, %d windows of %d, tokens scored %ld (second halves): perplexity %.4f +/- %.4f\n", t.n,
                   windows, W, n, ppl, se);
    }
    free(lps);
    ts_session_free(s);
    ts_tokens_free(&t);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    const char *file = NULL, *text = NULL;
    int mtp = 0, json = 0, window = 512;
    cli_engine eo;
    cli_engine_init(&eo, "perplexity", PPL_OPTS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        int sr = cli_engine_parse(argc, argv, &i, &eo);
        if (sr < 0) return 2;
        if (sr > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-f") && more) file = argv[++i];
        else if (!strcmp(a, "--text") && more) text = argv[++i];
        else if (!strcmp(a, "--window") && more) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 4 || v > 1 << 20) {
                fprintf(stderr, "turbospark perplexity: bad value '%s' for --window (4..1048576 ids)\n", argv[i]);
                return 2;
            }
            window = (int)v;
        }
        else if (!strcmp(a, "--mtp")) mtp = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else {
            fprintf(stderr, "turbospark perplexity: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!file == !text) {
        fprintf(stderr, "turbospark perplexity: give one of -f IDS_FILE and --text FILE\n");
        return 2;
    }
    if (text && mtp) { fprintf(stderr, "turbospark perplexity: --mtp takes -f IDS_FILE windows, not --text\n"); return 2; }
    if (cli_engine_check(&eo)) return 2;
    const char *model = eo.model;
    char *txt = NULL;
    if (file && !(txt = cli_read_file(file))) {
        fprintf(stderr, "turbospark perplexity: cannot read %s\n", file);
        return 1;
    }
    ts_error err = {0};
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    cli_engine_apply(&eo, &ep, NULL, NULL);
    ts_engine *e = NULL;
    if (ts_engine_open(model, &ep, &e, &err)) {
        fprintf(stderr, "turbospark perplexity: %s\n", err.msg);
        free(txt);
        return 1;
    }
    if (text) {
        int rc = text_perplexity(e, &eo, model, text, window, json);
        if (!rc) cli_expert_report(e, 0, 1);
        ts_engine_close(e);
        return rc;
    }
    const int V = ts_engine_info(e)->vocab_size, H = ts_engine_info(e)->hidden_size;
    if (mtp && !ts_engine_info(e)->has_mtp) {
        fprintf(stderr, "turbospark perplexity: --mtp: %s has no MTP head\n", model);
        ts_engine_close(e);
        free(txt);
        return 1;
    }
    double sum = 0;
    long scored = 0, mtp_rows = 0, mtp_top1 = 0, mtp_agree = 0;
    int windows = 0, rc = 0;
    ts_session *s = NULL;
    float *lg = NULL, *hid = NULL, *ml = NULL;
    ts_logprob *lps = NULL;
    int cap = 0;
    for (char *line = strtok(txt, "\n"); line && !rc; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || !line[strspn(line, " \t\r")]) continue;
        int *ids = NULL;
        int n = cli_parse_ids(line, &ids);
        if (n < 2) { fprintf(stderr, "turbospark perplexity: %s: a window needs at least 2 ids\n", file); free(ids); rc = 1; break; }
        if (n > cap) {
            ts_session_free(s);
            s = NULL;
            ts_session_params sp;
            ts_session_params_default(&sp);
            cli_engine_apply(&eo, NULL, &sp, NULL);
            sp.n_ctx = n;
            sp.mtp = mtp;
            cap = n;
            free(lg); free(hid); free(ml); free(lps);
            /* without --mtp the window is scored (ts_session_score: one
             * chunk's logits at a time, so a 4K window of a 248K vocabulary
             * needs 64 rows of them, not 4 GB); --mtp reads every row's
             * logits and hidden state */
            lg = mtp ? malloc(sizeof(float) * (size_t)n * V) : NULL;
            hid = mtp ? malloc(sizeof(float) * (size_t)n * H) : NULL;
            ml = mtp ? malloc(sizeof(float) * (size_t)n * V) : NULL;
            lps = mtp ? NULL : malloc(sizeof(ts_logprob) * (size_t)n);
            if ((mtp && (!lg || !hid || !ml)) || (!mtp && !lps) || ts_session_new(e, &sp, &s, &err)) {
                fprintf(stderr, "turbospark perplexity: %s\n", err.msg[0] ? err.msg : "out of memory");
                free(ids);
                rc = 1;
                break;
            }
        }
        ts_session_reset(s);
        int32_t *t = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) t[i] = ids[i];
        free(ids);
        if (mtp ? ts_session_feed(s, t, n, lg, hid, &err) || ts_session_mtp(s, t + 1, hid, n - 1, 0, NULL, ml, &err)
                : ts_session_score(s, t, n, 0, lps, &err)) {
            fprintf(stderr, "turbospark perplexity: window %d: %s\n", windows, err.msg);
            free(t);
            rc = 1;
            break;
        }
        for (int i = 1; i < n; i++) sum += mtp ? nll(lg + (size_t)(i - 1) * V, V, t[i]) : -(double)lps[i - 1].logprob;
        scored += n - 1;
        if (mtp)
            for (int i = 0; i + 2 < n; i++) {
                int d = argmax(ml + (size_t)i * V, V);
                mtp_top1 += d == t[i + 2];
                mtp_agree += d == argmax(lg + (size_t)(i + 1) * V, V);
                mtp_rows++;
            }
        windows++;
        free(t);
    }
    if (!rc && scored == 0) { fprintf(stderr, "turbospark perplexity: %s holds no windows\n", file); rc = 1; }
    if (!rc) {
        double ppl = exp(sum / (double)scored);
        if (json) {
            printf("{\"windows\": %d, \"tokens_scored\": %ld, \"ppl\": %.6f", windows, scored, ppl);
            if (mtp) printf(", \"mtp_rows\": %ld, \"mtp_top1\": %.6f, \"mtp_agree_main_greedy\": %.6f", mtp_rows,
                            (double)mtp_top1 / mtp_rows, (double)mtp_agree / mtp_rows);
            printf("}\n");
        } else {
            printf("windows %d, tokens scored %ld, perplexity %.4f\n", windows, scored, ppl);
            if (mtp) printf("MTP rows %ld: top-1 %.4f, agreement with the main head's greedy %.4f\n", mtp_rows,
                            (double)mtp_top1 / mtp_rows, (double)mtp_agree / mtp_rows);
        }
    }
    if (!rc) cli_expert_report(e, (int)(scored + windows), 1); /* --expert-cache: hit rates over the text */
    free(lg); free(hid); free(ml); free(lps); free(txt);
    ts_session_free(s);
    ts_engine_close(e);
    return rc;
}
