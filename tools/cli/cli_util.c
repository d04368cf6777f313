/* cli_util.c: small helpers shared by the subcommands. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_parse_ids(const char *s, int **ids) {
    *ids = NULL;
    int cap = 16, n = 0;
    int *v = malloc(sizeof(int) * cap);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\r' || *p == '\t') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > 0x7fffffff) { free(v); return -1; }
        if (n == cap) {
            int *nv = realloc(v, sizeof(int) * (cap *= 2));
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[n++] = (int)x;
        p = end;
        if (*p && *p != ',' && *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') { free(v); return -1; }
    }
    *ids = v;
    return n;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Where the default model is looked for, in order; [0] is the environment
 * variable's value (empty when unset). */
static int model_candidates(char out[3][4096]) {
    const char *env = getenv("TURBOSPARK_MODEL");
    snprintf(out[0], sizeof out[0], "%s", env ? env : "");
    snprintf(out[1], sizeof out[1], "models/default");
    out[2][0] = 0;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0; /* the executable's directory, e.g. REPO/build */
            snprintf(out[2], sizeof out[2], "%.4000s/../models/default", exe);
        }
    }
    return 3;
}

const char *cli_default_model(void) {
    /* An explicit TURBOSPARK_MODEL is taken as given: a wrong one is then
     * an error naming it, not a silent fall back to the bundled model. */
    static char c[3][4096];
    model_candidates(c);
    if (c[0][0]) return c[0];
    struct stat st;
    for (int i = 1; i < 3; i++)
        if (c[i][0] && stat(c[i], &st) == 0 && S_ISDIR(st.st_mode)) return c[i];
    return NULL;
}

void cli_no_model(const char *cmd) {
    char c[3][4096], cwd[4096];
    model_candidates(c);
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, ".");
    fprintf(stderr,
            "turbospark %s: no model: pass -m DIR or set TURBOSPARK_MODEL=DIR\n"
            "  looked for the bundled model in %s/%s and %s (TURBOSPARK_MODEL is not set)\n",
            cmd, cwd, c[1], c[2][0] ? c[2] : "(the executable's directory is unknown)");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double cli_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int pf(const char *s, float *out) {
    char *end;
    *out = strtof(s, &end);
    return end != s && *end == 0;
}

static int pi(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    *out = (int)v;
    return end != s && *end == 0 && v >= 0 && v <= (1L << 30);
}

int cli_parse_draft_vocab(const char *s, int *out) {
    if (!strcmp(s, "all")) {
        *out = -1;
        return 1;
    }
    return pi(s, out) && *out >= 1;
}

int cli_parse_count(const char *s, int *out) { return pi(s, out); }

int cli_parse_act_bits(const char *s, int *out) {
    int v;
    if (!pi(s, &v) || (v != 8 && v != 16 && v != 24)) return 0;
    *out = v;
    return 1;
}

int cli_parse_prob(const char *s, float *out) { return pf(s, out) && *out >= 0.0f && *out <= 1.0f; }

int cli_parse_spec(int argc, char **argv, int *i, cli_spec *o, const char *cmd) {
    const char *a = argv[*i];
    if (strcmp(a, "--spec") && strcmp(a, "--draft") && strcmp(a, "--draft-vocab") && strcmp(a, "--draft-p-min") &&
        strcmp(a, "--block") && strcmp(a, "--drafter") && strcmp(a, "--ngram-max") && strcmp(a, "--ngram-min"))
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "turbospark %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    int ok = 1;
    if (!strcmp(a, "--spec")) {
        if (strcmp(v, "mtp") && strcmp(v, "dflash") && strcmp(v, "ngram")) {
            fprintf(stderr, "turbospark %s: --spec '%s' is not supported (use 'mtp', 'dflash' or 'ngram')\n", cmd, v);
            return -1;
        }
        o->on = 1;
        o->dflash = !strcmp(v, "dflash");
        o->ngram = !strcmp(v, "ngram");
    } else if (!strcmp(a, "--ngram-max")) {
        ok = pi(v, &o->ngram_max);
    } else if (!strcmp(a, "--ngram-min")) {
        ok = pi(v, &o->ngram_min);
    } else if (!strcmp(a, "--block")) {
        ok = pi(v, &o->block);
    } else if (!strcmp(a, "--drafter")) {
        o->drafter = v;
    } else if (!strcmp(a, "--draft")) {
        ok = pi(v, &o->draft);
    } else if (!strcmp(a, "--draft-vocab")) {
        ok = cli_parse_draft_vocab(v, &o->draft_vocab);
    } else {
        ok = cli_parse_prob(v, &o->p_min);
    }
    if (!ok) fprintf(stderr, "turbospark %s: bad value '%s' for %s\n", cmd, v, a);
    return ok ? 1 : -1;
}

int cli_spec_check(cli_spec *o, const char *cmd) {
    /* TURBOSPARK_MTP_DRAFT=M (the original engine's knob): without --draft,
     * M drafts a block, and M >= 1 turns MTP drafting on even without
     * --spec; 0 or unset: no drafting unless --spec mtp asks (then 3) */
    const char *env = getenv("TURBOSPARK_MTP_DRAFT");
    if (!o->dflash && !o->ngram && o->draft == -1 && env && *env) {
        char *end;
        long m = strtol(env, &end, 10);
        if (*end || m < 0 || m > TS_SPEC_MAX_DRAFT) {
            fprintf(stderr, "turbospark %s: TURBOSPARK_MTP_DRAFT='%s': use 0..%d (0: no drafting)\n", cmd, env,
                    TS_SPEC_MAX_DRAFT);
            return -1;
        }
        if (m >= 1) o->on = 1, o->draft = (int)m;
    }
    if (!o->on && (o->draft != -1 || o->draft_vocab || o->p_min >= 0)) {
        fprintf(stderr, "turbospark %s: --draft, --draft-vocab and --draft-p-min need --spec mtp (or dflash, ngram)\n", cmd);
        return -1;
    }
    if (!o->ngram && (o->ngram_max != -1 || o->ngram_min != -1)) {
        fprintf(stderr, "turbospark %s: --ngram-max and --ngram-min need --spec ngram\n", cmd);
        return -1;
    }
    if (o->ngram) {
        if (o->draft_vocab || o->p_min >= 0 || o->block != -1 || o->drafter) {
            fprintf(stderr, "turbospark %s: --spec ngram copies its drafts from the context: --draft-vocab, "
                            "--draft-p-min, --block and --drafter do not apply\n", cmd);
            return -1;
        }
        if (o->draft == -1) o->draft = CLI_NGRAM_DRAFT;
        if (o->draft < 1 || o->draft > TS_SPEC_MAX_DRAFT) {
            fprintf(stderr, "turbospark %s: --draft %d is outside 1..%d\n", cmd, o->draft, TS_SPEC_MAX_DRAFT);
            return -1;
        }
        if (o->ngram_max == -1) o->ngram_max = o->ngram_min > CLI_NGRAM_MAX ? o->ngram_min : CLI_NGRAM_MAX;
        if (o->ngram_max < 1 || o->ngram_max > TS_NGRAM_MAX) {
            fprintf(stderr, "turbospark %s: --ngram-max %d is outside 1..%d\n", cmd, o->ngram_max, TS_NGRAM_MAX);
            return -1;
        }
        if (o->ngram_min == -1) o->ngram_min = o->ngram_max < TS_NGRAM_MIN_DEFAULT ? o->ngram_max : TS_NGRAM_MIN_DEFAULT;
        if (o->ngram_min < 1 || o->ngram_min > o->ngram_max) {
            fprintf(stderr, "turbospark %s: --ngram-min %d is outside 1..%d (at most --ngram-max)\n", cmd, o->ngram_min,
                    o->ngram_max);
            return -1;
        }
        return 0;
    }
    if (!o->dflash && (o->block != -1 || o->drafter)) {
        fprintf(stderr, "turbospark %s: --block and --drafter need --spec dflash\n", cmd);
        return -1;
    }
    if (o->dflash) {
        if (o->draft != -1) {
            fprintf(stderr, "turbospark %s: --draft is MTP's; DFlash drafts --block B rows (B-1 drafts)\n", cmd);
            return -1;
        }
        if (o->block == -1) o->block = TS_DFLASH_MAX_BLOCK;
        if (o->block < 2 || o->block > TS_DFLASH_MAX_BLOCK) {
            fprintf(stderr, "turbospark %s: --block %d is outside 2..%d\n", cmd, o->block, TS_DFLASH_MAX_BLOCK);
            return -1;
        }
        o->draft = o->block - 1; /* what the statistics count per block */
        return 0;
    }
    if (o->on && o->draft == -1) o->draft = 3;
    if (o->on && (o->draft < 1 || o->draft > TS_SPEC_MAX_DRAFT)) {
        fprintf(stderr, "turbospark %s: --draft %d is outside 1..%d\n", cmd, o->draft, TS_SPEC_MAX_DRAFT);
        return -1;
    }
    return 0;
}

void cli_spec_apply(const cli_spec *o, ts_session_params *sp, ts_gen_params *gp) {
    if (!o->on) return;
    if (sp) {
        if (o->dflash) sp->dflash_block = o->block;
        else if (o->ngram) sp->ngram_draft = o->draft; /* the verify buffers alone: no MTP head needed */
        else sp->spec_draft = o->draft;
    }
    if (!gp) return;
    if (o->dflash) gp->dflash_block = o->block;
    else gp->spec_draft = o->draft;
    if (o->ngram) gp->spec_ngram = o->ngram_max, gp->ngram_min = o->ngram_min;
    gp->draft_vocab = o->draft_vocab;
    if (o->p_min >= 0) gp->draft_p_min = o->p_min;
}

void cli_spec_report(const cli_spec *o, const ts_gen_params *gp, const ts_gen_stats *st) {
    if (!o->on || st->n_blocks <= 0) return;
    char what[96];
    if (o->dflash) snprintf(what, sizeof what, "dflash --block %d --draft-vocab %d --draft-p-min %g", o->block,
                            st->draft_vocab, (double)gp->draft_p_min);
    else if (o->ngram) snprintf(what, sizeof what, "ngram --draft %d --ngram-max %d --ngram-min %d", o->draft, o->ngram_max,
                                o->ngram_min);
    else snprintf(what, sizeof what, "mtp --draft %d --draft-vocab %d --draft-p-min %g", o->draft, st->draft_vocab,
                  (double)gp->draft_p_min);
    fprintf(stderr,
            "[spec %s: %d blocks, %d/%d drafts accepted, mean accepted "
            "length %.2f tokens/verify; acceptance by position:",
            what, st->n_blocks, st->n_accepted, st->n_drafted, (double)(st->n_accepted + st->n_blocks) / st->n_blocks);
    for (int j = 0; j < o->draft && j < 16; j++) {
        if (st->drafted_at[j]) fprintf(stderr, " %d:%.2f", j + 1, (double)st->accepted_at[j] / st->drafted_at[j]);
        else fprintf(stderr, " %d:-", j + 1); /* never drafted there */
    }
    fprintf(stderr, "; draft %.1f ms, verify %.1f ms, rollback %.2f ms (%.3f ms/verify)]\n", st->t_draft * 1e3,
            st->t_verify * 1e3, st->t_rollback * 1e3, st->t_verify * 1e3 / st->n_blocks);
}

/* --logit-bias ID=V[,ID=V...]: appended to one process-wide list (a CLI
 * runs one generation setup; the list must outlive the gen params). A
 * repeated id takes its last value, as a JSON object would. */
#define CLI_BIAS_MAX 1024
static int32_t bias_ids[CLI_BIAS_MAX];
static float bias_v[CLI_BIAS_MAX];
static int parse_bias(const char *s, ts_gen_params *gp) {
    int n = gp->n_bias;
    while (*s) {
        char *end;
        errno = 0;
        long id = strtol(s, &end, 10);
        if (end == s || *end != '=' || errno || id < 0 || id > INT32_MAX) return 0;
        s = end + 1;
        float v = strtof(s, &end);
        if (end == s || (*end && *end != ',') || !(v >= -100.0f && v <= 100.0f)) return 0;
        if (*end == ',' && !end[1]) return 0; /* a trailing comma: an entry missing */
        s = *end ? end + 1 : end;
        int k = 0;
        while (k < n && bias_ids[k] != (int32_t)id) k++;
        if (k == n && n == CLI_BIAS_MAX) return 0;
        bias_ids[k] = (int32_t)id, bias_v[k] = v;
        if (k == n) n++;
    }
    gp->bias_ids = bias_ids, gp->bias = bias_v, gp->n_bias = n;
    return n > 0;
}

int cli_parse_sampling(int argc, char **argv, int *i, ts_gen_params *gp, const char *cmd) {
    const char *a = argv[*i];
    if (*i + 1 >= argc) return 0;
    const char *v = argv[*i + 1];
    int ok;
    if (!strcmp(a, "--temp")) ok = pf(v, &gp->temperature) && gp->temperature >= 0;
    else if (!strcmp(a, "--top-k")) ok = pi(v, &gp->top_k);
    else if (!strcmp(a, "--top-p")) ok = pf(v, &gp->top_p) && gp->top_p > 0 && gp->top_p <= 1;
    else if (!strcmp(a, "--min-p")) ok = pf(v, &gp->min_p) && gp->min_p >= 0 && gp->min_p <= 1;
    else if (!strcmp(a, "--repeat-penalty")) ok = pf(v, &gp->repeat_penalty) && gp->repeat_penalty > 0;
    else if (!strcmp(a, "--presence-penalty")) ok = pf(v, &gp->presence_penalty);
    else if (!strcmp(a, "--frequency-penalty")) ok = pf(v, &gp->frequency_penalty);
    else if (!strcmp(a, "--logit-bias")) ok = parse_bias(v, gp);
    else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        gp->seed = strtoull(v, &end, 10);
        ok = end != v && *end == 0 && !errno;
    } else return 0;
    (*i)++;
    if (!ok) {
        fprintf(stderr, "turbospark %s: bad value '%s' for %s\n", cmd, v, a);
        return -1;
    }
    return 1;
}

char *cli_read_file(const char *path) { return cli_read_file_len(path, NULL); }

char *cli_read_file_len(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || bad) { free(buf); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* ---- the shared engine and session options ---- */

void cli_engine_init(cli_engine *o, const char *cmd, unsigned accept) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->accept = accept;
    o->spec = (cli_spec)CLI_SPEC_INIT;
}

int cli_engine_parse(int argc, char **argv, int *i, cli_engine *o) {
    const char *a = argv[*i];
    if (o->accept & CLI_OPT_SPEC) {
        int r = cli_parse_spec(argc, argv, i, &o->spec, o->cmd);
        if (r) return r;
    }
    unsigned opt = !strcmp(a, "-m") || !strcmp(a, "--model") ? CLI_OPT_MODEL
                 : !strcmp(a, "--threads")                   ? CLI_OPT_THREADS
                 : !strcmp(a, "--ctx")                       ? CLI_OPT_CTX
                 : !strcmp(a, "--act-bits")                  ? CLI_OPT_ACT_BITS
                 : !strcmp(a, "--chunk")                     ? CLI_OPT_CHUNK
                 : !strcmp(a, "--kernels")                   ? CLI_OPT_KERNELS
                 : !strcmp(a, "--backend") || !strcmp(a, "--device") || !strcmp(a, "--gpus") ? CLI_OPT_BACKEND
                 : !strcmp(a, "--expert-cache") || !strcmp(a, "--expert-policy") || !strcmp(a, "--expert-host-cache")
                     ? CLI_OPT_XCACHE
                                                             : 0;
    if (!(opt & o->accept)) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "turbospark %s: %s needs a value\n", o->cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    int ok = 1;
    const char *want = "a count";
    switch (opt) {
    case CLI_OPT_MODEL: o->model = v; break;
    case CLI_OPT_THREADS: ok = pi(v, &o->threads); break;
    case CLI_OPT_CTX: ok = pi(v, &o->n_ctx); break;
    case CLI_OPT_ACT_BITS: ok = cli_parse_act_bits(v, &o->act_bits), want = "use 8, 16 or 24"; break;
    case CLI_OPT_CHUNK: ok = pi(v, &o->chunk) && o->chunk >= 1, want = "a count >= 1"; break;
    case CLI_OPT_KERNELS: o->kernels = v; break;
    case CLI_OPT_BACKEND:
        if (!strcmp(a, "--device")) ok = pi(v, &o->device), want = "a device index >= 0";
        else if (!strcmp(a, "--gpus")) ok = pi(v, &o->gpus) && o->gpus >= 1 && o->gpus <= 8, want = "a count from 1 to 8";
        else ok = !strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda"), o->backend = v, want = "auto, cpu or cuda";
        break;
    case CLI_OPT_XCACHE:
        if (!strcmp(a, "--expert-policy")) {
            ok = !strcmp(v, "lfru") || !strcmp(v, "lru");
            o->expert_policy = v;
            want = "lfru or lru";
        } else if (!strcmp(a, "--expert-host-cache")) {
            return cli_parse_size(o->cmd, v, &o->expert_host_cache) ? 1 : -1;
        } else {
            return cli_parse_size(o->cmd, v, &o->expert_cache) ? 1 : -1;
        }
        break;
    }
    if (!ok) fprintf(stderr, "turbospark %s: bad value '%s' for %s (%s)\n", o->cmd, v, a, want);
    return ok ? 1 : -1;
}

int cli_engine_check(cli_engine *o) {
    if ((o->accept & CLI_OPT_SPEC) && cli_spec_check(&o->spec, o->cmd)) return -1;
    if (o->kernels && ts_kernels_select(o->kernels)) {
        fprintf(stderr, "turbospark %s: --kernels '%s': use auto, avx512, avx2, generic or ref (one this CPU runs)\n",
                o->cmd, o->kernels);
        return -1;
    }
    if ((o->accept & CLI_OPT_MODEL) && !o->model && !(o->model = cli_default_model())) {
        cli_no_model(o->cmd);
        return -1;
    }
    return 0;
}

void cli_engine_apply(const cli_engine *o, ts_engine_params *ep, ts_session_params *sp, ts_gen_params *gp) {
    if (ep) {
        ep->n_threads = o->threads;
        ep->act_bits = o->act_bits;
        if (o->spec.dflash) {
            ep->dflash = 1;
            ep->drafter_dir = o->spec.drafter;
        }
        ep->backend = o->backend ? o->backend : "auto";
        ep->device = o->device;
        ep->gpus = o->gpus;
        ep->expert_cache = o->expert_cache;
        ep->expert_host_cache = o->expert_host_cache;
        ep->expert_policy = o->expert_policy;
    }
    if (sp) {
        sp->n_ctx = o->n_ctx;
        sp->max_rows = o->chunk;
    }
    cli_spec_apply(&o->spec, sp, gp);
}

void cli_engine_help(FILE *f, unsigned accept) {
    if (accept & CLI_OPT_MODEL)
        fputs("  -m, --model DIR     model directory (default: $TURBOSPARK_MODEL, else the bundled\n"
              "                      models/default, under the working directory or next to the binary)\n", f);
    if (accept & CLI_OPT_CTX) fputs("  --ctx N             context limit in tokens (default min(4096, the model's))\n", f);
    if (accept & CLI_OPT_CHUNK)
        fputs("  --chunk N           prompt rows per forward pass (default 64); also the prefill grid:\n"
              "                      outputs are reproducible bit for bit for one chunk size\n", f);
    if (accept & CLI_OPT_THREADS) fputs("  --threads N         CPU threads (default 0: all cores)\n", f);
    if (accept & CLI_OPT_ACT_BITS)
        fputs("  --act-bits N        activation precision of quantized products: 8 (default, as llama.cpp),\n"
              "                      16, or 24 (f32-class; slower prompts and drafting blocks)\n", f);
    if (accept & CLI_OPT_KERNELS)
        fputs("  --kernels NAME      auto (default, or $TS_KERNELS), avx512, avx2, generic, ref\n", f);
    if (accept & CLI_OPT_BACKEND)
        fputs("  --backend NAME      auto (default: CUDA when a usable GPU is present and the model fits, else\n"
              "                      the CPU), cpu, cuda\n"
              "  --device N          CUDA device index (default 0)\n"
              "  --gpus N            tensor parallelism over N GPUs from --device on (1..8; with\n"
              "                      --backend cpu: N ranks in this process, for testing the split)\n", f);
    if (accept & CLI_OPT_XCACHE)
        fputs("  --expert-cache SIZE MoE: keep the routed experts in the files and read them on demand into\n"
              "                      a cache of SIZE bytes (K/M/G suffixes; at least one layer's top-k)\n"
              "  --expert-policy P   its eviction: lfru (default, decayed frequency) or lru\n"
              "  --expert-host-cache SIZE  GPU: pinned host memory for a second tier between the files and\n"
              "                      the device slots (a device miss then copies from host memory)\n", f);
    if (accept & CLI_OPT_SPEC) fputs(CLI_SPEC_HELP, f);
}

int cli_parse_size(const char *cmd, const char *s, uint64_t *out) {
    ts_error err = {0};
    if (ts_parse_size(s, out, &err)) {
        fprintf(stderr, "turbospark %s: --expert-cache %s\n", cmd, err.msg);
        return 0;
    }
    return 1;
}

void cli_expert_report(const ts_engine *e, int n_tokens, int per_layer) {
    ts_expert_stats x;
    ts_engine_expert_stats(e, &x);
    if (!x.enabled) return;
    uint64_t req = x.hits + x.misses;
    fprintf(stderr, "[expert cache: %d slots of %.2f MiB%s, %s reads: hit rate %.1f%% (%llu of %llu), %llu evictions, %.1f MB read",
            x.n_slots, x.slot_bytes / 1048576.0, x.prepared ? " (prepared)" : "", x.direct_io ? "direct" : "buffered",
            req ? 100.0 * x.hits / req : 0.0, (unsigned long long)x.hits, (unsigned long long)req,
            (unsigned long long)x.evictions, x.bytes_read / 1e6);
    if (n_tokens > 0) fprintf(stderr, ", %.1f MB/token", x.bytes_read / 1e6 / n_tokens);
    if (x.prefetched)
        fprintf(stderr, ", prefetched %llu, used %llu (%.1f%%)", (unsigned long long)x.prefetched,
                (unsigned long long)x.prefetch_used, 100.0 * x.prefetch_used / x.prefetched);
    fprintf(stderr, ", waited %.2f s for reads]\n", x.io_wait_s);
    if (x.host_slots) {
        uint64_t hr = x.host_hits + x.host_misses;
        fprintf(stderr, "[expert host tier: %d slots, %s, hit rate %.1f%% (%llu of %llu), %.1f MB read from the install, waited %.2f s",
                x.host_slots, x.host_exclusive ? "exclusive" : "inclusive", hr ? 100.0 * x.host_hits / hr : 0.0,
                (unsigned long long)x.host_hits, (unsigned long long)hr, x.host_bytes_read / 1e6, x.host_io_wait_s);
        if (x.host_exclusive) fprintf(stderr, ", %llu device victims kept", (unsigned long long)x.host_writebacks);
        fprintf(stderr, "]\n");
    }
    if (!per_layer) return;
    fprintf(stderr, "[expert cache hit rate by layer:");
    for (int L = 0; L < x.n_layers; L++) {
        uint64_t h = 0, m = 0;
        ts_engine_expert_layer(e, L, &h, &m);
        if (h + m) fprintf(stderr, " %d:%.0f%%", L, 100.0 * h / (h + m));
        else fprintf(stderr, " %d:-", L);
    }
    fprintf(stderr, "]\n");
}

/* The server's rule too (log-probability tokens, text offsets): one
 * validator for both frontends. */
int cli_utf8_seq(const void *p, size_t n) {
    const unsigned char *s = p;
    const unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : lo, hi = c == 0xED ? 0x9F : hi;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : lo, hi = c == 0xF4 ? 0x8F : hi;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0;
        if (k == 1 ? s[k] < lo || s[k] > hi : s[k] < 0x80 || s[k] > 0xBF) return -k;
    }
    return need + 1;
}

int cli_utf8_valid(const void *p, size_t n) {
    for (size_t i = 0; i < n;) {
        const int k = cli_utf8_seq((const unsigned char *)p + i, n - i);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

char *cli_token_str(const ts_tokenizer *t, int32_t id) {
    size_t n = 0;
    const char *b = t ? ts_tokenizer_token_bytes(t, id, &n) : NULL;
    if (!b) {
        char *s = malloc(32);
        if (s) snprintf(s, 32, "<id %d>", (int)id);
        return s;
    }
    const int ok = cli_utf8_valid(b, n);
    char *s = malloc(ok ? n + 1 : 6 + 4 * n + 1);
    if (!s) return NULL;
    if (ok) {
        memcpy(s, b, n);
        s[n] = 0;
        return s;
    }
    char *o = s + sprintf(s, "bytes:");
    for (size_t i = 0; i < n; i++) o += sprintf(o, "\\x%02x", (unsigned char)b[i]);
    return s;
}
