/* cli_chat.c: conversation helpers shared by `run --chat` and `chat`. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_chat_add(cJSON *messages, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return -1;
    if (!cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return -1;
    }
    cJSON_AddItemToArray(messages, m);
    return 0;
}

int cli_chat_render(const ts_chat_template *t, cJSON *messages, int no_think, int gen_prompt, char **out,
                    size_t *len, ts_error *err) {
    char *msgs = cJSON_PrintUnformatted(messages);
    if (!msgs) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return TS_E_NOMEM;
    }
    ts_chat_request req = {msgs, NULL, gen_prompt, no_think ? "{\"enable_thinking\": false}" : NULL};
    int rc = ts_chat_render(t, &req, out, len, err);
    free(msgs);
    return rc;
}

int cli_stop_ids(const ts_engine *e, const ts_tokenizer *tok, int32_t *ids, int cap) {
    const ts_model_info *info = ts_engine_info(e);
    int n = 0;
    for (int i = 0; i < info->n_eos && n < cap; i++) ids[n++] = info->eos_ids[i];
    static const char *stop_tokens[] = {"<|im_end|>", "<|endoftext|>"};
    for (int i = 0; tok && i < 2; i++) {
        int id = ts_tokenizer_token_id(tok, stop_tokens[i]), dup = 0;
        for (int j = 0; j < n; j++) dup |= ids[j] == id;
        if (id >= 0 && !dup && n < cap) ids[n++] = id;
    }
    return n;
}
