/* cmd_chat.c: `turbospark chat`: an interactive conversation.
 *
 *   turbospark chat [-m DIR] [--system TEXT] [--no-think] [-n N] [--json-schema FILE] [sampling]
 *                   [engine options: cli.h, cli_engine]
 *
 * Line editing and history come from readline. Each turn renders the whole
 * conversation with the model's chat template. The Qwen templates rewrite
 * history (an earlier assistant turn loses the think block its generation
 * prompt opened), and a reply decoded one token at a time has other bits
 * than the same ids prefilled, so a turn never continues the live timeline:
 * it returns to the state saved at the last prefill grid point of the
 * previous turn's history (cli_reuse.c) when the ids before it still match,
 * and feeds the rest. Every reply is therefore the one a fresh session gives
 * for the whole conversation.
 * Commands: /reset, /quit.
 */
#include <cjson/cJSON.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    ts_detok *detok;
    const int32_t *stops;
    int n_stop;
    char *text;       /* decoded reply of this turn */
    size_t len, tcap;
} turn;

static void text_add(turn *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->tcap) {
        size_t nc = (t->len + n + 1) * 2;
        char *nt = realloc(t->text, nc);
        if (!nt) return;
        t->text = nt;
        t->tcap = nc;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = 0;
}

static int on_token(void *user, int32_t id) {
    turn *t = user;
    for (int i = 0; i < t->n_stop; i++)
        if (t->stops[i] == id) return 0;
    const char *s;
    size_t n;
    ts_error err;
    if (ts_detok_push(t->detok, id, &s, &n, &err) == 0 && n) {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
        text_add(t, s, n);
    }
    return 0;
}

#define CHAT_OPTS (CLI_OPT_ALL)

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark chat [-m DIR] [--system TEXT] [--no-think] [-n N] [options]\n"
               "  --system TEXT       system message of the conversation\n"
               "  --no-think          no thinking block (enable_thinking=false)\n"
               "  -n N                reply length limit in tokens (default 512)\n"
               "  --json-schema FILE  every reply is a JSON document that validates against the JSON Schema\n"
               "                      in FILE (after the think block; as run --json-schema)\n" CLI_SAMPLING_HELP);
    cli_engine_help(f, CHAT_OPTS);
    fprintf(f, "commands in the conversation: /reset (forget it), /quit\n");
}

int cmd_chat(int argc, char **argv) {
    const char *system = NULL, *schema_file = NULL;
    int no_think = 0, n_predict = 512;
    cli_engine eo;
    cli_engine_init(&eo, "chat", CHAT_OPTS);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc, ok = 1;
        int sr = cli_parse_sampling(argc, argv, &i, &gp, "chat");
        if (sr < 0) return 2;
        if (sr > 0) continue;
        if ((sr = cli_engine_parse(argc, argv, &i, &eo)) < 0) return 2;
        if (sr > 0) continue;
        if (!strcmp(a, "--system") && more) system = argv[++i];
        else if (!strcmp(a, "--no-think")) no_think = 1;
        else if (!strcmp(a, "--json-schema") && more) schema_file = argv[++i];
        else if (!strcmp(a, "-n") && more) ok = cli_parse_count(argv[++i], &n_predict);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "turbospark chat: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
        if (!ok) { fprintf(stderr, "turbospark chat: bad value '%s' for %s\n", argv[i], a); return 2; }
    }
    if (n_predict <= 0) { fprintf(stderr, "turbospark chat: -n must be > 0\n"); return 2; }
    if (cli_engine_check(&eo)) return 2;
    const char *model = eo.model;

    ts_error err = {0};
    ts_tokenizer *tok = NULL;
    ts_chat_template *tpl = NULL;
    ts_engine *e = NULL;
    ts_session *s = NULL;
    ts_detok *dt = NULL;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    cli_engine_apply(&eo, &ep, NULL, NULL);
    ts_constraint *jc = NULL;
    char what[600] = ""; /* what failed, when err.msg does not say */
    int rc = ts_tokenizer_load(model, &tok, &err);
    if (!rc && schema_file) { /* before the model loads: a schema it cannot enforce is refused at once */
        size_t slen = 0;
        char *schema = cli_read_file_len(schema_file, &slen);
        if (!schema) rc = TS_E_IO, snprintf(err.msg, sizeof err.msg, "--json-schema: cannot read %s", schema_file);
        else if ((rc = ts_constraint_json_schema(tok, schema, slen, &jc, &err)))
            snprintf(what, sizeof what, "--json-schema %.500s: ", schema_file);
        free(schema);
    }
    if (!rc) rc = ts_chat_template_load(model, &tpl, &err);
    if (!rc) rc = ts_engine_open(model, &ep, &e, &err);
    if (!rc) {
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.checkpoint = 1; /* turns return to the history before the generation prompt */
        cli_engine_apply(&eo, NULL, &sp, &gp); /* turns continue the session: drafting is exact there too (tested) */
        if (eo.spec.on && !eo.spec.dflash && !eo.spec.ngram && !ts_engine_info(e)->has_mtp) {
            rc = TS_E_UNSUPPORTED;
            snprintf(err.msg, sizeof err.msg, "--spec mtp: %s has no MTP head (no mtp.* tensors)", model);
        } else {
            rc = ts_session_new(e, &sp, &s, &err);
        }
    }
    if (!rc) rc = ts_detok_new(tok, &dt, &err);
    cli_reuse ru = {0};
    if (!rc && cli_reuse_init(&ru, ts_session_n_ctx(s))) {
        rc = TS_E_NOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory");
    }
    if (rc) {
        fprintf(stderr, "turbospark chat: %s%s\n", what, err.msg);
        ts_constraint_free(jc);
        ts_detok_free(dt);
        ts_tokenizer_free(tok);
        ts_chat_template_free(tpl);
        ts_session_free(s);
        ts_engine_close(e);
        return 1;
    }
    int32_t stops[16];
    int n_stop = cli_stop_ids(e, tok, stops, 16);
    gp.stop_ids = stops;
    gp.n_stop = n_stop;
    cJSON *msgs = cJSON_CreateArray();
    if (system) cli_chat_add(msgs, "system", system);
    int tty = isatty(0);
    if (tty) fprintf(stderr, "turbospark chat: %s (/reset, /quit; Ctrl-D ends)\n", model);
    char *line;
    while ((line = readline(tty ? "> " : "")) != NULL) {
        if (!*line) { free(line); continue; }
        if (tty) add_history(line);
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) { free(line); break; }
        if (!strcmp(line, "/reset")) {
            cJSON_Delete(msgs);
            msgs = cJSON_CreateArray();
            if (system) cli_chat_add(msgs, "system", system);
            ts_session_reset(s);
            free(line);
            fprintf(stderr, "(conversation reset)\n");
            continue;
        }
        cli_chat_add(msgs, "user", line);
        free(line);
        char *prompt = NULL, *hprompt = NULL;
        size_t plen = 0, hlen = 0;
        ts_tokens ids = {0}, hids = {0};
        if (cli_chat_render(tpl, msgs, no_think, 1, &prompt, &plen, &err) ||
            ts_tokenizer_encode(tok, prompt, plen, &ids, &err) ||
            cli_chat_render(tpl, msgs, no_think, 0, &hprompt, &hlen, &err) ||
            ts_tokenizer_encode(tok, hprompt, hlen, &hids, &err)) {
            fprintf(stderr, "turbospark chat: %s\n", err.msg);
            cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
            ts_chat_text_free(prompt);
            ts_chat_text_free(hprompt);
            ts_tokens_free(&ids);
            ts_tokens_free(&hids);
            continue;
        }
        /* a schema holds the reply after the think block its prompt opened */
        const int32_t te = ts_tokenizer_token_id(tok, "</think>");
        gp.constraint = jc;
        gp.constraint_after = jc && te > 0 && ts_reply_think_open(prompt, plen) ? te : 0;
        ts_chat_text_free(prompt);
        ts_chat_text_free(hprompt);
        /* The history without the generation prompt ends where the next
         * turn's rendering may part from this one (the Qwen templates render
         * an earlier assistant turn without the think block the generation
         * prompt opened): the next checkpoint goes at its last grid point
         * when it is a prefix of the prompt. */
        int L0 = hids.n < ids.n ? hids.n : 0;
        for (int i = 0; L0 > 0 && i < L0; i++)
            if (hids.ids[i] != ids.ids[i]) L0 = 0;
        ts_tokens_free(&hids);
        int cached, fed; /* prompt tokens restored, and fed before the generation call */
        const double t0 = cli_now();
        const int from = cli_reuse_prepare(&ru, s, ids.ids, ids.n, L0, &cached, &fed, &err);
        const double t_fed = cli_now() - t0;
        if (from < 0) {
            fprintf(stderr, "turbospark chat: %s\n", err.msg);
            cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
            ts_tokens_free(&ids);
            continue;
        }
        turn t = {dt, stops, n_stop, NULL, 0, 0};
        ts_detok_reset(dt);
        ts_gen_stats st;
        gp.n_predict = n_predict;
        /* the ids the session holds before the fed part: the n-gram drafter
         * looks them up too (the history is where repeats come from) */
        gp.ngram_ctx = ids.ids, gp.n_ngram_ctx = from;
        rc = ts_generate(s, ids.ids + from, ids.n - from, &gp, on_token, &t, &st, &err);
        const char *tail;
        size_t tl;
        ts_detok_flush(dt, &tail, &tl);
        fwrite(tail, 1, tl, stdout);
        text_add(&t, tail, tl);
        printf("\n");
        fflush(stdout);
        if (rc) {
            fprintf(stderr, "turbospark chat: %s\n", err.msg);
            cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
            ts_session_reset(s);
        } else {
            cli_chat_add(msgs, "assistant", t.text ? t.text : "");
            const int np = st.n_prompt + fed;
            fprintf(stderr, "[prompt %d new token%s (%d cached), generated %d token%s; prefill %.1f tok/s, decode %.1f tok/s; %s]\n",
                    np, np == 1 ? "" : "s", cached, st.n_gen, st.n_gen == 1 ? "" : "s",
                    st.t_prefill + t_fed > 0 ? np / (st.t_prefill + t_fed) : 0,
                    st.n_gen > 1 && st.t_decode > 0 ? (st.n_gen - 1) / st.t_decode : 0, ts_engine_backend(e));
            cli_spec_report(&eo.spec, &gp, &st);
        }
        free(t.text);
        ts_tokens_free(&ids);
    }
    cJSON_Delete(msgs);
    cli_reuse_free(&ru);
    ts_constraint_free(jc);
    ts_detok_free(dt);
    ts_session_free(s);
    ts_engine_close(e);
    ts_chat_template_free(tpl);
    ts_tokenizer_free(tok);
    return 0;
}
