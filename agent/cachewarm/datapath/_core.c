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

static PyObject *bin_store_head(PyObject *self, PyObject *args) {
  (void)self;
  int opcode;
  Py_ssize_t key_len;
  unsigned long value_len, flags, expiration, opaque;
  if (!PyArg_ParseTuple(args, "inkkkk", &opcode, &key_len, &value_len, &flags, &expiration, &opaque)) return NULL;
  unsigned char out[CW_BIN_ADD_HEAD];
  cw_bin_store_head(out, (uint8_t)opcode, (size_t)key_len, (uint32_t)value_len, (uint32_t)flags, (uint32_t)expiration,
                    (uint32_t)opaque);
  return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

/* (token, b64, value_len, T, flags, add, tagged, opaque): the token as it goes on the line. */
static PyObject *ms_line(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer tok;
  int b64, add, tagged;
  unsigned long long value_len, expiry, opaque;
  unsigned long flags;
  if (!PyArg_ParseTuple(args, "y*pKKkppK", &tok, &b64, &value_len, &expiry, &flags, &add, &tagged, &opaque))
    return NULL;
  if (tok.len < 1 || tok.len > CW_MAX_KEY) {
    PyBuffer_Release(&tok);
    PyErr_SetString(PyExc_ValueError, "a key token is 1..250 bytes");
    return NULL;
  }
  char out[CW_RECORD_MAX_LINE];
  const cw_ms m = {tok.buf, (size_t)tok.len, b64, value_len, expiry, (uint32_t)flags, add, tagged, opaque};
  const size_t n = cw_ms_line(out, &m);
  PyBuffer_Release(&tok);
  if (n != cw_ms_line_len(&m)) {
    PyErr_SetString(PyExc_SystemError, "cw_ms_line_len disagrees with cw_ms_line");
    return NULL;
  }
  return PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
}

static PyObject *add_line(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer key;
  unsigned long flags;
  unsigned long long expiry, value_len;
  if (!PyArg_ParseTuple(args, "y*kKK", &key, &flags, &expiry, &value_len)) return NULL;
  if (key.len < 1 || key.len > CW_MAX_KEY) {
    PyBuffer_Release(&key);
    PyErr_SetString(PyExc_ValueError, "a key is 1..250 bytes");
    return NULL;
  }
  char out[CW_RECORD_MAX_LINE];
  const size_t n = cw_add_line(out, key.buf, (size_t)key.len, (uint32_t)flags, expiry, value_len);
  const size_t want = cw_add_line_len((size_t)key.len, (uint32_t)flags, expiry, value_len);
  PyBuffer_Release(&key);
  if (n != want) {
    PyErr_SetString(PyExc_SystemError, "cw_add_line_len disagrees with cw_add_line");
    return NULL;
  }
  return PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
}

static PyObject *bin_key_request(PyObject *self, PyObject *args) {
  (void)self;
  int opcode;
  Py_ssize_t key_len;
  unsigned long opaque;
  unsigned long long cas = 0;
  if (!PyArg_ParseTuple(args, "ink|K", &opcode, &key_len, &opaque, &cas)) return NULL;
  unsigned char out[CW_BIN_HEADER];
  cw_bin_cas_request(out, (uint8_t)opcode, (size_t)key_len, (uint32_t)opaque, cas);
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

/* (key, flags, opaque: int | None) -> `mg <token>[ b][ <flags>][ O<opaque>]\r\n`; ValueError for a key
 * no meta command names. */
static PyObject *mg_line(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer k;
  const char *flags;
  Py_ssize_t flags_len;
  PyObject *opaque_o;
  if (!PyArg_ParseTuple(args, "y*y#O", &k, &flags, &flags_len, &opaque_o)) return NULL;
  const int tagged = opaque_o != Py_None;
  const unsigned long long opaque = tagged ? PyLong_AsUnsignedLongLong(opaque_o) : 0;
  PyObject *res = NULL;
  char out[CW_MAX_META_LINE];
  size_t n = 0;
  if (tagged && PyErr_Occurred()) goto done;
  if (flags_len > CW_MAX_MG_FLAGS || strlen(flags) != (size_t)flags_len) {
    PyErr_Format(PyExc_ValueError, "mg flags %R: at most %d characters", PyTuple_GET_ITEM(args, 1), CW_MAX_MG_FLAGS);
    goto done;
  }
  n = cw_mg_line(out, k.buf, (size_t)k.len, flags, tagged, opaque);
  if (n == 0)
    PyErr_Format(PyExc_ValueError, "no meta command names a key of %zd bytes", k.len);
  else
    res = PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
done:
  PyBuffer_Release(&k);
  return res;
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

/* The record at pos of data[..end) (check 4): -> (key, flags, expiry, value_at, value_len, next, binary,
 * mode_at, source_cas, source_exp); ValueError with the core's words for a bad one. mode_at is -1 for
 * a binary record. */
static PyObject *record_parse(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer b;
  Py_ssize_t pos, end;
  int stamped;
  if (!PyArg_ParseTuple(args, "y*nnp", &b, &pos, &end, &stamped)) return NULL;
  PyObject *result = NULL;
  if (pos < 0 || end < pos || end > b.len) {
    PyErr_SetString(PyExc_ValueError, "no record");
  } else {
    cw_record r;
    unsigned char keybuf[CW_MAX_KEY];
    char why[CW_RECORD_WHY];
    if (cw_record_parse(b.buf, (size_t)pos, (size_t)end, stamped, &r, keybuf, why) < 0) {
      PyErr_SetString(PyExc_ValueError, why);
    } else {
      result = Py_BuildValue("(y#kLnKnOnKL)", (const char *)r.key, (Py_ssize_t)r.key_len, (unsigned long)r.flags,
                             (long long)r.expiry, (Py_ssize_t)r.value_at, (unsigned long long)r.value_len,
                             (Py_ssize_t)r.next, r.binary ? Py_True : Py_False,
                             r.binary ? (Py_ssize_t)-1 : (Py_ssize_t)r.mode_at, (unsigned long long)r.source_cas,
                             (long long)r.source_exp);
    }
  }
  PyBuffer_Release(&b);
  return result;
}

static PyObject *record_meta_line(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer k;
  unsigned long value_len, flags, expiry;
  unsigned long long offset;
  if (!PyArg_ParseTuple(args, "y*kkkK", &k, &value_len, &flags, &expiry, &offset)) return NULL;
  char out[CW_RECORD_MAX_LINE];
  const size_t n = k.len <= CW_MAX_KEY ? cw_record_meta_line(out, k.buf, (size_t)k.len, (uint32_t)value_len,
                                                              (uint32_t)flags, (uint32_t)expiry, offset)
                                      : 0;
  PyBuffer_Release(&k);
  return PyBytes_FromStringAndSize(out, (Py_ssize_t)n);
}

static PyObject *record_binary_head(PyObject *self, PyObject *args) {
  (void)self;
  Py_ssize_t key_len;
  unsigned long value_len, flags, expiry;
  if (!PyArg_ParseTuple(args, "nkkk", &key_len, &value_len, &flags, &expiry)) return NULL;
  unsigned char out[CW_BIN_ADD_HEAD];
  cw_record_binary_head(out, (size_t)key_len, (uint32_t)value_len, (uint32_t)flags, (uint32_t)expiry);
  return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

static PyObject *record_stamp(PyObject *self, PyObject *args) {
  (void)self;
  unsigned long long cas;
  long long exp;
  if (!PyArg_ParseTuple(args, "KL", &cas, &exp)) return NULL;
  unsigned char out[CW_RECORD_STAMP];
  cw_record_stamp(out, cas, exp);
  return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

/* The 24-byte cw_read at `at` of a buffer -> (source_cas, source_exp, value_len). */
static PyObject *read_stamp(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer b;
  Py_ssize_t at;
  if (!PyArg_ParseTuple(args, "y*n", &b, &at)) return NULL;
  PyObject *result = NULL;
  if (at < 0 || b.len - at < CW_READ_STAMP) {
    PyErr_SetString(PyExc_ValueError, "a read stamp runs past its buffer");
  } else {
    cw_read r;
    cw_read_unpack((const unsigned char *)b.buf + at, &r);
    result = Py_BuildValue("(KLL)", (unsigned long long)r.source_cas, (long long)r.source_exp, (long long)r.value_len);
  }
  PyBuffer_Release(&b);
  return result;
}

static PyObject *pack_read_stamp(PyObject *self, PyObject *args) {
  (void)self;
  cw_read r;
  unsigned long long cas;
  long long exp, vlen;
  if (!PyArg_ParseTuple(args, "KLL", &cas, &exp, &vlen)) return NULL;
  r.source_cas = cas;
  r.source_exp = exp;
  r.value_len = vlen;
  unsigned char out[CW_READ_STAMP];
  cw_read_pack(out, &r);
  return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

PyMethodDef kCoreMethods[] = {
    {"record_parse", record_parse, METH_VARARGS, "cw_record_parse"},
    {"core_record_meta_line", record_meta_line, METH_VARARGS, "cw_record_meta_line"},
    {"core_record_binary_head", record_binary_head, METH_VARARGS, "cw_record_binary_head"},
    {"core_record_stamp", record_stamp, METH_VARARGS, "cw_record_stamp"},
    {"read_stamp", read_stamp, METH_VARARGS, "cw_read_unpack"},
    {"pack_read_stamp", pack_read_stamp, METH_VARARGS, "cw_read_pack"},
    {"core_bin_add_head", bin_add_head, METH_VARARGS, "cw_bin_add_head"},
    {"core_bin_key_request", bin_key_request, METH_VARARGS, "cw_bin_key_request / cw_bin_cas_request"},
    {"core_bin_store_head", bin_store_head, METH_VARARGS, "cw_bin_store_head"},
    {"core_ms_line", ms_line, METH_VARARGS, "cw_ms_line"},
    {"core_add_line", add_line, METH_VARARGS, "cw_add_line"},
    {"core_bin_reply", bin_reply, METH_VARARGS, "cw_bin_reply_parse"},
    {"core_bin_add_outcome", bin_add_outcome, METH_VARARGS, "cw_bin_add_outcome"},
    {"core_bin_status_text", bin_status_text, METH_VARARGS, "cw_bin_status_text"},
    {"core_key_token", key_token, METH_VARARGS, "cw_key_token"},
    {"core_mg_look_line", mg_look_line, METH_VARARGS, "cw_mg_look_line"},
    {"core_mg_line", mg_line, METH_VARARGS, "cw_mg_line"},
    {"core_md_cas_line", md_cas_line, METH_VARARGS, "cw_md_cas_line"},
    {"core_meta_reply", meta_reply, METH_VARARGS, "cw_meta_reply_parse"},
    {"core_source_verdict", source_verdict, METH_VARARGS, "cw_source_verdict"},
    {"core_md_outcome", md_outcome, METH_VARARGS, "cw_md_outcome"},
    {"core_compare_verdict", compare_verdict, METH_VARARGS, "cw_compare_verdict"},
    {NULL, NULL, 0, NULL},
};
