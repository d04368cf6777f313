/* fuzz_server.c: an HTTP request body -> a job, the server's request layer
 * (tools/server/server_req.c: srv_parse_chat and srv_parse_completion, the
 * functions the connection threads call with the body as received), on the
 * server's test model setup: the small Qwen-derived tokenizer and the
 * Qwen3.5 chat template of tests/fixtures/server, a 512-token context.
 * Input: the body (both endpoints get it).
 * Properties: a refusal has a 4xx/5xx status and a message; an accepted job
 * has prompts (several on a completion: n_choices = prompts x n, at most
 * SRV_MAX_CHOICES) of 1..n_ctx ids inside the vocabulary, usage's sum of
 * them, a budget of 1..limit tokens (0 only with echo) and at most SRV_MAX_STOPS non-empty stop strings; a logit bias of
 * at most 1024 distinct ids inside the vocabulary with values in [-100,
 * 100], held by the job; 0..20 alternatives a token, none without logprobs;
 * a forced tool_choice ("required", a named function) holds its call's
 * constraint from the server's cache, nothing else but response_format
 * json_schema does, the cache stays within its bound; nothing leaks. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fuzz.h"
#include "server.h"

static srv *server(void) {
    static srv s;
    static int ready;
    if (!ready) {
        ts_error err = {0};
        if (ts_tokenizer_load("tests/fixtures/server/tokenizer.json", &s.tok, &err))
            fuzz_fail("tokenizer: %s", err.msg);
        size_t n;
        char *text = fuzz_read_fixture("tests/fixtures/server/chat_template.jinja", &n);
        if (ts_chat_template_parse(text, n, &s.tpl, &err)) fuzz_fail("template: %s", err.msg);
        free(text);
        pthread_mutex_init(&s.tpl_mu, NULL);
        pthread_mutex_init(&s.mu, NULL);
        srv_cc_init(&s);
        s.model_dir = "tests/fixtures/server";
        strcpy(s.model_id, "fuzz");
        s.n_vocab = ts_tokenizer_vocab_size(s.tok);
        s.n_ctx = 512;
        s.max_tokens_limit = 256;
        s.parallel = 1;
        s.queue_cap = 1;
        ready = 1;
    }
    return &s;
}

static void check(const srv *s, job *j, const srv_err *e, const char *what) {
    if (!j) {
        if (e->status < 400 || e->status > 599 || !e->msg[0] || !e->type)
            fuzz_fail("%s: refusal with status %d, message '%s'", what, e->status, e->msg);
        return;
    }
    if (j->n_prompts < 1 || j->n_per < 1 || j->n_per > SRV_MAX_N || j->n_choices != j->n_prompts * j->n_per ||
        j->n_choices > (j->n_prompts > 1 ? SRV_MAX_CHOICES : SRV_MAX_N) || j->cap_choices < j->n_choices ||
        (j->n_prompts > 1) != (j->prompt_at != NULL) || (j->kind == JOB_CHAT && j->n_prompts != 1))
        fuzz_fail("%s: %d prompts x %d = %d choices (%d allocated)", what, j->n_prompts, j->n_per, j->n_choices,
                  j->cap_choices);
    int total = 0;
    for (int k = 0; k < j->n_prompts; k++) { /* every prompt (its first choice's) */
        int n;
        const int32_t *p = srv_choice_prompt(j, k * j->n_per, &n);
        if (n < 1 || n > s->n_ctx || (k == 0 && n != j->n_prompt)) fuzz_fail("%s: prompt %d of %d ids accepted", what, k, n);
        for (int i = 0; i < n; i++)
            if (p[i] < 0 || p[i] >= s->n_vocab) fuzz_fail("%s: id %d in prompt %d", what, p[i], k);
        total += n;
    }
    if (total != j->prompt_total) fuzz_fail("%s: usage counts %d prompt ids of %d", what, j->prompt_total, total);
    if (j->echo && (j->kind != JOB_COMPLETION || !j->echo_text)) fuzz_fail("%s: echo without its texts", what);
    /* 0: an echo alone (completions) */
    if (j->gp.n_predict < (j->echo ? 0 : 1) || j->gp.n_predict > s->max_tokens_limit)
        fuzz_fail("%s: budget %d tokens (echo %d)", what, j->gp.n_predict, j->echo);
    if (j->n_stops < 0 || j->n_stops > SRV_MAX_STOPS) fuzz_fail("%s: %d stops", what, j->n_stops);
    for (int i = 0; i < j->n_stops; i++)
        if (!j->stops[i] || !j->stops[i][0]) fuzz_fail("%s: empty stop string", what);
    if (!(j->gp.temperature >= 0 && j->gp.temperature <= 2)) fuzz_fail("%s: temperature %g", what, j->gp.temperature);
    if (j->n_history > j->n_prompt) fuzz_fail("%s: history %d of %d ids", what, j->n_history, j->n_prompt);
    const ts_gen_params *gp = &j->gp;
    if (gp->n_bias < 0 || gp->n_bias > 1024 || (gp->n_bias && (gp->bias_ids != j->bias_ids || gp->bias != j->bias)))
        fuzz_fail("%s: a logit bias of %d entries not held by the job", what, gp->n_bias);
    for (int i = 0; i < gp->n_bias; i++) {
        if (gp->bias_ids[i] < 0 || gp->bias_ids[i] >= s->n_vocab || !(gp->bias[i] >= -100 && gp->bias[i] <= 100))
            fuzz_fail("%s: logit bias %g on id %d", what, gp->bias[i], gp->bias_ids[i]);
        for (int k = 0; k < i; k++)
            if (gp->bias_ids[k] == gp->bias_ids[i]) fuzz_fail("%s: logit bias on id %d twice", what, gp->bias_ids[i]);
    }
    if (gp->top_logprobs < 0 || gp->top_logprobs > TS_TOP_LOGPROBS_MAX || (!j->logprobs && gp->top_logprobs))
        fuzz_fail("%s: %d alternatives (logprobs %d)", what, gp->top_logprobs, j->logprobs);
    const int forced = j->tool_choice == SRV_TC_REQUIRED || j->tool_choice == SRV_TC_NAMED;
    if (j->kind != JOB_CHAT && j->tool_choice != SRV_TC_AUTO) fuzz_fail("%s: a tool_choice on a completion", what);
    if ((forced || j->json) ? (forced && j->json) || (forced && !j->schema) : j->schema != NULL)
        fuzz_fail("%s: tool_choice %d, json %d, constraint %p", what, j->tool_choice, j->json, (const void *)j->schema);
    if (j->schema != srv_cc_constraint(j->cref)) fuzz_fail("%s: a constraint the job does not hold", what);
    if (s->cc_n < 0 || s->cc_n > SRV_CC_CAP) fuzz_fail("%s: %d cached constraints", what, s->cc_n);
    srv_job_unref(j);
}

int fuzz_server(const uint8_t *data, size_t size) {
    srv *s = server();
    /* the body exactly as long as it is, as the connection hands it over */
    char *body = malloc(size ? size : 1);
    if (!body) fuzz_fail("out of memory");
    if (size) memcpy(body, data, size);
    srv_err e;
    memset(&e, 0, sizeof e);
    check(s, srv_parse_chat(s, body, size, &e), &e, "chat");
    memset(&e, 0, sizeof e);
    check(s, srv_parse_completion(s, body, size, &e), &e, "completion");
    /* /tokenize and /detokenize: a refusal names its status and reason, an
     * answer is a JSON object of the route's shape */
    for (int k = 0; k < 2; k++) {
        memset(&e, 0, sizeof e);
        char *out = k ? srv_detokenize(s, body, size, &e) : srv_tokenize(s, body, size, &e);
        if (!out) {
            if (e.status < 400 || e.status > 599 || !e.msg[0]) fuzz_fail("%s: a refusal without status or message",
                                                                       k ? "detokenize" : "tokenize");
            /* the error's param is read after the request is freed: ASan
             * names a param that pointed into it (a real bug, found so) */
            if (e.param && strlen(e.param) > sizeof e.param_buf + 64) fuzz_fail("a param of %zu bytes", strlen(e.param));
            continue;
        }
        cJSON *j = cJSON_Parse(out);
        const int ok = k ? cJSON_IsString(cJSON_GetObjectItem(j, "prompt"))
                         : cJSON_IsArray(cJSON_GetObjectItem(j, "tokens")) &&
                               cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) ==
                                   cJSON_GetObjectItem(j, "count")->valueint;
        if (!ok) fuzz_fail("%s: an answer of the wrong shape: %.200s", k ? "detokenize" : "tokenize", out);
        cJSON_Delete(j);
        free(out);
    }
    free(body);
    return 0;
}
