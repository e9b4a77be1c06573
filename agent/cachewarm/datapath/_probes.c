/* The stream warm's target check, in C: one walk over a key list the dumper kept (OUT/keys/<chunk>.keys,
 * lines `<URL-encoded key> <exptime or -1>`), routing each unexpired key to its destination and writing
 * its lookup there, so that no key is decoded, hashed or formatted in Python (datapath/presence.py).
 *
 * probe_keys(data, now, n_nodes, placement)
 *   placement: as plan_v2's (_v2plan.c): a Placement, or None for one destination.
 *   -> [(probes, expiry, binary) per destination]: probes `mg <key>\r\n` (`mg <base64> b\r\n` for a
 *   key with other bytes than 0x21..0x7E), expiry each one's exptime as packed int64 (0 = never),
 *   binary the keys no meta command can name (187..250 bytes: the binary protocol looks them up).
 *   A key whose exptime is not after `now` is expired: left out.
 *   Raises ValueError "key list line <n>: <why>" for a line that is not a listed key.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_v2plan.h"

struct cw_placement;
const struct cw_placement *placement_of(PyObject *o);
long cw_place(const struct cw_placement *p, const unsigned char *key, size_t len);

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* urllib.parse.unquote_to_bytes: %XX decoded, anything else (a bad escape too) kept as it is. */
static size_t unquote(const unsigned char *s, size_t n, unsigned char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n && o < cap; i++) {
    int hi, lo;
    if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 && (lo = hexval(s[i + 2])) >= 0) {
      out[o++] = (unsigned char)(hi << 4 | lo);
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  return o;
}

typedef struct {
  V2Buf probes, expiry;
  PyObject *binary;
} Share;

static PyObject *probe_keys(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer view;
  long long now;
  Py_ssize_t n_nodes;
  PyObject *placement_o;
  if (!PyArg_ParseTuple(args, "y*LnO", &view, &now, &n_nodes, &placement_o)) return NULL;
  PyObject *result = NULL;
  Share *sh = NULL;
  const struct cw_placement *placement = placement_of(placement_o);
  if (n_nodes < 1) {
    PyErr_SetString(PyExc_ValueError, "n_nodes: at least one destination");
    goto done;
  }
  if (placement_o != Py_None && !placement) {
    PyErr_SetString(PyExc_TypeError, "placement: a Placement or None");
    goto done;
  }
  sh = PyMem_Calloc((size_t)n_nodes, sizeof *sh);
  if (!sh) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n_nodes; i++)
    if (!(sh[i].binary = PyList_New(0))) goto done;
  const unsigned char *p = view.buf, *end = p + view.len;
  long line_no = 0;
  unsigned char key[CW_MAX_KEY + 1];
  while (p < end) {
    line_no++;
    const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
    const unsigned char *stop = nl ? nl : end;
    const unsigned char *sp = stop;
    while (sp > p && sp[-1] != ' ') sp--; /* rpartition(" ") */
    if (sp == p) {
      PyErr_Format(PyExc_ValueError, "key list line %ld: no exptime after the key", line_no);
      goto done;
    }
    char num[24];
    const size_t nl_len = (size_t)(stop - sp);
    if (nl_len == 0 || nl_len >= sizeof num) {
      PyErr_Format(PyExc_ValueError, "key list line %ld: a bad exptime", line_no);
      goto done;
    }
    memcpy(num, sp, nl_len);
    num[nl_len] = 0;
    char *after;
    const long long exp = strtoll(num, &after, 10);
    if (*after) {
      PyErr_Format(PyExc_ValueError, "key list line %ld: a bad exptime %s", line_no, num);
      goto done;
    }
    const size_t klen = unquote(p, (size_t)(sp - 1 - p), key, sizeof key);
    p = nl ? nl + 1 : end;
    if (exp != -1 && exp <= now) continue;
    if (klen == 0 || klen > CW_MAX_KEY) {
      PyErr_Format(PyExc_ValueError, "key list line %ld: a key of %zu bytes", line_no, klen);
      goto done;
    }
    const Py_ssize_t idx = placement ? (Py_ssize_t)cw_place(placement, key, klen) : 0;
    if (idx < 0 || idx >= n_nodes) {
      PyErr_Format(PyExc_ValueError, "key list line %ld: no destination for its key", line_no);
      goto done;
    }
    Share *s = &sh[idx];
    char tok[CW_MAX_KEY];
    int kind;
    const size_t tl = cw_key_token(tok, key, klen, &kind);
    if (kind != CW_KEY_PLAIN && kind != CW_KEY_BASE64) {
      PyObject *k = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)klen);
      if (!k || PyList_Append(s->binary, k) < 0) {
        Py_XDECREF(k);
        goto done;
      }
      Py_DECREF(k);
      continue;
    }
    char line[V2_MAX_LINE];
    const size_t ll = cw_mg_token_line(line, tok, tl, kind == CW_KEY_BASE64, "", 0, 0);
    const int64_t t = exp == -1 ? 0 : exp;
    if (v2buf_put(&s->probes, line, ll) < 0 || v2buf_put(&s->expiry, &t, sizeof t) < 0) {
      PyErr_NoMemory();
      goto done;
    }
  }
  result = PyList_New(n_nodes);
  if (!result) goto done;
  for (Py_ssize_t i = 0; i < n_nodes; i++) {
    const char *pd = sh[i].probes.data ? (const char *)sh[i].probes.data : "";
    const char *xd = sh[i].expiry.data ? (const char *)sh[i].expiry.data : "";
    PyObject *t = Py_BuildValue("(y#y#O)", pd, (Py_ssize_t)sh[i].probes.len, xd, (Py_ssize_t)sh[i].expiry.len,
                                sh[i].binary);
    if (!t) {
      Py_CLEAR(result);
      goto done;
    }
    PyList_SET_ITEM(result, i, t);
  }
done:
  if (sh) {
    for (Py_ssize_t i = 0; i < n_nodes; i++) {
      v2buf_free(&sh[i].probes);
      v2buf_free(&sh[i].expiry);
      Py_XDECREF(sh[i].binary);
    }
    PyMem_Free(sh);
  }
  PyBuffer_Release(&view);
  return result;
}

PyMethodDef kProbeMethods[] = {
    {"probe_keys", probe_keys, METH_VARARGS, "Route a key list's keys into lookups (see _probes.c)."},
    {NULL, NULL, 0, NULL},
};
