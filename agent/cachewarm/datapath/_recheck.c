/* The re-check's network work, in C (docs/reliability.md "Live traffic during the warm"): looking at
 * the source for every key a file stored, and deleting the stale copies on a destination, pipelined,
 * without the GIL; the decisions are dumper-cpp/core's (cw_source_verdict, cw_md_outcome), shared with
 * the stream. The rare cases (a destination that holds a client's value, keys no meta command names)
 * are datapath/populate/recheck.py's.
 *
 * Keys travel as a blob of (u8 length, bytes) entries; stamps as packed (u64 source_cas, int64
 * source_exp, int64 value length) per key (populate/plan.py PROBE_STAMP; value length -1: no stamp,
 * only the key's presence is compared).
 *
 * stamped_keys(data, offsets, stamped) -> (keys, stamps)
 *   the keys and stamps of the records at `offsets` (packed int64) of a verified v2/v3 file.
 * source_look(fd, keys, stamps, batch, timeout) -> verdicts
 *   per key a byte: CW_SOURCE_UNCHANGED / CHANGED / UNSURE (still straddling a tick of the source's
 *   clock after LOOK_ROUNDS looks) or LOOK_NO_META (no meta command names it: not looked at). Each
 *   batch is `stats`, `mg <key> c t s q O<i>` per key, `mn`, `stats`: the two `stats time`s bracket
 *   the source's clock while the batch ran, so `stats time + mg t` is the item's expiry on that clock
 *   (exact when they are equal). Raises ConnectionError (the connection failed or stayed silent for
 *   `timeout`) or RuntimeError (an error answer, named).
 * dest_delete(fd, keys, cas, batch, timeout) -> outcomes
 *   `md <key> C<cas> q O<i>` per key (cas: packed u64), `mn` per batch; per key a byte CW_MD_*
 *   (a key no meta command names: CW_MD_ERROR, not sent). Raises as source_look; an error answer
 *   (SERVER_ERROR ...) raises RuntimeError naming it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "_v2plan.h"
#include "cachewarm_core.h"

#define LOOK_ROUNDS 4
#define LOOK_NO_META 3

typedef struct {
  const unsigned char *key;
  size_t len;
} Key;

/* The keys of a blob; -1 (ValueError set) when it is malformed. */
static Py_ssize_t split_keys(const unsigned char *p, size_t n, Key **out) {
  size_t count = 0;
  for (size_t i = 0; i < n; i += 1 + (size_t)p[i]) count++;
  Key *k = PyMem_Calloc(count ? count : 1, sizeof *k);
  if (!k) {
    PyErr_NoMemory();
    return -1;
  }
  size_t j = 0;
  for (size_t i = 0; i < n; i += 1 + (size_t)p[i]) {
    if (p[i] == 0 || i + 1 + p[i] > n) {
      PyMem_Free(k);
      PyErr_SetString(PyExc_ValueError, "keys: a malformed (length, bytes) blob");
      return -1;
    }
    k[j].key = p + i + 1;
    k[j].len = p[i];
    j++;
  }
  *out = k;
  return (Py_ssize_t)count;
}

/* ---- one pipelined exchange ------------------------------------------------------------------- */

typedef struct Exchange Exchange;
/* Called per reply line (without \r\n); returns 1 when the exchange is complete, 0 to go on, -1 to
 * stop with `error` set. */
typedef int (*LineFn)(Exchange *x, const char *line, size_t n);
struct Exchange {
  int fd;
  double timeout;
  LineFn on_line;
  void *ctx;
  char error[256];
  int err_errno;
  int io; /* the failure is the connection's (ConnectionError: retried), not an answer's */
  char *rbuf;
  size_t rlen, rcap;
};

static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Sends req while reading replies until on_line says the exchange is complete; 0, or -1 with error. */
static int exchange(Exchange *x, const char *req, size_t len) {
  size_t sent = 0;
  double last = mono();
  for (;;) {
    struct pollfd p = {x->fd, (short)(POLLIN | (sent < len ? POLLOUT : 0)), 0};
    const int r = poll(&p, 1, 200);
    if (r < 0 && errno != EINTR) {
      x->err_errno = errno;
      snprintf(x->error, sizeof x->error, "poll failed");
      return -1;
    }
    if (r <= 0) {
      if (mono() - last > x->timeout) {
        x->io = 1;
        snprintf(x->error, sizeof x->error, "timed out: no answer for %.0f s", x->timeout);
        return -1;
      }
      continue;
    }
    if ((p.revents & POLLOUT) && sent < len) {
      const ssize_t w = send(x->fd, req + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        x->err_errno = errno;
        snprintf(x->error, sizeof x->error, "send failed");
        return -1;
      }
      if (w > 0) {
        sent += (size_t)w;
        last = mono();
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      if (x->rcap - x->rlen < 65536) {
        const size_t cap = x->rcap ? 2 * x->rcap : 1 << 18;
        char *b = realloc(x->rbuf, cap);
        if (!b) {
          snprintf(x->error, sizeof x->error, "out of memory");
          return -1;
        }
        x->rbuf = b;
        x->rcap = cap;
      }
      const ssize_t got = recv(x->fd, x->rbuf + x->rlen, x->rcap - x->rlen, MSG_DONTWAIT);
      if (got == 0) {
        x->io = 1;
        snprintf(x->error, sizeof x->error, "connection closed by the server");
        return -1;
      }
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        x->err_errno = errno;
        snprintf(x->error, sizeof x->error, "receive failed");
        return -1;
      }
      last = mono();
      x->rlen += (size_t)got;
      size_t start = 0;
      int done = 0;
      for (size_t i = 0; i + 1 < x->rlen; i++) {
        if (x->rbuf[i] != '\r' || x->rbuf[i + 1] != '\n') continue;
        const int v = x->on_line(x, x->rbuf + start, i - start);
        start = i + 2;
        i++;
        if (v < 0) return -1;
        if (v > 0) {
          done = 1;
          break;
        }
      }
      memmove(x->rbuf, x->rbuf + start, x->rlen - start);
      x->rlen -= start;
      if (done) {
        if (x->rlen || sent < len) {
          snprintf(x->error, sizeof x->error, "answers after the last one expected");
          return -1;
        }
        return 0;
      }
    }
  }
}

static int error_line(Exchange *x, const char *line, size_t n) {
  if ((n >= 12 && memcmp(line, "SERVER_ERROR", 12) == 0) || (n >= 12 && memcmp(line, "CLIENT_ERROR", 12) == 0) ||
      (n == 5 && memcmp(line, "ERROR", 5) == 0)) {
    snprintf(x->error, sizeof x->error, "answered '%.*s'", (int)(n > 200 ? 200 : n), line);
    return 1;
  }
  return 0;
}

/* ---- source_look ---------------------------------------------------------------------------------- */

typedef struct {
  int phase;         /* 0: the first stats, 1: the mg answers, 2: the second stats */
  int64_t t0, t1;    /* the two `stats time`s */
  size_t first;      /* the batch's keys are todo[first .. first + n) */
  const size_t *todo;
  size_t n;
  unsigned char *seen;     /* per batch key: its HD line was read */
  int64_t *ttl;            /* per batch key */
  uint64_t *cas, *size;
  const Key *keys;
} Look;

static int look_line(Exchange *x, const char *line, size_t n) {
  Look *l = x->ctx;
  if (error_line(x, line, n)) return -1;
  if (l->phase != 1) {
    if (n == 3 && memcmp(line, "END", 3) == 0) {
      if (l->phase == 2) return 1;
      l->phase = 1;
      return 0;
    }
    if (n > 10 && memcmp(line, "STAT time ", 10) == 0) {
      int64_t t = 0;
      for (size_t i = 10; i < n && line[i] >= '0' && line[i] <= '9'; i++) t = t * 10 + (line[i] - '0');
      if (l->phase == 0) l->t0 = t;
      else l->t1 = t;
    }
    return 0;
  }
  cw_meta_reply r;
  if (cw_meta_reply_parse(line, n, &r) < 0) {
    snprintf(x->error, sizeof x->error, "a malformed answer to mg: '%.*s'", (int)(n > 200 ? 200 : n), line);
    return -1;
  }
  if (strcmp(r.code, "MN") == 0) {
    l->phase = 2;
    return 0;
  }
  if (strcmp(r.code, "HD") != 0 || !r.has_opaque || r.opaque < l->first || r.opaque >= l->first + l->n ||
      !r.has_cas || !r.has_ttl) {
    snprintf(x->error, sizeof x->error, "an unexpected answer to mg: '%.*s'", (int)(n > 200 ? 200 : n), line);
    return -1;
  }
  const size_t k = (size_t)(r.opaque - l->first);
  l->seen[k] = 1;
  l->ttl[k] = r.ttl;
  l->cas[k] = r.cas;
  l->size[k] = r.has_size ? r.size : UINT64_MAX;
  return 0;
}

static int raise_exchange(const Exchange *x) {
  if (x->err_errno) PyErr_Format(PyExc_ConnectionError, "%s: %s", x->error, strerror(x->err_errno));
  else PyErr_SetString(x->io ? PyExc_ConnectionError : PyExc_RuntimeError, x->error);
  return -1;
}

static PyObject *source_look(PyObject *self, PyObject *args) {
  (void)self;
  int fd;
  Py_buffer kb, sb;
  Py_ssize_t batch;
  double timeout;
  if (!PyArg_ParseTuple(args, "iy*y*nd", &fd, &kb, &sb, &batch, &timeout)) return NULL;
  PyObject *result = NULL;
  Key *keys = NULL;
  Exchange x = {0};
  size_t *todo = NULL, *again = NULL;
  unsigned char *seen = NULL, *verdict = NULL;
  int64_t *ttl = NULL;
  uint64_t *cas = NULL, *size = NULL;
  char *req = NULL;
  const Py_ssize_t nk = split_keys(kb.buf, (size_t)kb.len, &keys);
  if (nk < 0) goto out;
  if ((size_t)sb.len != (size_t)nk * 24 || batch < 1) {
    PyErr_SetString(PyExc_ValueError, "stamps: 24 bytes per key; batch >= 1");
    goto out;
  }
  const size_t n = (size_t)nk, b = (size_t)batch;
  todo = PyMem_Calloc(n ? n : 1, sizeof *todo);
  again = PyMem_Calloc(n ? n : 1, sizeof *again);
  verdict = PyMem_Calloc(n ? n : 1, 1);
  seen = PyMem_Calloc(b, 1);
  ttl = PyMem_Calloc(b, sizeof *ttl);
  cas = PyMem_Calloc(b, sizeof *cas);
  size = PyMem_Calloc(b, sizeof *size);
  req = PyMem_Malloc(b * CW_MAX_META_LINE + 32);
  if (!todo || !again || !verdict || !seen || !ttl || !cas || !size || !req) {
    PyErr_NoMemory();
    goto out;
  }
  size_t ntodo = 0;
  char line[CW_MAX_META_LINE];
  for (size_t i = 0; i < n; i++) {
    if (cw_mg_look_line(line, keys[i].key, keys[i].len, 0) == 0) verdict[i] = LOOK_NO_META;
    else todo[ntodo++] = i;
  }
  const unsigned char *stamps = sb.buf;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS;
  x.fd = fd;
  x.timeout = timeout;
  x.on_line = look_line;
  for (int round = 0; round < LOOK_ROUNDS && ntodo && !failed; round++) {
    size_t nagain = 0;
    for (size_t first = 0; first < ntodo && !failed; first += b) {
      const size_t m = ntodo - first < b ? ntodo - first : b;
      size_t len = 0;
      memcpy(req, "stats\r\n", 7);
      len = 7;
      for (size_t j = 0; j < m; j++) {
        const Key *k = &keys[todo[first + j]];
        len += cw_mg_look_line(req + len, k->key, k->len, first + j);
      }
      memcpy(req + len, "mn\r\nstats\r\n", 11);
      len += 11;
      memset(seen, 0, m);
      Look l = {0, -1, -1, first, todo, m, seen, ttl, cas, size, keys};
      x.ctx = &l;
      if (exchange(&x, req, len) < 0) {
        failed = 1;
        break;
      }
      if (l.t0 < 0 || l.t1 < l.t0) {
        snprintf(x.error, sizeof x.error, "stats without a time (or a clock that went back)");
        failed = 1;
        break;
      }
      for (size_t j = 0; j < m; j++) {
        const size_t i = todo[first + j];
        cw_read rd;
        cw_read_unpack(stamps + CW_READ_STAMP * i, &rd);
        cw_source_now now = {seen[j], cas[j], CW_NEVER, CW_NEVER, size[j] == UINT64_MAX ? -1 : (int64_t)size[j]};
        if (seen[j] && ttl[j] != CW_NEVER) {
          now.exp_lo = l.t0 + ttl[j];
          now.exp_hi = l.t1 + ttl[j];
        }
        int v;
        if (rd.value_len < 0) { /* no stamp: only the key's presence tells */
          v = seen[j] ? CW_SOURCE_UNCHANGED : CW_SOURCE_CHANGED;
        } else {
          v = cw_source_verdict(&rd, &now);
        }
        verdict[i] = (unsigned char)v;
        if (v == CW_SOURCE_UNSURE) again[nagain++] = i;
      }
    }
    memcpy(todo, again, nagain * sizeof *todo);
    ntodo = nagain;
  }
  Py_END_ALLOW_THREADS;
  if (failed) {
    raise_exchange(&x);
    goto out;
  }
  result = PyBytes_FromStringAndSize((const char *)verdict, (Py_ssize_t)n);
out:
  PyMem_Free(keys);
  PyMem_Free(todo);
  PyMem_Free(again);
  PyMem_Free(verdict);
  PyMem_Free(seen);
  PyMem_Free(ttl);
  PyMem_Free(cas);
  PyMem_Free(size);
  PyMem_Free(req);
  free(x.rbuf);
  PyBuffer_Release(&kb);
  PyBuffer_Release(&sb);
  return result;
}

/* ---- dest_delete ---------------------------------------------------------------------------------- */

typedef struct {
  size_t first, n;
  unsigned char *outcome; /* per key of the call */
} Delete;

static int delete_line(Exchange *x, const char *line, size_t n) {
  Delete *d = x->ctx;
  if (error_line(x, line, n)) return -1;
  cw_meta_reply r;
  if (cw_meta_reply_parse(line, n, &r) < 0 || r.code[0] == 0) {
    snprintf(x->error, sizeof x->error, "a malformed answer to md: '%.*s'", (int)(n > 200 ? 200 : n), line);
    return -1;
  }
  if (strcmp(r.code, "MN") == 0) return 1;
  if (!r.has_opaque || r.opaque < d->first || r.opaque >= d->first + d->n) {
    snprintf(x->error, sizeof x->error, "an unexpected answer to md: '%.*s'", (int)(n > 200 ? 200 : n), line);
    return -1;
  }
  const int o = cw_md_outcome(&r);
  if (o == CW_MD_ERROR) {
    snprintf(x->error, sizeof x->error, "answered '%.*s' to md", (int)(n > 200 ? 200 : n), line);
    return -1;
  }
  d->outcome[r.opaque] = (unsigned char)o;
  return 0;
}

static PyObject *dest_delete(PyObject *self, PyObject *args) {
  (void)self;
  int fd;
  Py_buffer kb, cb;
  Py_ssize_t batch;
  double timeout;
  if (!PyArg_ParseTuple(args, "iy*y*nd", &fd, &kb, &cb, &batch, &timeout)) return NULL;
  PyObject *result = NULL;
  Key *keys = NULL;
  Exchange x = {0};
  unsigned char *outcome = NULL;
  char *req = NULL;
  const Py_ssize_t nk = split_keys(kb.buf, (size_t)kb.len, &keys);
  if (nk < 0) goto out;
  if ((size_t)cb.len != (size_t)nk * 8 || batch < 1) {
    PyErr_SetString(PyExc_ValueError, "cas: 8 bytes per key; batch >= 1");
    goto out;
  }
  const size_t n = (size_t)nk, b = (size_t)batch;
  outcome = PyMem_Calloc(n ? n : 1, 1);
  req = PyMem_Malloc(b * CW_MAX_META_LINE + 8);
  if (!outcome || !req) {
    PyErr_NoMemory();
    goto out;
  }
  const unsigned char *casb = cb.buf;
  int failed = 0;
  Py_BEGIN_ALLOW_THREADS;
  x.fd = fd;
  x.timeout = timeout;
  x.on_line = delete_line;
  for (size_t first = 0; first < n && !failed; first += b) {
    const size_t m = n - first < b ? n - first : b;
    size_t len = 0;
    for (size_t j = 0; j < m; j++) {
      const size_t i = first + j;
      const size_t l = cw_md_cas_line(req + len, keys[i].key, keys[i].len, v2_le64(casb + 8 * i), i);
      if (l == 0) outcome[i] = CW_MD_ERROR; /* no meta form: the caller deletes it another way */
      len += l;
    }
    memcpy(req + len, "mn\r\n", 4);
    len += 4;
    Delete d = {first, m, outcome};
    x.ctx = &d;
    if (exchange(&x, req, len) < 0) failed = 1;
  }
  Py_END_ALLOW_THREADS;
  if (failed) {
    raise_exchange(&x);
    goto out;
  }
  result = PyBytes_FromStringAndSize((const char *)outcome, (Py_ssize_t)n);
out:
  PyMem_Free(keys);
  PyMem_Free(outcome);
  PyMem_Free(req);
  free(x.rbuf);
  PyBuffer_Release(&kb);
  PyBuffer_Release(&cb);
  return result;
}

/* ---- stamped_keys --------------------------------------------------------------------------------- */

static PyObject *stamped_keys(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer data, offs;
  int stamped;
  if (!PyArg_ParseTuple(args, "y*y*p", &data, &offs, &stamped)) return NULL;
  PyObject *result = NULL;
  V2Buf keys = {0}, stamps = {0};
  if (offs.len % 8) {
    PyErr_SetString(PyExc_ValueError, "offsets: packed int64");
    goto out;
  }
  unsigned char keybuf[CW_MAX_KEY];
  char why[CW_RECORD_WHY];
  for (Py_ssize_t i = 0; i < offs.len / 8; i++) {
    const int64_t at = (int64_t)v2_le64((const unsigned char *)offs.buf + 8 * i);
    cw_record r;
    if (at < 0 || at >= data.len ||
        cw_record_parse(data.buf, (size_t)at, (size_t)data.len, stamped, &r, keybuf, why) < 0) {
      PyErr_Format(PyExc_ValueError, "no record at offset %lld", (long long)at);
      goto out;
    }
    const unsigned char kl = (unsigned char)r.key_len;
    const cw_read rd = {r.source_cas, r.source_exp, stamped ? (int64_t)r.value_len : -1};
    unsigned char st[CW_READ_STAMP];
    cw_read_pack(st, &rd);
    if (v2buf_put(&keys, &kl, 1) < 0 || v2buf_put(&keys, r.key, r.key_len) < 0 ||
        v2buf_put(&stamps, st, sizeof st) < 0) {
      PyErr_NoMemory();
      goto out;
    }
  }
  result = Py_BuildValue("(y#y#)", keys.data ? (const char *)keys.data : "", (Py_ssize_t)keys.len,
                         stamps.data ? (const char *)stamps.data : "", (Py_ssize_t)stamps.len);
out:
  v2buf_free(&keys);
  v2buf_free(&stamps);
  PyBuffer_Release(&data);
  PyBuffer_Release(&offs);
  return result;
}

PyMethodDef kRecheckMethods[] = {
    {"stamped_keys", stamped_keys, METH_VARARGS, "Keys and source stamps of records (see _recheck.c)."},
    {"source_look", source_look, METH_VARARGS, "The source's verdict on each key (see _recheck.c)."},
    {"dest_delete", dest_delete, METH_VARARGS, "CAS-guarded deletes on a destination (see _recheck.c)."},
    {NULL, NULL, 0, NULL},
};
