/* The re-check's decisions (docs/reliability.md "Live traffic during the warm"): each is a pure
 * function of what the servers answered, so the populator (C and Python) and the stream (C++) decide
 * alike, and tests/vectors/core/ pins them. */
#include <string.h>

#include "cachewarm_core.h"

int cw_source_verdict(const cw_read *r, const cw_source_now *s) {
  if (!s->present) return CW_SOURCE_CHANGED;
  /* Every change but a touch renews the CAS (set, add, incr, decr, append, prepend, ma, md I). */
  if (s->cas != r->source_cas) return CW_SOURCE_CHANGED;
  /* A client that chooses its own CAS (E, md x: 1.6.27+) can keep it: a value of another size is
   * another value all the same. */
  if (s->size >= 0 && r->value_len >= 0 && s->size != r->value_len) return CW_SOURCE_CHANGED;
  /* A touch changes only the expiry. Our copy ends no later than the source's item did at the read
   * (source_exp): an end now earlier than that (or a finite one for an item that never expired) is a
   * touch our copy missed; a later one is not (our copy ends first, as it always may). */
  if (r->source_exp == CW_NEVER) return s->exp_lo == CW_NEVER ? CW_SOURCE_UNCHANGED : CW_SOURCE_CHANGED;
  if (s->exp_lo == CW_NEVER) return CW_SOURCE_UNCHANGED;
  if (s->exp_hi < r->source_exp) return CW_SOURCE_CHANGED;
  if (s->exp_lo >= r->source_exp) return CW_SOURCE_UNCHANGED;
  return CW_SOURCE_UNSURE;
}

int cw_md_outcome(const cw_meta_reply *reply) {
  if (reply == NULL) return CW_MD_DELETED;
  if (strcmp(reply->code, "HD") == 0) return CW_MD_DELETED;
  if (strcmp(reply->code, "NF") == 0) return CW_MD_GONE;
  if (strcmp(reply->code, "EX") == 0) return CW_MD_NOT_OURS;
  return CW_MD_ERROR;
}

static int same(const cw_item *s, const cw_item *d, int64_t settle_s) {
  if (!s->present || s->flags != d->flags || s->value_len != d->value_len) return 0;
  if (s->value_len && memcmp(s->value, d->value, s->value_len) != 0) return 0;
  if (s->ttl == CW_NEVER) return 1;
  if (d->ttl == CW_NEVER) return 0;
  return d->ttl <= s->ttl + settle_s + 1;
}

int cw_compare_verdict(const cw_item *s, const cw_item *d, uint64_t d_cas_before, int round, int max_rounds,
                       int64_t settle_s) {
  if (!d->present) return CW_CMP_GONE;
  if (same(s, d, settle_s)) return CW_CMP_KEEP;
  /* Different now may be a client's write that has not reached the other replica yet: look again. */
  if (d_cas_before == 0) return round < max_rounds ? CW_CMP_WAIT : CW_CMP_UNSETTLED;
  /* Still different and nobody wrote the destination since: its value derives from our stale copy. */
  if (d->cas == d_cas_before) return CW_CMP_DELETE;
  return round < max_rounds ? CW_CMP_WAIT : CW_CMP_UNSETTLED;
}
