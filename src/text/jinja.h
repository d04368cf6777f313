/* jinja.h: a Jinja2 interpreter for chat templates (internal to the library).
 *
 * Owns: parsing a template (the subset of Jinja2 that Hugging Face chat
 * templates use) and rendering it against variables built from JSON, with the
 * semantics of Python jinja2 3.1 configured the way transformers configures it
 * in apply_chat_template: ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True, extensions=[loopcontrols]), a `tojson` filter that is
 * Python json.dumps(ensure_ascii=False) and a `raise_exception` global.
 * Values behave like the Python objects they stand for: str() of a float is
 * Python's repr, of True is "True", strings index by code point, etc.
 *
 * Does not own: which variables a chat request sets, where templates come from
 * (chat.c), tokenization.
 *
 * Not supported (clear error naming the construct and the line, never a
 * crash): template inheritance and inclusion (extends, include, import,
 * from; a lone {% block %} renders in place), {% call %}, recursive loops,
 * star-args in calls, Python %-formatting, str.format and the `format`
 * filter, integers beyond 64 bits (a JSON integer that large becomes a
 * float), the filters batch, slice, groupby, truncate, wordwrap, striptags,
 * urlize, urlencode, xmlattr, filesizeformat, pprint, random, and the
 * globals lipsum, cycler, joiner. Known small deviations: str() of
 * dict.items()/keys()/values() prints a list (Python prints dict_items([...])),
 * upper/lower use simple case mappings (Python: 'ß'.upper() == 'SS'),
 * select/map return lists where jinja2 returns generators, and
 * {% generation %} (transformers' AssistantTracker) is accepted and
 * renders its body.
 *
 * Limits against hostile templates: nesting depth while parsing, macro call
 * depth, total loop iterations, range() length (the sandbox's 100000) and the
 * memory one render may use (an arena with a byte cap).
 */
#ifndef TS_JINJA_H
#define TS_JINJA_H

#include <stddef.h>

#include "ts_int.h"

/* What went wrong, in Python jinja2's terms where there is one. */
typedef enum {
    TJ_OK = 0,
    TJ_SYNTAX,       /* TemplateSyntaxError / TemplateAssertionError: malformed template */
    TJ_RAISED,       /* TemplateError from raise_exception(msg): msg is the template's text */
    TJ_UNDEFINED,    /* UndefinedError */
    TJ_TYPE,         /* TypeError (and ValueError/ZeroDivisionError: the template misused a value) */
    TJ_RUNTIME,      /* TemplateRuntimeError, SecurityError (the sandbox refused) */
    TJ_UNSUPPORTED,  /* valid Jinja2 that this interpreter does not implement */
    TJ_LIMIT,        /* a resource limit was hit */
    TJ_INPUT,        /* bad input JSON for a variable */
    TJ_NOMEM
} tj_kind;

typedef struct tj_error {
    tj_kind kind;
    int line;          /* template line, 1-based; 0 when not tied to a line */
    char msg[1024];    /* for TJ_RAISED exactly the template's message */
} tj_error;

/* Python jinja2's name for a kind ("TemplateError", "UndefinedError", ...). */
const char *tj_kind_name(tj_kind k);

typedef struct tj_options {
    int trim_blocks;        /* default 1 */
    int lstrip_blocks;      /* default 1 */
    int keep_trailing_newline; /* default 0 */
    size_t max_bytes;       /* memory one render may use; default 256 MiB */
    long max_steps;         /* loop iterations + macro calls; default 10M */
} tj_options;

void tj_options_default(tj_options *o);

typedef struct tj_template tj_template;

/* Parse a template (UTF-8). o may be NULL (defaults). */
int tj_parse(const char *src, size_t len, const tj_options *o, tj_template **out, tj_error *err);
void tj_template_free(tj_template *t);

/* A set of variables for one render. Values are copied into the context. */
typedef struct tj_vars tj_vars;
tj_vars *tj_vars_new(void);
void tj_vars_free(tj_vars *v);
/* Bind name to the value of a JSON text (any JSON value). Integers stay
 * integers and 1.0 stays a float, as Python's json.loads would have them. */
int tj_vars_set_json(tj_vars *v, const char *name, const char *json, size_t len, tj_error *err);
int tj_vars_set_string(tj_vars *v, const char *name, const char *s);
int tj_vars_set_bool(tj_vars *v, const char *name, int b);
int tj_vars_set_none(tj_vars *v, const char *name);
/* Bind member `member` of a JSON object text as variable `name`. Returns 1
 * when bound, 0 when the object has no such member, -1 on error. */
int tj_vars_set_json_member(tj_vars *v, const char *name, const char *json, size_t len,
                            const char *member, tj_error *err);
/* Bind every member of a JSON object text as a variable (kwargs). */
int tj_vars_set_json_members(tj_vars *v, const char *json, size_t len, tj_error *err);
/* Bind every member of the object found at member `member` of a JSON object
 * text (null or absent: nothing). Returns 1/0 (found or not), -1 on error. */
int tj_vars_spread_json_member(tj_vars *v, const char *json, size_t len, const char *member, tj_error *err);

/* Render. *out is NUL-terminated, ts_alloc'd (TS_MEM_MISC): caller ts_free()s.
 * Returns 0, or -1 with err filled. */
int tj_render(const tj_template *t, const tj_vars *v, char **out, size_t *out_len, tj_error *err);

/* Python json.dumps(ensure_ascii=False) of a JSON text: re-serialize with
 * Python's separators and float repr (exposed for tests). */
int tj_json_pydumps(const char *json, size_t len, char **out, tj_error *err);

#endif
