/* tokenizer.h: internal view of the tokenizer (src/text/tokenizer.c).
 *
 * The public API (load, encode, decode, streaming decode, lookups) is in
 * include/turbospark.h. This header adds what tests and other modules inside
 * the library may use but frontends must not: the pre-tokenizer on its own,
 * so the regex splitter can be checked against golden pieces independently
 * of BPE.
 */
#ifndef TS_TEXT_TOKENIZER_H
#define TS_TEXT_TOKENIZER_H

#include "ts_int.h"

/* Called once per pre-tokenizer piece, in text order. For an added token,
 * `added_id` is its id and (p, n) is the matched text; otherwise added_id is
 * -1 and (p, n) is the NFC-normalized piece (before the byte-level mapping).
 * The bytes are borrowed for the duration of the call. */
typedef void (*ts_tok_piece_fn)(void *ud, const char *p, size_t n, int added_id);

/* Run added-token matching, normalization and the Split regex on text,
 * reporting every piece. Same validation and errors as ts_tokenizer_encode. */
int ts_tok_pretokenize(ts_tokenizer *t, const char *text, size_t len,
                       ts_tok_piece_fn fn, void *ud, ts_error *err);

/* Validate UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
 * Returns the byte offset of the first invalid sequence, or len if valid. */
size_t ts_utf8_check(const char *s, size_t len);

/* The pattern actually compiled for PCRE2 after rewriting \s and \S to the
 * reference engine's (Oniguruma's) whitespace set; borrowed. */
const char *ts_tok_regex(const ts_tokenizer *t);

/* Load from tokenizer.json's text held in memory (ts_tokenizer_load reads
 * the file and calls this; the fuzzer calls it directly). path names the
 * source in errors. */
int ts_tokenizer_load_mem(const char *text, size_t len, const char *path, ts_tokenizer **out, ts_error *err);

/* Set flags[id] = 1 for every added token (special or not: <think>,
 * <tool_call> as well as <|im_end|>); flags has ts_tokenizer_vocab_size
 * entries. */
void ts_tok_mark_added(const ts_tokenizer *t, uint8_t *flags);

/* One derived object attached to the tokenizer and shared by its users
 * (gen/constraint.c's token trie: tens of ms and ~16 MB at 150K ids, once a
 * tokenizer instead of once a constraint). The first call builds it with
 * build(t, arg) under the attachment's own lock (other callers wait; encoding
 * does not); later calls return the same object. The tokenizer keeps it
 * until ts_tokenizer_free, which calls release(obj) once: an object that
 * must outlive the tokenizer counts its users itself. NULL: build failed
 * (nothing is attached; a later call tries again). One slot: every caller
 * must pass the same build / release. */
void *ts_tok_attached(const ts_tokenizer *t, void *(*build)(const ts_tokenizer *t, void *arg), void *arg,
                      void (*release)(void *obj));

#endif
