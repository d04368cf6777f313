/* cmd_run.c: `turbospark run`: generate from a prompt.
 *
 *   turbospark run [-m DIR] (-p TEXT | -f FILE | --ids 1,2,3) [-n N] [sampling options]
 *                  [--chat [--system TEXT] [--no-think]] [engine options: cli.h, cli_engine]
 *                  [--print-ids | --logprobs N] [--json | --json-schema FILE] [-v]
 *
 * Text streams to stdout as it is generated (whole UTF-8 characters only);
 * with --print-ids, or for a checkpoint without a tokenizer, the generated
 * ids are printed comma-separated on one line instead; with --logprobs N,
 * one JSON line per token: its id, text, log-probability and the N most
 * likely tokens (the model's raw distribution: include/turbospark.h). One line of
 * statistics goes to stderr at the end; with --spec a second one: acceptance
 * per draft position, mean accepted length, draft/verify/rollback time.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

#define RUN_OPTS (CLI_OPT_ALL)

static void usage(FILE *f) {
    fprintf(f,
            "usage: turbospark run [-m DIR] (-p TEXT | -f FILE | --ids 1,2,3) [-n N] [options]\n"
            "  -p TEXT             prompt text (needs tokenizer.json in DIR)\n"
            "  -f FILE             prompt text from a file ('-' = stdin), byte for byte\n"
            "  --ids 1,2,3         prompt as token ids (default: the id 1)\n"
            "  --chat              wrap -p in the model's chat template (a user turn)\n"
            "  --system TEXT       system message for --chat\n"
            "  --no-think          --chat without a thinking block (enable_thinking=false)\n"
            "  -n N                tokens to generate (default 64)\n"
            CLI_SAMPLING_HELP
            "  --print-ids         print generated ids instead of text\n"
            "  --logprobs N        print a JSON line per token instead of text: id, token, logprob and the\n"
            "                      N (0..20) most likely tokens with theirs\n"
            "  --json              the reply is one JSON object (constrained decoding; with --chat after\n"
            "                      the think block when the template opens one)\n"
            "  --json-schema FILE  the reply is a JSON document that validates against the JSON Schema in\n"
            "                      FILE (as --json; properties in the schema's order, no keys beyond them;\n"
            "                      a keyword it cannot enforce, such as pattern or format, is refused)\n"
            "  -v                  verbose loading (unused tensors)\n");
    cli_engine_help(f, RUN_OPTS);
}

typedef struct {
    int print_ids;
    int n;
    ts_detok *detok;
    const int32_t *stops; /* not printed as text: they end the reply */
    int n_stop;
    const ts_tokenizer *tok; /* --logprobs: the line of each token */
    cJSON *line;             /* built by on_logprobs, printed by on_token */
} run_out;

static cJSON *lp_entry(const ts_tokenizer *t, const ts_logprob *lp) {
    cJSON *o = cJSON_CreateObject();
    char *s = cli_token_str(t, lp->id);
    cJSON_AddNumberToObject(o, "id", lp->id);
    cJSON_AddStringToObject(o, "token", s ? s : "");
    cJSON_AddNumberToObject(o, "logprob", cli_logprob_json(lp->logprob));
    free(s);
    return o;
}

static void on_logprobs(void *user, const ts_logprob *chosen, const ts_logprob *top, int n_top) {
    run_out *o = user;
    cJSON_Delete(o->line);
    o->line = lp_entry(o->tok, chosen);
    cJSON *a = cJSON_AddArrayToObject(o->line, "top");
    for (int k = 0; k < n_top; k++) cJSON_AddItemToArray(a, lp_entry(o->tok, &top[k]));
}

static int on_token(void *user, int32_t id) {
    run_out *o = user;
    if (o->line) {
        char *p = cJSON_PrintUnformatted(o->line);
        if (p) printf("%s\n", p);
        free(p);
        cJSON_Delete(o->line);
        o->line = NULL;
    } else if (o->print_ids || !o->detok) {
        printf("%s%d", o->n ? "," : "", id);
    } else {
        for (int i = 0; i < o->n_stop; i++)
            if (o->stops[i] == id) { o->n++; return 0; }
        const char *t;
        size_t len;
        ts_error err;
        if (ts_detok_push(o->detok, id, &t, &len, &err) == 0 && len) fwrite(t, 1, len, stdout);
    }
    fflush(stdout);
    o->n++;
    return 0;
}

/* file_prompt: the -f buffer, freed by cmd_run whichever way this returns */
static int run_main(int argc, char **argv, char **file_prompt_out) {
    const char *ids_s = NULL, *prompt = NULL, *system = NULL, *schema_file = NULL;
    char *file_prompt = NULL;
    int chat = 0, no_think = 0;
    int n_predict = 64, print_ids = 0, verbose = 0, logprobs = -1, json = 0;
    cli_engine eo;
    cli_engine_init(&eo, "run", RUN_OPTS);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc, ok = 1;
        int sr = cli_parse_sampling(argc, argv, &i, &gp, "run");
        if (sr < 0) return 2;
        if (sr > 0) continue;
        if ((sr = cli_engine_parse(argc, argv, &i, &eo)) < 0) return 2;
        if (sr > 0) continue;
#define ARG(name) (!strcmp(a, name) && more)
        if (ARG("--ids")) ids_s = argv[++i];
        else if (ARG("-p") || ARG("--prompt")) prompt = argv[++i];
        else if (ARG("-f") || ARG("--file")) {
            free(file_prompt);
            file_prompt = *file_prompt_out = cli_read_file(argv[++i]);
            if (!file_prompt) { fprintf(stderr, "turbospark run: cannot read prompt file %s\n", argv[i]); return 2; }
            prompt = file_prompt;
        }
        else if (ARG("-n")) ok = cli_parse_count(argv[++i], &n_predict);
        else if (!strcmp(a, "--print-ids")) print_ids = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (ARG("--json-schema")) schema_file = argv[++i];
        else if (ARG("--logprobs")) ok = cli_parse_count(argv[++i], &logprobs) && logprobs <= TS_TOP_LOGPROBS_MAX;
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--no-think")) no_think = 1;
        else if (ARG("--system")) system = argv[++i];
        else if (!strcmp(a, "-v")) verbose = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "turbospark run: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
        if (!ok) { fprintf(stderr, "turbospark run: bad value '%s' for %s\n", argv[i], a); return 2; }
#undef ARG
    }
    if (cli_engine_check(&eo)) return 2;
    const char *model = eo.model;
    if (prompt && ids_s) { fprintf(stderr, "turbospark run: pass -p or --ids, not both\n"); return 2; }
    if ((chat || system || no_think) && !prompt) {
        fprintf(stderr, "turbospark run: --chat, --system and --no-think need a text prompt (-p)\n");
        return 2;
    }
    if ((system || no_think) && !chat) chat = 1;
    if (print_ids && logprobs >= 0) { fprintf(stderr, "turbospark run: pass --print-ids or --logprobs, not both\n"); return 2; }
    if (json && schema_file) { fprintf(stderr, "turbospark run: pass --json or --json-schema, not both\n"); return 2; }

    ts_error err = {0};
    ts_tokenizer *tok = NULL;
    if (ts_tokenizer_load(model, &tok, &err) != 0) {
        if (prompt) { fprintf(stderr, "turbospark run: -p needs a tokenizer: %s\n", err.msg); return 1; }
        tok = NULL;
    }
    /* the constraint before the model loads: a schema it cannot enforce is
     * refused at once */
    ts_constraint *jc = NULL;
    if (json || schema_file) {
        size_t slen = 0;
        char *schema = NULL;
        int crc = 0;
        if (!tok) {
            fprintf(stderr, "turbospark run: %s needs the checkpoint's tokenizer (tokenizer.json)\n",
                    json ? "--json" : "--json-schema");
            crc = 1;
        } else if (schema_file && !(schema = cli_read_file_len(schema_file, &slen))) {
            fprintf(stderr, "turbospark run: --json-schema: cannot read %s\n", schema_file);
            crc = 1;
        } else if (schema ? ts_constraint_json_schema(tok, schema, slen, &jc, &err) : ts_constraint_json(tok, 1, &jc, &err)) {
            fprintf(stderr, "turbospark run: %s%s: %s\n", json ? "--json" : "--json-schema ", json ? "" : schema_file,
                    err.msg);
            crc = 1;
        }
        free(schema);
        if (crc) {
            ts_tokenizer_free(tok);
            return 1;
        }
    }
    ts_tokens pt = {0};     /* owned by the tokenizer's allocator (ts_tokens_free) */
    int32_t *cli_ids = NULL; /* --ids: malloc'd here */
    char *rendered = NULL;
    if (chat) {
        ts_chat_template *tpl = NULL;
        cJSON *msgs = cJSON_CreateArray();
        size_t rlen = 0;
        int crc = ts_chat_template_load(model, &tpl, &err);
        if (!crc && system) crc = cli_chat_add(msgs, "system", system) ? TS_E_NOMEM : 0;
        if (!crc) crc = cli_chat_add(msgs, "user", prompt) ? TS_E_NOMEM : 0;
        if (!crc) crc = cli_chat_render(tpl, msgs, no_think, 1, &rendered, &rlen, &err);
        cJSON_Delete(msgs);
        ts_chat_template_free(tpl);
        if (crc) {
            fprintf(stderr, "turbospark run: chat template: %s\n", err.msg);
            ts_constraint_free(jc);
            ts_tokenizer_free(tok);
            return 1;
        }
        prompt = rendered;
    }
    if (prompt) {
        if (ts_tokenizer_encode(tok, prompt, strlen(prompt), &pt, &err)) {
            fprintf(stderr, "turbospark run: prompt: %s\n", err.msg);
            ts_constraint_free(jc);
            ts_tokenizer_free(tok);
            ts_chat_text_free(rendered);
            return 1;
        }
    } else {
        int *ids = NULL;
        int n = cli_parse_ids(ids_s ? ids_s : "1", &ids);
        if (n <= 0) {
            fprintf(stderr, "turbospark run: --ids '%s' is not a list of token ids\n", ids_s);
            free(ids);
            ts_constraint_free(jc);
            ts_tokenizer_free(tok);
            return 2;
        }
        cli_ids = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) cli_ids[i] = ids[i];
        pt.n = n;
        free(ids);
        pt.cap = 0;
    }
    if (pt.n == 0) {
        fprintf(stderr, "turbospark run: the prompt encodes to no tokens\n");
        ts_constraint_free(jc);
        ts_tokenizer_free(tok);
        return 2;
    }

    ts_engine_params ep;
    ts_engine_params_default(&ep);
    cli_engine_apply(&eo, &ep, NULL, NULL);
    ep.verbose = verbose;
    ts_engine *e = NULL;
    ts_session *s = NULL;
    ts_detok *dt = NULL;
    int rc = ts_engine_open(model, &ep, &e, &err);
    int32_t stops[16];
    int n_stop = 0;
    if (!rc) {
        n_stop = cli_stop_ids(e, tok, stops, 16);
        ts_session_params sp;
        ts_session_params_default(&sp);
        if (eo.spec.on && !eo.spec.dflash && !eo.spec.ngram && !ts_engine_info(e)->has_mtp) {
            rc = TS_E_UNSUPPORTED;
            snprintf(err.msg, sizeof err.msg, "--spec mtp: %s has no MTP head (no mtp.* tensors)", model);
        }
        cli_engine_apply(&eo, NULL, &sp, &gp);
        if (!rc) rc = ts_session_new(e, &sp, &s, &err);
    }
    if (!rc && tok && !print_ids && logprobs < 0) rc = ts_detok_new(tok, &dt, &err);
    if (!rc && jc) {
        gp.constraint = jc;
        /* a chat prompt that opened a think block: the JSON follows it */
        const int32_t te = ts_tokenizer_token_id(tok, "</think>");
        gp.constraint_after = rendered && te > 0 && ts_reply_think_open(rendered, strlen(rendered)) ? te : 0;
    }
    gp.n_predict = n_predict;
    gp.stop_ids = stops;
    gp.n_stop = n_stop;
    run_out out = {print_ids, 0, dt, stops, n_stop, tok, NULL};
    if (logprobs >= 0) gp.logprob_cb = on_logprobs, gp.top_logprobs = logprobs;
    ts_gen_stats stats;
    memset(&stats, 0, sizeof stats);
    if (!rc && n_predict > 0) rc = ts_generate(s, cli_ids ? cli_ids : pt.ids, pt.n, &gp, on_token, &out, &stats, &err);
    if (dt) {
        const char *t;
        size_t len;
        ts_detok_flush(dt, &t, &len);
        fwrite(t, 1, len, stdout);
    }
    cJSON_Delete(out.line); /* a line whose token never came (an error) */
    if ((out.n || print_ids) && logprobs < 0) printf("\n");
    fflush(stdout);
    if (rc) {
        fprintf(stderr, "turbospark run: %s\n", err.msg);
    } else if (n_predict > 0) {
        double pf = stats.t_prefill > 0 ? stats.n_prompt / stats.t_prefill : 0;
        double dc = stats.n_gen > 1 && stats.t_decode > 0 ? (stats.n_gen - 1) / stats.t_decode : 0;
        /* slow models (streamed experts) get a digit more */
        fprintf(stderr, "[prompt %d token%s, generated %d token%s; prefill %.*f tok/s, decode %.*f tok/s; %s]\n",
                stats.n_prompt, stats.n_prompt == 1 ? "" : "s", stats.n_gen, stats.n_gen == 1 ? "" : "s", pf < 10 ? 2 : 1, pf,
                dc < 10 ? 2 : 1, dc, ts_engine_backend(e));
        cli_spec_report(&eo.spec, &gp, &stats);
        cli_expert_report(e, stats.n_prompt + stats.n_gen, verbose);
    }
    ts_detok_free(dt);
    ts_constraint_free(jc);
    ts_tokens_free(&pt);
    free(cli_ids);
    ts_chat_text_free(rendered);
    ts_session_free(s);
    ts_engine_close(e);
    ts_tokenizer_free(tok);
    return rc ? 1 : 0;
}

int cmd_run(int argc, char **argv) {
    char *file_prompt = NULL;
    int rc = run_main(argc, argv, &file_prompt);
    free(file_prompt);
    return rc;
}
