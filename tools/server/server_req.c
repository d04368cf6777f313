/* server_req.c: OpenAI request bodies -> jobs for `turbospark serve`.
 *
 * Owns: validating /v1/chat/completions and /v1/completions bodies (one JSON
 * object, nothing after it, no key twice; types and ranges of every field we
 * read; unknown fields and unsupported options refused with 400
 * "unsupported_*" rather than silently ignored, the accepted-and-ignored
 * list at check_fields; a model other than ours 404 model_not_found),
 * rendering chat requests with the checkpoint's own
 * template, tokenizing, the context check and the max_tokens policy.
 * Does not own: HTTP, generation.
 *
 * The chat body goes to the template as the request's own JSON text
 * (ts_chat_render_json reads "messages", "tools", "add_generation_prompt" and
 * "chat_template_kwargs" from it), so numbers keep their spelling (1 vs 1.0)
 * exactly as the client wrote them.
 *
 * max_tokens: an explicit value above --max-tokens-limit is an error; an
 * absent one means "until the context is full" for chat (capped by the limit)
 * and 16 for completions (OpenAI's default); 0 only on a completion with
 * echo (the prompt returned, scored with logprobs: vLLM's rule). Generation
 * that reaches the end of the context stops with finish_reason "length".
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void fail(srv_err *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void vfail(srv_err *e, int status, const char *param, const char *code, const char *fmt, va_list ap) {
    e->status = status;
    e->type = status >= 500 ? "server_error" : "invalid_request_error";
    e->param = param;
    e->code = code;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
}

static void fail(srv_err *e, int status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, status, param, code, fmt, ap);
    va_end(ap);
}

/* A member, with JSON null read as absent. */
static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 9.007199254740992e15;
}

/* A number in [lo, hi]; returns 0 ok (absent leaves *out), -1 bad. */
static int num_field(const cJSON *root, const char *k, double lo, double hi, int lo_open, float *out,
                     srv_err *e) {
    const cJSON *v = get(root, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        fail(e, 400, k, "invalid_type", "'%s' must be a number", k);
        return -1;
    }
    double x = v->valuedouble;
    if (x < lo || x > hi || (lo_open && x == lo)) {
        fail(e, 400, k, "invalid_value", "'%s' must be in %s%g, %g]; got %g", k, lo_open ? "(" : "[", lo, hi, x);
        return -1;
    }
    *out = (float)x;
    return 0;
}

static int bool_field(const cJSON *root, const char *k, int *out, srv_err *e) {
    const cJSON *v = get(root, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) {
        fail(e, 400, k, "invalid_type", "'%s' must be true or false", k);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A key of the request for an error message: printable ASCII as is, other
 * bytes as \xNN (the message goes out as JSON, which must stay UTF-8),
 * at most about 40 characters. */
static const char *key_for_msg(const char *k, char *buf, size_t cap) {
    size_t o = 0;
    for (; *k && o + 8 < cap && o < 40; k++) {
        unsigned char c = (unsigned char)*k;
        if (c >= 0x20 && c < 0x7f) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (*k) o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = 0;
    return buf;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

#define SRV_MAX_BIAS 1024 /* logit_bias entries, as OpenAI allows */

/* logit_bias (both endpoints): {"token id": bias in [-100, 100], ...} into
 * job-owned arrays that gp.bias_ids / gp.bias point at. OpenAI's rules: keys
 * are token ids in decimal, values numbers in [-100, 100]; {} is no bias.
 * Two keys naming one id ("5" and "05") are refused: which one wins would
 * be a guess. */
static int parse_logit_bias(srv *s, const cJSON *root, job *j, srv_err *e) {
    const cJSON *v = get(root, "logit_bias"), *it;
    char kb[64];
    if (!v) return 0;
    if (!cJSON_IsObject(v)) {
        fail(e, 400, "logit_bias", "invalid_logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
        return -1;
    }
    const int n = cJSON_GetArraySize(v);
    if (n == 0) return 0;
    if (n > SRV_MAX_BIAS) {
        fail(e, 400, "logit_bias", "invalid_logit_bias", "'logit_bias' has %d entries; at most %d are allowed", n,
             SRV_MAX_BIAS);
        return -1;
    }
    j->bias_ids = malloc(sizeof *j->bias_ids * (size_t)n);
    j->bias = malloc(sizeof *j->bias * (size_t)n);
    int32_t *sorted = malloc(sizeof *sorted * (size_t)n);
    if (!j->bias_ids || !j->bias || !sorted) {
        free(sorted);
        fail(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    int k = 0;
    cJSON_ArrayForEach(it, v) {
        const char *key = it->string;
        long id = 0;
        size_t nd = strspn(key, "0123456789");
        if (!nd || key[nd]) {
            fail(e, 400, "logit_bias", "invalid_logit_bias",
                 "'logit_bias' key '%s' is not a token id (a non-negative integer in decimal)",
                 key_for_msg(key, kb, sizeof kb));
            goto bad;
        }
        for (size_t i = 0; i < nd && id < s->n_vocab; i++) id = id * 10 + (key[i] - '0');
        if (id >= s->n_vocab) {
            fail(e, 400, "logit_bias", "invalid_logit_bias",
                 "'logit_bias' key '%s' is outside the model's vocabulary (token ids 0..%d)",
                 key_for_msg(key, kb, sizeof kb), s->n_vocab - 1);
            goto bad;
        }
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) {
            fail(e, 400, "logit_bias", "invalid_logit_bias", "'logit_bias' value of token %ld must be a number", id);
            goto bad;
        }
        if (it->valuedouble < -100 || it->valuedouble > 100) {
            fail(e, 400, "logit_bias", "invalid_logit_bias",
                 "'logit_bias' value of token %ld is %g; it must be in [-100, 100]", id, it->valuedouble);
            goto bad;
        }
        j->bias_ids[k] = sorted[k] = (int32_t)id;
        j->bias[k++] = (float)it->valuedouble;
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_i32);
    for (int i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1]) {
            fail(e, 400, "logit_bias", "invalid_logit_bias", "'logit_bias' names token %d twice (keys with leading zeros?)",
                 (int)sorted[i]);
            goto bad;
        }
    free(sorted);
    j->gp.bias_ids = j->bias_ids;
    j->gp.bias = j->bias;
    j->gp.n_bias = n;
    return 0;
bad:
    free(sorted);
    return -1;
}

/* Fields both endpoints share: n, stream, stream_options, max_tokens,
 * sampling, logit_bias, seed, stop, ignore_eos. *max_tokens = -1 when absent. */
static int parse_common(srv *s, const cJSON *root, job *j, int *max_tokens, srv_err *e) {
    const cJSON *v;
    if ((v = get(root, "n"))) {
        if (!is_int(v) || v->valuedouble < 1 || v->valuedouble > SRV_MAX_N) {
            fail(e, 400, "n", "invalid_value", "'n' must be an integer in [1, %d] (choices to generate)", SRV_MAX_N);
            return -1;
        }
        j->n_choices = j->n_per = (int)v->valuedouble;
    }
    if (bool_field(root, "stream", &j->stream, e) || bool_field(root, "ignore_eos", &j->ignore_eos, e) ||
        bool_field(root, "return_tokens_as_token_ids", &j->token_ids, e))
        return -1;
    if ((v = get(root, "stream_options"))) {
        if (!cJSON_IsObject(v)) {
            fail(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
            return -1;
        }
        if (bool_field(v, "include_usage", &j->include_usage, e)) return -1;
    }
    *max_tokens = -1;
    static const char *const mt_keys[] = {"max_completion_tokens", "max_tokens"};
    for (int i = 0; i < 2; i++) {
        if (!(v = get(root, mt_keys[i]))) continue;
        /* 0: a completion with echo scores its prompt alone (srv_parse_completion) */
        if (!is_int(v) || v->valuedouble < (j->kind == JOB_COMPLETION ? 0 : 1)) {
            fail(e, 400, mt_keys[i], "invalid_value", "'%s' must be a positive integer", mt_keys[i]);
            return -1;
        }
        if (v->valuedouble > s->max_tokens_limit) {
            fail(e, 400, mt_keys[i], "invalid_value", "'%s' is %.0f, above this server's limit of %d", mt_keys[i],
                 v->valuedouble, s->max_tokens_limit);
            return -1;
        }
        *max_tokens = (int)v->valuedouble;
        break;
    }
    ts_gen_params *gp = &j->gp;
    gp->temperature = 1.0f; /* OpenAI's default */
    if (num_field(root, "temperature", 0, 2, 0, &gp->temperature, e) ||
        num_field(root, "top_p", 0, 1, 1, &gp->top_p, e) || num_field(root, "min_p", 0, 1, 0, &gp->min_p, e) ||
        num_field(root, "presence_penalty", -2, 2, 0, &gp->presence_penalty, e) ||
        num_field(root, "frequency_penalty", -2, 2, 0, &gp->frequency_penalty, e) ||
        num_field(root, "repetition_penalty", 0, 100, 1, &gp->repeat_penalty, e) || parse_logit_bias(s, root, j, e))
        return -1;
    if ((v = get(root, "top_k"))) {
        if (!is_int(v) || v->valuedouble < -1 || v->valuedouble > 1e9) {
            fail(e, 400, "top_k", "invalid_value", "'top_k' must be an integer >= 0 (0 or -1: off)");
            return -1;
        }
        gp->top_k = v->valuedouble < 0 ? 0 : (int)v->valuedouble;
    }
    if ((v = get(root, "seed"))) {
        if (!is_int(v)) {
            fail(e, 400, "seed", "invalid_type", "'seed' must be an integer");
            return -1;
        }
        gp->seed = (uint64_t)(int64_t)v->valuedouble;
    } else {
        /* No seed: a different draw every request, as OpenAI does. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gp->seed = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)j;
    }
    if ((v = get(root, "stop"))) {
        const cJSON *it;
        if (cJSON_IsString(v)) {
            if (*v->valuestring) j->stops[j->n_stops++] = strdup(v->valuestring);
        } else if (cJSON_IsArray(v)) {
            if (cJSON_GetArraySize(v) > SRV_MAX_STOPS) {
                fail(e, 400, "stop", "invalid_value", "'stop' has more than %d sequences", SRV_MAX_STOPS);
                return -1;
            }
            cJSON_ArrayForEach(it, v) {
                if (!cJSON_IsString(it)) {
                    fail(e, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
                    return -1;
                }
                if (*it->valuestring) j->stops[j->n_stops++] = strdup(it->valuestring);
            }
        } else {
            fail(e, 400, "stop", "invalid_type", "'stop' must be a string or a list of strings");
            return -1;
        }
        for (int i = 0; i < j->n_stops; i++)
            if (!j->stops[i]) {
                fail(e, 500, NULL, NULL, "out of memory");
                return -1;
            }
    }
    return 0;
}

/* Context check and the token budget, once the prompts are known (every
 * prompt checked; the budget from the longest). */
static int finish_budget(srv *s, job *j, int max_tokens, int default_tokens, srv_err *e) {
    int longest = 0, total = 0;
    for (int k = 0; k < j->n_prompts; k++) {
        int n;
        srv_choice_prompt(j, k * j->n_per, &n);
        char which[32] = "";
        if (j->n_prompts > 1) snprintf(which, sizeof which, " %d", k);
        if (n == 0) {
            fail(e, 400, "prompt", "invalid_value", "the prompt%s is empty", which);
            return -1;
        }
        if (n > s->n_ctx) {
            fail(e, 400, j->kind == JOB_CHAT ? "messages" : "prompt", "context_length_exceeded",
                 "prompt%s is %d tokens, the context is %d", which, n, s->n_ctx);
            return -1;
        }
        longest = n > longest ? n : longest;
        total += n;
    }
    j->prompt_total = total;
    int room = s->n_ctx - longest + 1; /* the last token needs no slot */
    int n = max_tokens >= 0 ? max_tokens : default_tokens;
    if (max_tokens < 0 && n > room) n = room;
    if (n > s->max_tokens_limit) n = s->max_tokens_limit;
    j->gp.n_predict = n;
    return 0;
}

static int set_prompt_text(srv *s, job *j, const char *text, size_t len, const char *param, srv_err *e) {
    ts_tokens t = {0};
    ts_error err;
    if (ts_tokenizer_encode(s->tok, text, len, &t, &err)) {
        fail(e, 400, param, "invalid_value", "%s", err.msg);
        return -1;
    }
    j->prompt = malloc(sizeof(int32_t) * (size_t)(t.n ? t.n : 1));
    if (!j->prompt) {
        ts_tokens_free(&t);
        fail(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    if (t.n) memcpy(j->prompt, t.ids, sizeof(int32_t) * (size_t)t.n);
    j->n_prompt = t.n;
    ts_tokens_free(&t);
    return 0;
}

/* The number of prompt ids the conversation renders to without the
 * generation prompt, when those ids are a prefix of the prompt (-1 when not,
 * or when the request asked for no generation prompt): where the worker
 * saves the session's state, because the template renders the assistant
 * turn differently once it is history (server_gen.c). Best effort: any
 * failure gives -1. */
static int history_ids(srv *s, const cJSON *root, const job *j) {
    const cJSON *agp = get(root, "add_generation_prompt");
    if (agp && cJSON_IsFalse(agp)) return -1;
    cJSON *h = cJSON_Duplicate(root, 1);
    if (!h) return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(h, "add_generation_prompt");
    cJSON_AddFalseToObject(h, "add_generation_prompt");
    char *body = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!body) return -1;
    char *text = NULL;
    size_t tlen = 0;
    ts_error err = {0};
    pthread_mutex_lock(&s->tpl_mu);
    int rc = ts_chat_render_json(s->tpl, body, strlen(body), &text, &tlen, &err);
    pthread_mutex_unlock(&s->tpl_mu);
    free(body);
    ts_tokens t = {0};
    int n = -1;
    if (!rc && !ts_tokenizer_encode(s->tok, text, tlen, &t, &err) && t.n > 0 && t.n < j->n_prompt &&
        !memcmp(t.ids, j->prompt, sizeof(int32_t) * (size_t)t.n))
        n = t.n;
    ts_tokens_free(&t);
    ts_chat_text_free(text);
    return n;
}

/* A duplicate key anywhere in v: its name, else NULL. Refused rather than
 * resolved: cJSON (what this file checks) reads the first copy, jinja.c
 * (what the template renders) the last, as Python's json.loads does, so a
 * request with both would be validated on one value and rendered from
 * another; RFC 8259 leaves the meaning open, so no choice is "the" right
 * one. Depth is bounded by cJSON's nesting limit. */
static const char *dup_key(const cJSON *v) {
    const cJSON *a, *b;
    if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v);
        if (n > 1 && n <= 64) {
            for (a = v->child; a; a = a->next)
                for (b = a->next; b; b = b->next)
                    if (!strcmp(a->string, b->string)) return a->string;
        } else if (n > 64) {
            const char **k = malloc(sizeof *k * (size_t)n);
            if (!k) return "(out of memory)";
            int i = 0;
            for (a = v->child; a; a = a->next) k[i++] = a->string;
            qsort(k, (size_t)n, sizeof *k, cmp_str);
            const char *d = NULL;
            for (i = 1; i < n && !d; i++)
                if (!strcmp(k[i - 1], k[i])) d = k[i];
            free(k);
            if (d) return d;
        }
    }
    if (cJSON_IsObject(v) || cJSON_IsArray(v))
        for (a = v->child; a; a = a->next) {
            const char *d = dup_key(a);
            if (d) return d;
        }
    return NULL;
}

static cJSON *parse_body(const char *body, size_t len, srv_err *e) {
    const char *at = NULL; /* cJSON's global error pointer is not thread-safe; this is */
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &at, 0);
    if (!root) {
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        fail(e, 400, NULL, "invalid_json", "the request body is not valid JSON (near byte %ld)", off);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        fail(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
        cJSON_Delete(root);
        return NULL;
    }
    /* Bytes after the object: a second object, a truncated concatenation, a
     * proxy's garbage. Whitespace is fine. */
    const char *p = at ? at : body + len;
    while (p < body + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p < body + len) {
        fail(e, 400, NULL, "invalid_json", "the request body has %zu bytes after its JSON object (from byte %ld)",
             (size_t)(body + len - p), (long)(p - body));
        cJSON_Delete(root);
        return NULL;
    }
    const char *d = dup_key(root);
    if (d) {
        fail(e, 400, NULL, "invalid_json", "the request body has the key '%.200s' twice in one object", d);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- fields refused rather than ignored -----------------------------------
 *
 * The rule: a field that changes what a client gets is either honoured or
 * refused with a 400 "unsupported_*" error, never silently ignored. Fields
 * accepted and ignored because they change nothing a client gets back:
 *   user, safety_identifier   an end-user id for the provider's abuse monitoring
 *   metadata, store           tags for / storing of the completion on the provider's side
 *   prompt_cache_key          a caching hint (this server reuses prefixes anyway)
 *   service_tier              "auto" or "default" only
 * Everything else that is not a field this server reads is refused
 * ("unsupported_parameter"). */

static int known(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(k, *list)) return 1;
    return 0;
}

static const char *const COMMON_FIELDS[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "stop", "stream", "stream_options", "n", "ignore_eos", "logprobs", "logit_bias",
    "return_tokens_as_token_ids",
    /* accepted and ignored (above) */
    "user", "safety_identifier", "metadata", "store", "prompt_cache_key", "service_tier", NULL};
static const char *const CHAT_FIELDS[] = {
    "messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
    "add_generation_prompt", "top_logprobs", "response_format", "modalities", NULL};
static const char *const COMPLETION_FIELDS[] = {"prompt", "echo", "best_of", "suffix", NULL};

static int unsupported(srv_err *e, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int unsupported(srv_err *e, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, 400, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

/* Unknown fields, the model, and the options both endpoints refuse. */
static int check_fields(srv *s, const cJSON *root, int chat, srv_err *e) {
    const cJSON *it, *v;
    cJSON_ArrayForEach(it, root) {
        if (known(it->string, COMMON_FIELDS) || known(it->string, chat ? CHAT_FIELDS : COMPLETION_FIELDS)) continue;
        snprintf(e->param_buf, sizeof e->param_buf, "%s", it->string);
        return unsupported(e, e->param_buf, "unsupported_parameter",
                           "'%.200s' is not a field this server supports; it is refused rather than ignored",
                           it->string);
    }
    if ((v = get(root, "model"))) {
        if (!cJSON_IsString(v)) {
            fail(e, 400, "model", "invalid_type", "'model' must be a string");
            return -1;
        }
        if (strcmp(v->valuestring, s->model_id)) {
            fail(e, 404, "model", "model_not_found", "the model '%.200s' does not exist; this server serves '%s' (GET /v1/models)",
                 v->valuestring, s->model_id);
            return -1;
        }
    }
    if ((v = get(root, "service_tier")) &&
        !(cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "default"))))
        return unsupported(e, "service_tier", "unsupported_parameter", "'service_tier' may only be \"auto\" or \"default\"");
    return 0;
}

/* response_format json_schema: {"type": "json_schema", "json_schema":
 * {"name", "schema", "strict", "description"}}. The schema is compiled
 * here (or found in the server's cache, server_cc.c), so a schema the
 * constraint cannot enforce is a 400 naming the keyword and its path
 * before anything is queued; the job holds the constraint. "strict" false is accepted and changes nothing: the reply
 * always follows the schema. */
static int parse_json_schema(srv *s, const cJSON *rf, job *j, srv_err *e) {
    const cJSON *it, *js = get(rf, "json_schema"), *v;
    cJSON_ArrayForEach(it, rf) {
        if (strcmp(it->string, "type") && strcmp(it->string, "json_schema"))
            return unsupported(e, "response_format", "unsupported_parameter",
                               "'response_format' has '%.100s', which this server does not know", it->string);
    }
    if (!js) {
        fail(e, 400, "response_format.json_schema", "missing_required_parameter",
             "'response_format' json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
        return -1;
    }
    if (!cJSON_IsObject(js)) {
        fail(e, 400, "response_format.json_schema", "invalid_type", "'response_format.json_schema' must be an object");
        return -1;
    }
    cJSON_ArrayForEach(it, js) {
        static const char *const keys[] = {"name", "schema", "strict", "description", NULL};
        if (!known(it->string, keys))
            return unsupported(e, "response_format.json_schema", "unsupported_parameter",
                               "'response_format.json_schema' has '%.100s' (it may have name, schema, strict, description)",
                               it->string);
    }
    if (((v = get(js, "name")) && !cJSON_IsString(v)) || ((v = get(js, "description")) && !cJSON_IsString(v)) ||
        ((v = get(js, "strict")) && !cJSON_IsBool(v))) {
        fail(e, 400, "response_format.json_schema", "invalid_type",
             "'response_format.json_schema': name and description must be strings, strict true or false");
        return -1;
    }
    if (!(v = get(js, "schema"))) {
        fail(e, 400, "response_format.json_schema.schema", "missing_required_parameter",
             "'response_format.json_schema.schema' is required (the JSON Schema of the reply)");
        return -1;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsBool(v)) {
        fail(e, 400, "response_format.json_schema.schema", "invalid_type",
             "'response_format.json_schema.schema' must be a JSON Schema (an object)");
        return -1;
    }
    char *text = cJSON_PrintUnformatted(v);
    if (!text) {
        fail(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    ts_error err = {0};
    const int rc = srv_cc_get(s, SRV_CC_SCHEMA, text, strlen(text), NULL, &j->cref, &err);
    free(text);
    j->schema = srv_cc_constraint(j->cref);
    if (rc == TS_E_NOMEM) fail(e, 500, NULL, NULL, "out of memory compiling the JSON schema");
    else if (rc) fail(e, 400, "response_format.json_schema.schema", "invalid_json_schema", "%s", err.msg);
    return rc ? -1 : 0;
}

/* Chat-only refusals: response formats but text, json_object and
 * json_schema (and either with tools: a reply held to one JSON document
 * cannot call a tool), parts a text-only model cannot take. (tool_choice:
 * server_tools.c.) */
static int check_chat_fields(srv *s, const cJSON *root, job *j, srv_err *e) {
    const cJSON *v, *it;
    const cJSON *tools = get(root, "tools");
    int has_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    if ((v = get(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
        const int schema = cJSON_IsString(t) && !strcmp(t->valuestring, "json_schema");
        j->json = schema || (cJSON_IsString(t) && !strcmp(t->valuestring, "json_object"));
        if (!cJSON_IsString(t) || (strcmp(t->valuestring, "text") && !j->json))
            return unsupported(e, "response_format", "unsupported_response_format",
                               "'response_format' may be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                               "{\"type\": \"json_schema\", \"json_schema\": {...}}");
        if (j->json && has_tools)
            return unsupported(e, "response_format", "unsupported_response_format",
                               "'response_format' %s with 'tools': a reply held to one JSON document cannot call a tool",
                               t->valuestring);
        if (schema && parse_json_schema(s, v, j, e)) return -1;
    }
    if ((v = get(root, "modalities"))) {
        int ok = cJSON_IsArray(v);
        cJSON_ArrayForEach(it, v) ok = ok && cJSON_IsString(it) && !strcmp(it->valuestring, "text");
        if (!ok) return unsupported(e, "modalities", "unsupported_parameter", "only the \"text\" modality is supported");
    }
    /* Content parts: text only (an image part would render as a vision
     * placeholder into a text-only model). */
    int k = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content"), *part;
        if (cJSON_IsArray(c)) {
            cJSON_ArrayForEach(part, c) {
                const cJSON *t = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "type") : NULL;
                if (!cJSON_IsString(t))
                    return unsupported(e, "messages", "invalid_value",
                                       "messages[%d]: every content part must be an object with a string 'type'", k);
                if (strcmp(t->valuestring, "text"))
                    return unsupported(e, "messages", "unsupported_content_part",
                                       "messages[%d]: '%.64s' content parts are not supported: this model takes text only",
                                       k, t->valuestring);
                if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(part, "text")))
                    return unsupported(e, "messages", "invalid_value", "messages[%d]: a text part needs a string 'text'", k);
            }
        } else if (c && !cJSON_IsString(c) && !cJSON_IsNull(c)) {
            return unsupported(e, "messages", "invalid_value",
                               "messages[%d]: 'content' must be a string, null or a list of parts", k);
        }
        if (get(it, "audio")) return unsupported(e, "messages", "unsupported_content_part", "messages[%d]: audio is not supported", k);
        k++;
    }
    return 0;
}

/* Chat: logprobs (true / false) and top_logprobs (0..20 alternatives a
 * token, only with logprobs true, as OpenAI checks). */
static int parse_chat_logprobs(const cJSON *root, job *j, srv_err *e) {
    const cJSON *v;
    if (bool_field(root, "logprobs", &j->logprobs, e)) return -1;
    if (!(v = get(root, "top_logprobs"))) return 0;
    if (!is_int(v) || v->valuedouble < 0 || v->valuedouble > TS_TOP_LOGPROBS_MAX) {
        fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' must be an integer in [0, %d]",
             TS_TOP_LOGPROBS_MAX);
        return -1;
    }
    if (v->valuedouble > 0 && !j->logprobs) {
        fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs' set to true");
        return -1;
    }
    j->gp.top_logprobs = (int)v->valuedouble;
    return 0;
}

job *srv_parse_chat(srv *s, const char *body, size_t len, srv_err *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    job *j = srv_job_new(JOB_CHAT);
    char *text = NULL;
    size_t tlen = 0;
    int max_tokens;
    const cJSON *v;
    if (!j) { fail(e, 500, NULL, NULL, "out of memory"); goto bad; }
    v = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!v) { fail(e, 400, "messages", "missing_required_parameter", "'messages' is required"); goto bad; }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0) {
        fail(e, 400, "messages", "invalid_value", "'messages' must be a non-empty list of messages");
        goto bad;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        if (!cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "role"))) {
            fail(e, 400, "messages", "invalid_value", "every message must be an object with a string 'role'");
            goto bad;
        }
    }
    if (check_fields(s, root, 1, e) || check_chat_fields(s, root, j, e)) goto bad;
    if (parse_common(s, root, j, &max_tokens, e)) goto bad;
    if (parse_chat_logprobs(root, j, e)) goto bad;
    if ((v = get(root, "tools"))) {
        if (!cJSON_IsArray(v)) { fail(e, 400, "tools", "invalid_type", "'tools' must be a list"); goto bad; }
        if (cJSON_GetArraySize(v) && !(j->tools_json = cJSON_PrintUnformatted(v))) {
            fail(e, 500, NULL, NULL, "out of memory");
            goto bad;
        }
    }
    if (srv_parse_tool_choice(s, root, j, e)) goto bad;
    if ((v = get(root, "chat_template_kwargs")) && !cJSON_IsObject(v)) {
        fail(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
        goto bad;
    }
    if ((v = get(root, "add_generation_prompt")) && !cJSON_IsBool(v)) {
        fail(e, 400, "add_generation_prompt", "invalid_type", "'add_generation_prompt' must be true or false");
        goto bad;
    }
    if (!s->tpl) {
        fail(e, 400, NULL, "no_chat_template", "model '%s' has no chat template: use /v1/completions", s->model_id);
        goto bad;
    }
    ts_error err = {0};
    pthread_mutex_lock(&s->tpl_mu);
    int rc = ts_chat_render_json(s->tpl, body, len, &text, &tlen, &err);
    pthread_mutex_unlock(&s->tpl_mu);
    if (rc) {
        if (rc == TS_E_NOMEM) fail(e, 500, NULL, NULL, "out of memory rendering the chat template");
        else fail(e, 400, "messages", "invalid_value", "%s", err.msg);
        goto bad;
    }
    j->think_open = ts_reply_think_open(text, tlen);
    if (set_prompt_text(s, j, text, tlen, "messages", e)) goto bad;
    j->n_history = history_ids(s, root, j);
    if (finish_budget(s, j, max_tokens, s->n_ctx, e)) goto bad;
    ts_chat_text_free(text);
    cJSON_Delete(root);
    return j;
bad:
    ts_chat_text_free(text);
    cJSON_Delete(root);
    srv_job_unref(j);
    return NULL;
}

/* A completion's prompts: a string or a list of ids (one prompt), or a list
 * of strings and id lists (one prompt each: OpenAI's and vLLM's batch),
 * tokenized into j->prompt one after the other (prompt_at with several);
 * with echo, the text prompts kept as sent. n_per becomes the request's n
 * and n_choices prompts x n. */
static int parse_prompts(srv *s, job *j, const cJSON *p, srv_err *e) {
    const int multi = cJSON_IsArray(p) && cJSON_GetArraySize(p) >= 1 && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    const int np = multi ? cJSON_GetArraySize(p) : 1;
    if (!multi && !cJSON_IsString(p) && !cJSON_IsArray(p)) {
        fail(e, 400, "prompt", "invalid_type", "'prompt' must be a string, a list of token ids, or a list of those");
        return -1;
    }
    if (np * j->n_choices > SRV_MAX_CHOICES) {
        fail(e, 400, "prompt", "invalid_value", "%d prompts with n = %d are %d choices, above this server's %d", np,
             j->n_choices, np * j->n_choices, SRV_MAX_CHOICES);
        return -1;
    }
    if ((j->echo && !(j->echo_text = calloc((size_t)np, sizeof *j->echo_text))) ||
        (np > 1 && !(j->prompt_at = calloc((size_t)np + 1, sizeof *j->prompt_at)))) {
        fail(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    j->n_prompts = np;
    int total = 0, cap = 0;
    const cJSON *it = multi ? p->child : p;
    for (int k = 0; k < np; k++, it = it->next) {
        char which[32] = "";
        if (multi) snprintf(which, sizeof which, " %d", k);
        const int32_t *ids = NULL;
        int n = 0;
        ts_tokens t = {0};
        ts_error err;
        if (cJSON_IsString(it)) {
            if (ts_tokenizer_encode(s->tok, it->valuestring, strlen(it->valuestring), &t, &err)) {
                fail(e, 400, "prompt", "invalid_value", "prompt%s: %s", which, err.msg);
                return -1;
            }
            ids = t.ids, n = t.n;
            if (j->echo && !(j->echo_text[k] = strdup(it->valuestring))) {
                ts_tokens_free(&t);
                fail(e, 500, NULL, NULL, "out of memory");
                return -1;
            }
        } else if (!cJSON_IsArray(it)) {
            fail(e, 400, "prompt", "invalid_type", "prompt%s must be a string or a list of token ids", which);
            return -1;
        } else {
            n = cJSON_GetArraySize(it);
        }
        if (total + n > cap) {
            cap = (total + n) * 2 + 16;
            int32_t *q = realloc(j->prompt, sizeof(int32_t) * (size_t)cap);
            if (!q) {
                ts_tokens_free(&t);
                fail(e, 500, NULL, NULL, "out of memory");
                return -1;
            }
            j->prompt = q;
        }
        if (cJSON_IsString(it)) {
            if (n) memcpy(j->prompt + total, ids, sizeof(int32_t) * (size_t)n);
            ts_tokens_free(&t);
        } else {
            int i = 0;
            const cJSON *x;
            cJSON_ArrayForEach(x, it) {
                if (!is_int(x) || x->valuedouble < 0 || x->valuedouble >= s->n_vocab) {
                    fail(e, 400, "prompt", "invalid_value",
                         "'prompt' must be a string or a list of token ids in [0, %d); prompt%s's item %d is not",
                         s->n_vocab, which, i);
                    return -1;
                }
                j->prompt[total + i++] = (int32_t)x->valuedouble;
            }
        }
        if (k == 0) j->n_prompt = n;
        total += n;
        if (j->prompt_at) j->prompt_at[k + 1] = total;
    }
    if (!j->prompt && !(j->prompt = malloc(sizeof(int32_t)))) { /* an empty prompt: finish_budget refuses it */
        fail(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    j->n_per = j->n_choices;
    j->n_choices = np * j->n_per;
    if (srv_job_choices(j, j->n_choices)) {
        fail(e, 500, NULL, NULL, "out of memory");
        return -1;
    }
    return 0;
}

job *srv_parse_completion(srv *s, const char *body, size_t len, srv_err *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    job *j = srv_job_new(JOB_COMPLETION);
    int max_tokens;
    const cJSON *v, *p;
    if (!j) { fail(e, 500, NULL, NULL, "out of memory"); goto bad; }
    if (check_fields(s, root, 0, e)) goto bad;
    if (parse_common(s, root, j, &max_tokens, e)) goto bad;
    if (bool_field(root, "echo", &j->echo, e)) goto bad;
    if (max_tokens == 0 && !j->echo) {
        fail(e, 400, get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", "invalid_value",
             "max_tokens 0 generates nothing: it is allowed with echo only (the prompt returned, and scored with "
             "logprobs)");
        goto bad;
    }
    if ((v = get(root, "logprobs")) && !cJSON_IsFalse(v)) {
        if (!is_int(v) || v->valuedouble < 0 || v->valuedouble > TS_TOP_LOGPROBS_MAX) {
            fail(e, 400, "logprobs", "invalid_value",
                 "'logprobs' must be an integer in [0, %d] (the alternatives given per token) or null",
                 TS_TOP_LOGPROBS_MAX);
            goto bad;
        }
        j->logprobs = 1;
        j->gp.top_logprobs = (int)v->valuedouble;
    }
    if ((v = get(root, "best_of")) && !(is_int(v) && v->valuedouble == 1)) {
        fail(e, 400, "best_of", "unsupported_parameter", "only best_of = 1 is supported");
        goto bad;
    }
    if ((v = get(root, "suffix")) && !(cJSON_IsString(v) && !*v->valuestring)) {
        fail(e, 400, "suffix", "unsupported_parameter", "'suffix' is not supported");
        goto bad;
    }
    p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) { fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required"); goto bad; }
    if (parse_prompts(s, j, p, e)) goto bad;
    if (finish_budget(s, j, max_tokens, 16, e)) goto bad;
    cJSON_Delete(root);
    return j;
bad:
    cJSON_Delete(root);
    srv_job_unref(j);
    return NULL;
}

/* ---- /tokenize and /detokenize ---------------------------------------------
 *
 * vLLM's utility routes (llama.cpp's spelling accepted too): a client counts
 * a prompt's tokens, or reads ids back as text, with this server's tokenizer
 * and chat template. POST /tokenize {"prompt": text} (or llama.cpp's
 * "content") -> {"count", "max_model_len", "tokens"}; with "messages" the
 * chat rendering a chat completion would feed (its fields and refusals: the
 * same request body gives the same ids as usage.prompt_tokens counts).
 * POST /detokenize {"tokens": [ids]} -> {"prompt": text} (and "content",
 * llama.cpp's key), ids checked against the model's vocabulary, the text
 * decoded as the streamed replies are (bytes that are not UTF-8 as U+FFFD,
 * so the JSON stays valid). Fields other than these and "model" refused. */

static int model_ok(srv *s, const cJSON *root, srv_err *e) {
    const cJSON *v = get(root, "model");
    if (!v) return 1;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, s->model_id)) {
        fail(e, 404, "model", "model_not_found", "the model does not exist; this server serves '%s' (GET /v1/models)",
             s->model_id);
        return 0;
    }
    return 1;
}

/* A field the route does not read: refused, named (copied: the request is
 * freed before the reply is written). */
static void unknown_field(srv_err *e, const char *key, const char *route_fields) {
    snprintf(e->param_buf, sizeof e->param_buf, "%s", key);
    fail(e, 400, e->param_buf, "unsupported_parameter", "'%.200s' is not a field of %s", key, route_fields);
}

static char *ids_reply(srv *s, const int32_t *ids, int n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", n);
    cJSON_AddNumberToObject(o, "max_model_len", s->n_ctx);
    cJSON *a = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    char *p = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return p;
}

char *srv_tokenize(srv *s, const char *body, size_t len, srv_err *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    char *out = NULL;
    if (get(root, "messages")) { /* the chat endpoint's own parse: its rendering, its checks */
        cJSON_Delete(root);
        job *j = srv_parse_chat(s, body, len, e);
        if (!j) return NULL;
        out = ids_reply(s, j->prompt, j->n_prompt);
        srv_job_unref(j);
        return out;
    }
    const cJSON *it, *text = NULL;
    cJSON_ArrayForEach(it, root) {
        if (!strcmp(it->string, "prompt") || !strcmp(it->string, "content")) {
            if (text) { /* (param: a literal, never the freed request's key) */
                fail(e, 400, "content", "invalid_value", "give 'prompt' or 'content', not both");
                goto done;
            }
            text = it;
        } else if (!strcmp(it->string, "add_special_tokens")) {
            /* vLLM's (lm-evaluation-harness sends false): the tokenizers of
             * this family add none (a ByteLevel post-processor), so either
             * value gives the same ids */
            if (!cJSON_IsBool(it)) {
                fail(e, 400, "add_special_tokens", "invalid_type", "'add_special_tokens' must be true or false");
                goto done;
            }
        } else if (strcmp(it->string, "model")) {
            unknown_field(e, it->string,
                          "/tokenize (prompt or content, add_special_tokens, or messages as in a chat completion)");
            goto done;
        }
    }
    if (!model_ok(s, root, e)) goto done;
    if (!cJSON_IsString(text)) {
        fail(e, 400, "prompt", text ? "invalid_type" : "missing_field", "'prompt' must be a string of text to tokenize");
        goto done;
    }
    ts_tokens t = {0};
    ts_error err = {0};
    if (ts_tokenizer_encode(s->tok, text->valuestring, strlen(text->valuestring), &t, &err)) {
        fail(e, 400, "prompt", "invalid_value", "%s", err.msg);
        goto done;
    }
    out = ids_reply(s, t.ids, t.n);
    ts_tokens_free(&t);
done:
    cJSON_Delete(root);
    return out;
}

/* The text of a file of the model directory, NULL when there is none. */
static char *model_file(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return cli_read_file(path);
}

char *srv_tokenizer_info(srv *s, const char *model_dir) {
    cJSON *o = cJSON_CreateObject();
    /* the special tokens and the template as the chat template holds them
     * (ts_chat_template_load read tokenizer_config.json and the template's
     * file); without one, the eos token is the first stop id's text */
    static const char *const tokens[] = {"eos_token", "bos_token", "pad_token", "unk_token"};
    for (int i = 0; i < 4; i++) {
        const char *v = s->tpl ? ts_chat_template_token(s->tpl, tokens[i]) : NULL;
        size_t n;
        const char *t = !s->tpl && i == 0 && s->n_stop_ids ? ts_tokenizer_token_bytes(s->tok, s->stop_ids[0], &n) : NULL;
        char *z = t ? strndup(t, n) : NULL;
        if (v || z) cJSON_AddStringToObject(o, tokens[i], v ? v : z);
        else cJSON_AddNullToObject(o, tokens[i]);
        free(z);
    }
    /* the config's fields the library does not read, as they are */
    char *cfg_text = model_file(model_dir, "tokenizer_config.json");
    cJSON *cfg = cfg_text ? cJSON_Parse(cfg_text) : NULL;
    free(cfg_text);
    static const char *const copied[] = {"tokenizer_class", "add_bos_token", "add_eos_token", "clean_up_tokenization_spaces"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, copied[i]);
        if (v && (cJSON_IsString(v) || cJSON_IsBool(v))) cJSON_AddItemToObject(o, copied[i], cJSON_Duplicate(v, 1));
    }
    cJSON_Delete(cfg);
    if (s->tpl) cJSON_AddStringToObject(o, "chat_template", ts_chat_template_source(s->tpl));
    cJSON_AddNumberToObject(o, "model_max_length", s->n_ctx);
    cJSON_AddNumberToObject(o, "vocab_size", s->n_vocab);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

/* Append n bytes to a growable buffer; 0 when out of memory. */
static int append(char **b, size_t *len, size_t *cap, const char *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *q = realloc(*b, c);
        if (!q) return 0;
        *b = q, *cap = c;
    }
    if (n) memcpy(*b + *len, p, n);
    *len += n;
    (*b)[*len] = 0;
    return 1;
}

char *srv_detokenize(srv *s, const char *body, size_t len, srv_err *e) {
    cJSON *root = parse_body(body, len, e);
    if (!root) return NULL;
    char *out = NULL;
    ts_detok *d = NULL;
    char *text = NULL;
    size_t tl = 0, tcap = 0;
    const cJSON *it, *ids = get(root, "tokens");
    cJSON_ArrayForEach(it, root)
        if (strcmp(it->string, "tokens") && strcmp(it->string, "model")) {
            unknown_field(e, it->string, "/detokenize (tokens)");
            goto done;
        }
    if (!model_ok(s, root, e)) goto done;
    if (!cJSON_IsArray(ids)) {
        fail(e, 400, "tokens", ids ? "invalid_type" : "missing_field", "'tokens' must be a list of token ids");
        goto done;
    }
    ts_error err = {0};
    if (ts_detok_new(s->tok, &d, &err)) {
        fail(e, 500, NULL, NULL, "%s", err.msg);
        goto done;
    }
    int k = 0;
    cJSON_ArrayForEach(it, ids) {
        const double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        size_t n;
        if (!(v >= 0 && v < s->n_vocab && v == (double)(int32_t)v) || !ts_tokenizer_token_bytes(s->tok, (int32_t)v, &n)) {
            fail(e, 400, "tokens", "invalid_value", "'tokens'[%d] is not a token id of this model's vocabulary (0..%d)", k,
                 s->n_vocab - 1);
            goto done;
        }
        const char *p;
        size_t pl = 0;
        if (ts_detok_push(d, (int32_t)v, &p, &pl, &err) || !append(&text, &tl, &tcap, p, pl)) {
            fail(e, 500, NULL, NULL, "out of memory decoding %d tokens", k + 1);
            goto done;
        }
        k++;
    }
    const char *p;
    size_t pl;
    ts_detok_flush(d, &p, &pl);
    if (!append(&text, &tl, &tcap, p, pl)) {
        fail(e, 500, NULL, NULL, "out of memory decoding the tokens");
        goto done;
    }
    cJSON *o = cJSON_CreateObject();
    srv_add_str(o, "prompt", text, tl);
    srv_add_str(o, "content", text, tl);
    out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
done:
    ts_detok_free(d);
    free(text);
    cJSON_Delete(root);
    return out;
}
