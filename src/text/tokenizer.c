/* tokenizer.c: a Hugging Face tokenizer.json byte-level BPE tokenizer.
 *
 * Owns: loading tokenizer.json (vocab, merges in both the ["a","b"] and the
 * legacy "a b" form, added tokens, normalizer, pre-tokenizer), encoding text
 * to ids, decoding ids to bytes, streaming decoding, id/string lookups.
 * Does not own: chat templates (chat.c), BOS/EOS policy (the engine decides;
 * encode adds nothing, like HF's add_special_tokens=False).
 *
 * Encoding pipeline (the one HF `tokenizers` runs for Qwen3/Qwen3.5):
 *   1. Added tokens with normalized=false are found in the raw text, exact,
 *      leftmost-longest; each is one id and never merges with neighbours.
 *   2. Every other segment is normalized (NFC through utf8proc), then split
 *      again by added tokens with normalized=true, if any.
 *   3. The Split regex from the file (behavior Isolated) cuts the segment
 *      into pieces; matches and the gaps between them are both pieces.
 *   4. Each piece's bytes become byte-level symbols (one per byte), and BPE
 *      repeatedly merges the adjacent pair of lowest merge rank (leftmost on
 *      ties) until no pair has a merge.
 * We work on raw bytes and ids throughout: the GPT-2 byte->unicode alphabet
 * only matters when reading the file (vocab strings are in that alphabet) and
 * for token_id() lookups. Decoding is a table of bytes per id.
 *
 * The regex: HF compiles it with Oniguruma. PCRE2 (UTF + UCP) agrees on the
 * Unicode properties used (\p{L} \p{N} \p{M}, case folding of (?i:...)), but
 * not on \s: PCRE2 10.42's UCP \s is \p{Z} + \h + \v, which includes U+0085
 * (NEL) and U+180E, while Oniguruma's \s (what the goldens were made with)
 * is White_Space minus U+0085 (its Latin-1 ctype table marks NEL as a
 * control only). We therefore rewrite \s and \S in the pattern to an explicit
 * class before compiling (tok_rewrite_regex); the test group checks it.
 *
 * Speed: a piece -> ids cache (HF keeps one too) turns most pieces into one
 * hash lookup; BPE uses a linear scan for short pieces and a binary heap over
 * a linked list for long ones, so a 10,000-letter piece is O(n log n).
 *
 * Invariants: every id in [0, n_vocab) has tok_off/tok_len (tok_len may be 0
 * for a hole in the id space, flagged by has_tok=0). byte_id[b] is the id of
 * the single-byte token for b, or -1 (HF then silently drops the byte, since
 * these files have no unk token). Encode holds t->mu for its whole duration
 * (cache, scratch and PCRE2 match data are per tokenizer).
 *
 * References: HF tokenizers (Rust) models/bpe/word.rs (merge order and
 * validation), pre_tokenizers/byte_level.rs (bytes_to_unicode),
 * tokenizer/added_vocabulary.rs (added-token splitting), utils/pattern.rs
 * (Isolated split with gaps); ../shared/tokenizer/README.md (the team's golden data).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "text/tokenizer.h"

/* ---- hashing ------------------------------------------------------------ */

static uint64_t tok_hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* String -> id map over strings stored in an arena (open addressing). */
typedef struct {
    uint32_t *slot;   /* [cap] index+1 into ent, 0 = empty */
    uint32_t cap;
    struct strent { uint32_t off, len; int32_t id; } *ent;
    uint32_t n, n_cap;
    char *arena;
    size_t arena_len, arena_cap;
} strmap;

static void strmap_free(strmap *m) {
    ts_free(m->slot);
    ts_free(m->ent);
    ts_free(m->arena);
    memset(m, 0, sizeof *m);
}

static int strmap_init(strmap *m, uint32_t n_expect, size_t arena_bytes) {
    memset(m, 0, sizeof *m);
    m->cap = (uint32_t)pow2_at_least((size_t)n_expect * 2 + 16);
    m->n_cap = n_expect + 16;
    m->arena_cap = arena_bytes + 16;
    m->slot = ts_alloc(sizeof(uint32_t) * m->cap, TS_MEM_MISC);
    m->ent = ts_alloc(sizeof(struct strent) * m->n_cap, TS_MEM_MISC);
    m->arena = ts_alloc(m->arena_cap, TS_MEM_MISC);
    if (!m->slot || !m->ent || !m->arena) {
        strmap_free(m);
        return TS_E_NOMEM;
    }
    return 0;
}

static int32_t strmap_get(const strmap *m, const char *s, size_t n) {
    if (!m->cap) return -1;
    uint32_t mask = m->cap - 1, i = (uint32_t)tok_hash(s, n) & mask;
    for (;;) {
        uint32_t e = m->slot[i];
        if (!e) return -1;
        const struct strent *x = &m->ent[e - 1];
        if (x->len == n && !memcmp(m->arena + x->off, s, n)) return x->id;
        i = (i + 1) & mask;
    }
}

/* Insert or overwrite. The map was sized at init; growing is not needed for
 * the one use (vocab), so running out is reported as NOMEM. */
static int strmap_put(strmap *m, const char *s, size_t n, int32_t id) {
    uint32_t mask = m->cap - 1, i = (uint32_t)tok_hash(s, n) & mask;
    for (;;) {
        uint32_t e = m->slot[i];
        if (!e) break;
        struct strent *x = &m->ent[e - 1];
        if (x->len == n && !memcmp(m->arena + x->off, s, n)) {
            x->id = id;
            return 0;
        }
        i = (i + 1) & mask;
    }
    if (m->n >= m->n_cap || m->n * 2 >= m->cap || m->arena_len + n > m->arena_cap)
        return TS_E_NOMEM;
    memcpy(m->arena + m->arena_len, s, n);
    m->ent[m->n] = (struct strent){(uint32_t)m->arena_len, (uint32_t)n, id};
    m->arena_len += n;
    m->slot[i] = ++m->n;
    return 0;
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes available): >0 the
 * length of a complete valid character; 0 when the bytes are a valid but
 * incomplete prefix (more bytes could complete it); <0 when invalid, -k
 * meaning the maximal invalid subpart is k bytes. */
static int utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0;
        uint8_t b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -k;
    }
    return need + 1;
}

size_t ts_utf8_check(const char *str, size_t len) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_seq(s + i, len - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return len;
}

static int utf8_encode(uint32_t c, char *o) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 63));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 63));
        o[2] = (char)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 63));
    o[2] = (char)(0x80 | ((c >> 6) & 63));
    o[3] = (char)(0x80 | (c & 63));
    return 4;
}

/* ---- the tokenizer ------------------------------------------------------- */

typedef struct {
    char *content;   /* owned, NUL-terminated */
    size_t len;
    int32_t id;
    uint8_t special, normalized, lstrip, rstrip;
} added_tok;

/* Added tokens of one kind (raw or normalized), for leftmost-longest search:
 * idx sorted by first byte, then by length descending. */
typedef struct {
    int n;
    int *idx;                 /* [n] into t->added */
    uint16_t first[257];      /* idx range per first byte: [first[b], first[b+1]) */
    uint8_t any_first[256];
} added_set;

/* BPE merge table: (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key;   /* left << 32 | right; UINT64_MAX = empty */
    uint32_t rank;
    int32_t id;
} merge_ent;

/* Cache of piece -> ids. A hit costs one hash and one memcmp. It starts
 * small (a tokenizer that encodes little pays little: loading is cheap) and
 * doubles each time it fills, up to CACHE_MAX_ENTS entries and
 * CACHE_MAX_ARENA bytes; when full at that size it is dropped whole (cheap,
 * and rare). Growing also drops the contents: the cache only saves time. */
#define CACHE_MAX_PIECE 256
#define CACHE_MIN_ENTS (1u << 10)
#define CACHE_MIN_ARENA ((size_t)64 << 10)
#define CACHE_MAX_ENTS (1u << 16)
#define CACHE_MAX_ARENA ((size_t)4 << 20)
typedef struct {
    uint64_t h;
    uint32_t off;     /* into arena: key bytes, then ids (4-byte aligned) */
    uint16_t klen, nids;
} cache_ent;

struct ts_tokenizer {
    int n_vocab;
    uint32_t *tok_off, *tok_len;  /* [n_vocab] into tok_bytes */
    uint8_t *has_tok;             /* [n_vocab] */
    uint8_t *special;             /* [n_vocab] 1 = added token marked special */
    char *tok_bytes;
    size_t max_tok_len;
    strmap vocab;                 /* file string (byte-level alphabet) -> id */
    int32_t byte_id[256];
    uint32_t b2u[256];            /* byte -> byte-level code point */

    merge_ent *merges;
    uint32_t merge_mask;
    int n_merges;

    added_tok *added;
    int n_added;
    added_set raw_set, norm_set;

    int nfc;
    int ignore_merges;
    int has_split;
    char *regex;                  /* rewritten pattern, owned */
    pcre2_code *re;
    int jit;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;

    pthread_mutex_t mu;

    /* the attached object (ts_tok_attached), under its own lock: its build
     * takes tens of ms and must not hold encoders up */
    pthread_mutex_t att_mu;
    void *att;
    void (*att_release)(void *);

    /* cache (under mu) */
    cache_ent *cache;
    uint32_t cache_mask, cache_n;
    char *cache_arena;
    size_t cache_used, cache_cap;

    /* scratch (under mu) */
    int32_t *nfc_buf;
    size_t nfc_cap;               /* in int32 units */
    int32_t *sym;                 /* BPE symbols */
    uint32_t *rank;
    int32_t *pair_id;
    int32_t *prev, *next;
    uint64_t *heap;               /* (rank << 32 | pos) */
    size_t bpe_cap;               /* capacity of the arrays above, in symbols */
    ts_tokens *out;               /* the vector encode appends to */
    int oom;
};

/* GPT-2 byte-level alphabet: printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order. */
static void byte_level_tables(uint32_t b2u[256], int16_t u2b[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

int ts_tokenizer_vocab_size(const ts_tokenizer *t) { return t ? t->n_vocab : 0; }

const char *ts_tok_regex(const ts_tokenizer *t) { return t->regex; }

int ts_tokenizer_token_id(const ts_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, token, n)) return t->added[i].id;
    return strmap_get(&t->vocab, token, n);
}

const char *ts_tokenizer_token_bytes(const ts_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab || !t->has_tok[id]) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tok_len[id];
    return t->tok_bytes + t->tok_off[id];
}

int ts_tokenizer_is_special(const ts_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->special[id];
}

void ts_tok_mark_added(const ts_tokenizer *t, uint8_t *flags) {
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id >= 0 && t->added[i].id < t->n_vocab) flags[t->added[i].id] = 1;
}

void *ts_tok_attached(const ts_tokenizer *t, void *(*build)(const ts_tokenizer *t, void *arg), void *arg,
                      void (*release)(void *obj)) {
    ts_tokenizer *m = (ts_tokenizer *)t; /* the slot is a cache: logically const */
    pthread_mutex_lock(&m->att_mu);
    if (!m->att && (m->att = build(t, arg))) m->att_release = release;
    void *o = m->att;
    pthread_mutex_unlock(&m->att_mu);
    return o;
}

void ts_tokenizer_free(ts_tokenizer *t) {
    if (!t) return;
    if (t->att) t->att_release(t->att);
    pthread_mutex_destroy(&t->att_mu);
    ts_free(t->tok_off);
    ts_free(t->tok_len);
    ts_free(t->has_tok);
    ts_free(t->special);
    ts_free(t->tok_bytes);
    strmap_free(&t->vocab);
    ts_free(t->merges);
    for (int i = 0; i < t->n_added; i++) ts_free(t->added[i].content);
    ts_free(t->added);
    ts_free(t->raw_set.idx);
    ts_free(t->norm_set.idx);
    ts_free(t->regex);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->mctx) pcre2_match_context_free(t->mctx);
    if (t->jstack) pcre2_jit_stack_free(t->jstack);
    if (t->re) pcre2_code_free(t->re);
    ts_free(t->cache);
    ts_free(t->cache_arena);
    ts_free(t->nfc_buf);
    ts_free(t->sym);
    ts_free(t->rank);
    ts_free(t->pair_id);
    ts_free(t->prev);
    ts_free(t->next);
    ts_free(t->heap);
    pthread_mutex_destroy(&t->mu);
    ts_free(t);
}

/* ---- loading ------------------------------------------------------------- */

/* Load errors: every message names the file. */
static int load_fail(ts_error *err, const char *path, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int load_fail(ts_error *err, const char *path, int code, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts_fail(err, code, "%s: %s", path, msg);
}
#define LOAD_FAIL(code, ...) load_fail(err, path, code, __VA_ARGS__)

/* Rewrite \s and \S into explicit classes with Oniguruma's whitespace set
 * (see the file comment). Everything else is copied verbatim, including
 * other escapes (\p{..}, \r, \n, \\). Returns an owned string or NULL. */
static const char ONIG_SPACE[] =
    "\\t-\\r\\x20\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

static char *tok_rewrite_regex(const char *pat, ts_error *err, const char *path) {
    size_t n = strlen(pat), o = 0, n_esc = 0;
    /* each \s or \S grows by at most sizeof ONIG_SPACE + 4 bytes */
    for (size_t i = 0; i + 1 < n; i++)
        if (pat[i] == '\\') n_esc++, i++;
    size_t cap = n + n_esc * (sizeof ONIG_SPACE + 4) + 16;
    char *out = ts_alloc(cap, TS_MEM_MISC);
    if (!out) {
        LOAD_FAIL(TS_E_NOMEM, "out of memory for the regex");
        return NULL;
    }
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 's' || d == 'S') {
                if (in_class && d == 'S') {
                    ts_free(out);
                    LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer regex: \\S inside a character class is not supported");
                    return NULL;
                }
                if (!in_class) out[o++] = '[';
                if (!in_class && d == 'S') out[o++] = '^';
                memcpy(out + o, ONIG_SPACE, sizeof ONIG_SPACE - 1);
                o += sizeof ONIG_SPACE - 1;
                if (!in_class) out[o++] = ']';
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            out[o++] = c;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && pat[i + 1] == '^') out[o++] = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') out[o++] = pat[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {
            /* POSIX class [:alpha:] inside a class: copy through ":]" */
            const char *e = strstr(pat + i + 2, ":]");
            if (e) {
                size_t k = (size_t)(e + 2 - (pat + i));
                memcpy(out + o, pat + i, k);
                o += k;
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = 0;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

static int cmp_added_idx_ctx_first(const added_tok *a, const added_tok *b) {
    uint8_t fa = (uint8_t)a->content[0], fb = (uint8_t)b->content[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return 0;
}

static int build_added_set(ts_tokenizer *t, added_set *s, int normalized) {
    s->n = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized) s->n++;
    s->idx = ts_alloc(sizeof(int) * (size_t)(s->n + 1), TS_MEM_MISC);
    if (!s->idx) return TS_E_NOMEM;
    int k = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized) s->idx[k++] = i;
    /* insertion sort: a few dozen entries */
    for (int i = 1; i < s->n; i++) {
        int v = s->idx[i], j = i;
        while (j > 0 && cmp_added_idx_ctx_first(&t->added[s->idx[j - 1]], &t->added[v]) > 0) {
            s->idx[j] = s->idx[j - 1];
            j--;
        }
        s->idx[j] = v;
    }
    int j = 0;
    for (int b = 0; b < 256; b++) {
        s->first[b] = (uint16_t)j;
        while (j < s->n && (uint8_t)t->added[s->idx[j]].content[0] == b) j++;
        s->any_first[b] = (uint8_t)(j > s->first[b]);
    }
    s->first[256] = (uint16_t)j;
    return 0;
}

static uint32_t merge_slot(uint64_t key, uint32_t mask) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & mask;
}

static const merge_ent *merge_get(const ts_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = merge_slot(key, t->merge_mask);
    for (;;) {
        const merge_ent *e = &t->merges[i];
        if (e->key == key) return e;
        if (e->key == UINT64_MAX) return NULL;
        i = (i + 1) & t->merge_mask;
    }
}

/* Decode a vocab string (byte-level alphabet, UTF-8 in the file) into raw
 * bytes. HF's ByteLevel decoder falls back to the string's own UTF-8 when
 * any character is outside the alphabet; we do the same. Returns length. */
static size_t byte_level_decode(const char *s, size_t n, const int16_t u2b[324], char *out) {
    size_t o = 0, i = 0;
    while (i < n) {
        int k = utf8_seq((const uint8_t *)s + i, n - i);
        if (k <= 0) break;
        uint32_t c;
        const uint8_t *p = (const uint8_t *)s + i;
        if (k == 1) c = p[0];
        else if (k == 2) c = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
        else if (k == 3) c = (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
        else c = (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
        if (c >= 324 || u2b[c] < 0) break;
        out[o++] = (char)u2b[c];
        i += (size_t)k;
    }
    if (i == n) return o;
    memcpy(out, s, n);
    return n;
}

static int json_flag(const cJSON *o, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    return cJSON_IsTrue(v);
}

/* Sequences nest; real files use one level. */
#define TOK_MAX_SEQ_DEPTH 8

static int load_normalizer(ts_tokenizer *t, const cJSON *nz, ts_error *err, const char *path, int depth) {
    if (!nz || cJSON_IsNull(nz)) return 0;
    if (depth > TOK_MAX_SEQ_DEPTH)
        return LOAD_FAIL(TS_E_FORMAT, "normalizer Sequences nested more than %d deep", TOK_MAX_SEQ_DEPTH);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(nz, "type");
    if (!cJSON_IsString(type)) return LOAD_FAIL(TS_E_FORMAT, "normalizer has no \"type\" string");
    if (!strcmp(type->valuestring, "NFC")) {
        t->nfc = 1;
        return 0;
    }
    if (!strcmp(type->valuestring, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
        if (!cJSON_IsArray(list)) return LOAD_FAIL(TS_E_FORMAT, "normalizer Sequence has no \"normalizers\" array");
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            int rc = load_normalizer(t, it, err, path, depth + 1);
            if (rc) return rc;
        }
        return 0;
    }
    return LOAD_FAIL(TS_E_UNSUPPORTED, "normalizer type \"%s\" is not supported (NFC only)", type->valuestring);
}

/* GPT-2's regex, used by a ByteLevel pre-tokenizer with use_regex=true. */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int set_regex(ts_tokenizer *t, const char *pat, ts_error *err, const char *path) {
    if (t->has_split)
        return LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer: more than one regex split is not supported");
    t->has_split = 1;
    /* compiled with PCRE2_NO_UTF_CHECK, and cJSON passes string bytes
     * through unchecked: validate here, or PCRE2 reads invalid UTF-8 */
    size_t plen = strlen(pat), bad = ts_utf8_check(pat, plen);
    if (bad != plen)
        return LOAD_FAIL(TS_E_FORMAT, "pre_tokenizer regex is not valid UTF-8 (byte %zu)", bad);
    t->regex = tok_rewrite_regex(pat, err, path);
    if (!t->regex) return err ? err->code : TS_E_FORMAT;
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)t->regex, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                          &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return LOAD_FAIL(TS_E_FORMAT, "pre_tokenizer regex does not compile (PCRE2: %s at offset %zu): %s",
                         (const char *)msg, (size_t)eo, pat);
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    t->mctx = pcre2_match_context_create(NULL);
    if (!t->md || !t->mctx) return LOAD_FAIL(TS_E_NOMEM, "out of memory for the regex");
    if (t->jit) {
        /* Long runs of letters or spaces (10,000 in the goldens) must not
         * exhaust the default 32 KiB JIT stack. */
        t->jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (!t->jstack) return LOAD_FAIL(TS_E_NOMEM, "out of memory for the regex stack");
        pcre2_jit_stack_assign(t->mctx, NULL, t->jstack);
    }
    return 0;
}

static int load_pretok(ts_tokenizer *t, const cJSON *pt, ts_error *err, const char *path, int depth) {
    if (!pt || cJSON_IsNull(pt)) return 0;
    if (depth > TOK_MAX_SEQ_DEPTH)
        return LOAD_FAIL(TS_E_FORMAT, "pre_tokenizer Sequences nested more than %d deep", TOK_MAX_SEQ_DEPTH);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return LOAD_FAIL(TS_E_FORMAT, "pre_tokenizer has no \"type\" string");
    const char *ty = type->valuestring;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) return LOAD_FAIL(TS_E_FORMAT, "pre_tokenizer Sequence has no \"pretokenizers\" array");
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            int rc = load_pretok(t, it, err, path, depth + 1);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *rx = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(rx))
            return LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer Split: only {\"Regex\": ...} patterns are supported");
        if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated"))
            return LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer Split: behavior \"%s\" is not supported (Isolated only)",
                             cJSON_IsString(behavior) ? behavior->valuestring : "?");
        if (json_flag(pt, "invert", 0))
            return LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer Split: invert=true is not supported");
        return set_regex(t, rx->valuestring, err, path);
    }
    if (!strcmp(ty, "ByteLevel")) {
        if (json_flag(pt, "add_prefix_space", 0))
            return LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer ByteLevel: add_prefix_space=true is not supported");
        if (json_flag(pt, "use_regex", 1)) return set_regex(t, GPT2_REGEX, err, path);
        return 0;
    }
    return LOAD_FAIL(TS_E_UNSUPPORTED, "pre_tokenizer type \"%s\" is not supported", ty);
}

static int load_json(ts_tokenizer *t, const cJSON *root, ts_error *err, const char *path) {
    int16_t u2b[324];
    uint32_t *b2u = t->b2u;
    byte_level_tables(b2u, u2b);

    if (!cJSON_IsObject(root)) return LOAD_FAIL(TS_E_FORMAT, "the top level is not a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return LOAD_FAIL(TS_E_FORMAT, "missing object \"model\"");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (mtype && !cJSON_IsString(mtype)) return LOAD_FAIL(TS_E_FORMAT, "model.type is not a string");
    if (mtype && strcmp(mtype->valuestring, "BPE"))
        return LOAD_FAIL(TS_E_UNSUPPORTED, "model type \"%s\" is not supported (BPE only)", mtype->valuestring);
    if (json_flag(model, "byte_fallback", 0))
        return LOAD_FAIL(TS_E_UNSUPPORTED, "model.byte_fallback=true is not supported");
    const char *strkeys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, strkeys[i]);
        if (v && !cJSON_IsNull(v) && (!cJSON_IsString(v) || v->valuestring[0]))
            return LOAD_FAIL(TS_E_UNSUPPORTED, "model.%s is not supported (must be empty)", strkeys[i]);
    }
    t->ignore_merges = json_flag(model, "ignore_merges", 0);

    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return LOAD_FAIL(TS_E_FORMAT, "missing object \"model.vocab\"");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return LOAD_FAIL(TS_E_FORMAT, "missing array \"model.merges\"");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return LOAD_FAIL(TS_E_FORMAT, "\"added_tokens\" is not an array");

    /* sizes */
    uint32_t n_v = 0;
    size_t str_bytes = 0;
    int32_t max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 16777216.0 ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return LOAD_FAIL(TS_E_FORMAT, "model.vocab[\"%s\"] is not a valid id", it->string);
        n_v++;
        str_bytes += strlen(it->string);
        if (it->valueint > max_id) max_id = it->valueint;
    }
    int n_added = 0;
    size_t added_bytes = 0;
    if (cJSON_IsArray(added)) {
        cJSON_ArrayForEach(it, added) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216.0 ||
                id->valuedouble != (double)(int32_t)id->valuedouble)
                return LOAD_FAIL(TS_E_FORMAT, "added_tokens[%d].id is missing or not a valid id", n_added);
            if (!cJSON_IsString(content) || !content->valuestring[0])
                return LOAD_FAIL(TS_E_FORMAT, "added_tokens[%d].content is missing or empty", n_added);
            if (json_flag(it, "single_word", 0))
                return LOAD_FAIL(TS_E_UNSUPPORTED, "added token \"%s\": single_word=true is not supported",
                                 content->valuestring);
            if (id->valueint > max_id) max_id = id->valueint;
            added_bytes += strlen(content->valuestring);
            n_added++;
        }
    }
    if (max_id < 0) return LOAD_FAIL(TS_E_FORMAT, "model.vocab is empty");
    t->n_vocab = max_id + 1;

    size_t nv = (size_t)t->n_vocab;
    t->tok_off = ts_alloc(sizeof(uint32_t) * nv, TS_MEM_MISC);
    t->tok_len = ts_alloc(sizeof(uint32_t) * nv, TS_MEM_MISC);
    t->has_tok = ts_alloc(nv, TS_MEM_MISC);
    t->special = ts_alloc(nv, TS_MEM_MISC);
    t->tok_bytes = ts_alloc(str_bytes + added_bytes + 16, TS_MEM_MISC);
    if (!t->tok_off || !t->tok_len || !t->has_tok || !t->special || !t->tok_bytes ||
        strmap_init(&t->vocab, n_v, str_bytes))
        return LOAD_FAIL(TS_E_NOMEM, "out of memory for a vocabulary of %d tokens", t->n_vocab);

    /* vocab: file strings into the map, decoded bytes into tok_bytes */
    size_t used = 0;
    cJSON_ArrayForEach(it, vocab) {
        size_t n = strlen(it->string);
        int32_t id = it->valueint;
        if (strmap_put(&t->vocab, it->string, n, id))
            return LOAD_FAIL(TS_E_NOMEM, "out of memory for the vocabulary map");
        if (t->has_tok[id]) continue; /* two strings for one id: keep the first */
        size_t k = byte_level_decode(it->string, n, u2b, t->tok_bytes + used);
        t->tok_off[id] = (uint32_t)used;
        t->tok_len[id] = (uint32_t)k;
        t->has_tok[id] = 1;
        used += k;
    }
    for (int b = 0; b < 256; b++) {
        char s[4];
        int k = utf8_encode(b2u[b], s);
        t->byte_id[b] = strmap_get(&t->vocab, s, (size_t)k);
    }

    /* added tokens: they decode to their content and override a vocab entry
     * of the same id (HF looks the added vocabulary up first). */
    if (n_added) {
        t->added = ts_alloc(sizeof(added_tok) * (size_t)n_added, TS_MEM_MISC);
        if (!t->added) return LOAD_FAIL(TS_E_NOMEM, "out of memory for added tokens");
        cJSON_ArrayForEach(it, added) {
            added_tok *a = &t->added[t->n_added];
            const char *c = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
            a->len = strlen(c);
            if (ts_utf8_check(c, a->len) != a->len)
                return LOAD_FAIL(TS_E_FORMAT, "added token \"%s\" is not valid UTF-8", c);
            a->content = ts_strdup(c, TS_MEM_MISC);
            if (!a->content) return LOAD_FAIL(TS_E_NOMEM, "out of memory for added tokens");
            t->n_added++;
            a->id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
            a->special = (uint8_t)json_flag(it, "special", 0);
            /* HF's default for a missing "normalized" is !special */
            a->normalized = (uint8_t)json_flag(it, "normalized", !a->special);
            a->lstrip = (uint8_t)json_flag(it, "lstrip", 0);
            a->rstrip = (uint8_t)json_flag(it, "rstrip", 0);
            memcpy(t->tok_bytes + used, c, a->len);
            t->tok_off[a->id] = (uint32_t)used;
            t->tok_len[a->id] = (uint32_t)a->len;
            t->has_tok[a->id] = 1;
            t->special[a->id] = a->special;
            used += a->len;
        }
    }
    for (size_t i = 0; i < nv; i++)
        if (t->tok_len[i] > t->max_tok_len) t->max_tok_len = t->tok_len[i];
    if (build_added_set(t, &t->raw_set, 0) || build_added_set(t, &t->norm_set, 1))
        return LOAD_FAIL(TS_E_NOMEM, "out of memory for added tokens");

    /* merges */
    int n_m = cJSON_GetArraySize(merges);
    t->merge_mask = (uint32_t)pow2_at_least((size_t)n_m * 2 + 16) - 1;
    t->merges = ts_alloc(sizeof(merge_ent) * ((size_t)t->merge_mask + 1), TS_MEM_MISC);
    if (!t->merges) return LOAD_FAIL(TS_E_NOMEM, "out of memory for %d merges", n_m);
    for (uint32_t i = 0; i <= t->merge_mask; i++) t->merges[i].key = UINT64_MAX;
    char *cat = ts_alloc(t->vocab.arena_len + 1, TS_MEM_MISC); /* a+b never exceeds this */
    if (!cat) return LOAD_FAIL(TS_E_NOMEM, "out of memory for merges");
    int rank = 0, rc = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsArray(it)) {
            const cJSON *x = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
            if (cJSON_GetArraySize(it) != 2 || !cJSON_IsString(x) || !cJSON_IsString(y)) {
                rc = LOAD_FAIL(TS_E_FORMAT, "model.merges[%d] is not a pair of strings", rank);
                break;
            }
            a = x->valuestring, la = strlen(a);
            b = y->valuestring, lb = strlen(b);
        } else if (cJSON_IsString(it)) {
            /* legacy form "a b": exactly one space (HF splits on ' ' and
             * requires two parts; byte-level tokens never contain ' ') */
            a = it->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = LOAD_FAIL(TS_E_FORMAT, "model.merges[%d] \"%s\" is not of the form \"a b\"", rank, a);
                break;
            }
            la = (size_t)(sp - a);
            b = sp + 1, lb = strlen(b);
        } else {
            rc = LOAD_FAIL(TS_E_FORMAT, "model.merges[%d] is neither a pair nor a string", rank);
            break;
        }
        int32_t ia = strmap_get(&t->vocab, a, la), ib = strmap_get(&t->vocab, b, lb), inew = -1;
        if (la + lb <= t->vocab.arena_len) {
            memcpy(cat, a, la);
            memcpy(cat + la, b, lb);
            inew = strmap_get(&t->vocab, cat, la + lb);
        }
        if (ia < 0 || ib < 0 || inew < 0) {
            rc = LOAD_FAIL(TS_E_FORMAT, "model.merges[%d] (\"%.*s\", \"%.*s\"): %s is not in the vocab", rank,
                           (int)la, a, (int)lb, b, ia < 0 ? "the left token" : ib < 0 ? "the right token" : "the merged token");
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        uint32_t s = merge_slot(key, t->merge_mask);
        while (t->merges[s].key != UINT64_MAX && t->merges[s].key != key) s = (s + 1) & t->merge_mask;
        /* a repeated pair: the later rank wins, as in HF's HashMap collect */
        t->merges[s] = (merge_ent){key, (uint32_t)rank, inew};
        rank++;
    }
    ts_free(cat);
    if (rc) return rc;
    t->n_merges = rank;

    rc = load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err, path, 0);
    if (rc) return rc;
    rc = load_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err, path, 0);
    if (rc) return rc;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec)) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(dec, "type");
        if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "ByteLevel"))
            return LOAD_FAIL(TS_E_UNSUPPORTED, "decoder type \"%s\" is not supported (ByteLevel only)",
                             cJSON_IsString(dt) ? dt->valuestring : "?");
    }
    return 0;
}

int ts_tokenizer_load(const char *path_in, ts_tokenizer **out, ts_error *err) {
    *out = NULL;
    char pathbuf[4096];
    const char *path = path_in;
    struct stat st;
    if (!path_in) return ts_fail(err, TS_E_ARG, "tokenizer: no path given");
    if (stat(path_in, &st) == 0 && S_ISDIR(st.st_mode))
        path = ts_path_join(pathbuf, sizeof pathbuf, path_in, "tokenizer.json");
    char *text = NULL;
    size_t len = 0;
    int rc = ts_read_file(path, &text, &len, err);
    if (rc) return rc;
    rc = ts_tokenizer_load_mem(text, len, path, out, err);
    ts_free(text);
    return rc;
}

int ts_tokenizer_load_mem(const char *text, size_t len, const char *path, ts_tokenizer **out, ts_error *err) {
    *out = NULL;
    /* cJSON's global error pointer is not thread-safe; the Opts form's is */
    const char *ep = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &ep, 0);
    if (!root) {
        size_t off = (ep && ep >= text && ep <= text + len) ? (size_t)(ep - text) : 0;
        int line = 1;
        for (size_t i = 0; i < off; i++) line += text[i] == '\n';
        return ts_fail(err, TS_E_FORMAT, "%s: invalid JSON near byte %zu (line %d)", path, off, line);
    }
    ts_tokenizer *t = ts_alloc(sizeof *t, TS_MEM_MISC);
    if (!t) {
        cJSON_Delete(root);
        return ts_fail(err, TS_E_NOMEM, "%s: out of memory", path);
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->att_mu, NULL);
    int rc = load_json(t, root, err, path);
    cJSON_Delete(root);
    if (!rc) {
        t->cache_mask = CACHE_MIN_ENTS - 1;
        t->cache_cap = CACHE_MIN_ARENA;
        t->cache = ts_alloc(sizeof(cache_ent) * (t->cache_mask + 1), TS_MEM_MISC);
        t->cache_arena = ts_alloc(t->cache_cap, TS_MEM_MISC);
        if (!t->cache || !t->cache_arena) rc = ts_fail(err, TS_E_NOMEM, "%s: out of memory for the cache", path);
    }
    if (rc) {
        ts_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- output vectors ---------------------------------------------------------- */

void ts_tokens_free(ts_tokens *v) {
    if (!v) return;
    ts_free(v->ids);
    memset(v, 0, sizeof *v);
}

void ts_text_free(ts_text *s) {
    if (!s) return;
    ts_free(s->s);
    memset(s, 0, sizeof *s);
}

static int tokens_reserve(ts_tokens *v, size_t extra) {
    size_t need = (size_t)v->n + extra;
    if (need <= (size_t)v->cap) return 0;
    if (need > INT32_MAX) return TS_E_NOMEM;
    size_t cap = v->cap ? (size_t)v->cap : 64;
    while (cap < need) cap *= 2;
    if (cap > INT32_MAX) cap = INT32_MAX;
    int32_t *ids = ts_alloc(sizeof(int32_t) * cap, TS_MEM_MISC);
    if (!ids) return TS_E_NOMEM;
    if (v->n) memcpy(ids, v->ids, sizeof(int32_t) * (size_t)v->n);
    ts_free(v->ids);
    v->ids = ids;
    v->cap = (int)cap;
    return 0;
}

static int text_reserve(ts_text *s, size_t extra) {
    size_t need = s->len + extra + 1;
    if (need <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < need) cap *= 2;
    char *p = ts_alloc(cap, TS_MEM_MISC);
    if (!p) return TS_E_NOMEM;
    if (s->len) memcpy(p, s->s, s->len);
    ts_free(s->s);
    s->s = p;
    s->cap = cap;
    return 0;
}

/* ---- BPE ------------------------------------------------------------------ */

static int bpe_reserve(ts_tokenizer *t, size_t n) {
    if (n <= t->bpe_cap) return 0;
    size_t cap = t->bpe_cap ? t->bpe_cap : 256;
    while (cap < n) cap *= 2;
    ts_free(t->sym), ts_free(t->rank), ts_free(t->pair_id), ts_free(t->prev), ts_free(t->next), ts_free(t->heap);
    t->sym = ts_alloc(sizeof(int32_t) * cap, TS_MEM_MISC);
    t->rank = ts_alloc(sizeof(uint32_t) * cap, TS_MEM_MISC);
    t->pair_id = ts_alloc(sizeof(int32_t) * cap, TS_MEM_MISC);
    t->prev = ts_alloc(sizeof(int32_t) * cap, TS_MEM_MISC);
    t->next = ts_alloc(sizeof(int32_t) * cap, TS_MEM_MISC);
    t->heap = ts_alloc(sizeof(uint64_t) * cap * 3, TS_MEM_MISC);
    t->bpe_cap = cap;
    if (!t->sym || !t->rank || !t->pair_id || !t->prev || !t->next || !t->heap) {
        t->bpe_cap = 0;
        return TS_E_NOMEM;
    }
    return 0;
}

static inline void pair_rank(const ts_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
    const merge_ent *e = merge_get(t, a, b);
    *rank = e ? e->rank : UINT32_MAX;
    *id = e ? e->id : -1;
}

/* Short pieces: ranks of adjacent pairs in an array, linear scan for the
 * minimum (first minimum = leftmost on ties), two lookups per merge. */
static int bpe_small(const ts_tokenizer *t, int32_t *sym, int n, uint32_t *rank, int32_t *pid) {
    for (int i = 0; i + 1 < n; i++) pair_rank(t, sym[i], sym[i + 1], &rank[i], &pid[i]);
    while (n > 1) {
        int best = -1;
        uint32_t br = UINT32_MAX;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] < br) br = rank[i], best = i;
        if (best < 0) break;
        sym[best] = pid[best];
        for (int i = best + 1; i + 1 < n; i++) {
            sym[i] = sym[i + 1];
            if (i + 1 < n - 1) rank[i] = rank[i + 1], pid[i] = pid[i + 1];
        }
        n--;
        if (best > 0) pair_rank(t, sym[best - 1], sym[best], &rank[best - 1], &pid[best - 1]);
        if (best + 1 < n) pair_rank(t, sym[best], sym[best + 1], &rank[best], &pid[best]);
    }
    return n;
}

/* Binary min-heap of (rank << 32 | position): lowest rank first, then the
 * leftmost position, the order HF's priority queue pops merges in. */
static void heap_push(uint64_t *h, int *n, uint64_t v) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, int *n) {
    uint64_t top = h[0], v = h[--*n];
    int i = 0, m = *n;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

/* Long pieces: symbols in a linked list, candidate merges in a heap. An
 * entry is stale when its left symbol was merged away or changed; we detect
 * that by re-looking up the current pair (as HF does) and checking that it
 * still has the entry's rank. Compacts the result into sym[0..k). */
static int bpe_large(ts_tokenizer *t, int32_t *sym, int n) {
    int32_t *prev = t->prev, *next = t->next;
    uint64_t *heap = t->heap;
    int hn = 0;
    for (int i = 0; i < n; i++) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    for (int i = 0; i + 1 < n; i++) {
        const merge_ent *e = merge_get(t, sym[i], sym[i + 1]);
        if (e) heap_push(heap, &hn, (uint64_t)e->rank << 32 | (uint32_t)i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int pos = (int)(uint32_t)top;
        uint32_t r = (uint32_t)(top >> 32);
        if (sym[pos] < 0) continue;          /* merged into its left neighbour */
        int nx = next[pos];
        if (nx < 0) continue;
        const merge_ent *e = merge_get(t, sym[pos], sym[nx]);
        if (!e || e->rank != r) continue;    /* the pair at pos changed */
        sym[pos] = e->id;
        sym[nx] = -1;
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = pos;
        if (prev[pos] >= 0) {
            const merge_ent *l = merge_get(t, sym[prev[pos]], sym[pos]);
            if (l) heap_push(heap, &hn, (uint64_t)l->rank << 32 | (uint32_t)prev[pos]);
        }
        if (next[pos] >= 0) {
            const merge_ent *rr = merge_get(t, sym[pos], sym[next[pos]]);
            if (rr) heap_push(heap, &hn, (uint64_t)rr->rank << 32 | (uint32_t)pos);
        }
    }
    int k = 0;
    for (int i = 0; i >= 0 && i < n; i = next[i]) sym[k++] = sym[i];
    return k;
}

#define BPE_SMALL_MAX 48

/* Encode one pre-tokenized piece, appending to t->out. */
static int bpe_piece(ts_tokenizer *t, const char *p, size_t n) {
    ts_tokens *out = t->out;
    if (n == 1) {
        int32_t id = t->byte_id[(uint8_t)p[0]];
        if (id < 0) return 0;
        if (out->n >= out->cap && tokens_reserve(out, 1)) return TS_E_NOMEM;
        out->ids[out->n++] = id;
        return 0;
    }
    uint64_t h = 0;
    cache_ent *ce = NULL;
    if (n <= CACHE_MAX_PIECE) {
        h = tok_hash(p, n);
        uint32_t i = (uint32_t)h & t->cache_mask;
        for (;;) {
            ce = &t->cache[i];
            if (!ce->klen) break;
            if (ce->h == h && ce->klen == n && !memcmp(t->cache_arena + ce->off, p, n)) {
                const int32_t *ids = (const int32_t *)(t->cache_arena + ((ce->off + n + 3) & ~3u));
                if (tokens_reserve(out, ce->nids)) return TS_E_NOMEM;
                memcpy(out->ids + out->n, ids, sizeof(int32_t) * ce->nids);
                out->n += ce->nids;
                return 0;
            }
            i = (i + 1) & t->cache_mask;
        }
    }
    if (bpe_reserve(t, n)) return TS_E_NOMEM;
    int32_t *sym = t->sym;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)p[i]];
        if (id >= 0) sym[k++] = id;
    }
    int32_t whole = -1;
    if (t->ignore_merges) {
        /* a piece that is itself a vocab entry is taken as is */
        char buf[CACHE_MAX_PIECE * 2 + 8];
        if (n <= CACHE_MAX_PIECE) {
            size_t o = 0;
            for (size_t i = 0; i < n; i++) o += (size_t)utf8_encode(t->b2u[(uint8_t)p[i]], buf + o);
            whole = strmap_get(&t->vocab, buf, o);
        }
    }
    if (whole >= 0) sym[0] = whole, k = 1;
    else if (k <= BPE_SMALL_MAX) k = bpe_small(t, sym, k, t->rank, t->pair_id);
    else k = bpe_large(t, sym, k);
    if (tokens_reserve(out, (size_t)k)) return TS_E_NOMEM;
    memcpy(out->ids + out->n, sym, sizeof(int32_t) * (size_t)k);
    out->n += k;

    if (ce && k <= 0xffff) {
        size_t need = ((n + 3) & ~(size_t)3) + sizeof(int32_t) * (size_t)k;
        if (t->cache_used + need > t->cache_cap || t->cache_n * 2 > t->cache_mask) {
            cache_ent *nc = NULL;
            char *na = NULL;
            if (t->cache_mask + 1 < CACHE_MAX_ENTS) {
                nc = ts_alloc(sizeof(cache_ent) * 2 * ((size_t)t->cache_mask + 1), TS_MEM_MISC);
                na = ts_alloc(2 * t->cache_cap, TS_MEM_MISC);
            }
            if (nc && na) { /* zeroed: empty */
                ts_free(t->cache);
                ts_free(t->cache_arena);
                t->cache = nc;
                t->cache_arena = na;
                t->cache_mask = 2 * t->cache_mask + 1;
                t->cache_cap *= 2;
            } else { /* at the largest size, or out of memory: drop the contents */
                ts_free(nc);
                ts_free(na);
                memset(t->cache, 0, sizeof(cache_ent) * (t->cache_mask + 1));
            }
            t->cache_used = 0;
            t->cache_n = 0;
            uint32_t i = (uint32_t)h & t->cache_mask;
            ce = &t->cache[i];
        }
        uint32_t off = (uint32_t)t->cache_used;
        memcpy(t->cache_arena + off, p, n);
        memcpy(t->cache_arena + ((off + n + 3) & ~(size_t)3), sym, sizeof(int32_t) * (size_t)k);
        t->cache_used += need;
        *ce = (cache_ent){h, off, (uint16_t)n, (uint16_t)k};
        t->cache_n++;
    }
    return 0;
}

/* ---- pre-tokenization ---------------------------------------------------------- */

typedef struct {
    ts_tok_piece_fn fn;  /* NULL: encode pieces with BPE */
    void *ud;
} piece_sink;

static int emit_piece(ts_tokenizer *t, const piece_sink *sk, const char *p, size_t n) {
    if (!n) return 0;
    if (sk->fn) {
        sk->fn(sk->ud, p, n, -1);
        return 0;
    }
    return bpe_piece(t, p, n);
}

static int emit_added(ts_tokenizer *t, const piece_sink *sk, const added_tok *a, const char *p, size_t n) {
    if (sk->fn) {
        sk->fn(sk->ud, p, n, a->id);
        return 0;
    }
    if (tokens_reserve(t->out, 1)) return TS_E_NOMEM;
    t->out->ids[t->out->n++] = a->id;
    return 0;
}

/* The Split regex over one normalized segment: matches and gaps are pieces. */
static int split_regex(ts_tokenizer *t, const piece_sink *sk, const char *s, size_t n, ts_error *err) {
    if (!t->re) return emit_piece(t, sk, s, n);
    size_t off = 0, prev = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    while (off < n) {
        int rc = t->jit ? pcre2_jit_match(t->re, (PCRE2_SPTR)s, n, off, 0, t->md, t->mctx)
                        : pcre2_match(t->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return ts_fail(err, TS_E_ARG, "tokenizer: regex match failed at byte %zu: %s", off, (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            /* an empty match: step over one character, it joins the gap */
            int k = utf8_seq((const uint8_t *)s + ms, n - ms);
            off = ms + (size_t)(k > 0 ? k : 1);
            continue;
        }
        int e = emit_piece(t, sk, s + prev, ms - prev);
        if (!e) e = emit_piece(t, sk, s + ms, me - ms);
        if (e) return e;
        off = prev = me;
    }
    return emit_piece(t, sk, s + prev, n - prev);
}

/* Unicode White_Space, as Rust's char::is_whitespace (lstrip/rstrip). */
static size_t ws_len_at(const uint8_t *s, size_t n) {
    if (!n) return 0;
    if (s[0] == ' ' || (s[0] >= 9 && s[0] <= 13)) return 1;
    if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
    if (n >= 3 && s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3;
    if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 && (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF)) return 3;
    if (n >= 3 && s[0] == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3;
    if (n >= 3 && s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3;
    return 0;
}

static size_t ws_len_before(const uint8_t *s, size_t end) {
    for (size_t k = 1; k <= 3 && k <= end; k++)
        if (ws_len_at(s + end - k, k) == k) return k;
    return 0;
}

/* Leftmost-longest search for an added token of set in s[from, n). On a hit
 * fills [*ms, *me) (extended by lstrip/rstrip, never before `floor`) and the
 * token. */
static int find_added(const ts_tokenizer *t, const added_set *set, const char *s, size_t n, size_t from,
                      size_t floor, size_t *ms, size_t *me, const added_tok **tok) {
    if (!set->n) return 0;
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = from; i < n; i++) {
        if (!set->any_first[u[i]]) continue;
        for (int j = set->first[u[i]]; j < set->first[u[i] + 1]; j++) {
            const added_tok *a = &t->added[set->idx[j]];
            if (a->len <= n - i && !memcmp(s + i, a->content, a->len)) {
                size_t st = i, en = i + a->len;
                if (a->lstrip)
                    for (size_t k; st > floor && (k = ws_len_before(u, st)) && st - k >= floor;) st -= k;
                if (a->rstrip)
                    for (size_t k; en < n && (k = ws_len_at(u + en, n - en));) en += k;
                *ms = st, *me = en, *tok = a;
                return 1;
            }
        }
    }
    return 0;
}

/* Normalize a segment into t->nfc_buf (as UTF-8 bytes); returns its length
 * or <0. Code points below U+0300 never change under NFC and cannot combine
 * with anything before U+0300, so a segment whose bytes are all < 0xCC
 * (no lead byte of U+0300 or above) is returned as is. */
static int nfc_segment(ts_tokenizer *t, const char *s, size_t n, const char **out, size_t *out_n) {
    size_t i = 0;
    const uint8_t *u = (const uint8_t *)s;
    while (i < n && u[i] < 0xCC) i++;
    if (i == n) {
        *out = s, *out_n = n;
        return 0;
    }
    utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    for (;;) {
        utf8proc_ssize_t r = t->nfc_cap ? utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                                             t->nfc_buf, (utf8proc_ssize_t)t->nfc_cap, opt)
                                        : (utf8proc_ssize_t)n + 1;
        if (r < 0) return TS_E_ARG;
        if ((size_t)r <= t->nfc_cap) {
            utf8proc_ssize_t k = utf8proc_reencode(t->nfc_buf, r, opt);
            if (k < 0) return TS_E_ARG;
            *out = (const char *)t->nfc_buf, *out_n = (size_t)k;
            return 0;
        }
        size_t cap = (size_t)r + 64;
        int32_t *b = ts_alloc(sizeof(int32_t) * cap, TS_MEM_MISC);
        if (!b) return TS_E_NOMEM;
        ts_free(t->nfc_buf);
        t->nfc_buf = b;
        t->nfc_cap = cap;
    }
}

/* One stretch of raw text between non-normalized added tokens. */
static int encode_segment(ts_tokenizer *t, const piece_sink *sk, const char *s, size_t n, ts_error *err) {
    if (!n) return 0;
    if (t->nfc) {
        int rc = nfc_segment(t, s, n, &s, &n);
        if (rc == TS_E_NOMEM) return ts_fail(err, rc, "tokenizer: out of memory normalizing %zu bytes", n);
        if (rc) return ts_fail(err, rc, "tokenizer: NFC normalization failed");
    }
    size_t pos = 0, ms, me;
    const added_tok *a;
    while (find_added(t, &t->norm_set, s, n, pos, pos, &ms, &me, &a)) {
        int rc = split_regex(t, sk, s + pos, ms - pos, err);
        if (!rc) rc = emit_added(t, sk, a, s + ms, me - ms);
        if (rc) return rc == TS_E_NOMEM ? ts_fail(err, rc, "tokenizer: out of memory") : rc;
        pos = me;
    }
    int rc = split_regex(t, sk, s + pos, n - pos, err);
    return rc == TS_E_NOMEM ? ts_fail(err, rc, "tokenizer: out of memory") : rc;
}

static int encode_all(ts_tokenizer *t, const piece_sink *sk, const char *text, size_t len, ts_error *err) {
    size_t bad = ts_utf8_check(text, len);
    if (bad != len)
        return ts_fail(err, TS_E_ARG, "tokenizer: input is not valid UTF-8 (byte 0x%02x at offset %zu)",
                       (uint8_t)text[bad], bad);
    size_t pos = 0, ms, me;
    const added_tok *a;
    while (find_added(t, &t->raw_set, text, len, pos, pos, &ms, &me, &a)) {
        int rc = encode_segment(t, sk, text + pos, ms - pos, err);
        if (!rc) rc = emit_added(t, sk, a, text + ms, me - ms);
        if (rc) return rc == TS_E_NOMEM ? ts_fail(err, rc, "tokenizer: out of memory") : rc;
        pos = me;
    }
    return encode_segment(t, sk, text + pos, len - pos, err);
}

int ts_tokenizer_encode(ts_tokenizer *t, const char *text, size_t len, ts_tokens *out, ts_error *err) {
    if (!t || !out || (!text && len)) return ts_fail(err, TS_E_ARG, "tokenizer encode: NULL argument");
    int n0 = out->n, fresh = out->ids == NULL;
    /* most text is 3-5 bytes per token: one reservation avoids regrowth */
    if (tokens_reserve(out, len / 3 + 16)) return ts_fail(err, TS_E_NOMEM, "tokenizer: out of memory");
    pthread_mutex_lock(&t->mu);
    t->out = out;
    piece_sink sk = {NULL, NULL};
    int rc = encode_all(t, &sk, text, len, err);
    t->out = NULL;
    pthread_mutex_unlock(&t->mu);
    if (rc) {
        out->n = n0;
        /* unchanged on error means unallocated too: a caller that passed an
         * empty vector need not free it after a refusal */
        if (fresh) ts_tokens_free(out);
    }
    return rc;
}

int ts_tok_pretokenize(ts_tokenizer *t, const char *text, size_t len, ts_tok_piece_fn fn, void *ud, ts_error *err) {
    if (!t || !fn || (!text && len)) return ts_fail(err, TS_E_ARG, "tokenizer pretokenize: NULL argument");
    pthread_mutex_lock(&t->mu);
    piece_sink sk = {fn, ud};
    int rc = encode_all(t, &sk, text, len, err);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* ---- decoding -------------------------------------------------------------------- */

int ts_tokenizer_decode(const ts_tokenizer *t, const int32_t *ids, int n, ts_text *out, ts_error *err) {
    if (!t || !out || (n && !ids) || n < 0) return ts_fail(err, TS_E_ARG, "tokenizer decode: bad argument");
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab || !t->has_tok[id])
            return ts_fail(err, TS_E_ARG, "tokenizer decode: id %d at position %d is outside the vocabulary (%d ids)",
                           (int)id, i, t->n_vocab);
        total += t->tok_len[id];
    }
    if (text_reserve(out, total)) return ts_fail(err, TS_E_NOMEM, "tokenizer decode: out of memory");
    for (int i = 0; i < n; i++) {
        memcpy(out->s + out->len, t->tok_bytes + t->tok_off[ids[i]], t->tok_len[ids[i]]);
        out->len += t->tok_len[ids[i]];
    }
    out->s[out->len] = 0;
    return 0;
}

struct ts_detok {
    const ts_tokenizer *t;
    uint8_t pend[4];
    int n_pend;
    uint8_t *in;     /* [max_tok_len + 4] pending bytes + the new token */
    char *buf;       /* [3 * (max_tok_len + 4) + 1] output */
};

int ts_detok_new(const ts_tokenizer *t, ts_detok **out, ts_error *err) {
    *out = NULL;
    if (!t) return ts_fail(err, TS_E_ARG, "detok: no tokenizer");
    ts_detok *d = ts_alloc(sizeof *d, TS_MEM_MISC);
    if (!d) return ts_fail(err, TS_E_NOMEM, "detok: out of memory");
    d->t = t;
    d->in = ts_alloc(t->max_tok_len + 4, TS_MEM_MISC);
    d->buf = ts_alloc(3 * (t->max_tok_len + 4) + 1, TS_MEM_MISC);
    if (!d->in || !d->buf) {
        ts_detok_free(d);
        return ts_fail(err, TS_E_NOMEM, "detok: out of memory");
    }
    *out = d;
    return 0;
}

void ts_detok_free(ts_detok *d) {
    if (!d) return;
    ts_free(d->in);
    ts_free(d->buf);
    ts_free(d);
}

void ts_detok_reset(ts_detok *d) {
    if (d) d->n_pend = 0;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

int ts_detok_push(ts_detok *d, int32_t id, const char **text, size_t *len, ts_error *err) {
    *text = d->buf, *len = 0;
    d->buf[0] = 0;
    size_t tl;
    const char *tb = ts_tokenizer_token_bytes(d->t, id, &tl);
    if (!tb)
        return ts_fail(err, TS_E_ARG, "detok: id %d is outside the vocabulary (%d ids)", (int)id, d->t->n_vocab);
    size_t n = (size_t)d->n_pend;
    memcpy(d->in, d->pend, n);
    memcpy(d->in + n, tb, tl);
    n += tl;
    size_t i = 0, o = 0;
    d->n_pend = 0;
    while (i < n) {
        int k = utf8_seq(d->in + i, n - i);
        if (k > 0) {
            memcpy(d->buf + o, d->in + i, (size_t)k);
            o += (size_t)k, i += (size_t)k;
        } else if (k == 0) {
            /* a valid prefix cut by the end of this token: hold it */
            d->n_pend = (int)(n - i);
            memcpy(d->pend, d->in + i, n - i);
            break;
        } else {
            memcpy(d->buf + o, REPLACEMENT, 3);
            o += 3, i += (size_t)-k;
        }
    }
    d->buf[o] = 0;
    *len = o;
    return 0;
}

void ts_detok_flush(ts_detok *d, const char **text, size_t *len) {
    *text = d->buf, *len = 0;
    if (d->n_pend) {
        memcpy(d->buf, REPLACEMENT, 3);
        *len = 3;
    }
    d->buf[*len] = 0;
    d->n_pend = 0;
}
