/* cli_reuse.c: exact reuse of a session across requests, for `chat` and the
 * server's sessions (one policy for both).
 *
 * Owns: which saved state a new prompt resumes from, where the next one is
 * saved, and the ids that saved state covers. Does not own: the checkpoint
 * itself (ts_session_save / ts_session_restore), the prefill grid
 * (ts_session_feed), generation.
 *
 * Invariant: a reply depends on the prompt's ids alone, never on what the
 * session served before (issue 20). The prefill rounds each row according to
 * the chunk it was fed in, and one-row decode steps round otherwise again, so
 * a timeline equals a cold feed of its ids only up to the last cut that fell
 * on the prefill grid (turbospark.h, ts_session_feed). Hence:
 * - the live timeline is never reused: past its last grid point it holds
 *   rows that were decoded one at a time (the previous reply) or fed as a
 *   partial chunk, which a cold prefill computes as one chunk;
 * - a state is saved only at a grid point, after a feed that started at a
 *   grid point from a state of the same kind (position 0 or a restored
 *   checkpoint), so by induction it is the state a cold feed reaches there;
 * - a prompt resumes from that checkpoint when the ids before it start the
 *   prompt, and feeds the rest: at most one chunk of the part the previous
 *   request shared (the history up to its grid point) is fed again.
 * The cost of exactness is that re-fed part (under max_rows tokens per turn)
 * and no reuse for a shared start shorter than one chunk.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_reuse_init(cli_reuse *r, int n_ctx) {
    r->ids = malloc(sizeof(int32_t) * (size_t)(n_ctx > 0 ? n_ctx : 1));
    r->cap = r->ids ? n_ctx : 0;
    return r->ids ? 0 : -1;
}

void cli_reuse_free(cli_reuse *r) {
    free(r->ids);
    r->ids = NULL;
    r->cap = 0;
}

int cli_reuse_match(const cli_reuse *r, const ts_session *s, const int32_t *ids, int n) {
    const int c = ts_session_saved_pos(s);
    return c > 0 && c < n && c <= r->cap && !memcmp(r->ids, ids, sizeof(int32_t) * (size_t)c) ? c : 0;
}

int cli_reuse_prepare(cli_reuse *r, ts_session *s, const int32_t *ids, int n, int n_keep, int *cached, int *fed,
                      ts_error *err) {
    *cached = *fed = 0;
    int c = cli_reuse_match(r, s, ids, n);
    if (!c || ts_session_restore(s, err)) {
        ts_session_reset(s);
        c = 0;
    }
    *cached = c;
    const int h = cli_reuse_point(r, s, n, n_keep);
    if (h <= c) return c;
    int rc = ts_session_feed(s, ids + c, h - c, NULL, NULL, err);
    if (!rc) rc = cli_reuse_save(r, s, ids, err);
    if (rc) { /* a failed feed leaves no usable timeline */
        ts_session_reset(s);
        *cached = 0;
        return rc;
    }
    *fed = h - c;
    return h;
}

/* the next save point: the last grid point of the part the next request is
 * expected to share, leaving at least one id for the caller to feed (its
 * generation needs the last row's logits) */
int cli_reuse_point(const cli_reuse *r, const ts_session *s, int n, int n_keep) {
    const int G = ts_session_grid(s);
    const int keep = n_keep < n ? n_keep : n - 1;
    const int h = keep > 0 ? keep / G * G : 0;
    return h <= r->cap ? h : 0;
}

int cli_reuse_save(cli_reuse *r, ts_session *s, const int32_t *ids, ts_error *err) {
    const int h = ts_session_pos(s);
    int rc = ts_session_save(s, err);
    if (!rc) memcpy(r->ids, ids, sizeof(int32_t) * (size_t)h);
    return rc;
}
