/* constraint.c: JSON-constrained generation's token masks
 * (ts_constraint_json, ts_constraint_json_schema, include/turbospark.h;
 * internal side gen/constraint.h).
 *
 * Owns: the trie of the tokenizer's tokens, the mask of a recognizer state
 * (which ids extend the reply to a live prefix), the cache of masks, a
 * generation's constraint state (ts_cgen: activation, stop ids, the reply's
 * recognizer state). Does not own: the grammars (text/json_fsm.c for any
 * JSON text, text/json_schema.c and text/schema_fsm.c for a schema's
 * documents), applying a mask to logits (gen/sample.c), where in the token
 * loop masks are taken (generate.c, spec.c).
 *
 * The tokenizer's index (the trie, the string bits, the tokens' bytes) is
 * built once a tokenizer and shared by every constraint over it
 * (ts_tok_attached, reference counted: tok_index below); a constraint owns
 * its grammar, its literal tokens and its cache of masks.
 *
 * The trie is an array of nodes in preorder (the tokens sorted by bytes):
 * node i holds one byte, its level (1 for a token's first byte), end[i]
 * (the index after its subtree) and the ids whose bytes end there. A mask
 * is one walk: each node's byte is fed once to the state of its parent's
 * prefix, and a refused byte skips the whole subtree (end[i]). Tokens that
 * share a prefix pay for it once; after a value only a handful of nodes
 * are visited. Inside a string nearly every token is allowed: a bit per
 * node and string class (in_str) marks the subtrees whose every path stays
 * in the string, taken whole without a feed, so only the paths through a
 * quote, a backslash or a control byte are walked (Qwen3's 151,669 tokens:
 * 0.39 ms a string mask on average without it, 0.06 with; test_constraint).
 *
 * Saving a state on the walk: a byte changes the head (8 bytes) and at most
 * the one stack word a push writes to (json_fsm.h), so a level keeps its
 * head and that word's old value, restored when the walk leaves the level.
 *
 * The cache key: what the mask depends on. The normalized head, and of the
 * stack only what a token can reach: a token with c closing brackets pops
 * at most c containers and then reads the kind below, so the top
 * max_close + 1 kinds; the depth itself only when a token could reach the
 * bottom (depth <= max_close + 1: the end of the text) or the depth cap
 * (depth + max_open >= TS_JSON_MAX_DEPTH). JSON repeats these keys a lot
 * (every string value in an object at the same depth shares one), so most
 * masks are a lookup and a copy. Bounded: at most TS_CONSTRAINT_CACHE_BYTES
 * of masks (and 4096 entries), least recently used out; masks are
 * allocated on first use, so a small reply costs little.
 *
 * A schema's constraint walks the same trie with the schema recognizer's
 * step form (schema_fsm.h): each trie level holds the threads after its
 * byte, over the reply's flat state, so a level costs a copy of a few
 * hundred bytes whatever the nesting. The string shortcut holds there too
 * when the string's length is bounded, for subtrees no deeper (in bytes,
 * so in code points) than the room left (height[]). Its cache key is
 * schema_fsm's: each thread's head and top frames, as the JSON key.
 *
 * A wrapped schema (ts_constraint_json_schema_wrap: fixed text around the
 * documents, "<tool_call>\n" ... "\n</tool_call>") is the same walk over
 * the recognizer's wrapped form, plus its literal tokens: the added tokens
 * (not special) whose text lies inside a literal ("<tool_call>" is one
 * token in Qwen's vocabulary, and the model writes it as one). They are
 * not in the trie (an added token is markup, never a document's text);
 * each is tried after the walk with the literal-only step
 * (ts_sfsm_step_literal), so it can spell its literal and nothing else.
 */
#include "gen/constraint.h"

#include <pthread.h>
#include <stdlib.h>

#include "gen/sample.h"
#include "text/tokenizer.h"

#define CACHE_MAX_ENTRIES 4096
#define CACHE_MIN_ENTRIES 16
#define STACK_WORDS (TS_JSON_MAX_DEPTH / 64)

enum { CK_JSON, CK_SCHEMA };

typedef struct ckey {
    ts_jhead h;                 /* normalized; depth 0xFFFF: "deep" (see above) */
    uint64_t bits[STACK_WORDS]; /* the reachable top of the stack, packed from bit 0 */
} ckey;

typedef struct centry {
    uint8_t *key;     /* [key_len] a ckey's bytes (JSON) or ts_sfsm_key's (a schema) */
    uint32_t key_len, key_cap;
    uint64_t *mask;   /* [words], NULL until first used */
    uint64_t tick;    /* last use */
    int32_t next;     /* hash chain, -1 ends */
    int32_t bucket;   /* -1: empty entry */
} centry;

/* The tokenizer's index: what every constraint over one tokenizer walks
 * and never changes, built once a tokenizer (ts_tok_attached) and shared
 * by reference count: the tokenizer holds one reference, each constraint
 * one, so either may be freed first. At Qwen3's 151,669 ids it is ~16 MB
 * and ~50 ms to build, which every constraint (every distinct schema or
 * tool list the server meets) used to pay again. */
typedef struct tok_index {
    int refs;          /* atomic */
    int n_ids;
    int n_tokens, max_len, max_close, max_open;
    uint8_t *kind;     /* [n_ids] 1: a text token, in the trie; 2: an added token (not
                          special) with text, a wrapped schema's literal if its text
                          lies in a literal; 0: neither */
    uint32_t *off;     /* [n_ids + 1] a token's bytes (kinds 1 and 2): bytes[off[id], off[id + 1]) */
    uint8_t *bytes;    /* (the tokenizer need not outlive the index) */
    /* the trie, preorder */
    int n_nodes;
    uint8_t *byte;     /* [n_nodes] */
    uint16_t *level;   /* [n_nodes] 1.. */
    uint32_t *end;     /* [n_nodes] */
    uint32_t *tok_off; /* [n_nodes + 1] into tok_ids */
    uint8_t *in_str;   /* [n_nodes] bit k: from a string state of class k
                          (ts_jfsm_string_class), every path of the subtree
                          stays inside the string: all its tokens allowed */
    uint16_t *height;  /* [n_nodes] bytes of the longest path from a node
                          down its subtree, itself included (schemas' bounded strings) */
    int32_t *tok_ids;  /* [n_tokens] */
} tok_index;

struct ts_constraint {
    int kind;          /* CK_JSON, CK_SCHEMA */
    const char *name;  /* for messages: "JSON constraint", "JSON schema constraint" */
    ts_schema *schema; /* CK_SCHEMA (owned) */
    tok_index *ix;     /* shared (a reference) */
    int n_ids;         /* the tokenizer's ids */
    int words;         /* (n_ids + 63) / 64 */
    int object_only;
    int32_t *lit_ids;  /* [n_lit] a wrapped schema's literal tokens */
    uint64_t *lit;     /* [words] their bits; NULL when n_lit = 0 */
    int n_lit;
    /* the cache (under mu) */
    pthread_mutex_t mu;
    int mu_ok;         /* mu initialized */
    centry *ent;       /* [cap] */
    int32_t *head;     /* [n_buckets] */
    int cap, n_buckets, n_ent;
    uint64_t tick;
    long hits, misses;
};

/* 1: id is a trie token, 2: a literal token of c's wrap, 0: neither */
static inline int tok_kind(const ts_constraint *c, int32_t id) {
    if (c->ix->kind[id] == 1) return 1;
    return c->lit && ((c->lit[id >> 6] >> (id & 63)) & 1) ? 2 : 0;
}

/* ---- building ---- */

typedef struct tok_ref {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    const uint32_t n = TS_MIN(x->len, y->len);
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void index_release(void *o) {
    tok_index *x = o;
    if (!x || __atomic_sub_fetch(&x->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    ts_free(x->kind);
    ts_free(x->off);
    ts_free(x->bytes);
    ts_free(x->byte);
    ts_free(x->level);
    ts_free(x->end);
    ts_free(x->tok_off);
    ts_free(x->tok_ids);
    ts_free(x->in_str);
    ts_free(x->height);
    ts_free(x);
}

void ts_constraint_free(ts_constraint *c) {
    if (!c) return;
    if (c->ent)
        for (int i = 0; i < c->cap; i++) ts_free(c->ent[i].mask), ts_free(c->ent[i].key);
    if (c->mu_ok) pthread_mutex_destroy(&c->mu);
    ts_free(c->ent);
    ts_free(c->head);
    ts_free(c->lit_ids);
    ts_free(c->lit);
    index_release(c->ix);
    ts_schema_free(c->schema);
    ts_free(c);
}

/* The trie from the tokens sorted by bytes: a token shares its first
 * lcp bytes (with the previous token) with nodes already made; nodes for
 * the rest follow in preorder. A node's subtree ends where the next node of
 * its level or above starts. */
static int build_trie(tok_index *c, const tok_ref *r, int n, size_t total_bytes) {
    const size_t cap = total_bytes + 1;
    c->byte = ts_alloc(cap, TS_MEM_MISC);
    c->level = ts_alloc(sizeof(uint16_t) * cap, TS_MEM_MISC);
    c->end = ts_alloc(sizeof(uint32_t) * cap, TS_MEM_MISC);
    c->tok_off = ts_alloc(sizeof(uint32_t) * (cap + 1), TS_MEM_MISC);
    c->tok_ids = ts_alloc(sizeof(int32_t) * (size_t)(n ? n : 1), TS_MEM_MISC);
    uint32_t *path = ts_alloc(sizeof(uint32_t) * ((size_t)c->max_len + 2), TS_MEM_MISC); /* open node per level */
    if (!c->byte || !c->level || !c->end || !c->tok_off || !c->tok_ids || !path) {
        ts_free(path);
        return TS_E_NOMEM;
    }
    uint32_t nn = 0, depth = 0; /* open levels on the path */
    for (int k = 0; k < n; k++) {
        uint32_t l = 0;
        if (k) {
            const uint32_t m = TS_MIN(r[k].len, r[k - 1].len);
            while (l < m && r[k].p[l] == r[k - 1].p[l]) l++;
        }
        /* close the levels past the shared prefix */
        while (depth > l) c->end[path[depth--]] = nn;
        for (uint32_t i = l; i < r[k].len; i++) {
            c->byte[nn] = r[k].p[i];
            c->level[nn] = (uint16_t)(i + 1);
            c->tok_off[nn] = (uint32_t)k;
            path[++depth] = nn++;
        }
        c->tok_ids[k] = r[k].id; /* ends at path[depth]: tok_off of the next node counts it */
    }
    while (depth > 0) c->end[path[depth--]] = nn;
    c->tok_off[nn] = (uint32_t)n;
    c->n_nodes = (int)nn;
    ts_free(path);
    return 0;
}

/* in_str, bottom-up (children follow their parent in preorder): node i
 * keeps the string from class k when its byte does (landing in class k')
 * and every child keeps it from k'. Inside a string most of the trie is
 * such subtrees; the walk then takes each whole, without feeding a byte. */
static int build_in_str(tok_index *c) {
    const uint32_t n = (uint32_t)c->n_nodes;
    c->in_str = ts_alloc(n ? n : 1, TS_MEM_MISC);
    if (!c->in_str) return TS_E_NOMEM;
    uint64_t dummy[TS_JSON_MAX_DEPTH / 64] = {0}; /* string bytes never touch the stack */
    for (uint32_t i = n; i-- > 0;) {
        uint8_t bits = 0;
        for (int k = 0; k < TS_JFSM_STR_CLASSES; k++) {
            ts_jhead h = ts_jfsm_string_head(k);
            if (!ts_jfsm_step(&h, dummy, c->byte[i])) continue;
            const int k2 = ts_jfsm_string_class(&h);
            if (k2 < 0) continue; /* the quote, a backslash */
            int all = 1;
            for (uint32_t j = i + 1; j < c->end[i] && all; j = c->end[j]) all = (c->in_str[j] >> k2) & 1;
            if (all) bits |= (uint8_t)(1u << k);
        }
        c->in_str[i] = bits;
    }
    return 0;
}

/* The subtrees' heights (a node's children follow it in preorder). */
static int build_height(tok_index *c) {
    const uint32_t n = (uint32_t)c->n_nodes;
    c->height = ts_alloc(sizeof(uint16_t) * (n ? n : 1), TS_MEM_MISC);
    if (!c->height) return TS_E_NOMEM;
    for (uint32_t i = n; i-- > 0;) {
        uint16_t h = 1;
        for (uint32_t j = i + 1; j < c->end[i]; j = c->end[j]) h = (uint16_t)TS_MAX(h, c->height[j] + 1);
        c->height[i] = h;
    }
    return 0;
}

static int cache_init(ts_constraint *c) {
    size_t mask_bytes = sizeof(uint64_t) * (size_t)c->words;
    size_t cap = TS_CONSTRAINT_CACHE_BYTES / mask_bytes;
    cap = TS_MAX(TS_MIN(cap, (size_t)CACHE_MAX_ENTRIES), (size_t)CACHE_MIN_ENTRIES);
    c->cap = (int)cap;
    c->n_buckets = 1;
    while (c->n_buckets < 2 * c->cap) c->n_buckets <<= 1;
    c->ent = ts_alloc(sizeof(centry) * cap, TS_MEM_MISC);
    c->head = ts_alloc(sizeof(int32_t) * (size_t)c->n_buckets, TS_MEM_MISC);
    if (!c->ent || !c->head) return TS_E_NOMEM;
    for (int i = 0; i < c->n_buckets; i++) c->head[i] = -1;
    for (int i = 0; i < c->cap; i++) c->ent[i].bucket = -1, c->ent[i].next = -1;
    if (pthread_mutex_init(&c->mu, NULL)) return TS_E_NOMEM;
    c->mu_ok = 1;
    return 0;
}

/* Whether n bytes p lie inside one of a wrapped schema's literals. */
static int in_literal(const ts_schema *sc, const char *p, size_t n) {
    for (int k = 0; sc && sc->wrap && k < TS_SW_N; k++) {
        const uint8_t *l = sc->wrap + sc->wrap_off[k];
        for (uint32_t i = 0; n <= sc->wrap_len[k] && i + n <= sc->wrap_len[k]; i++)
            if (!memcmp(l + i, p, n)) return 1;
    }
    return 0;
}

/* The tokenizer's index (ts_tok_attached's build; NULL: out of memory):
 * the candidates are the tokens with bytes that are not added tokens
 * (markup: <|im_end|>, <think>, <tool_call> decode to text a JSON string
 * could hold, but they are not text); the added ones with text (not
 * special) keep their bytes for a wrap's literals. */
static void *index_build(const ts_tokenizer *t, void *arg) {
    (void)arg;
    const int V = ts_tokenizer_vocab_size(t);
    tok_index *c = ts_alloc(sizeof *c, TS_MEM_MISC);
    tok_ref *r = ts_alloc(sizeof(tok_ref) * (size_t)V, TS_MEM_MISC);
    if (c) c->kind = ts_alloc((size_t)V, TS_MEM_MISC);
    if (!c || !r || !c->kind) goto nomem;
    c->refs = 1; /* the tokenizer's */
    c->n_ids = V;
    ts_tok_mark_added(t, c->kind);
    size_t total = 0;
    int n = 0;
    for (int id = 0; id < V; id++) {
        size_t len = 0;
        const char *p = ts_tokenizer_token_bytes(t, id, &len);
        const int text = p && len > 0 && !ts_tokenizer_is_special(t, id) && len < 65535;
        const int cand = text && !c->kind[id];
        c->kind[id] = (uint8_t)(cand ? 1 : text && c->kind[id] ? 2 : 0);
        if (!c->kind[id]) continue;
        total += len;
        if (!cand) continue;
        r[n++] = (tok_ref){(const uint8_t *)p, (uint32_t)len, id};
        int open = 0, close = 0;
        for (size_t i = 0; i < len; i++) open += p[i] == '[' || p[i] == '{', close += p[i] == ']' || p[i] == '}';
        c->max_len = TS_MAX(c->max_len, (int)len);
        c->max_open = TS_MAX(c->max_open, open);
        c->max_close = TS_MAX(c->max_close, close);
    }
    c->n_tokens = n;
    /* the tokens' bytes, copied: the trie and the sort point into them */
    c->off = ts_alloc(sizeof(uint32_t) * ((size_t)V + 1), TS_MEM_MISC);
    c->bytes = ts_alloc(total + 1, TS_MEM_MISC);
    if (!c->off || !c->bytes || total >= UINT32_MAX) goto nomem;
    c->off[0] = 0;
    for (int k = 0, id = 0; id < V; id++) {
        c->off[id + 1] = c->off[id];
        if (!c->kind[id]) continue;
        size_t len = 0;
        const char *p = ts_tokenizer_token_bytes(t, id, &len);
        memcpy(c->bytes + c->off[id], p, len);
        if (c->kind[id] == 1) r[k++].p = c->bytes + c->off[id]; /* r is in id order until the sort */
        c->off[id + 1] += (uint32_t)len;
    }
    qsort(r, (size_t)n, sizeof *r, cmp_tok);
    if (build_trie(c, r, n, total) || build_in_str(c) || build_height(c)) goto nomem;
    ts_free(r);
    return c;
nomem:
    ts_free(r);
    index_release(c);
    return NULL;
}

/* A constraint over the tokenizer's shared index; wsc, a wrapped schema,
 * picks the literal tokens. */
static int constraint_new(const ts_tokenizer *t, const char *name, const ts_schema *wsc, ts_constraint **out,
                          ts_error *err) {
    const int V = ts_tokenizer_vocab_size(t);
    if (V <= 0) return ts_fail(err, TS_E_ARG, "%s: the tokenizer has no tokens", name);
    ts_constraint *c = ts_alloc(sizeof *c, TS_MEM_MISC);
    tok_index *ix = ts_tok_attached(t, index_build, NULL, index_release);
    if (!c || !ix) goto nomem;
    __atomic_add_fetch(&ix->refs, 1, __ATOMIC_ACQ_REL);
    c->ix = ix;
    c->name = name;
    c->n_ids = V;
    c->words = (V + 63) / 64;
    if (wsc && wsc->wrap) {
        for (int id = 0; id < V; id++) {
            if (ix->kind[id] != 2 || !in_literal(wsc, (const char *)ix->bytes + ix->off[id], ix->off[id + 1] - ix->off[id]))
                continue;
            if (!c->lit && !(c->lit = ts_alloc(sizeof(uint64_t) * (size_t)c->words, TS_MEM_MISC))) goto nomem;
            int32_t *q = ts_alloc(sizeof(int32_t) * (size_t)(c->n_lit + 1), TS_MEM_MISC);
            if (!q) goto nomem;
            if (c->n_lit) memcpy(q, c->lit_ids, sizeof(int32_t) * (size_t)c->n_lit);
            ts_free(c->lit_ids);
            c->lit_ids = q;
            c->lit_ids[c->n_lit++] = id;
            c->lit[id >> 6] |= (uint64_t)1 << (id & 63);
        }
    }
    if (cache_init(c)) goto nomem;
    *out = c;
    return 0;
nomem:
    ts_constraint_free(c);
    return ts_fail(err, TS_E_NOMEM, "%s: out of memory indexing %d tokens", name, V);
}

int ts_constraint_json(const ts_tokenizer *t, int object_only, ts_constraint **out, ts_error *err) {
    if (!out) return ts_fail(err, TS_E_ARG, "JSON constraint: no output pointer");
    *out = NULL;
    if (!t) return ts_fail(err, TS_E_ARG, "JSON constraint: no tokenizer");
    if (object_only != 0 && object_only != 1)
        return ts_fail(err, TS_E_ARG, "JSON constraint: object_only %d (0: any value, 1: an object)", object_only);
    int rc = constraint_new(t, "JSON constraint", NULL, out, err);
    if (!rc) (*out)->kind = CK_JSON, (*out)->object_only = object_only;
    return rc;
}

/* A schema's constraint, wrapped when w is set. */
static int schema_constraint(const ts_tokenizer *t, const char *schema, size_t len, const ts_constraint_wrap *w,
                             ts_constraint **out, ts_error *err) {
    const char *name = w ? "wrapped JSON schema constraint" : "JSON schema constraint";
    if (!out) return ts_fail(err, TS_E_ARG, "%s: no output pointer", name);
    *out = NULL;
    if (!t) return ts_fail(err, TS_E_ARG, "%s: no tokenizer", name);
    ts_schema *sc = NULL;
    int rc = ts_schema_compile(schema, len, &sc, err);
    if (!rc && w) rc = ts_schema_set_wrap(sc, w->prefix, w->suffix, w->sep, w->repeat, err);
    if (rc) {
        ts_schema_free(sc);
        return rc;
    }
    ts_constraint *c = NULL;
    if ((rc = constraint_new(t, name, sc, &c, err))) {
        ts_schema_free(sc);
        return rc;
    }
    c->kind = CK_SCHEMA;
    c->schema = sc;
    *out = c;
    return 0;
}

int ts_constraint_json_schema(const ts_tokenizer *t, const char *schema, size_t len, ts_constraint **out,
                              ts_error *err) {
    return schema_constraint(t, schema, len, NULL, out, err);
}

int ts_constraint_json_schema_wrap(const ts_tokenizer *t, const char *schema, size_t len, const ts_constraint_wrap *w,
                                   ts_constraint **out, ts_error *err) {
    if (!w) {
        if (out) *out = NULL;
        return ts_fail(err, TS_E_ARG, "wrapped JSON schema constraint: no wrap given");
    }
    return schema_constraint(t, schema, len, w, out, err);
}

const ts_schema *ts_constraint_schema(const ts_constraint *c) { return c && c->kind == CK_SCHEMA ? c->schema : NULL; }

/* ---- the walk ---- */

static inline int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* Set out's bits for the ids of the trie that extend st. g->stk is the
 * stack the walk mutates (a copy of st's). */
static void walk(ts_cgen *g, const ts_jfsm *st, uint64_t *out) {
    const ts_constraint *c = g->c;
    memset(out, 0, sizeof(uint64_t) * (size_t)c->words);
    const int complete = ts_jfsm_complete(st);
    /* a complete text takes no more bytes but a top-level number's */
    if (complete && !ts_jfsm_in_number(st)) return;
    ts_cframe *f = g->frames;
    uint64_t *stk = g->stk;
    memcpy(stk, st->stack, sizeof st->stack);
    f[0].h = st->h;
    const uint8_t *byte = c->ix->byte;
    const uint16_t *level = c->ix->level;
    const uint32_t *end = c->ix->end, *toff = c->ix->tok_off;
    const int32_t *tid = c->ix->tok_ids;
    const uint32_t n = (uint32_t)c->ix->n_nodes;
    uint32_t cur = 0; /* deepest level whose saved word is live */
    for (uint32_t i = 0; i < n;) {
        const uint32_t L = level[i];
        while (cur >= L) { /* leave the levels of the previous branch */
            stk[f[cur].widx] = f[cur].wsave;
            cur--;
        }
        ts_jhead h = f[L - 1].h;
        const int cls = ts_jfsm_string_class(&h);
        if (cls >= 0 && ((c->ix->in_str[i] >> cls) & 1)) { /* a subtree that stays in the string: all of it */
            for (uint32_t k = toff[i]; k < toff[end[i]]; k++) out[tid[k] >> 6] |= (uint64_t)1 << (tid[k] & 63);
            i = end[i];
            continue;
        }
        const uint32_t w = (uint32_t)h.depth >> 6;
        f[L].widx = w < STACK_WORDS ? w : STACK_WORDS - 1;
        f[L].wsave = stk[f[L].widx];
        cur = L;
        if ((L == 1 && complete && is_ws(byte[i])) || !ts_jfsm_step(&h, stk, byte[i])) {
            i = end[i];
            continue;
        }
        f[L].h = h;
        for (uint32_t k = toff[i]; k < toff[i + 1]; k++) out[tid[k] >> 6] |= (uint64_t)1 << (tid[k] & 63);
        i++;
    }
    while (cur > 0) stk[f[cur].widx] = f[cur].wsave, cur--;
}

/* The schema form of walk(): lv[L] holds the threads after level L's byte
 * (over st, the reply's flat state), lcls/lroom its string shortcut. */
static void walk_schema(ts_cgen *g, const ts_sstate *st, uint64_t *out) {
    const ts_constraint *c = g->c;
    const ts_schema *sc = c->schema;
    memset(out, 0, sizeof(uint64_t) * (size_t)c->words);
    const int complete = ts_sfsm_complete(sc, st);
    /* a complete document takes no more bytes, but a number's or a literal's
     * that goes on ("1" of enum [1, 12]) */
    if (!st->n || (complete && ts_sfsm_done(sc, st))) return;
    ts_swstate *lv = g->lv;
    ts_sfsm_lift(st, &lv[0]);
    int cls = -1;
    uint32_t room = 0;
    g->lcls[0] = (int16_t)(ts_sfsm_in_string(sc, &lv[0], &cls, &room) ? cls : -1);
    g->lroom[0] = room;
    const uint8_t *byte = c->ix->byte;
    const uint16_t *level = c->ix->level;
    const uint32_t *end = c->ix->end, *toff = c->ix->tok_off;
    const int32_t *tid = c->ix->tok_ids;
    const uint32_t n = (uint32_t)c->ix->n_nodes;
    for (uint32_t i = 0; i < n;) {
        const uint32_t L = level[i];
        const int pc = g->lcls[L - 1];
        if (pc >= 0 && ((c->ix->in_str[i] >> pc) & 1) && g->lroom[L - 1] >= c->ix->height[i]) { /* stays in the string */
            for (uint32_t k = toff[i]; k < toff[end[i]]; k++) out[tid[k] >> 6] |= (uint64_t)1 << (tid[k] & 63);
            i = end[i];
            continue;
        }
        /* no trailing whitespace token after a complete document (a
         * wrapped one takes none: what may follow is its literals') */
        if ((L == 1 && complete && !sc->wrap && is_ws(byte[i])) ||
            !ts_sfsm_step(sc, st, &lv[L - 1], byte[i], &lv[L])) {
            i = end[i];
            continue;
        }
        g->lcls[L] = (int16_t)(ts_sfsm_in_string(sc, &lv[L], &cls, &room) ? cls : -1);
        g->lroom[L] = room;
        for (uint32_t k = toff[i]; k < toff[i + 1]; k++) out[tid[k] >> 6] |= (uint64_t)1 << (tid[k] & 63);
        i++;
    }
    /* the literal tokens, one by one (a handful), in the step scratch */
    for (int k = 0; k < c->n_lit; k++) {
        const int32_t id = c->lit_ids[k];
        const uint8_t *p = c->ix->bytes + c->ix->off[id];
        const uint32_t len = c->ix->off[id + 1] - c->ix->off[id];
        ts_swstate *cur = &g->sw->a, *nxt = &g->sw->b;
        ts_sfsm_lift(st, cur);
        uint32_t j = 0;
        for (; j < len && ts_sfsm_step_literal(sc, st, cur, p[j], nxt); j++) {
            ts_swstate *tmp = cur;
            cur = nxt, nxt = tmp;
        }
        if (j == len) out[id >> 6] |= (uint64_t)1 << (id & 63);
    }
}

/* ---- the cache ---- */

static void make_key(const ts_constraint *c, const ts_jfsm *st, ckey *k) {
    memset(k, 0, sizeof *k);
    k->h = ts_jfsm_norm_head(&st->h);
    const int d = st->h.depth, reach = c->ix->max_close + 1;
    int from = 0; /* the stack kinds [from, d) are part of the key */
    if (d > reach && d + c->ix->max_open < TS_JSON_MAX_DEPTH) {
        from = d - reach;
        k->h.depth = 0xFFFF;
    }
    for (int i = from; i < d; i++)
        if ((st->stack[i >> 6] >> (i & 63)) & 1) k->bits[(i - from) >> 6] |= (uint64_t)1 << ((i - from) & 63);
}

static uint32_t hash_key(const uint8_t *k, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, k + i, TS_MIN((size_t)8, n - i));
        h ^= w;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static int find(const ts_constraint *c, const uint8_t *k, uint32_t n, uint32_t hv) {
    for (int32_t e = c->head[hv & (uint32_t)(c->n_buckets - 1)]; e >= 0; e = c->ent[e].next)
        if (c->ent[e].key_len == n && !memcmp(c->ent[e].key, k, n)) return e;
    return -1;
}

static void unlink_entry(ts_constraint *c, int e) {
    int32_t *p = &c->head[c->ent[e].bucket];
    while (*p != e) p = &c->ent[*p].next;
    *p = c->ent[e].next;
    c->ent[e].bucket = -1;
}

/* Store a mask under k: a free entry, else the least recently used one
 * (a scan: a miss costs a walk, thousands of times more). Out of memory
 * for the mask: nothing is stored (the cache only saves time). */
static void store(ts_constraint *c, const uint8_t *k, uint32_t kn, uint32_t hv, const uint64_t *mask) {
    if (find(c, k, kn, hv) >= 0) return; /* another thread stored it meanwhile */
    int e = -1;
    if (c->n_ent < c->cap) e = c->n_ent++;
    else {
        uint64_t best = UINT64_MAX;
        for (int i = 0; i < c->cap; i++)
            if (c->ent[i].tick < best) best = c->ent[i].tick, e = i;
        unlink_entry(c, e);
    }
    centry *x = &c->ent[e];
    if (!x->mask) x->mask = ts_alloc(sizeof(uint64_t) * (size_t)c->words, TS_MEM_MISC);
    if (x->key_cap < kn) {
        ts_free(x->key);
        x->key = ts_alloc(kn, TS_MEM_MISC);
        x->key_cap = x->key ? kn : 0;
    }
    if (!x->mask || !x->key) {
        if (e == c->n_ent - 1) c->n_ent--;
        return;
    }
    memcpy(x->key, k, kn);
    x->key_len = kn;
    memcpy(x->mask, mask, sizeof(uint64_t) * (size_t)c->words);
    x->tick = ++c->tick;
    x->bucket = (int32_t)(hv & (uint32_t)(c->n_buckets - 1));
    x->next = c->head[x->bucket];
    c->head[x->bucket] = e;
}

/* The mask under key k from the cache, else by walk_fn (and stored). */
static void cached_mask(ts_cgen *g, const uint8_t *k, uint32_t kn, const void *st, int use_cache, uint64_t *out,
                        void (*walk_fn)(ts_cgen *, const void *, uint64_t *)) {
    /* the cache is the one mutable part of a shared constraint: under its lock */
    ts_constraint *c = (ts_constraint *)g->c;
    if (!use_cache) {
        walk_fn(g, st, out);
        return;
    }
    const uint32_t hv = hash_key(k, kn);
    pthread_mutex_lock(&c->mu);
    const int e = find(c, k, kn, hv);
    if (e >= 0) {
        memcpy(out, c->ent[e].mask, sizeof(uint64_t) * (size_t)c->words);
        c->ent[e].tick = ++c->tick;
        c->hits++;
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    walk_fn(g, st, out);
    pthread_mutex_lock(&c->mu);
    store(c, k, kn, hv, out);
    pthread_mutex_unlock(&c->mu);
}

static void walk_json_fn(ts_cgen *g, const void *st, uint64_t *out) { walk(g, st, out); }
static void walk_schema_fn(ts_cgen *g, const void *st, uint64_t *out) { walk_schema(g, st, out); }

void ts_constraint_byte_mask(ts_cgen *g, const ts_jfsm *st, int use_cache, uint64_t *out) {
    ckey k;
    if (use_cache) make_key(g->c, st, &k);
    cached_mask(g, (const uint8_t *)&k, sizeof k, st, use_cache, out, walk_json_fn);
}

void ts_constraint_schema_mask(ts_cgen *g, const ts_sstate *st, int use_cache, uint64_t *out) {
    const ts_constraint *c = g->c;
    const uint32_t kn = use_cache ? (uint32_t)ts_sfsm_key(c->schema, st, c->ix->max_close, c->ix->max_open, g->key) : 0;
    cached_mask(g, g->key, kn, st, use_cache, out, walk_schema_fn);
}

void ts_constraint_get_info(const ts_constraint *c, ts_constraint_info *o) {
    ts_constraint *m = (ts_constraint *)c;
    memset(o, 0, sizeof *o);
    o->n_ids = c->n_ids;
    o->n_tokens = c->ix->n_tokens;
    o->n_nodes = c->ix->n_nodes;
    o->max_len = c->ix->max_len;
    o->max_close = c->ix->max_close;
    o->max_open = c->ix->max_open;
    o->index = c->ix;
    o->index_refs = __atomic_load_n(&c->ix->refs, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&m->mu);
    o->cache_cap = c->cap;
    o->cache_n = c->n_ent;
    o->hits = c->hits;
    o->misses = c->misses;
    pthread_mutex_unlock(&m->mu);
}

void ts_constraint_cache_limit(ts_constraint *c, int n) {
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_ent; i++) ts_free(c->ent[i].mask), c->ent[i].mask = NULL, c->ent[i].key_len = 0;
    for (int i = 0; i < c->n_buckets; i++) c->head[i] = -1;
    for (int i = 0; i < c->cap; i++) c->ent[i].bucket = -1, c->ent[i].next = -1, c->ent[i].tick = 0;
    c->n_ent = 0;
    c->cap = TS_MAX(1, TS_MIN(n, c->cap)); /* the table keeps its size; only its use shrinks */
    pthread_mutex_unlock(&c->mu);
}

int ts_constraint_token_ok(const ts_constraint *c, int32_t id) { return id >= 0 && id < c->n_ids && tok_kind(c, id); }
int ts_constraint_token_literal(const ts_constraint *c, int32_t id) {
    return id >= 0 && id < c->n_ids && tok_kind(c, id) == 2;
}

/* ---- a generation's constraint ---- */

void ts_cgen_free(ts_cgen *g) {
    if (!g || !g->owner) return;
    ts_free(g->mask);
    ts_free(g->frames);
    ts_free(g->stk);
    ts_free(g->ss);
    ts_free(g->ss_look);
    ts_free(g->sw);
    ts_free(g->lv);
    ts_free(g->lcls);
    ts_free(g->lroom);
    ts_free(g->key);
    memset(g, 0, sizeof *g);
}

void ts_cgen_lookahead(ts_cgen *dst, const ts_cgen *src) {
    *dst = *src;
    dst->owner = 0;
    if (src->ss) {
        ts_sfsm_copy(src->ss_look, src->ss);
        dst->ss = src->ss_look;
    }
}

int ts_cgen_init(ts_cgen *g, const ts_gen_params *p, int V, ts_error *err) {
    memset(g, 0, sizeof *g);
    const ts_constraint *c = p->constraint;
    if (!c) return 0;
    if (c->n_ids > V)
        return ts_fail(err, TS_E_ARG, "%s: its tokenizer has %d ids, more than the model's %d (another model's tokenizer?)",
                       c->name, c->n_ids, V);
    if (p->n_stop < 0 || (p->n_stop && !p->stop_ids))
        return ts_fail(err, TS_E_ARG, "%s: %d stop ids without the ids", c->name, p->n_stop);
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= V)
            return ts_fail(err, TS_E_ARG, "%s: stop id %d is outside the vocabulary [0, %d)", c->name, p->stop_ids[i], V);
    if (p->constraint_after >= V)
        return ts_fail(err, TS_E_ARG, "%s: constraint_after id %d is outside the vocabulary [0, %d)", c->name,
                       p->constraint_after, V);
    g->c = c;
    g->owner = 1;
    g->V = V;
    g->words = (V + 63) / 64;
    g->after = p->constraint_after > 0 ? p->constraint_after : -1;
    g->active = g->after < 0;
    ts_jfsm_init(&g->st, c->object_only);
    g->stop = p->stop_ids;
    g->n_stop = p->n_stop;
    g->mask = ts_alloc(sizeof(uint64_t) * (size_t)g->words, TS_MEM_SCRATCH);
    g->frames = ts_alloc(sizeof(ts_cframe) * ((size_t)c->ix->max_len + 1), TS_MEM_SCRATCH);
    g->stk = ts_alloc(sizeof(uint64_t) * STACK_WORDS, TS_MEM_SCRATCH);
    int bad = !g->mask || !g->frames || !g->stk;
    if (c->kind == CK_SCHEMA && !bad) {
        const size_t levels = (size_t)c->ix->max_len + 1;
        g->ss = ts_alloc(sizeof(ts_sstate), TS_MEM_SCRATCH);
        g->ss_look = ts_alloc(sizeof(ts_sstate), TS_MEM_SCRATCH);
        g->sw = ts_alloc(sizeof(ts_sfsm_work), TS_MEM_SCRATCH);
        g->lv = ts_alloc(sizeof(ts_swstate) * levels, TS_MEM_SCRATCH);
        g->lcls = ts_alloc(sizeof(int16_t) * levels, TS_MEM_SCRATCH);
        g->lroom = ts_alloc(sizeof(uint32_t) * levels, TS_MEM_SCRATCH);
        g->key = ts_alloc(TS_SFSM_KEY_MAX, TS_MEM_SCRATCH);
        bad = !g->ss || !g->ss_look || !g->sw || !g->lv || !g->lcls || !g->lroom || !g->key;
        if (!bad) ts_sfsm_init(g->ss, c->schema);
    }
    if (bad) {
        ts_cgen_free(g);
        return ts_fail(err, TS_E_NOMEM, "%s: out of memory for a mask of %d ids", c->name, V);
    }
    return 0;
}

static int is_stop(const ts_cgen *g, int32_t id) {
    for (int i = 0; i < g->n_stop; i++)
        if (g->stop[i] == id) return 1;
    return 0;
}

int ts_cgen_arm(ts_cgen *g, ts_sampler *smp, ts_error *err) {
    if (!g || !g->c) return 0;
    if (!g->active) {
        ts_sampler_set_ban(smp, g->stop, g->n_stop);
        return 0;
    }
    int rc = ts_cgen_mask(g, err);
    if (!rc) ts_sampler_set_mask(smp, g->mask);
    return rc;
}

void ts_cgen_disarm(ts_sampler *smp) {
    ts_sampler_set_mask(smp, NULL);
    ts_sampler_set_ban(smp, NULL, 0);
}

/* The recognizer's verdicts on g's reply, whichever the grammar. */
static int cgen_complete(const ts_cgen *g) {
    return g->ss ? ts_sfsm_complete(g->c->schema, g->ss) : ts_jfsm_complete(&g->st);
}

int ts_cgen_mask(ts_cgen *g, ts_error *err) {
    /* the byte rule over the tokenizer's ids (bits past them stay 0: the
     * model's padding rows are never allowed), then the stop ids: allowed
     * exactly when the text is complete, whatever their bytes */
    memset(g->mask, 0, sizeof(uint64_t) * (size_t)g->words);
    if (g->ss) ts_constraint_schema_mask(g, g->ss, 1, g->mask);
    else ts_constraint_byte_mask(g, &g->st, 1, g->mask);
    const int complete = cgen_complete(g);
    for (int i = 0; i < g->n_stop; i++) {
        const int32_t id = g->stop[i];
        const uint64_t bit = (uint64_t)1 << (id & 63);
        g->mask[id >> 6] = complete ? g->mask[id >> 6] | bit : g->mask[id >> 6] & ~bit;
    }
    for (int i = 0; i < g->words; i++)
        if (g->mask[i]) return 0;
    return ts_fail(err, TS_E_ARG,
                   "%s: no token of the vocabulary can continue the reply after %ld bytes (%s, depth %d%s): "
                   "the tokenizer lacks the bytes the grammar needs",
                   g->c->name, g->n_bytes, g->ss ? ts_sfsm_describe(g->ss) : ts_jfsm_describe(&g->st),
                   g->ss ? (g->ss->n ? g->ss->t[0].depth : 0) : g->st.h.depth,
                   complete && !g->n_stop ? ", complete, no stop ids" : "");
}

int ts_cgen_advance(ts_cgen *g, int32_t id, ts_error *err) {
    if (!g->c) return 0;
    if (!g->active) {
        g->active = id == g->after;
        return 0;
    }
    if (is_stop(g, id)) return 0; /* the generation ends on it anyway */
    const ts_constraint *c = g->c;
    if (!ts_constraint_token_ok(c, id))
        return ts_fail(err, TS_E_ARG, "%s: token id %d was emitted, which the constraint never allows", c->name, id);
    const uint32_t len = c->ix->off[id + 1] - c->ix->off[id];
    const uint8_t *p = c->ix->bytes + c->ix->off[id];
    const int ok = !g->ss            ? ts_jfsm_feed_bytes(&g->st, p, len)
                   : tok_kind(c, id) == 2 ? ts_sfsm_feed_literal(c->schema, g->ss, p, len, g->sw)
                                    : ts_sfsm_feed_token(c->schema, g->ss, p, len, g->sw);
    if (!ok)
        return ts_fail(err, TS_E_ARG, "%s: token id %d was emitted after %ld bytes (%s), which its mask did not allow",
                       c->name, id, g->n_bytes, g->ss ? ts_sfsm_describe(g->ss) : ts_jfsm_describe(&g->st));
    g->n_bytes += len;
    return cgen_complete(g) && !g->n_stop;
}
