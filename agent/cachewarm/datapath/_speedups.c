/* The populator's hot loop in C for data format v1: data-file records (docs/data-format.md section
 * 2.2) to pipelined quiet meta sets for one destination (version 2 files need no encoding: _v2plan.c
 * and _v2send.c). The pure-Python twin is encode.encode_sets over
 * format.record_spans; tests (tests/datapath/test_speedups.py) check that both produce the same bytes
 * and reject the same records with the same message. Measured: the Python loop costs ~1.7 us per
 * item, which on a 2-core box took CPU the destination memcached needed; this one ~0.1 us.
 *
 * The format's sizes and limits and the encoding rules come from Python (encode.py calls configure at
 * import): nothing here restates them. The record's fields are decoded at the offsets of
 * format.RECORD ("<IIqB3x": value_len, flags, exptime, key_len).
 *
 * configure(record_fixed, max_key_len, never_expires, flags_suffix, expiry_margin)
 * encode_ms(data, pos, end, now, add, batch_items, batch_bytes, budget, clock_offset)
 *   -> (batches: list[(bytes, count, order)], records: int, expired: int, long_keys: list[int],
 *       oversize: list[int])
 * In set mode each batch is "ms <key> <len> [b] T<expiry> F<flags> MS q\r\n<value>\r\n"...; in add
 * mode "add <key> <flags> <expiry> <len>\r\n<value>\r\n"... (memcached's `ms` unlinks the key's
 * live value when it cannot allocate the new item, in add mode too; the text `add` does not) and
 * order is the record offset of each item (packed native int64: `add` answers every item, in order);
 * in set mode order is b"". Batches are without the trailing mn; the expiry is 0 (never) or the
 * record's absolute expiry less expiry_margin (a record for which that is not after `now` is expired:
 * counted, not sent), then moved onto the destination's clock (+ clock_offset: its `stats time` minus
 * ours, whole seconds, rounded down) and clamped to 2^31-1 (memcached parses T as a signed 32-bit
 * number; clamping only shortens); one that would not be above 30 days then is expired too.
 * long_keys: the record offsets of binary keys whose base64 form is longer than
 * memcached's key token (CW_MAX_BASE64_KEY), and in add mode of every binary key (no text form) — the caller sends them with the
 * binary protocol;
 * oversize: the record offsets of items whose key + value (+ flags_suffix when flags != 0) exceed
 * `budget` (never sent). Raises ValueError naming the record on a record the format forbids; nothing
 * is returned then, so a bad file is never partly applied.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "cachewarm_core.h"

/* Set once by configure(); encode_ms refuses to run before. */
static struct {
  int ready;
  Py_ssize_t record_fixed;  /* bytes before a record's key */
  size_t max_key_len;       /* the format's key_len bound */
  long long never_expires;  /* the exptime of an item that never expires */
  size_t flags_suffix;      /* what non-zero flags add to an item's size in memcached */
  long long expiry_margin;  /* seconds sent before a record's exptime */
} cfg;

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return (int64_t)v;
}

/* One record, decoded and judged. */
typedef struct {
  const unsigned char *key, *value;
  size_t klen;
  uint32_t vlen, flags;
  uint64_t ttl; /* the T token: 0 = never, else the absolute unix time of expiry */
  int plain;
} Item;

typedef struct {
  long records, expired;
  long long budget;    /* the destination's ItemLimit.budget */
  long long offset;    /* the destination's clock offset (whole seconds) */
  PyObject *long_keys; /* list of record offsets, or NULL: do not collect (second pass) */
  PyObject *oversize;  /* idem */
  int add;             /* text `add` commands (binary keys go to long_keys) */
} Counts;

enum { kSend = 0, kSkip = 1, kError = -1 };

static int note(PyObject *list, Py_ssize_t at) {
  if (list == NULL) return 0;
  PyObject *o = PyLong_FromSsize_t(at);
  if (!o) return -1;
  const int r = PyList_Append(list, o);
  Py_DECREF(o);
  return r;
}

/* Decodes the record at *pos and advances past it: kSend (an item to write), kSkip (expired, too
 * large for the destination, or a binary key too long for a meta command; counted or noted), or
 * kError with a ValueError naming the record. */
static int next_item(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t end, long long now, Counts *c,
                     Item *it) {
  const Py_ssize_t at = *pos;
  if (end - at < cfg.record_fixed) {
    PyErr_Format(PyExc_ValueError, "record %ld at offset %zd: header runs past records end %zd", c->records, at,
                 end);
    return kError;
  }
  const unsigned char *r = data + at;
  it->vlen = le32(r);
  it->flags = le32(r + 4);
  const int64_t exptime = le64(r + 8);
  it->klen = r[16];
  if (it->klen == 0 || it->klen > cfg.max_key_len) {
    PyErr_Format(PyExc_ValueError, "record %ld at offset %zd: key_len %zu not in 1..%zu", c->records, at, it->klen,
                 cfg.max_key_len);
    return kError;
  }
  const Py_ssize_t nxt = at + cfg.record_fixed + (Py_ssize_t)it->klen + (Py_ssize_t)it->vlen;
  if (nxt > end) {
    PyErr_Format(PyExc_ValueError, "record %ld at offset %zd: key/value (%zu+%u bytes) run past %zd", c->records,
                 at, it->klen, it->vlen, end);
    return kError;
  }
  if (exptime <= 0 && exptime != cfg.never_expires) {
    PyErr_Format(PyExc_ValueError, "record %ld at offset %zd: exptime %lld", c->records, at, (long long)exptime);
    return kError;
  }
  c->records++;
  *pos = nxt;
  if (exptime == cfg.never_expires) {
    it->ttl = 0;
  } else if (exptime - cfg.expiry_margin > now) {
    long long t = (long long)(exptime - cfg.expiry_margin) + c->offset;
    if (t > 2147483647LL) t = 2147483647LL;
    if (t <= 2592000LL) {
      c->expired++;
      return kSkip;
    }
    it->ttl = (uint64_t)t;
  } else {
    c->expired++;
    return kSkip;
  }
  if ((long long)(it->klen + it->vlen + (it->flags ? cfg.flags_suffix : 0)) > c->budget)
    return note(c->oversize, at) < 0 ? kError : kSkip;
  it->key = r + cfg.record_fixed;
  it->value = it->key + it->klen;
  it->plain = cw_key_is_plain(it->key, it->klen);
  if (!it->plain && (c->add || it->klen > CW_MAX_BASE64_KEY))
    return note(c->long_keys, at) < 0 ? kError : kSkip;
  return kSend;
}

/* The item's `add` or `ms ... MS q` line (dumper-cpp/core/store_lines.c), its value and \r\n. The key
 * token of a binary key is built in tok (base64). */
static cw_ms ms_of(const Item *it, char *tok) {
  cw_ms m = {(const char *)it->key, it->klen, 0, it->vlen, it->ttl, it->flags, 0, 0, 0};
  if (!it->plain) {
    m.tok = tok;
    m.tok_len = cw_base64_encode(tok, it->key, it->klen);
    m.b64 = 1;
  }
  return m;
}

static size_t item_size(const Item *it, int add) {
  if (add) return cw_add_line_len(it->klen, it->flags, it->ttl, it->vlen) + it->vlen + 2;
  char tok[CW_MAX_KEY * 2];
  const cw_ms m = ms_of(it, tok);
  return cw_ms_line_len(&m) + it->vlen + 2;
}

static char *put_item(char *d, const Item *it, int add) {
  if (add) {
    d += cw_add_line(d, (const char *)it->key, it->klen, it->flags, it->ttl, it->vlen);
  } else {
    char tok[CW_MAX_KEY * 2];
    const cw_ms m = ms_of(it, tok);
    d += cw_ms_line(d, &m);
  }
  memcpy(d, it->value, it->vlen);
  d += it->vlen;
  memcpy(d, "\r\n", 2);
  return d + 2;
}

static PyObject *configure(PyObject *self, PyObject *args) {
  (void)self;
  Py_ssize_t record_fixed, max_key_len, flags_suffix;
  long long never_expires, expiry_margin;
  if (!PyArg_ParseTuple(args, "nnLnL", &record_fixed, &max_key_len, &never_expires, &flags_suffix, &expiry_margin))
    return NULL;
  /* The fields decoded below end at byte 17; key_len is one byte. */
  if (record_fixed < 17 || max_key_len < 1 || max_key_len > 255 || flags_suffix < 0 || expiry_margin < 0) {
    PyErr_SetString(PyExc_ValueError, "configure: constants out of range");
    return NULL;
  }
  cfg.record_fixed = record_fixed;
  cfg.max_key_len = (size_t)max_key_len;
  cfg.never_expires = never_expires;
  cfg.flags_suffix = (size_t)flags_suffix;
  cfg.expiry_margin = expiry_margin;
  cfg.ready = 1;
  Py_RETURN_NONE;
}

static PyObject *encode_ms(PyObject *self, PyObject *args) {
  (void)self;
  if (!cfg.ready) {
    PyErr_SetString(PyExc_RuntimeError, "encode_ms: call configure() first (encode.py does at import)");
    return NULL;
  }
  Py_buffer view;
  Py_ssize_t pos, end, batch_items, batch_bytes;
  long long now, budget, offset;
  int add;
  if (!PyArg_ParseTuple(args, "y*nnLpnnLL", &view, &pos, &end, &now, &add, &batch_items, &batch_bytes, &budget,
                        &offset))
    return NULL;
  const unsigned char *data = view.buf;
  Counts counts = {0, 0, budget, offset, NULL, NULL, add};
  Item it;
  PyObject *batches = NULL;
  if (pos < 0 || end < pos || end > view.len) {
    PyErr_Format(PyExc_ValueError, "records span %zd..%zd outside the data (%zd bytes)", pos, end, view.len);
    goto fail;
  }
  batches = PyList_New(0);
  counts.long_keys = PyList_New(0);
  counts.oversize = PyList_New(0);
  if (!batches || !counts.long_keys || !counts.oversize) goto fail;
  while (pos < end) {
    /* Pass 1 checks and counts the records of one batch and sizes it; pass 2 writes them straight
     * into a bytes object of that size (no second copy of the values). */
    const Py_ssize_t first = pos;
    size_t size = 0;
    long count = 0;
    while (pos < end && count < batch_items && size < (size_t)batch_bytes) {
      const int k = next_item(data, &pos, end, now, &counts, &it);
      if (k == kError) goto fail;
      if (k == kSend) {
        size += item_size(&it, add);
        count++;
      }
    }
    if (count == 0) continue; /* only skipped records */
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!bytes) goto fail;
    char *d = PyBytes_AS_STRING(bytes);
    PyObject *order = PyBytes_FromStringAndSize(NULL, add ? (Py_ssize_t)count * 8 : 0);
    if (!order) {
      Py_DECREF(bytes);
      goto fail;
    }
    int64_t *o = (int64_t *)PyBytes_AS_STRING(order);
    Counts again = {0, 0, budget, offset, NULL, NULL, add};
    for (Py_ssize_t p = first; p < pos;) {
      const Py_ssize_t at = p;
      if (next_item(data, &p, pos, now, &again, &it) != kSend) continue;
      d = put_item(d, &it, add);
      if (add) *o++ = (int64_t)at;
    }
    if (d != PyBytes_AS_STRING(bytes) + size) {
      Py_DECREF(bytes);
      Py_DECREF(order);
      PyErr_SetString(PyExc_SystemError, "encode_ms: batch size mismatch");
      goto fail;
    }
    PyObject *t = Py_BuildValue("(NlN)", bytes, count, order);
    if (!t || PyList_Append(batches, t) < 0) {
      Py_XDECREF(t);
      goto fail;
    }
    Py_DECREF(t);
  }
  PyBuffer_Release(&view);
  return Py_BuildValue("(NllNN)", batches, counts.records, counts.expired, counts.long_keys, counts.oversize);
fail:
  Py_XDECREF(batches);
  Py_XDECREF(counts.long_keys);
  Py_XDECREF(counts.oversize);
  PyBuffer_Release(&view);
  return NULL;
}

static PyMethodDef kMethods[] = {
    {"configure", configure, METH_VARARGS, "Set the format's sizes and limits and the encoding rules."},
    {"encode_ms", encode_ms, METH_VARARGS, "Data-file records to pipelined quiet meta sets (see module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cachewarm.datapath._speedups",
    .m_doc = "The populator's encoding loop in C.",
    .m_size = -1,
    .m_methods = kMethods,
};

/* Data format v2: the walk and plan (_v2plan.c) and the sender (_v2send.c). */
extern PyMethodDef kV2PlanMethods[];
extern PyMethodDef kV2SendMethods[];
/* The stream warm's target check: key lists into routed lookups (_probes.c). */
extern PyMethodDef kProbeMethods[];
/* Key placement (_placement.c over hashkit/). */
int placement_add_type(PyObject *m);
/* The wire rules of dumper-cpp/core for Python (_core.c) and the re-check's network work (_recheck.c). */
extern PyMethodDef kCoreMethods[];
extern PyMethodDef kRecheckMethods[];

PyMODINIT_FUNC PyInit__speedups(void) {
  PyObject *m = PyModule_Create(&kModule);
  if (m && (PyModule_AddFunctions(m, kV2PlanMethods) < 0 || PyModule_AddFunctions(m, kV2SendMethods) < 0 ||
            PyModule_AddFunctions(m, kProbeMethods) < 0 || PyModule_AddFunctions(m, kCoreMethods) < 0 ||
            PyModule_AddFunctions(m, kRecheckMethods) < 0 ||
            placement_add_type(m) < 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
