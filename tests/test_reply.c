/* test_reply.c: the reply parser (src/text/reply.c): think blocks, content and
 * both Qwen tool-call forms, with the text cut at every possible point (the
 * split must not depend on how tokens cut the text). */
#include <cjson/cJSON.h>

#include "ts_test.h"
#include "turbospark.h"

typedef struct {
    char reasoning[4096], content[4096], calls[4096];
} parsed;

static int g_no_calls; /* parse() with ts_reply_no_tool_calls */

/* Parse text pushed in pieces of `step` bytes (0: one piece). */
static int parse(const char *text, int think_open, const char *tools, size_t step, parsed *out) {
    ts_reply *r = NULL;
    ts_error err;
    if (ts_reply_new(think_open, tools, &r, &err)) return -1;
    if (g_no_calls) ts_reply_no_tool_calls(r);
    ts_text re = {0}, co = {0};
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += step)
        rc = ts_reply_push(r, text + i, i + step <= n ? step : n - i, &re, &co, &err);
    char *calls = NULL;
    if (!rc) rc = ts_reply_finish(r, &re, &co, &calls, &err);
    snprintf(out->reasoning, sizeof out->reasoning, "%s", re.s ? re.s : "");
    snprintf(out->content, sizeof out->content, "%s", co.s ? co.s : "");
    snprintf(out->calls, sizeof out->calls, "%s", calls ? calls : "");
    ts_chat_text_free(calls);
    ts_text_free(&re);
    ts_text_free(&co);
    ts_reply_free(r);
    return rc;
}

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"metric\":{\"type\":\"boolean\"},"
    "\"opts\":{\"type\":\"object\"},\"zip\":{\"type\":\"string\"}}}}}]";

TS_TEST(reply, think_content_and_tool_calls_any_split) {
    struct {
        const char *text;
        int think_open;
        const char *reasoning, *content, *calls;
    } cases[] = {
        {"Hello world.", 0, "", "Hello world.", ""},
        {"plan it\n</think>\n\nThe answer is 4.", 1, "plan it", "The answer is 4.", ""},
        {"<think>\nhmm\n</think>\n\nok", 0, "hmm", "ok", ""},
        {"\n\nstill thinking", 1, "still thinking", "", ""},
        {"a < b and </thinker>", 0, "", "a < b and </thinker>", ""},
        {"Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
         "<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n"
         "</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>",
         0, "", "Let me check.",
         "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"days\\\":3,\\\"metric\\\":true,"
         "\\\"opts\\\":{\\\"a\\\":[1,2]},\\\"zip\\\":\\\"75001\\\"}\"}]"},
        {"x\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a b\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>",
         1, "x", "",
         "[{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":\\\"a b\\\"}\"},{\"name\":\"g\",\"arguments\":\"{}\"}]"},
        {"Sure: <tool_call>\nnot a call\n</tool_call>", 0, "", "Sure: <tool_call>\nnot a call\n</tool_call>", ""},
        {"<tool_call>\n<function=f>\n<parameter=a>\nmulti\nline\n</parameter>\n</function>", 0, "", "",
         "[{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\\\"multi\\\\nline\\\"}\"}]"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = strlen(cases[c].text);
        for (size_t step = 0; step <= n; step++) {
            parsed p;
            CHECK(parse(cases[c].text, cases[c].think_open, TOOLS, step, &p) == 0);
            CHECK_MSG(!strcmp(p.reasoning, cases[c].reasoning), "case %zu step %zu: reasoning '%s'", c, step, p.reasoning);
            CHECK_MSG(!strcmp(p.content, cases[c].content), "case %zu step %zu: content '%s'", c, step, p.content);
            CHECK_MSG(!strcmp(p.calls, cases[c].calls), "case %zu step %zu: calls '%s'", c, step, p.calls);
        }
    }
}

TS_TEST(reply, think_open_detection) {
    CHECK(ts_reply_think_open("<|im_start|>assistant\n<think>\n", 30) == 1);
    const char *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(ts_reply_think_open(closed, strlen(closed)) == 0);
    CHECK(ts_reply_think_open("", 0) == 0);
}

/* An empty reply (a stop string matching its first characters, a first
 * token that is a stop id, only special tokens: nothing reaches the parser)
 * and replies that empty out (only layout whitespace, a lone tag) finish
 * cleanly in every state the parser can start in, with zero-length pushes
 * mixed in. Before the fix, finishing a parser that never held a byte
 * dereferenced its NULL hold buffer (issue 20, item 1). */
TS_TEST(reply, empty_replies_finish) {
    struct {
        const char *text;
        int think_open;
        const char *reasoning, *content;
    } cases[] = {
        {"", 0, "", ""},
        {"", 1, "", ""},
        {"\n\n", 0, "", "\n\n"},
        {"\n\n", 1, "", ""},
        {"<think>", 0, "", ""},
        {"</think>", 1, "", ""},
        {"</think>\n\n", 1, "", ""},
        {"<tool_call>", 0, "", "<tool_call>"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int tools = 0; tools < 2; tools++)
            for (int empties = 0; empties < 2; empties++) {
                ts_reply *r = NULL;
                ts_error err;
                CHECK(ts_reply_new(cases[c].think_open, tools ? TOOLS : NULL, &r, &err) == 0);
                ts_text re = {0}, co = {0};
                int rc = 0;
                if (empties) rc |= ts_reply_push(r, "", 0, &re, &co, &err);
                size_t n = strlen(cases[c].text);
                for (size_t i = 0; i < n; i++) {
                    rc |= ts_reply_push(r, cases[c].text + i, 1, &re, &co, &err);
                    if (empties) rc |= ts_reply_push(r, cases[c].text + i, 0, &re, &co, &err);
                }
                char *calls = NULL;
                rc |= ts_reply_finish(r, &re, &co, &calls, &err);
                CHECK_MSG(rc == 0 && !calls, "case %zu: rc %d", c, rc);
                CHECK_MSG(!strcmp(re.s ? re.s : "", cases[c].reasoning), "case %zu: reasoning '%s'", c, re.s);
                CHECK_MSG(!strcmp(co.s ? co.s : "", cases[c].content), "case %zu tools %d empties %d: content '%s'", c,
                          tools, empties, co.s);
                /* finishing twice is harmless too */
                CHECK(ts_reply_finish(r, &re, &co, NULL, &err) == 0);
                ts_chat_text_free(calls);
                ts_text_free(&re);
                ts_text_free(&co);
                ts_reply_free(r);
            }
}

/* The JSON form ends where its value ends: a "</tool_call>" inside one of
 * its strings (which a schema-constrained call may well write) is text;
 * text between the value and the closing tag is ignored as before. With
 * ts_reply_no_tool_calls (tool_choice "none") a block is content, the
 * think block still split off. Every cut of the text. */
TS_TEST(reply, json_call_ends_with_its_value_and_calls_off) {
    static const struct {
        const char *text;
        int think_open, no_calls;
        const char *reasoning, *content, *calls;
    } cases[] = {
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a</tool_call>b\"}}\n</tool_call>", 0, 0, "", "",
         "[{\"name\":\"f\",\"arguments\":\"{\\\"q\\\":\\\"a</tool_call>b\\\"}\"}]"},
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\"}\n</tool_call>",
         0, 0, "", "", "[{\"name\":\"f\",\"arguments\":\"{}\"},{\"name\":\"g\",\"arguments\":\"{}\"}]"},
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1", 0, 0, "",
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": 1", ""},
        {"r\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 1, 1, "r",
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", ""},
        {"Text <tool_call", 0, 1, "", "Text <tool_call", ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = strlen(cases[c].text);
        g_no_calls = cases[c].no_calls;
        for (size_t step = 0; step <= n; step++) {
            parsed p;
            int rc = parse(cases[c].text, cases[c].think_open, NULL, step, &p);
            g_no_calls = cases[c].no_calls;
            CHECK(rc == 0);
            CHECK_MSG(!strcmp(p.reasoning, cases[c].reasoning), "case %zu step %zu: reasoning '%s'", c, step, p.reasoning);
            CHECK_MSG(!strcmp(p.content, cases[c].content), "case %zu step %zu: content '%s'", c, step, p.content);
            CHECK_MSG(!strcmp(p.calls, cases[c].calls), "case %zu step %zu: calls '%s'", c, step, p.calls);
        }
    }
    g_no_calls = 0;
}
