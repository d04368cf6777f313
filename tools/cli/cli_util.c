/* cli_util.c: small helpers shared by the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

const char *cli_default_model(void) {
    /* The bundled install, relative to the working directory or to the
     * TURBOSPARK_MODEL environment variable. */
    const char *env = getenv("TURBOSPARK_MODEL");
    if (env && *env) return env;
    static const char *candidates[] = {"models/default", "tests/fixtures/tiny-dense", NULL};
    struct stat st;
    for (int i = 0; candidates[i]; i++)
        if (stat(candidates[i], &st) == 0 && S_ISDIR(st.st_mode)) return candidates[i];
    return NULL;
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
    if (strcmp(a, "--spec") && strcmp(a, "--draft") && strcmp(a, "--draft-vocab") && strcmp(a, "--draft-p-min")) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "turbospark %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    int ok = 1;
    if (!strcmp(a, "--spec")) {
        if (strcmp(v, "mtp")) {
            fprintf(stderr, "turbospark %s: --spec '%s' is not supported (only 'mtp')\n", cmd, v);
            return -1;
        }
        o->on = 1;
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
    if (!o->on && (o->draft != -1 || o->draft_vocab || o->p_min >= 0)) {
        fprintf(stderr, "turbospark %s: --draft, --draft-vocab and --draft-p-min need --spec mtp\n", cmd);
        return -1;
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
    if (sp) sp->spec_draft = o->draft;
    if (!gp) return;
    gp->spec_draft = o->draft;
    gp->draft_vocab = o->draft_vocab;
    if (o->p_min >= 0) gp->draft_p_min = o->p_min;
}

void cli_spec_report(const cli_spec *o, const ts_gen_params *gp, const ts_gen_stats *st) {
    if (!o->on || st->n_blocks <= 0) return;
    fprintf(stderr,
            "[spec mtp --draft %d --draft-vocab %d --draft-p-min %g: %d blocks, %d/%d drafts accepted, mean accepted "
            "length %.2f tokens/verify; acceptance by position:",
            o->draft, st->draft_vocab, (double)gp->draft_p_min, st->n_blocks, st->n_accepted, st->n_drafted,
            (double)(st->n_accepted + st->n_blocks) / st->n_blocks);
    for (int j = 0; j < o->draft && j < 16; j++) {
        if (st->drafted_at[j]) fprintf(stderr, " %d:%.2f", j + 1, (double)st->accepted_at[j] / st->drafted_at[j]);
        else fprintf(stderr, " %d:-", j + 1); /* never drafted there */
    }
    fprintf(stderr, "; draft %.1f ms, verify %.1f ms, rollback %.2f ms (%.3f ms/verify)]\n", st->t_draft * 1e3,
            st->t_verify * 1e3, st->t_rollback * 1e3, st->t_verify * 1e3 / st->n_blocks);
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
