/* Placement descriptions (placement.h) parsed, and keys placed: the key transforms, then ketama,
 * modula, rendezvous or furc. */
/* why this file is long: the parser and the placing share the private struct cw_placement; split,
 * it would need an internal header that setup.py and the sdist ship besides placement.h. */
#define _GNU_SOURCE /* memmem */
#include "placement.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashkit.h"

enum dist { D_KETAMA, D_MODULA, D_RENDEZVOUS, D_FURC, D_WCH3 };
enum { MAX_NAME = 1024, MAX_NODES = 1 << 16, MAX_COUNT = 1 << 16 };

typedef struct {
  unsigned char *s;
  size_t n;
} bytes_t;

struct cw_placement {
  int dist, hash, md5x4, collision_last, hash_stop, keyform_repr, has_tag;
  unsigned char tag[2];
  bytes_t prefix, delimiter, salt;
  size_t nnodes;
  bytes_t *names;
  uint32_t *counts;
  uint32_t *dest; /* what cw_place returns for each node (default: its own index) */
  size_t npoints; /* ketama */
  uint32_t *points, *owners;
  size_t nslots; /* modula */
  uint32_t *slots;
  size_t nweights; /* wch3: one per node, in [0, 1] */
  double *weights;
};

static void fail(char *err, size_t errlen, const char *fmt, ...) {
  if (!errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static int unhex(const char *s, size_t n, bytes_t *out) {
  if (n % 2) return -1;
  out->s = malloc(n / 2 + 1);
  if (!out->s) return -1;
  out->n = n / 2;
  for (size_t i = 0; i < n; i += 2) {
    int v = 0;
    for (int k = 0; k < 2; k++) {
      const char c = s[i + (size_t)k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    out->s[i / 2] = (unsigned char)v;
  }
  return 0;
}

void cw_placement_free(cw_placement *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nnodes; i++) free(p->names[i].s);
  free(p->names);
  free(p->counts);
  free(p->dest);
  free(p->prefix.s);
  free(p->delimiter.s);
  free(p->salt.s);
  free(p->points);
  free(p->owners);
  free(p->slots);
  free(p->weights);
  free(p);
}

size_t cw_placement_nodes(const cw_placement *p) { return p->nnodes; }

size_t cw_placement_max_dest(const cw_placement *p) {
  size_t m = 0;
  for (size_t i = 0; i < p->nnodes; i++)
    if (p->dest[i] > m) m = p->dest[i];
  return m;
}

size_t cw_placement_ring(const cw_placement *p, const uint32_t **points, const uint32_t **owners) {
  *points = p->points;
  *owners = p->owners;
  return p->npoints;
}

typedef struct {
  uint32_t value, owner, order;
} point_t;

static int point_cmp(const void *a, const void *b) {
  const point_t *x = a, *y = b;
  if (x->value != y->value) return x->value < y->value ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int build_ring(cw_placement *p, char *err, size_t errlen) {
  size_t total = 0;
  for (size_t i = 0; i < p->nnodes; i++) {
    if (p->md5x4 && p->counts[i] % 4) {
      fail(err, errlen, "node %zu: %u ketama points is not a multiple of 4", i, p->counts[i]);
      return -1;
    }
    total += p->counts[i];
  }
  if (total == 0) {
    fail(err, errlen, "the ring has no points");
    return -1;
  }
  point_t *pts = malloc(total * sizeof *pts);
  if (!pts) return fail(err, errlen, "out of memory"), -1;
  size_t k = 0;
  unsigned char buf[MAX_NAME + 16];
  for (size_t i = 0; i < p->nnodes; i++) {
    const bytes_t *nm = &p->names[i];
    const uint32_t steps = p->md5x4 ? p->counts[i] / 4 : p->counts[i];
    for (uint32_t j = 0; j < steps; j++) {
      memcpy(buf, nm->s, nm->n);
      const size_t len = nm->n + (size_t)snprintf((char *)buf + nm->n, 16, "-%u", j);
      if (p->md5x4) {
        unsigned char d[16];
        cw_md5(buf, len, d);
        for (int w = 0; w < 4; w++, k++) {
          pts[k].value = (uint32_t)d[4 * w] | (uint32_t)d[4 * w + 1] << 8 | (uint32_t)d[4 * w + 2] << 16 | (uint32_t)d[4 * w + 3] << 24;
          pts[k].owner = p->dest[i];
          pts[k].order = (uint32_t)k;
        }
      } else {
        pts[k].value = cw_hash((cw_hash_id)p->hash, buf, len);
        pts[k].owner = p->dest[i];
        pts[k].order = (uint32_t)k;
        k++;
      }
    }
  }
  qsort(pts, total, sizeof *pts, point_cmp);
  p->points = malloc(total * sizeof(uint32_t));
  p->owners = malloc(total * sizeof(uint32_t));
  if (!p->points || !p->owners) return free(pts), fail(err, errlen, "out of memory"), -1;
  size_t n = 0;
  for (size_t i = 0; i < total; i++) {
    if (n && p->points[n - 1] == pts[i].value) {
      if (p->collision_last) p->owners[n - 1] = pts[i].owner;
      continue;
    }
    p->points[n] = pts[i].value;
    p->owners[n++] = pts[i].owner;
  }
  p->npoints = n;
  free(pts);
  return 0;
}

static int build_slots(cw_placement *p, char *err, size_t errlen) {
  size_t total = 0;
  for (size_t i = 0; i < p->nnodes; i++) total += p->counts[i];
  if (total == 0) return fail(err, errlen, "modula needs a weight of at least 1"), -1;
  p->slots = malloc(total * sizeof(uint32_t));
  if (!p->slots) return fail(err, errlen, "out of memory"), -1;
  for (size_t i = 0; i < p->nnodes; i++)
    for (uint32_t j = 0; j < p->counts[i]; j++) p->slots[p->nslots++] = p->dest[i];
  return 0;
}

static int read_count(const char *s, size_t n, unsigned long *out) {
  unsigned long c = 0;
  if (n == 0) return -1;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || c > MAX_COUNT) return -1;
    c = c * 10 + (unsigned long)(s[i] - '0');
  }
  *out = c;
  return c > MAX_COUNT ? -1 : 0;
}

/* "w1,w2,..." each a decimal in [0, 1] */
static int parse_weights(cw_placement *p, const char *s, size_t n) {
  char *text = malloc(n + 1);
  if (!text) return -1;
  memcpy(text, s, n);
  text[n] = 0;
  free(p->weights);
  p->weights = NULL;
  p->nweights = 0;
  size_t cap = 0;
  int rc = 0;
  for (char *c = text; *c;) {
    char *end;
    const double v = strtod(c, &end);
    if (end == c || !(v >= 0 && v <= 1) || (*end && *end != ',')) {
      rc = -1;
      break;
    }
    if (p->nweights == cap) {
      cap = cap ? 2 * cap : 16;
      double *nw = realloc(p->weights, cap * sizeof *nw);
      if (!nw) {
        rc = -1;
        break;
      }
      p->weights = nw;
    }
    p->weights[p->nweights++] = v;
    c = *end ? end + 1 : end;
  }
  free(text);
  return rc;
}

static int word_is(const char *w, size_t n, const char *lit) { return strlen(lit) == n && memcmp(w, lit, n) == 0; }

cw_placement *cw_placement_parse(const char *text, size_t len, char *err, size_t errlen) {
  cw_placement *p = calloc(1, sizeof *p);
  if (!p) return fail(err, errlen, "out of memory"), NULL;
  p->dist = p->hash = -1;
  size_t cap = 0;
  const char *line = text, *end = text + len;
  int lineno = 0;
  while (line < end) {
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    if (!eol) eol = end;
    lineno++;
    /* up to four space-separated words */
    const char *w[4] = {0};
    size_t wl[4] = {0};
    int nw = 0;
    for (const char *c = line; c < eol && nw <= 4;) {
      while (c < eol && *c == ' ') c++;
      if (c == eol) break;
      const char *s = c;
      while (c < eol && *c != ' ') c++;
      if (nw == 4) {
        nw = 5;
        break;
      }
      w[nw] = s;
      wl[nw++] = (size_t)(c - s);
    }
    line = eol + 1;
    if (nw == 0) continue;
    if (nw > 4) goto bad_line;
#define ARGS(k) \
  if (nw != (k) + 1) goto bad_line
    if (word_is(w[0], wl[0], "dist")) {
      ARGS(1);
      p->dist = word_is(w[1], wl[1], "ketama") ? D_KETAMA
                : word_is(w[1], wl[1], "modula") ? D_MODULA
                : word_is(w[1], wl[1], "rendezvous") ? D_RENDEZVOUS
                : word_is(w[1], wl[1], "furc") ? D_FURC
                : word_is(w[1], wl[1], "wch3") ? D_WCH3
                                                 : -2;
      if (p->dist == -2) goto bad_line;
    } else if (word_is(w[0], wl[0], "hash")) {
      ARGS(1);
      if ((p->hash = cw_hash_by_name(w[1], wl[1])) < 0) {
        fail(err, errlen, "line %d: unknown hash %.*s", lineno, (int)wl[1], w[1]);
        goto error;
      }
    } else if (word_is(w[0], wl[0], "points")) {
      ARGS(1);
      if (word_is(w[1], wl[1], "md5x4")) p->md5x4 = 1;
      else if (!word_is(w[1], wl[1], "hash")) goto bad_line;
    } else if (word_is(w[0], wl[0], "collision")) {
      ARGS(1);
      if (word_is(w[1], wl[1], "last")) p->collision_last = 1;
      else if (!word_is(w[1], wl[1], "first")) goto bad_line;
    } else if (word_is(w[0], wl[0], "keyform")) {
      ARGS(1);
      if (word_is(w[1], wl[1], "repr")) p->keyform_repr = 1;
      else if (!word_is(w[1], wl[1], "str")) goto bad_line;
    } else if (word_is(w[0], wl[0], "weights")) {
      ARGS(1);
      if (parse_weights(p, w[1], wl[1])) goto bad_line;
    } else if (word_is(w[0], wl[0], "hash-stop")) {
      ARGS(0);
      p->hash_stop = 1;
    } else if (word_is(w[0], wl[0], "tag")) {
      bytes_t t = {0};
      ARGS(1);
      if (unhex(w[1], wl[1], &t) || t.n != 2) {
        free(t.s);
        goto bad_line;
      }
      memcpy(p->tag, t.s, 2);
      p->has_tag = 1;
      free(t.s);
    } else if (word_is(w[0], wl[0], "prefix") || word_is(w[0], wl[0], "delimiter") || word_is(w[0], wl[0], "salt")) {
      ARGS(1);
      bytes_t *dst = w[0][0] == 'p' ? &p->prefix : w[0][0] == 'd' ? &p->delimiter : &p->salt;
      free(dst->s);
      dst->s = NULL;
      if (unhex(w[1], wl[1], dst) || dst->n == 0) goto bad_line;
    } else if (word_is(w[0], wl[0], "node")) {
      if (nw != 3 && nw != 4) goto bad_line;
      if (p->nnodes == MAX_NODES) {
        fail(err, errlen, "more than %d nodes", MAX_NODES);
        goto error;
      }
      if (p->nnodes == cap) {
        cap = cap ? cap * 2 : 16;
        bytes_t *nn = realloc(p->names, cap * sizeof *nn);
        if (nn) p->names = nn;
        uint32_t *nc = realloc(p->counts, cap * sizeof *nc);
        if (nc) p->counts = nc;
        uint32_t *nd = realloc(p->dest, cap * sizeof *nd);
        if (nd) p->dest = nd;
        if (!nn || !nc || !nd) return fail(err, errlen, "out of memory"), cw_placement_free(p), NULL;
      }
      bytes_t nm = {0};
      if (unhex(w[1], wl[1], &nm) || nm.n > MAX_NAME) {
        free(nm.s);
        goto bad_line;
      }
      unsigned long c = 0, dest = p->nnodes;
      if (read_count(w[2], wl[2], &c) || (nw == 4 && (read_count(w[3], wl[3], &dest) || dest >= MAX_NODES))) {
        free(nm.s);
        goto bad_line;
      }
      p->names[p->nnodes] = nm;
      p->dest[p->nnodes] = (uint32_t)dest;
      p->counts[p->nnodes++] = (uint32_t)c;
    } else {
      goto bad_line;
    }
#undef ARGS
    continue;
  bad_line:
    fail(err, errlen, "placement description line %d: cannot read \"%.*s\"", lineno, (int)(eol - w[0] > 80 ? 80 : eol - w[0]), w[0]);
    goto error;
  }
  if (p->dist < 0) {
    fail(err, errlen, "placement description has no dist");
    goto error;
  }
  if (p->nnodes == 0) {
    fail(err, errlen, "placement description has no node");
    goto error;
  }
  if (p->dist == D_RENDEZVOUS) p->hash = CW_HASH_MURMUR3;
  if ((p->dist == D_KETAMA || p->dist == D_MODULA) && p->hash < 0) {
    fail(err, errlen, "placement description has no hash");
    goto error;
  }
  if (p->dist == D_WCH3 && p->nweights != p->nnodes) {
    fail(err, errlen, "wch3 needs one weight per node (%zu weights, %zu nodes)", p->nweights, p->nnodes);
    goto error;
  }
  if ((p->dist == D_FURC || p->dist == D_WCH3) && p->nnodes > CW_FURC_MAX) {
    fail(err, errlen, "furc pools have at most %u nodes", CW_FURC_MAX);
    goto error;
  }
  if (p->dist == D_KETAMA && build_ring(p, err, errlen)) goto error;
  if (p->dist == D_MODULA && build_slots(p, err, errlen)) goto error;
  return p;
error:
  cw_placement_free(p);
  return NULL;
}

/* Python's repr of a bytes object (b'...'), as pymemcache formats a bytes key into "%s-%s". */
static size_t bytes_repr(unsigned char *d, const unsigned char *s, size_t n) {
  const int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
  const unsigned char q = has_sq && !has_dq ? '"' : '\'';
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  d[o++] = 'b';
  d[o++] = q;
  for (size_t i = 0; i < n; i++) {
    const unsigned char c = s[i];
    if (c == q || c == '\\') {
      d[o++] = '\\';
      d[o++] = c;
    } else if (c == '\t' || c == '\n' || c == '\r') {
      d[o++] = '\\';
      d[o++] = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
    } else if (c < 0x20 || c >= 0x7f) {
      d[o++] = '\\';
      d[o++] = 'x';
      d[o++] = (unsigned char)hex[c >> 4];
      d[o++] = (unsigned char)hex[c & 15];
    } else {
      d[o++] = c;
    }
  }
  d[o++] = q;
  return o;
}

/* pymemcache hashes a str key's characters, each & 0xff: the UTF-8 key decoded, each code point's
 * low byte. -1 when s is not UTF-8. */
static long utf8_low_bytes(unsigned char *d, const unsigned char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t extra;
    uint32_t cp, min;
    if (c < 0x80) {
      extra = 0, cp = c, min = 0;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return -1;
    }
    for (size_t k = 1; k <= extra; k++) {
      if (i + k >= n || (s[i + k] & 0xc0) != 0x80) return -1;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    d[o++] = (unsigned char)(cp & 0xff);
    i += extra + 1;
  }
  return (long)o;
}

static long rendezvous(const cw_placement *p, const unsigned char *key, size_t len) {
  unsigned char stack[4096];
  const size_t need = MAX_NAME + 1 + 4 * len + 3;
  unsigned char *buf = need <= sizeof stack ? stack : malloc(need);
  if (!buf) return -1;
  /* the key's text once, after a gap the node name is copied into each time */
  unsigned char *kt = buf + MAX_NAME + 1;
  long kn;
  /* a key that is not UTF-8 cannot have come from a str: the app passed bytes */
  if (p->keyform_repr || (kn = utf8_low_bytes(kt, key, len)) < 0) kn = (long)bytes_repr(kt, key, len);
  long best = -1;
  uint32_t best_score = 0;
  if (kn >= 0) {
    for (size_t i = 0; i < p->nnodes; i++) {
      const bytes_t *nm = &p->names[i];
      unsigned char *s = kt - 1 - nm->n;
      memcpy(s, nm->s, nm->n);
      s[nm->n] = '-';
      const uint32_t score = cw_hash_murmur3(s, nm->n + 1 + (size_t)kn);
      /* ties go to the greater name (pymemcache: max(str(node), str(winner))) */
      if (best < 0 || score > best_score) {
        best = (long)i, best_score = score;
      } else if (score == best_score) {
        const bytes_t *bn = &p->names[best];
        const size_t m = nm->n < bn->n ? nm->n : bn->n;
        const int c = memcmp(nm->s, bn->s, m);
        if (c > 0 || (c == 0 && nm->n > bn->n)) best = (long)i;
      }
    }
  }
  if (buf != stack) free(buf);
  return best < 0 ? -1 : (long)p->dest[best];
}

long cw_place(const cw_placement *p, const unsigned char *key, size_t len) {
  if (p->prefix.n && len >= p->prefix.n && memcmp(key, p->prefix.s, p->prefix.n) == 0) {
    key += p->prefix.n;
    len -= p->prefix.n;
  }
  if (p->hash_stop) {
    const unsigned char *stop = len >= 3 ? memmem(key, len, "|#|", 3) : NULL;
    if (stop) len = (size_t)(stop - key);
  }
  if (p->has_tag) {
    const unsigned char *a = memchr(key, p->tag[0], len);
    if (a) {
      const unsigned char *b = memchr(a + 1, p->tag[1], len - (size_t)(a + 1 - key));
      if (b && b - a > 1) {
        len = (size_t)(b - a - 1);
        key = a + 1;
      }
    }
  }
  if (p->delimiter.n) {
    const unsigned char *cut = memmem(key, len, p->delimiter.s, p->delimiter.n);
    if (cut) len = (size_t)(cut - key);
  }
  if (p->dist == D_RENDEZVOUS) return rendezvous(p, key, len);
  unsigned char stack[1024];
  unsigned char *salted = NULL;
  if (p->salt.n) {
    const size_t n = len + p->salt.n;
    salted = n <= sizeof stack ? stack : malloc(n);
    if (!salted) return -1;
    memcpy(salted, key, len);
    memcpy(salted + len, p->salt.s, p->salt.n);
    key = salted;
    len = n;
  }
  long idx;
  if (p->dist == D_FURC) {
    idx = (long)p->dest[cw_furc_hash(key, len, (uint32_t)p->nnodes)];
  } else if (p->dist == D_WCH3) {
    idx = (long)p->dest[cw_wch3_hash(key, len, p->weights, (uint32_t)p->nnodes)];
  } else {
    const uint32_t h = cw_hash((cw_hash_id)p->hash, key, len);
    if (p->dist == D_MODULA) {
      idx = (long)p->slots[h % p->nslots];
    } else {
      size_t lo = 0, hi = p->npoints;
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (p->points[mid] < h) lo = mid + 1;
        else hi = mid;
      }
      idx = (long)p->owners[lo == p->npoints ? 0 : lo];
    }
  }
  if (salted && salted != stack) free(salted);
  return idx;
}
