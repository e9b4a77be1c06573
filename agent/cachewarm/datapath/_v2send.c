/* The populator's sender for data format v2 (docs/data-format.md section 7.3), in C: writes the
 * pieces _v2plan.c planned (ranges of the verified file's bytes, `mn` after each batch, `S` in set
 * mode) to one connection per destination and reads their replies concurrently, in one poll loop,
 * without the GIL. Its Python oracle is tests/datapath/send_oracle.py (send_py, over MetaConnection);
 * tests run both against real memcacheds.
 * why this file is long: one poll loop over every destination (pieces out, text and binary replies
 * in) whose helpers all share its Conn; a third of it is the contract below, the Python API's.
 *
 * send_v2(fds, data, pieces, lines, orders, collect_tags, items_per_second, bytes_per_second, timeout
 *         [, binary])
 *   fds: one connected socket per destination (already past any handshake); pieces: the plan's bytes
 *   for each; lines / orders: the plan's generated `add` lines (or binary ADD heads and keys) and the
 *   record offset of each item in send order (empty in set mode); collect_tags: keep the record
 *   offset of every NS / NOT_STORED / EXISTS (the O<offset> of an NS, the order entry of the others);
 *   items_per_second: 0 = no limit, else batches start no faster than that (all connections
 *   together); bytes_per_second: the same for the bytes written (0 = no limit; the tighter of the two
 *   paces); timeout: seconds without progress on any connection before giving up; binary: the
 *   pieces are binary-protocol ADDs (plan mode PLAN_ADD_BINARY) on connections that have sent nothing
 *   else: each batch ends with a NOOP instead of `mn`, and every answer is parsed as a binary
 *   response whose opaque is the item's index in `orders` (dumper-cpp/core cw_bin_reply_parse).
 *   -> [(sent, not_stored, tags | None, errors, first_error | None, failure | None, first_error_at,
 *       cas | None) per connection]
 *   sent: items of the batches written; not_stored: NS / NOT_STORED / EXISTS replies (add mode: a
 *   value was there); errors: SERVER_ERROR / CLIENT_ERROR / ERROR, a binary error status, or any other
 *   unexpected answer, first_error the first, first_error_at the record offset it answered (add mode;
 *   -1 when not known); failure: the connection was closed, reset or timed out (its own counts are
 *   then not reliable); cas (binary): packed u64 per item in send order, the CAS of the item our ADD
 *   stored (c_w), 0 when it did not store it (EXISTS, an error, or no answer).
 * At most two batches are in flight per connection (a batch starts once the one before the previous
 * has its MN). Once any connection has read an error or failed, no connection starts another batch:
 * the batches in flight end and their replies are read on every connection that still works, so an
 * error one destination answered is never lost because another one dropped.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "cachewarm_core.h"

#define MAX_IOV 256
#define RBUF 65536
#define IN_FLIGHT 2

typedef struct {
  int fd, saved_flags;
  const int64_t *pieces; /* pairs */
  size_t n_pieces;
  const unsigned char *lines;
  size_t lines_len;
  const int64_t *order; /* add mode: the record offset of each item, in send order */
  size_t n_order, replied;
  int64_t first_error_at;
  size_t cur;        /* current piece */
  uint64_t cur_done; /* bytes of it already sent */
  int in_batch;      /* a batch has started and its mn is not written yet */
  long batches_sent, batches_acked;
  long sent, not_stored, errors;
  char first_error[256];
  int has_error;
  char failure[256];
  int failed;
  int64_t *tags;
  size_t n_tags, cap_tags;
  int binary;    /* binary-protocol ADDs, NOOP batch ends */
  uint64_t *cas; /* binary: per item in send order, the CAS our ADD stored (0: not stored) */
  char rbuf[RBUF];
  size_t rlen;
} Conn;

/* A binary NOOP (the batch end of a binary connection), built once. */
static unsigned char kNoop[CW_BIN_HEADER];

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void fail(Conn *c, const char *what, int err) {
  if (c->failed) return;
  c->failed = 1;
  if (err) snprintf(c->failure, sizeof c->failure, "%s: %s", what, strerror(err));
  else snprintf(c->failure, sizeof c->failure, "%s", what);
}

static int all_sent(const Conn *c) { return c->cur >= c->n_pieces; }

/* The bytes a piece puts on the wire. */
static uint64_t piece_size(const Conn *c, int64_t off, int64_t len) {
  if (off >= 0 || off <= -3) return (uint64_t)len;
  if (off == -1) return c->binary ? CW_BIN_HEADER : 4u;
  return 1u;
}

/* The items (its mn's count) and the bytes of the batch starting at piece i. */
static long batch_from(const Conn *c, size_t i, uint64_t *bytes) {
  uint64_t b = 0;
  for (; i < c->n_pieces; i++) {
    const int64_t off = c->pieces[2 * i], len = c->pieces[2 * i + 1];
    if (off == -1) {
      *bytes = b + piece_size(c, off, len); /* "mn\r\n" or a NOOP */
      return (long)len;
    }
    b += piece_size(c, off, len);
  }
  *bytes = b;
  return 0;
}

static void add_tag(Conn *c, int64_t t) {
  if (c->n_tags == c->cap_tags) {
    size_t cap = c->cap_tags ? 2 * c->cap_tags : 1024;
    int64_t *n = realloc(c->tags, cap * sizeof *n);
    if (!n) return; /* counted anyway; the caller sees fewer tags than NS and reads them back */
    c->tags = n;
    c->cap_tags = cap;
  }
  c->tags[c->n_tags++] = t;
}

static void on_line(Conn *c, const char *l, size_t n, int collect) {
  if (n == 2 && memcmp(l, "MN", 2) == 0) {
    c->batches_acked++;
    return;
  }
  if (c->n_order) { /* add mode: one reply per item, in order */
    const int64_t at = c->replied < c->n_order ? c->order[c->replied] : -1;
    c->replied++;
    if (n == 6 && memcmp(l, "STORED", 6) == 0) return;
    if (n == 10 && memcmp(l, "NOT_STORED", 10) == 0) {
      c->not_stored++;
      if (collect && at >= 0) add_tag(c, at);
      return;
    }
    if (!c->has_error) c->first_error_at = at;
  }
  if ((n == 2 && memcmp(l, "NS", 2) == 0) || (n > 3 && memcmp(l, "NS ", 3) == 0)) {
    c->not_stored++;
    if (collect) {
      for (size_t i = 2; i + 1 < n; i++) {
        if (l[i] == ' ' && l[i + 1] == 'O') {
          int64_t v = 0;
          size_t j = i + 2;
          for (; j < n && l[j] >= '0' && l[j] <= '9'; j++) v = v * 10 + (l[j] - '0');
          if (j > i + 2) add_tag(c, v);
        }
      }
    }
    return;
  }
  c->errors++;
  if (!c->has_error) {
    c->has_error = 1;
    snprintf(c->first_error, sizeof c->first_error, "%.*s", (int)(n > 200 ? 200 : n), l);
  }
}

static void bin_error(Conn *c, const cw_bin_reply *r, const char *body, size_t n) {
  c->errors++;
  if (!c->has_error) {
    c->has_error = 1;
    c->first_error_at = r->opaque < c->n_order ? c->order[r->opaque] : -1;
    snprintf(c->first_error, sizeof c->first_error, "%s (binary protocol status 0x%04x '%.*s')",
             cw_bin_status_text(r->status), (unsigned)r->status, (int)(n > 160 ? 160 : n), body);
  }
}

/* Binary answers: one per ADD (its opaque = the item's index in send order), one per NOOP. */
static void on_binary(Conn *c, int collect) {
  size_t at = 0;
  for (;;) {
    cw_bin_reply r;
    const int got = cw_bin_reply_parse((const unsigned char *)c->rbuf + at, c->rlen - at, &r);
    if (got == 0) break;
    if (got < 0) {
      fail(c, "answered something that is not memcached's binary protocol (a server run with -B ascii?)", 0);
      return;
    }
    if (r.body_len > RBUF - CW_BIN_HEADER) {
      fail(c, "a binary answer longer than 64 KiB", 0);
      return;
    }
    if (c->rlen - at < CW_BIN_HEADER + (size_t)r.body_len) break;
    const char *body = c->rbuf + at + CW_BIN_HEADER;
    at += CW_BIN_HEADER + r.body_len;
    c->replied++;
    if (r.opcode == CW_BIN_OP_NOOP) {
      c->batches_acked++;
      continue;
    }
    if (r.opcode != CW_BIN_OP_ADD || r.opaque >= c->n_order) {
      bin_error(c, &r, "an answer to no ADD we sent", 28);
      continue;
    }
    const int outcome = cw_bin_add_outcome(r.status);
    if (outcome > 0) {
      c->cas[r.opaque] = r.cas;
    } else if (outcome == 0) {
      c->not_stored++;
      if (collect) add_tag(c, c->order[r.opaque]);
    } else {
      bin_error(c, &r, body, r.body_len);
    }
  }
  memmove(c->rbuf, c->rbuf + at, c->rlen - at);
  c->rlen -= at;
}

static void read_replies(Conn *c, int collect) {
  for (;;) {
    ssize_t r = recv(c->fd, c->rbuf + c->rlen, RBUF - c->rlen, MSG_DONTWAIT);
    if (r == 0) {
      fail(c, "connection closed by the server", 0);
      return;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      fail(c, "receive failed", errno);
      return;
    }
    c->rlen += (size_t)r;
    if (c->binary) {
      on_binary(c, collect);
      if (c->failed) return;
      continue;
    }
    size_t start = 0;
    for (size_t i = 0; i + 1 < c->rlen; i++) {
      if (c->rbuf[i] == '\r' && c->rbuf[i + 1] == '\n') {
        on_line(c, c->rbuf + start, i - start, collect);
        start = i + 2;
        i++;
      }
    }
    if (start == 0 && c->rlen == RBUF) {
      fail(c, "a reply line longer than 64 KiB", 0);
      return;
    }
    memmove(c->rbuf, c->rbuf + start, c->rlen - start);
    c->rlen -= start;
  }
}

/* Writes from the cursor up to the end of the current batch (its mn included). */
static void write_some(Conn *c, const unsigned char *data) {
  struct iovec iov[MAX_IOV];
  int n = 0;
  size_t i = c->cur;
  uint64_t skip = c->cur_done;
  for (; i < c->n_pieces && n < MAX_IOV; i++) {
    const int64_t off = c->pieces[2 * i], len = c->pieces[2 * i + 1];
    if (off >= 0) iov[n].iov_base = (void *)(data + off + skip), iov[n].iov_len = (size_t)((uint64_t)len - skip);
    else if (off <= -3) iov[n].iov_base = (void *)(c->lines + (-3 - off) + skip), iov[n].iov_len = (size_t)((uint64_t)len - skip);
    else if (off == -1 && c->binary) iov[n].iov_base = (void *)(kNoop + skip), iov[n].iov_len = CW_BIN_HEADER - skip;
    else if (off == -1) iov[n].iov_base = (void *)&"mn\r\n"[skip], iov[n].iov_len = 4 - skip;
    else iov[n].iov_base = (void *)&"S"[skip], iov[n].iov_len = 1 - skip;
    skip = 0;
    n++;
    if (off == -1) break; /* the batch ends here: the next one waits for its turn */
  }
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = iov;
  m.msg_iovlen = (size_t)n;
  ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail(c, "send failed", errno);
    return;
  }
  uint64_t left = (uint64_t)w;
  while (left > 0 && c->cur < c->n_pieces) {
    const int64_t off = c->pieces[2 * c->cur], len = c->pieces[2 * c->cur + 1];
    const uint64_t size = piece_size(c, off, len);
    const uint64_t rest = size - c->cur_done;
    if (left < rest) {
      c->cur_done += left;
      left = 0;
      break;
    }
    left -= rest;
    c->cur_done = 0;
    c->cur++;
    if (off == -1) {
      c->sent += (long)len;
      c->batches_sent++;
      c->in_batch = 0;
    }
  }
}

static PyObject *send_v2(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *fds_o, *pieces_o, *lines_o, *orders_o;
  Py_buffer data;
  int collect, binary = 0;
  double rate, byte_rate, timeout;
  if (!PyArg_ParseTuple(args, "Oy*OOOpddd|p", &fds_o, &data, &pieces_o, &lines_o, &orders_o, &collect, &rate,
                        &byte_rate, &timeout, &binary))
    return NULL;
  cw_bin_key_request(kNoop, CW_BIN_OP_NOOP, 0, 0);
  PyObject *fds = PySequence_Fast(fds_o, "fds: a sequence"), *pcs = PySequence_Fast(pieces_o, "pieces: a sequence");
  PyObject *lns = PySequence_Fast(lines_o, "lines: a sequence"), *ords = PySequence_Fast(orders_o, "orders: a sequence");
  Conn *conns = NULL;
  Py_buffer *pbufs = NULL, *lbufs = NULL, *obufs = NULL;
  PyObject *result = NULL;
  Py_ssize_t n = 0, got_bufs = 0;
  if (!fds || !pcs || !lns || !ords) goto done;
  n = PySequence_Fast_GET_SIZE(fds);
  if (PySequence_Fast_GET_SIZE(pcs) != n || PySequence_Fast_GET_SIZE(lns) != n || PySequence_Fast_GET_SIZE(ords) != n) {
    PyErr_SetString(PyExc_ValueError, "one pieces, lines and order per fd");
    goto done;
  }
  conns = calloc((size_t)(n ? n : 1), sizeof *conns);
  pbufs = calloc((size_t)(n ? n : 1), sizeof *pbufs);
  lbufs = calloc((size_t)(n ? n : 1), sizeof *lbufs);
  obufs = calloc((size_t)(n ? n : 1), sizeof *obufs);
  if (!conns || !pbufs || !lbufs || !obufs) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    Conn *c = &conns[i];
    c->fd = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(fds, i));
    if (c->fd == -1 && PyErr_Occurred()) goto done;
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(pcs, i), &pbufs[i], PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(lns, i), &lbufs[i], PyBUF_SIMPLE) < 0) {
      PyBuffer_Release(&pbufs[i]);
      goto done;
    }
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(ords, i), &obufs[i], PyBUF_SIMPLE) < 0) {
      PyBuffer_Release(&pbufs[i]);
      PyBuffer_Release(&lbufs[i]);
      goto done;
    }
    got_bufs++;
    if (pbufs[i].len % 16 || obufs[i].len % 8) {
      PyErr_SetString(PyExc_ValueError, "pieces: int64 pairs; order: int64s");
      goto done;
    }
    c->pieces = pbufs[i].buf;
    c->n_pieces = (size_t)pbufs[i].len / 16;
    c->lines = lbufs[i].buf;
    c->lines_len = (size_t)lbufs[i].len;
    c->order = obufs[i].buf;
    c->n_order = (size_t)obufs[i].len / 8;
    c->first_error_at = -1;
    c->binary = binary;
    if (binary && !(c->cas = calloc(c->n_order ? c->n_order : 1, sizeof *c->cas))) {
      PyErr_NoMemory();
      goto done;
    }
    for (size_t k = 0; k < c->n_pieces; k++) {
      const int64_t off = c->pieces[2 * k], len = c->pieces[2 * k + 1];
      if ((off >= 0 && (len < 0 || off + len > data.len)) || (off == -2 && len != 1) ||
          (off <= -3 && (len < 0 || (uint64_t)(-3 - off) + (uint64_t)len > c->lines_len))) {
        PyErr_SetString(PyExc_ValueError, "pieces: a range outside the data");
        goto done;
      }
    }
  }
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t i = 0; i < n; i++) {
    conns[i].saved_flags = fcntl(conns[i].fd, F_GETFL);
    fcntl(conns[i].fd, F_SETFL, conns[i].saved_flags | O_NONBLOCK);
  }
  const double t0 = now_s();
  double last_progress = t0;
  long started_items = 0;
  uint64_t started_bytes = 0;
  int stop_new = 0;
  struct pollfd *pfd = calloc((size_t)(n ? n : 1), sizeof *pfd);
  for (;;) {
    int active = 0, network = 0;
    for (Py_ssize_t i = 0; i < n; i++)
      if (conns[i].failed || conns[i].has_error) stop_new = 1;
    double wait = timeout;
    const double now = now_s();
    for (Py_ssize_t i = 0; i < n; i++) {
      Conn *c = &conns[i];
      pfd[i].fd = c->fd;
      pfd[i].events = 0;
      pfd[i].revents = 0;
      if (c->failed) {
        stop_new = 1; /* the others finish what is in flight and read its replies */
        continue;
      }
      if (c->has_error) stop_new = 1;
      if (!c->in_batch && !all_sent(c) && !stop_new && c->batches_sent - c->batches_acked < IN_FLIGHT) {
        uint64_t bytes = 0;
        const long items = batch_from(c, c->cur, &bytes);
        const double by_items = rate > 0 ? (double)started_items / rate : 0;
        const double by_bytes = byte_rate > 0 ? (double)started_bytes / byte_rate : 0;
        const double due = (by_items > by_bytes ? by_items : by_bytes) - (now - t0);
        if (due <= 0) {
          c->in_batch = 1;
          started_items += items;
          started_bytes += bytes;
        } else if (due < wait) {
          wait = due;
        }
      }
      if (c->in_batch) pfd[i].events |= POLLOUT;
      if (c->batches_acked < c->batches_sent) pfd[i].events |= POLLIN;
      if (pfd[i].events) network = 1;
      else pfd[i].fd = -1; /* nothing to do on it now (poll ignores it) */
      if (pfd[i].events || (!all_sent(c) && !stop_new)) active = 1;
    }
    if (!active) break;
    if (!network) last_progress = now; /* only waiting for the rate limit */
    if (now - last_progress > timeout) {
      for (Py_ssize_t i = 0; i < n; i++)
        if (pfd[i].events) fail(&conns[i], "timed out: no progress", 0);
      break;
    }
    const int r = poll(pfd, (nfds_t)n, (int)(wait * 1000) + 1);
    if (r < 0 && errno != EINTR) {
      for (Py_ssize_t i = 0; i < n; i++) fail(&conns[i], "poll failed", errno);
      break;
    }
    for (Py_ssize_t i = 0; i < n && r > 0; i++) {
      Conn *c = &conns[i];
      if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        const size_t before = (size_t)(c->batches_acked + c->not_stored + c->errors) + c->replied;
        read_replies(c, collect);
        if ((size_t)(c->batches_acked + c->not_stored + c->errors) + c->replied != before) last_progress = now_s();
        if ((pfd[i].revents & (POLLHUP | POLLERR)) && !(pfd[i].events & POLLIN) && !c->failed)
        fail(c, "connection lost", 0);
      }
      if (!c->failed && (pfd[i].revents & POLLOUT) && c->in_batch) {
        const size_t cur = c->cur;
        const uint64_t done = c->cur_done;
        write_some(c, data.buf);
        if (c->cur != cur || c->cur_done != done) last_progress = now_s();
      }
    }
  }
  free(pfd);
  for (Py_ssize_t i = 0; i < n; i++) fcntl(conns[i].fd, F_SETFL, conns[i].saved_flags);
  Py_END_ALLOW_THREADS;
  result = PyList_New(n);
  if (!result) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    Conn *c = &conns[i];
    PyObject *tags = Py_None;
    Py_INCREF(tags);
    if (collect) {
      Py_DECREF(tags);
      tags = PyList_New((Py_ssize_t)c->n_tags);
      if (!tags) goto fail_result;
      for (size_t k = 0; k < c->n_tags; k++) PyList_SET_ITEM(tags, (Py_ssize_t)k, PyLong_FromLongLong(c->tags[k]));
    }
    PyObject *cas = Py_None;
    Py_INCREF(cas);
    if (c->binary) {
      Py_DECREF(cas);
      cas = PyBytes_FromStringAndSize((const char *)c->cas, (Py_ssize_t)(c->n_order * sizeof *c->cas));
      if (!cas) {
        Py_DECREF(tags);
        goto fail_result;
      }
    }
    PyObject *t = Py_BuildValue("(llNlzzLN)", c->sent, c->not_stored, tags, c->errors,
                                c->has_error ? c->first_error : NULL, c->failed ? c->failure : NULL,
                                (long long)c->first_error_at, cas);
    if (!t) goto fail_result;
    PyList_SET_ITEM(result, i, t);
  }
  goto done;
fail_result:
  Py_CLEAR(result);
done:
  if (conns)
    for (Py_ssize_t i = 0; i < n; i++) {
      free(conns[i].tags);
      free(conns[i].cas);
    }
  for (Py_ssize_t i = 0; i < got_bufs; i++) {
    PyBuffer_Release(&pbufs[i]);
    PyBuffer_Release(&lbufs[i]);
    PyBuffer_Release(&obufs[i]);
  }
  free(conns);
  free(pbufs);
  free(lbufs);
  free(obufs);
  Py_XDECREF(fds);
  Py_XDECREF(pcs);
  Py_XDECREF(lns);
  Py_XDECREF(ords);
  PyBuffer_Release(&data);
  return result;
}

PyMethodDef kV2SendMethods[] = {
    {"send_v2", send_v2, METH_VARARGS, "Send planned v2 pieces to destinations (see _v2send.c)."},
    {NULL, NULL, 0, NULL},
};
