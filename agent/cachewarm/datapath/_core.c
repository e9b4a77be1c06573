/* dumper-cpp/core (cachewarm_core.h) for Python: the re-check's decisions for the rare cases
 * datapath/populate/recheck.py handles, and every rule for tests/datapath/test_core.py (the same
 * vectors as the C++ GoogleTest). Thin: each function converts arguments and calls the core. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cachewarm_core.h"

static PyObject *bin_add_head(PyObject *self, PyObject *args) {
  (void)self;
  Py_ssize_t key_len;
  unsigned long value_len, flags, expiration, opaque;
  if (!PyArg_ParseTuple(args, "nkkkk", &key_len, &value_len, &flags, &expiration, &opaque)) return NULL;
  unsigned char out[CW_BIN_ADD_HEAD];
  cw_bin_add_head(out, (size_t)key_len, (uint32_t)value_len, (uint32_t)flags, (uint32_t)expiration, (uint32_t)opaque);
  return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

static PyObject *bin_key_request(PyObject *self, PyObject *args) {
  (void)self;
  int opcode;
  Py_ssize_t key_len;
  unsigned long opaque;
  if (!PyArg_ParseTuple(args, "ink", &opcode, &key_len, &opaque)) return NULL;
  unsigned char out[CW_BIN_HEADER];
  cw_bin_key_request(out, (uint8_t)opcode, (size_t)key_len, (uint32_t)opaque);
  return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

/* -> (1, opcode, status, body_len, opaque, cas), or (0,) / (-1,) */
static PyObject *bin_reply(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer b;
  if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
  cw_bin_reply r;
  const int got = cw_bin_reply_parse(b.buf, (size_t)b.len, &r);
  PyBuffer_Release(&b);
  if (got != 1) return Py_BuildValue("(i)", got);
  return Py_BuildValue("(iiIIIK)", got, (int)r.opcode, (unsigned)r.status, (unsigned)r.body_len, (unsigned)r.opaque,
                       (unsigned long long)r.cas);
}

static PyObject *bin_add_outcome(PyObject *self, PyObject *args) {
  (void)self;
  unsigned int status;
  if (!PyArg_ParseTuple(args, "I", &status)) return NULL;
  return PyLong_FromLong(cw_bin_add_outcome((uint16_t)status));
}

static PyObject *bin_status_text(PyObject *self, PyObject *args) {
  (void)self;
  unsigned int status;
  if (!PyArg_ParseTuple(args, "I", &status)) return NULL;
  return PyUnicode_FromString(cw_bin_status_text((uint16_t)status));
}

static PyObject *key_token(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer k;
  if (!PyArg_ParseTuple(args, "y*", &k)) return NULL;
  char out[CW_MAX_KEY];
  int kind;
  const size_t n = cw_key_token(out, k.buf, (size_t)k.len, &kind);
  PyBuffer_Release(&k);
  return Py_BuildValue("(iy#)", kind, out, (Py_ssize_t)n);
}

static PyObject *mg_look_line(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer k;
  unsigned long long opaque;
  if (!PyArg_ParseTuple(args, "y*K", &k, &opaque)) return NULL;
  char out[CW_MAX_META_LINE];
  const size_t n = cw_mg_look_line(out, k.buf, (size_t)k.len, opaque);
  PyBuffer_Release(&k);
  return PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
}

static PyObject *md_cas_line(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer k;
  unsigned long long cas, opaque;
  if (!PyArg_ParseTuple(args, "y*KK", &k, &cas, &opaque)) return NULL;
  char out[CW_MAX_META_LINE];
  const size_t n = cw_md_cas_line(out, k.buf, (size_t)k.len, cas, opaque);
  PyBuffer_Release(&k);
  return PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
}

/* -> (rc, code, cas|None, ttl|None, size|None, opaque|None, flags|None, value_len) */
static PyObject *reply_tuple(const cw_meta_reply *r, int rc) {
  PyObject *f[5];
  const int has[5] = {r->has_cas, r->has_ttl, r->has_size, r->has_opaque, r->has_flags};
  f[0] = PyLong_FromUnsignedLongLong(r->cas);
  f[1] = PyLong_FromLongLong(r->ttl);
  f[2] = PyLong_FromUnsignedLongLong(r->size);
  f[3] = PyLong_FromUnsignedLongLong(r->opaque);
  f[4] = PyLong_FromUnsignedLong(r->flags);
  for (int i = 0; i < 5; i++) {
    if (!f[i]) {
      for (int j = 0; j < 5; j++) Py_XDECREF(f[j]);
      return NULL;
    }
    if (!has[i]) {
      Py_DECREF(f[i]);
      Py_INCREF(Py_None);
      f[i] = Py_None;
    }
  }
  return Py_BuildValue("(isNNNNNK)", rc, r->code, f[0], f[1], f[2], f[3], f[4], (unsigned long long)r->value_len);
}

static PyObject *meta_reply(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer b;
  if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
  cw_meta_reply r;
  const int rc = cw_meta_reply_parse(b.buf, (size_t)b.len, &r);
  PyBuffer_Release(&b);
  return reply_tuple(&r, rc);
}

static PyObject *source_verdict(PyObject *self, PyObject *args) {
  (void)self;
  cw_read r;
  cw_source_now s;
  unsigned long long rcas, scas;
  long long rexp, vlen, lo, hi, size;
  int present;
  if (!PyArg_ParseTuple(args, "KLLiKLLL", &rcas, &rexp, &vlen, &present, &scas, &lo, &hi, &size)) return NULL;
  r.source_cas = rcas;
  r.source_exp = rexp;
  r.value_len = vlen;
  s.present = present;
  s.cas = scas;
  s.exp_lo = lo;
  s.exp_hi = hi;
  s.size = size;
  return PyLong_FromLong(cw_source_verdict(&r, &s));
}

static PyObject *md_outcome(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *o;
  if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
  if (o == Py_None) return PyLong_FromLong(cw_md_outcome(NULL));
  Py_buffer b;
  if (PyObject_GetBuffer(o, &b, PyBUF_SIMPLE) < 0) return NULL;
  cw_meta_reply r;
  cw_meta_reply_parse(b.buf, (size_t)b.len, &r);
  PyBuffer_Release(&b);
  return PyLong_FromLong(cw_md_outcome(&r));
}

/* An item tuple (present, cas, flags, ttl, value) into *it; the value's buffer stays held in *b. */
static int item_of(PyObject *t, cw_item *it, Py_buffer *b) {
  int present;
  unsigned long long cas;
  unsigned long flags;
  long long ttl;
  PyObject *value;
  if (!PyArg_ParseTuple(t, "iKkLO", &present, &cas, &flags, &ttl, &value)) return -1;
  if (PyObject_GetBuffer(value, b, PyBUF_SIMPLE) < 0) return -1;
  it->present = present;
  it->cas = cas;
  it->flags = (uint32_t)flags;
  it->ttl = ttl;
  it->value = b->buf;
  it->value_len = (size_t)b->len;
  return 0;
}

static PyObject *compare_verdict(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *so, *dobj;
  unsigned long long before;
  int round, max_rounds;
  long long settle;
  if (!PyArg_ParseTuple(args, "O!O!KiiL", &PyTuple_Type, &so, &PyTuple_Type, &dobj, &before, &round, &max_rounds,
                        &settle))
    return NULL;
  cw_item s, d;
  Py_buffer sb, db;
  if (item_of(so, &s, &sb) < 0) return NULL;
  if (item_of(dobj, &d, &db) < 0) {
    PyBuffer_Release(&sb);
    return NULL;
  }
  const int v = cw_compare_verdict(&s, &d, before, round, max_rounds, settle);
  PyBuffer_Release(&sb);
  PyBuffer_Release(&db);
  return PyLong_FromLong(v);
}

PyMethodDef kCoreMethods[] = {
    {"core_bin_add_head", bin_add_head, METH_VARARGS, "cw_bin_add_head"},
    {"core_bin_key_request", bin_key_request, METH_VARARGS, "cw_bin_key_request"},
    {"core_bin_reply", bin_reply, METH_VARARGS, "cw_bin_reply_parse"},
    {"core_bin_add_outcome", bin_add_outcome, METH_VARARGS, "cw_bin_add_outcome"},
    {"core_bin_status_text", bin_status_text, METH_VARARGS, "cw_bin_status_text"},
    {"core_key_token", key_token, METH_VARARGS, "cw_key_token"},
    {"core_mg_look_line", mg_look_line, METH_VARARGS, "cw_mg_look_line"},
    {"core_md_cas_line", md_cas_line, METH_VARARGS, "cw_md_cas_line"},
    {"core_meta_reply", meta_reply, METH_VARARGS, "cw_meta_reply_parse"},
    {"core_source_verdict", source_verdict, METH_VARARGS, "cw_source_verdict"},
    {"core_md_outcome", md_outcome, METH_VARARGS, "cw_md_outcome"},
    {"core_compare_verdict", compare_verdict, METH_VARARGS, "cw_compare_verdict"},
    {NULL, NULL, 0, NULL},
};
