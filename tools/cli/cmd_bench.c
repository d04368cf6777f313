/* cmd_bench.c: `turbospark bench [-m DIR] [--prompt N] [--gen N] [--runs R] [--json] [--bw-mib M]
 *                               [--ids-file FILE] [engine options: --threads, --act-bits, --kernels,
 *                               --spec mtp [--draft M] [--draft-vocab K|all] [--draft-p-min P],
 *                               --spec dflash [--block B], --spec ngram [--draft M] [--ngram-max N]
 *                               [--ngram-min N]]`.
 *
 * Measures, on this machine, in one process:
 * - the memory read bandwidth: sum over a 1 GiB uint64 array, best of 9
 *   (3 each without software prefetch and with it 4 and 8 KiB ahead)
 *   passes, with 1 and with T threads (T = --threads, or all cores);
 * - prefill: an N-token prompt (default 128) fed in one block, tok/s;
 * - decode: --gen tokens (default 64) one at a time, each the argmax of the
 *   previous logits (ts_generate, greedy), tok/s;
 * - the weight bytes one decoded token reads (every matrix once, one
 *   embedding row, only the top-k routed experts; MTP head not used), the
 *   GB/s that implies, and that as a percentage of the measured bandwidth
 *   with the same thread count; and the same again counting the GDN
 *   recurrent state, read and written once per token (37.7 MB on the 0.8B
 *   shape), reported on its own line.
 * Each phase runs --runs times (default 5) after a warm-up; the median is
 * reported (the mean of the two middle runs for an even count), with min
 * and max.
 * With --spec mtp --draft M (or dflash, ngram) it also generates --gen tokens
 * greedily with that drafting after the same prompt, interleaved with plain runs, and reports
 * the speedup, per-position acceptance, mean accepted length and the draft,
 * verify and rollback times (checking that both outputs are identical),
 * and on a device whether its speculative passes ran as graphs (TSC_VGRAPH)
 * with the replays per block.
 * --accept P1,P2,.. (with --spec) forces the acceptance: each block's drafts
 * are replaced, after the drafter proposed them (its cost stays in), by the
 * plain run's own greedy tokens for the first A positions and a wrong token
 * at position A + 1, A drawn per block so that position j is accepted with
 * probability Pj (Pj non-increasing; positions past the list: 0). This
 * measures the speculative decoder at a chosen acceptance on a random-weight
 * model (issue 17's 0.8 / 0.6 / 0.5 on the 9B shape); the output is still
 * checked identical to plain greedy.
 * --ids-file takes the prompt from a file of comma-separated token ids, '#'
 * lines skipped (tools/train/heldout.ids: its windows one after another)
 * (acceptance means little on random prompts of random-weight models). Load matters on a shared machine: the load
 * average is printed alongside.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "turbospark.h"

typedef struct { const uint64_t *a; size_t n; size_t pf; uint64_t sum; } bw_part;

/* Sum of the part, one cache line per iteration; pf > 0: a software
 * prefetch pf bytes ahead (the engine's kernels prefetch, so the roofline
 * must too: on the Xeon the hardware prefetchers alone reached ~2/3 of it). */
static void *bw_sum(void *arg) {
    bw_part *p = arg;
    uint64_t s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= p->n; i += 8) {
        if (p->pf) __builtin_prefetch((const char *)(p->a + i) + p->pf);
        for (int k = 0; k < 8; k++) s[k] += p->a[i + k];
    }
    for (; i < p->n; i++) s[0] += p->a[i];
    p->sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
    return NULL;
}

/* Best-of-passes read bandwidth in GB/s over buf with nt threads: 3 passes
 * each without software prefetch and with it 4 and 8 KiB ahead. */
static double bandwidth(const uint64_t *buf, size_t n, int nt) {
    double best = 0;
    for (int pass = 0; pass < 9; pass++) {
        pthread_t th[64];
        bw_part parts[64];
        double t0 = cli_now();
        for (int t = 0; t < nt; t++) {
            parts[t].a = buf + n / nt * t;
            parts[t].pf = (size_t)(pass % 3) * 4096;
            parts[t].n = t == nt - 1 ? n - n / nt * t : n / nt;
            if (t) pthread_create(&th[t], NULL, bw_sum, &parts[t]);
        }
        bw_sum(&parts[0]);
        for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
        double dt = cli_now() - t0;
        volatile uint64_t sink = 0;
        for (int t = 0; t < nt; t++) sink += parts[t].sum;
        (void)sink;
        double gbs = n * 8.0 / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

#define BENCH_OPTS (CLI_OPT_ENGINE | CLI_OPT_SPEC)

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark bench [-m DIR] [--prompt N] [--gen N] [--runs R] [--json] [options]\n"
               "  --prompt N          prompt tokens, fed in one chunk (default 128)\n"
               "  --gen N             tokens generated one at a time (default 64)\n"
               "  --runs R            timed runs of each phase after a warm-up, 1..100 (default 5);\n"
               "                      the median is reported (the mean of the two middle runs when R\n"
               "                      is even), with min and max\n"
               "  --ids-file FILE     the prompt from comma-separated token ids, '#' lines skipped\n"
               "                      (default: random ids)\n"
               "  --bw-mib M          MiB of the memory bandwidth array (default 1024)\n"
               "  --ctx N             the session's context limit (default: what the prompt and the\n"
               "                      generated tokens need); a serving context (run's default 4096, or\n"
               "                      more) sizes the caches and the attention split as a server's\n"
               "  --json              one JSON object instead of the text report\n"
               "  --accept P1,P2,..   with --spec: force the acceptance by draft position (probabilities,\n"
               "                      non-increasing; the drafter still runs, its drafts are replaced by\n"
               "                      the plain run's greedy tokens or a wrong one): speed at that acceptance\n"
               "  (--threads N: the threads of the model and of the bandwidth measure;\n"
               "   with --spec mtp|dflash|ngram: drafted vs plain greedy, interleaved, checked identical;\n"
               "   on CUDA, TSC_VGRAPH=0 in the environment runs the verify, rollback and MTP passes\n"
               "   uncaptured, TS_GRAPHS=0 every pass: the report says which)\n");
    cli_engine_help(f, BENCH_OPTS);
}

typedef struct collect {
    int32_t *ids;
    int n, cap;
} collect;

static int collect_cb(void *user, int32_t id) {
    collect *c = user;
    if (c->n < c->cap) c->ids[c->n++] = id;
    return 0;
}

/* --accept: the planted drafts (ts_session_override_drafts). ref is the
 * plain run's greedy output after the same prompt of T tokens. */
typedef struct forced {
    int n;          /* probabilities given (0: --accept not used) */
    float p[16];    /* position j accepted with probability p[j] */
    const int32_t *ref;
    int n_ref, T;
    uint64_t lcg;
} forced;

static void forced_drafts(void *user, int pos, int m, int32_t *d) {
    forced *f = user;
    f->lcg = f->lcg * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(f->lcg >> 11) / 9007199254740992.0; /* [0, 1) */
    /* one uniform a block against non-increasing thresholds: position j is
     * accepted with probability p[j] exactly, and only after j - 1 was */
    int A = 0;
    while (A < m && A < f->n && u < f->p[A]) A++;
    for (int j = 0; j < m; j++) {
        const int i = pos - f->T + 1 + j; /* generated index of draft j */
        int32_t t = i >= 0 && i < f->n_ref ? f->ref[i] : 0;
        if (j == A) t = (t + 1) % 7; /* wrong: != t for every t (small ids exist in every vocabulary) */
        d[j] = t;
    }
}

/* "P1,P2,.." into f: 1..16 probabilities in [0, 1], non-increasing (the
 * chance of reaching position j + 1 cannot exceed that of reaching j) */
static int parse_accept(const char *v, forced *f) {
    f->n = 0;
    for (const char *q = v; *q;) {
        char *end;
        const double x = strtod(q, &end);
        if (end == q || x < 0 || x > 1 || f->n == 16 || (f->n && x > f->p[f->n - 1])) return 0;
        f->p[f->n++] = (float)x;
        q = end;
        if (*q == ',') q++;
        else if (*q) return 0;
    }
    return f->n > 0;
}

/* Plain vs drafted greedy generation after the same prompt (o: MTP, DFlash
 * or n-gram drafting, checked), `runs` times interleaved (after a warm-up
 * pair); prints the medians and the speculative statistics summed over the
 * timed runs. */
static int bench_spec(ts_session *s, const int32_t *ids, int prompt, int gen, int runs, const cli_spec *o, forced *fa,
                      int json, ts_error *err) {
    /* B > 0: DFlash blocks of B rows (B - 1 drafts), else MTP or n-gram drafts of M */
    const int B = o->dflash ? o->block : 0, M = B ? B - 1 : o->draft;
    const float pmin = o->p_min > 0 ? o->p_min : 0;
    char what[64];
    if (B) snprintf(what, sizeof what, "dflash --block %d", B);
    else if (o->ngram) snprintf(what, sizeof what, "ngram --draft %d --ngram-max %d --ngram-min %d", M, o->ngram_max, o->ngram_min);
    else snprintf(what, sizeof what, "mtp --draft %d", M);
    ts_gen_params gp, gs; /* plain, drafted */
    ts_gen_params_default(&gp);
    gp.n_predict = gen;
    gp.temperature = 0.0f;
    gs = gp;
    cli_spec_apply(o, NULL, &gs);
    double *tpl = malloc(sizeof(double) * (runs + 1)), *tsp = malloc(sizeof(double) * (runs + 1));
    collect a = {malloc(sizeof(int32_t) * (size_t)gen), 0, gen}, b = {malloc(sizeof(int32_t) * (size_t)gen), 0, gen};
    ts_gen_stats sum = {0};
    int rc = 0, same = 1;
    /* graph replays of the drafted runs (the device backend's: verify,
     * rollback and MTP passes are captured unless TSC_VGRAPH=0) */
    const char *vg = getenv("TSC_VGRAPH");
    const int vgraph = !(vg && !strcmp(vg, "0"));
    long spec_replays = 0;
    int graphs = 0;
    for (int r = 0; r <= runs && !rc; r++) {
        ts_gen_stats st;
        ts_session_reset(s);
        a.n = 0;
        rc = ts_generate(s, ids, prompt, &gp, collect_cb, &a, &st, err);
        tpl[r] = st.n_gen > 1 ? (st.n_gen - 1) / st.t_decode : 0;
        if (rc) break;
        ts_session_reset(s);
        b.n = 0;
        if (fa->n) {
            fa->ref = a.ids, fa->n_ref = a.n, fa->T = prompt, fa->lcg = 977u + (uint64_t)r;
            ts_session_override_drafts(s, forced_drafts, fa);
        }
        long rp0 = 0, rp1 = 0;
        ts_session_graph_stats(s, NULL, &rp0, NULL, NULL);
        rc = ts_generate(s, ids, prompt, &gs, collect_cb, &b, &st, err);
        ts_session_graph_stats(s, &graphs, &rp1, NULL, NULL);
        ts_session_override_drafts(s, NULL, NULL);
        tsp[r] = st.n_gen > 1 ? (st.n_gen - 1) / st.t_decode : 0;
        same &= a.n == b.n && !memcmp(a.ids, b.ids, sizeof(int32_t) * (size_t)a.n);
        if (r == 0) continue;
        spec_replays += rp1 - rp0;
        sum.n_blocks += st.n_blocks;
        sum.draft_vocab = st.draft_vocab;
        sum.n_drafted += st.n_drafted;
        sum.n_accepted += st.n_accepted;
        sum.t_draft += st.t_draft;
        sum.t_verify += st.t_verify;
        sum.t_rollback += st.t_rollback;
        for (int j = 0; j < 16; j++) { sum.accepted_at[j] += st.accepted_at[j]; sum.drafted_at[j] += st.drafted_at[j]; }
    }
    if (!rc) {
        double p = cli_median(tpl + 1, runs), q = cli_median(tsp + 1, runs), nb = sum.n_blocks > 0 ? sum.n_blocks : 1;
        double mal = (sum.n_accepted + sum.n_blocks) / nb;
        if (json) {
            printf("{\"spec\": \"%s\", \"block\": %d, \"draft\": %d, \"draft_vocab\": %d, \"draft_p_min\": %g,"
                   " \"ngram_max\": %d, \"ngram_min\": %d, \"plain_tok_s\": %.2f,"
                   " \"spec_tok_s\": %.2f, \"speedup\": %.3f, \"identical\": %s, \"mean_accepted_length\": %.3f,"
                   " \"drafts_per_block\": %.3f, \"accept_by_position\": [",
                   B ? "dflash" : o->ngram ? "ngram" : "mtp", B, M, sum.draft_vocab, (double)pmin, o->ngram ? o->ngram_max : 0,
                   o->ngram ? o->ngram_min : 0, p, q, p > 0 ? q / p : 0, same ? "true" : "false", mal, sum.n_drafted / nb);
            for (int j = 0; j < M && j < 16; j++) {
                if (sum.drafted_at[j]) printf("%s%.3f", j ? ", " : "", (double)sum.accepted_at[j] / sum.drafted_at[j]);
                else printf("%snull", j ? ", " : ""); /* never drafted there */
            }
            printf("], \"forced_accept\": ");
            if (fa->n) {
                for (int j = 0; j < fa->n; j++) printf("%s%.3f", j ? ", " : "[", (double)fa->p[j]);
                printf("]");
            } else {
                printf("null");
            }
            printf(", \"ms_draft_per_block\": %.4f, \"ms_verify_per_block\": %.4f, \"ms_rollback_per_block\": %.4f,"
                   " \"vgraph\": %s, \"graphs\": %d, \"spec_graph_replays_per_block\": %.3f}\n",
                   1e3 * sum.t_draft / nb, 1e3 * sum.t_verify / nb, 1e3 * sum.t_rollback / nb, vgraph ? "true" : "false",
                   graphs, spec_replays / nb);
        } else {
            char knobs[64] = ""; /* the head's knobs (an n-gram draft has no head) */
            if (!o->ngram) snprintf(knobs, sizeof knobs, " --draft-vocab %d --draft-p-min %g", sum.draft_vocab, (double)pmin);
            printf("spec       %s%s: %.1f tok/s vs plain %.1f tok/s = %.2fx (medians of %d); output %s\n",
                   what, knobs, q, p, p > 0 ? q / p : 0, runs, same ? "identical" : "DIFFERENT");
            printf("           mean accepted length %.2f tokens/verify, %.2f drafts/verify; acceptance by position%s:", mal,
                   sum.n_drafted / nb, fa->n ? " (forced by --accept)" : "");
            for (int j = 0; j < M && j < 16; j++) {
                if (sum.drafted_at[j]) printf(" %d:%.2f", j + 1, (double)sum.accepted_at[j] / sum.drafted_at[j]);
                else printf(" %d:-", j + 1);
            }
            printf("\n           per block: draft %.3f ms, verify %.3f ms, rollback %.3f ms\n", 1e3 * sum.t_draft / nb,
                   1e3 * sum.t_verify / nb, 1e3 * sum.t_rollback / nb);
            printf("           graphs of the speculative passes %s (TSC_VGRAPH): %d captured in all, %.2f replays per block\n",
                   vgraph ? "on" : "off", graphs, spec_replays / nb);
        }
        if (!same) {
            snprintf(err->msg, sizeof err->msg, "speculative output differs from plain greedy output");
            rc = -1;
        }
    }
    free(tpl); free(tsp); free(a.ids); free(b.ids);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    int prompt = 128, gen = 64, runs = 5, json = 0, bw_mib = 1024, ctx = 0;
    forced fa = {0};
    const char *ids_file = NULL;
    cli_engine eo;
    cli_engine_init(&eo, "bench", BENCH_OPTS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--accept")) {
            if (i + 1 >= argc || !parse_accept(argv[++i], &fa)) {
                fprintf(stderr, "turbospark bench: --accept needs 1..16 comma-separated probabilities in [0, 1], "
                                "non-increasing (e.g. 0.8,0.6,0.5)\n");
                return 2;
            }
            continue;
        }
        int sr = cli_engine_parse(argc, argv, &i, &eo);
        if (sr < 0) return 2;
        if (sr > 0) continue;
        int *dst = !strcmp(a, "--prompt") ? &prompt : !strcmp(a, "--gen") ? &gen : !strcmp(a, "--runs") ? &runs
                 : !strcmp(a, "--bw-mib") ? &bw_mib : !strcmp(a, "--ctx") ? &ctx : NULL;
        if (!dst && strcmp(a, "--ids-file")) {
            fprintf(stderr, "turbospark bench: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) { fprintf(stderr, "turbospark bench: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!dst) ids_file = v;
        else if (!cli_parse_count(v, dst)) { fprintf(stderr, "turbospark bench: %s '%s' is not a count\n", a, v); return 2; }
    }
    if (prompt < 1 || gen < 1 || runs < 1 || runs > 100) {
        fprintf(stderr, "turbospark bench: --prompt and --gen must be >= 1, --runs in 1..100\n");
        return 2;
    }
    if (cli_engine_check(&eo)) return 2;
    if (fa.n && !eo.spec.on) {
        fprintf(stderr, "turbospark bench: --accept needs --spec mtp (or dflash, ngram)\n");
        return 2;
    }
    const char *dir = eo.model;
    const int spec = eo.spec.on, draft = eo.spec.draft;
    int32_t *file_ids = NULL;
    if (ids_file) {
        char *txt = cli_read_file(ids_file);
        if (!txt) { fprintf(stderr, "turbospark bench: cannot read %s\n", ids_file); return 1; }
        /* '#' lines are comments (tools/train/heldout.ids, which perplexity
         * -f reads: its windows then follow one another) */
        for (char *l = txt; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
            if (*l == '#')
                for (char *q = l; *q && *q != '\n'; q++) *q = ' ';
        int n = cli_parse_ids(txt, &file_ids);
        if (n < 1) {
            fprintf(stderr, "turbospark bench: %s: not a list of token ids\n", ids_file);
            free(txt);
            free(file_ids);
            return 1;
        }
        free(txt);
        if (n < prompt) prompt = n;
    }
    int nt = eo.threads > 0 ? eo.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt > 64) nt = 64;

    ts_error err = {0};
    /* the session's context: what the prompt and the generated tokens need,
     * or --ctx (checked before the weights are loaded) */
    const int need = prompt + gen + 8 + (spec ? draft + 1 : 0);
    if (ctx && ctx < need) {
        fprintf(stderr, "turbospark bench: --ctx %d is less than the %d tokens the prompt and --gen need\n", ctx, need);
        free(file_ids);
        return 2;
    }
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    cli_engine_apply(&eo, &ep, NULL, NULL);
    ep.n_threads = nt;
    const int act_bits = eo.act_bits;
    ts_engine *e = NULL;
    if (ts_engine_open(dir, &ep, &e, &err)) { fprintf(stderr, "turbospark bench: %s\n", err.msg); return 1; }
    const ts_model_info *in = ts_engine_info(e);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = ctx ? ctx : need;
    sp.max_rows = prompt;
    cli_spec_apply(&eo.spec, &sp, NULL); /* the drafter's buffers (none without --spec) */
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "turbospark bench: %s\n", err.msg); ts_engine_close(e); return 1; }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)prompt);
    uint64_t rs = 12345;
    for (int i = 0; i < prompt; i++) { rs = rs * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((rs >> 33) % (uint64_t)in->vocab_size); }
    if (file_ids) memcpy(ids, file_ids, sizeof(int32_t) * (size_t)prompt);
    free(file_ids);

    double *tp = malloc(sizeof(double) * (runs + 1)), *td = malloc(sizeof(double) * (runs + 1));
    int rc = 0;
    /* Greedy generation through the public ts_generate, as a user runs it:
     * the prompt in one block, then `gen` one-row steps, each fed the argmax
     * of the previous logits (gen + 1 tokens picked, gen forwards). */
    ts_gen_params gp0;
    ts_gen_params_default(&gp0);
    gp0.n_predict = gen + 1;
    gp0.temperature = 0.0f;
    for (int r = 0; r <= runs && !rc; r++) { /* run 0 is the warm-up (page faults, pool start) */
        ts_session_reset(s);
        ts_gen_stats st;
        rc = ts_generate(s, ids, prompt, &gp0, NULL, NULL, &st, &err);
        tp[r] = prompt / st.t_prefill;
        td[r] = st.n_gen > 1 ? (st.n_gen - 1) / st.t_decode : 0;
        if (r == 0) ts_engine_expert_stats_reset(e); /* the expert cache counts the timed runs only */
    }
    if (rc) { fprintf(stderr, "turbospark bench: %s\n", err.msg); goto out; }
    /* the medians sort each array: [1] is then the min, [runs] the max */
    double pp = cli_median(tp + 1, runs), dd = cli_median(td + 1, runs);

    /* bandwidth after the model runs, so the model's pages are not evicted before it;
     * on a GPU the device-copy probe (the same process, the same device) */
    const char *bname = ts_engine_backend(e);
    const int on_gpu = strncmp(bname, "cpu", 3) != 0;
    double probe = on_gpu ? ts_engine_copy_probe(e, (size_t)1 << 30) : -1;
    size_t n = (size_t)(bw_mib > 0 ? bw_mib : 1) << 17; /* MiB of uint64 (default 1 GiB) */
    uint64_t *buf = on_gpu ? NULL : malloc(n * sizeof(uint64_t));
    double bw1 = 0, bwn = 0;
    if (buf) {
        for (size_t i = 0; i < n; i++) buf[i] = i;
        bw1 = bandwidth(buf, n, 1);
        bwn = nt > 1 ? bandwidth(buf, n, nt) : bw1;
        free(buf);
    }
    double bwt = on_gpu ? probe : nt > 1 ? bwn : bw1;
    uint64_t wb = ts_engine_decode_bytes(e);
    double loadavg[3] = {0};
    if (getloadavg(loadavg, 3) < 0) loadavg[0] = -1;
    uint64_t sb = ts_engine_state_bytes(e);
    double gbs = wb * dd / 1e9, gbs_all = (wb + sb) * dd / 1e9;
    int graphs = 0, gkern = 0;
    long replays = 0;
    double glaunch = 0;
    ts_session_graph_stats(s, &graphs, &replays, &gkern, &glaunch);
    size_t dours = 0, dfree = 0, dtot = 0;
    const int dmem = on_gpu && !ts_engine_device_mem(e, &dours, &dfree, &dtot);
    ts_expert_stats xs;
    ts_engine_expert_stats(e, &xs);
    /* tokens through the forward in the timed runs: each run feeds the prompt and gen decoded tokens */
    const double xtok = (double)runs * (prompt + gen);
    if (json) {
        printf("{\"model\": \"%s\", \"backend\": \"%s\", \"gpus\": %d, \"quant_bits\": %d, \"threads\": %d, \"prompt\": %d, \"gen\": %d, \"runs\": %d, \"n_ctx\": %d,\n"
               " \"prefill_tok_s\": %.2f, \"prefill_tok_s_min\": %.2f, \"prefill_tok_s_max\": %.2f,\n"
               " \"decode_tok_s\": %.2f, \"decode_tok_s_min\": %.2f, \"decode_tok_s_max\": %.2f,\n"
               " \"weight_bytes_per_token\": %llu, \"state_bytes_per_token\": %llu, \"decode_gb_s\": %.2f,\n"
               " \"decode_gb_s_with_state\": %.2f, \"pct_of_bandwidth_with_state\": %.1f,\n"
               " \"bandwidth_gb_s_1t\": %.2f, \"bandwidth_gb_s\": %.2f, \"pct_of_bandwidth\": %.1f,\n"
               " \"copy_probe_gb_s\": %.2f, \"pct_of_copy_probe\": %.1f, \"ms_per_token\": %.4f,\n"
               " \"graphs\": %d, \"graph_replays\": %ld, \"graph_kernels\": %d, \"graph_launch_us\": %.2f,\n"
               " \"device_mem_ours\": %llu, \"device_mem_driver_and_others\": %llu,\n"
               " \"kernels\": \"%s\", \"act_bits\": %d, \"ahead\": %d, \"loadavg\": %.2f",
               dir, bname, in->tp_ranks, in->quant_bits, nt, prompt, gen, runs, sp.n_ctx, pp, tp[1], tp[runs], dd, td[1], td[runs],
               (unsigned long long)wb, (unsigned long long)sb, gbs, gbs_all, bwt > 0 ? 100.0 * gbs_all / bwt : 0.0, bw1, bwt, bwt > 0 ? 100.0 * gbs / bwt : 0.0,
               probe, probe > 0 ? 100.0 * gbs / probe : 0.0, dd > 0 ? 1000.0 / dd : 0.0, graphs, replays, gkern, glaunch,
               (unsigned long long)dours, (unsigned long long)(dmem && dtot > dfree + dours ? dtot - dfree - dours : 0),
               ts_kernels_name(), act_bits ? act_bits : TS_ACT_BITS_DEFAULT, ts_session_ahead(s), loadavg[0]);
        if (xs.enabled) { /* the expert cache: --expert-cache */
            uint64_t req = xs.hits + xs.misses;
            printf(", \"expert_cache\": {\"slots\": %d, \"slot_bytes\": %llu, \"prepared\": %s, \"direct_io\": %s, \"hits\": %llu,"
                   " \"misses\": %llu, \"hit_rate\": %.4f, \"evictions\": %llu, \"bytes_read\": %llu, \"bytes_read_per_token\": %.0f,"
                   " \"io_wait_s\": %.3f, \"layer_hit_rate\": [",
                   xs.n_slots, (unsigned long long)xs.slot_bytes, xs.prepared ? "true" : "false", xs.direct_io ? "true" : "false",
                   (unsigned long long)xs.hits, (unsigned long long)xs.misses, req ? (double)xs.hits / req : 0.0,
                   (unsigned long long)xs.evictions, (unsigned long long)xs.bytes_read, xs.bytes_read / xtok, xs.io_wait_s);
            for (int L = 0; L < xs.n_layers; L++) {
                uint64_t h = 0, m = 0;
                ts_engine_expert_layer(e, L, &h, &m);
                if (h + m) printf("%s%.4f", L ? ", " : "", (double)h / (h + m));
                else printf("%snull", L ? ", " : "");
            }
            printf("]");
            if (xs.host_slots) {
                uint64_t hr = xs.host_hits + xs.host_misses;
                printf(", \"host_tier\": {\"slots\": %d, \"hits\": %llu, \"misses\": %llu, \"hit_rate\": %.4f, \"bytes_read\": %llu,"
                       " \"bytes_read_per_token\": %.0f, \"io_wait_s\": %.3f, \"exclusive\": %s, \"writebacks\": %llu}",
                       xs.host_slots, (unsigned long long)xs.host_hits, (unsigned long long)xs.host_misses,
                       hr ? (double)xs.host_hits / hr : 0.0, (unsigned long long)xs.host_bytes_read, xs.host_bytes_read / xtok,
                       xs.host_io_wait_s, xs.host_exclusive ? "true" : "false", (unsigned long long)xs.host_writebacks);
            }
            printf("}");
        }
        printf("}\n");
    } else {
        printf("model      %s (%s, %s, backend %s, %d threads, kernels %s, %d-bit activations)\n", dir, in->model_type,
               in->quant_bits ? (in->quant_bits == 4 ? "INT4" : "INT8") : "bf16/f32", bname, nt, ts_kernels_name(),
               act_bits ? act_bits : TS_ACT_BITS_DEFAULT);
        printf("prefill    %d tokens: %.1f tok/s (median of %d; min %.1f, max %.1f)\n", prompt, pp, runs, tp[1], tp[runs]);
        printf("decode     %d tokens: %.1f tok/s (median of %d; min %.1f, max %.1f)\n", gen, dd, runs, td[1], td[runs]);
        printf("weights    %.1f MB read per decoded token -> %.1f GB/s\n", wb / 1e6, gbs);
        printf("state      %.1f MB of GDN state read and written per token -> %.1f GB/s with the weights\n", sb / 1e6,
               gbs_all);
        if (on_gpu) {
            printf("bandwidth  device-copy probe: %.1f GB/s (read + write, 1 GiB)\n", probe);
            printf("           decode reaches %.1f%% of the probe (%.1f%% counting the state)\n",
                   probe > 0 ? 100.0 * gbs / probe : 0.0, probe > 0 ? 100.0 * gbs_all / probe : 0.0);
            printf("graphs     %d captured, %ld replays, %d kernels in the decode graph, %.1f us to launch one\n",
                   graphs, replays, gkern, glaunch);
            if (dmem)
                printf("device mem ours %.2f GB (counted); driver and others %.2f GB (measured: total - free - ours)\n",
                       dours / 1e9, dtot > dfree + dours ? (dtot - dfree - dours) / 1e9 : 0.0);
        } else {
            printf("bandwidth  measured read: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n", bw1, bwn, nt);
            printf("           decode reaches %.1f%% of the %d-thread read bandwidth (%.1f%% counting the state)\n",
                   bwt > 0 ? 100.0 * gbs / bwt : 0.0, nt, bwt > 0 ? 100.0 * gbs_all / bwt : 0.0);
        }
        printf("load       %.2f (1-minute load average at the end)\n", loadavg[0]);
        if (xs.enabled) {
            uint64_t req = xs.hits + xs.misses;
            printf("experts    cache of %d slots x %.2f MiB%s, %s reads: hit rate %.1f%%, %.1f MB read per token "
                   "(%d runs x %d tokens), %llu evictions, %.2f s waiting for reads\n",
                   xs.n_slots, xs.slot_bytes / 1048576.0, xs.prepared ? " (prepared)" : "", xs.direct_io ? "O_DIRECT" : "buffered",
                   req ? 100.0 * xs.hits / req : 0.0, xs.bytes_read / 1e6 / xtok, runs, prompt + gen,
                   (unsigned long long)xs.evictions, xs.io_wait_s);
            printf("           hit rate by layer:");
            for (int L = 0; L < xs.n_layers; L++) {
                uint64_t h = 0, m = 0;
                ts_engine_expert_layer(e, L, &h, &m);
                if (h + m) printf(" %d:%.0f%%", L, 100.0 * h / (h + m));
                else printf(" %d:-", L);
            }
            printf("\n");
        }
    }
    if (spec) rc = bench_spec(s, ids, prompt, gen, runs, &eo.spec, &fa, json, &err);
    if (rc) fprintf(stderr, "turbospark bench: %s\n", err.msg);
out:
    free(tp); free(td); free(ids);
    ts_session_free(s);
    ts_engine_close(e);
    return rc ? 1 : 0;
}
