/* The populator's walk over a data format v2 or v3 file (docs/data-format.md sections 7 and 8), in C:
 * check 4 of every record and, per record, what to do with it — so that sending a verified file needs
 * no per-item Python. Its Python twin is populate/plan.py (plan_py); tests/datapath/test_plan_v2.py
 * checks that both give the same plan and reject the same records with the same message.
 *
 * plan_v2(data, start, end, now, budgets, mode, batch_items, batch_bytes, placement, only, offsets
 *         [, probes[, stamped]])
 *   data: the verified file's bytes; start/end: its records; now: the clock for expiry;
 *   budgets: per destination, the most key + value (+4 when flags != 0) bytes an item may have;
 *   mode: PLAN_ADD_BINARY (add mode: every item a binary-protocol ADD), PLAN_SET (each `ME` sent as
 *   `MS`) or PLAN_ADD_TEXT (add mode without the binary protocol: text `add`, accepted only);
 *   placement: a Placement (_placement.c: EVCache's ring or another client's), or None for one
 *   destination; only: bytes with one flag per
 *   destination (0: skip its records) or None; offsets: per destination, its clock's offset from this
 *   host's in whole seconds (rounded down: its `stats time` minus ours), or None (all 0). Each T goes
 *   out moved onto its destination's clock (v2_dest_expiry): memcached converts an absolute T with its
 *   own idea of the time, so a destination 600 s behind would otherwise keep every item 600 s too
 *   long. A set-mode record then goes as a generated `ms` line too (its T differs from the file's).
 *   probes: also give, per destination, the target check's lookups of the items; stamped: a version 3
 *   file (each record behind its source stamp, section 8.1).
 *   -> (records, [(pieces, items, expired, oversize, binary, lines, order, probes, probe_expiry,
 *       probe_stamps) per destination]); probes: `mg <key>\r\n` (`mg <base64> b\r\n`) per item a
 *   meta command names, in send order, empty unless asked; probe_expiry: each one's T (packed int64,
 *   0 = never); probe_stamps: each one's source stamp and value length (packed u64 cas, int64
 *   source_exp, int64 value length; the length -1 when the file has no stamps).
 *   pieces: packed little-endian int64 pairs, in send order: (offset, length) a range of `data`;
 *   (-1, n) the end of a batch of n items (the sender writes `mn`, or a binary NOOP); (-2, 1) the byte
 *   `S` (set mode, in place of the record's `E`); (-3 - k, n) n bytes of `lines` from offset k.
 *   oversize / binary: lists of record offsets (never sent / keys no meta command names). A record
 *   whose T is not after `now` is expired: counted, not sent.
 *   Add mode sends no `ms`: memcached's `ms` unlinks the key's live value when it cannot allocate the
 *   new item (out of memory), in add mode too; binary ADD and the classic `add` do not. PLAN_ADD_BINARY:
 *   each item is a non-quiet ADD — its 32-byte head (opaque = the item's index in the destination's
 *   send order) and raw key generated into `lines`, then the record's value bytes — so its answer
 *   names it and carries the new item's CAS (the re-check's c_w); `order` (packed int64) is the record
 *   offset of each item in send order; `binary` lists the items among them no meta command can name
 *   (sent inline). PLAN_ADD_TEXT: each meta record with a plain key as `add <key> <flags> <T> <len>\r\n`
 *   and its own value bytes, `order` as above (`add` answers every item in order); a base64 key (no
 *   text form) and a binary record go to `binary` (ADDQ, sent apart). In set mode `lines` and `order`
 *   are empty and the records go as they are (binary records to `binary`).
 *   Raises ValueError "record <n> at offset <pos>: <why>" at the first record the format forbids.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_v2plan.h"
#include "cachewarm_core.h"

/* plan_v2's modes (populate/plan.py PLAN_*: 0 and 1 are the old set_mode flag's False and True). */
#define PLAN_ADD_TEXT 0
#define PLAN_SET 1
#define PLAN_ADD_BINARY 2

/* ---- the plan ---------------------------------------------------------------------------------- */

typedef struct {
  V2Buf pieces, lines, order;
  /* probes: `mg <key>[ b]\r\n` per item sent as text, in send order, and each one's T (int64, 0 =
   * never): the warm's target check sends these as they are instead of walking the file again. */
  V2Buf probes, probe_exp, probe_stamps;
  long items, expired;
  long batch_items;
  uint64_t batch_bytes;
  PyObject *oversize, *binary;
} Node;

static int add_offset(PyObject *list, Py_ssize_t at) {
  PyObject *o = PyLong_FromSsize_t(at);
  if (!o) return -1;
  const int r = PyList_Append(list, o);
  Py_DECREF(o);
  return r;
}

/* Appends a file range, merged with the previous piece when they touch. */
static int add_range(Node *n, int64_t off, int64_t len) {
  if (len <= 0) return 0;
  if (n->pieces.len >= 16) {
    int64_t *last = (int64_t *)(n->pieces.data + n->pieces.len - 16);
    if (last[0] >= 0 && last[0] + last[1] == off) {
      last[1] += len;
      return 0;
    }
  }
  const int64_t p[2] = {off, len};
  return v2buf_put(&n->pieces, p, sizeof p);
}

static int end_batch(Node *n) {
  if (n->batch_items == 0) return 0;
  const int64_t p[2] = {V2_PIECE_MN, n->batch_items};
  n->batch_items = 0;
  n->batch_bytes = 0;
  return v2buf_put(&n->pieces, p, sizeof p);
}

/* The target check's lookup of a record a meta command names, its T and its source stamp (value length
 * -1: the file has none). */
static int add_probe(Node *n, const cw_record *r, int stamped) {
  char probe[V2_MAX_LINE];
  const size_t pl = r->b64 ? cw_mg_token_line(probe, (const char *)r->tok, r->tok_len, 1, "", 0, 0)
                           : cw_mg_token_line(probe, (const char *)r->key, r->key_len, 0, "", 0, 0);
  const int64_t e = r->expiry;
  const cw_read rd = {r->source_cas, r->source_exp, stamped ? (int64_t)r->value_len : -1};
  unsigned char st[CW_READ_STAMP];
  cw_read_pack(st, &rd);
  if (v2buf_put(&n->probes, probe, pl) < 0 || v2buf_put(&n->probe_exp, &e, sizeof e) < 0 ||
      v2buf_put(&n->probe_stamps, st, sizeof st) < 0)
    return -1;
  return 0;
}

/* A Placement object (_placement.c), or NULL. */
struct cw_placement;
const struct cw_placement *placement_of(PyObject *o);
long cw_place(const struct cw_placement *p, const unsigned char *key, size_t len);

static PyObject *plan_v2(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer view, only = {0};
  Py_ssize_t pos, end, batch_items, batch_bytes;
  long long now;
  int mode, want_probes = 0, stamped = 0;
  PyObject *budgets, *placement_o, *only_o, *offsets_o;
  if (!PyArg_ParseTuple(args, "y*nnLOinnOOO|pp", &view, &pos, &end, &now, &budgets, &mode, &batch_items,
                        &batch_bytes, &placement_o, &only_o, &offsets_o, &want_probes, &stamped))
    return NULL;
  const int set_mode = mode == PLAN_SET, binary_add = mode == PLAN_ADD_BINARY;
  if (mode < PLAN_ADD_TEXT || mode > PLAN_ADD_BINARY) {
    PyErr_Format(PyExc_ValueError, "mode %d: not a plan mode", mode);
    PyBuffer_Release(&view);
    return NULL;
  }
  PyObject *result = NULL, *per_node = NULL;
  Node *nodes = NULL;
  long long *budget = NULL, *offset = NULL;
  Py_ssize_t n_nodes = 0;
  long records = 0;
  if (!PyTuple_Check(budgets) || (n_nodes = PyTuple_GET_SIZE(budgets)) < 1) {
    PyErr_SetString(PyExc_TypeError, "budgets: a non-empty tuple");
    goto done;
  }
  const struct cw_placement *placement = placement_of(placement_o);
  if (placement_o != Py_None && !placement) {
    PyErr_SetString(PyExc_TypeError, "placement: a Placement or None");
    goto done;
  }
  if (only_o != Py_None && PyObject_GetBuffer(only_o, &only, PyBUF_SIMPLE) < 0) goto done;
  if (only.buf && only.len != n_nodes) {
    PyErr_SetString(PyExc_ValueError, "only: one flag per destination");
    goto done;
  }
  if (pos < 0 || end < pos || end > view.len) {
    PyErr_Format(PyExc_ValueError, "records span %zd..%zd outside the data (%zd bytes)", pos, end, view.len);
    goto done;
  }
  nodes = PyMem_Calloc((size_t)n_nodes, sizeof *nodes);
  budget = PyMem_Calloc((size_t)n_nodes, sizeof *budget);
  offset = PyMem_Calloc((size_t)n_nodes, sizeof *offset);
  if (!nodes || !budget || !offset) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n_nodes; i++) {
    budget[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(budgets, i));
    if (offsets_o != Py_None) {
      if (!PyTuple_Check(offsets_o) || PyTuple_GET_SIZE(offsets_o) != n_nodes) {
        PyErr_SetString(PyExc_ValueError, "offsets: one per destination");
        goto done;
      }
      offset[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(offsets_o, i));
      if (offset[i] == -1 && PyErr_Occurred()) goto done;
    }
    nodes[i].oversize = PyList_New(0);
    nodes[i].binary = PyList_New(0);
    if ((budget[i] == -1 && PyErr_Occurred()) || !nodes[i].oversize || !nodes[i].binary) goto done;
  }
  const unsigned char *data = view.buf;
  unsigned char keybuf[CW_MAX_KEY];
  cw_record r;
  char why[CW_RECORD_WHY];
  while (pos < end) {
    if (cw_record_parse(data, (size_t)pos, (size_t)end, stamped, &r, keybuf, why) < 0) {
      PyErr_Format(PyExc_ValueError, "record %ld at offset %zd: %s", records, pos, why);
      goto done;
    }
    records++;
    const Py_ssize_t at = pos;
    pos = (Py_ssize_t)r.next;
    Py_ssize_t idx = 0;
    if (placement) {
      idx = (Py_ssize_t)cw_place(placement, r.key, r.key_len);
      if (idx < 0 || idx >= n_nodes) {
        PyErr_Format(PyExc_ValueError, "record %ld at offset %zd: the placement cannot place its key", records - 1, at);
        goto done;
      }
    }
    if (only.buf && !((const unsigned char *)only.buf)[idx]) continue;
    Node *n = &nodes[idx];
    const long long t = v2_dest_expiry(r.expiry, offset[idx]);
    if ((r.expiry != 0 && r.expiry <= now) || t < 0) {
      n->expired++;
      continue;
    }
    if ((long long)(r.key_len + r.value_len + (r.flags ? 4 : 0)) > budget[idx]) {
      if (add_offset(n->oversize, at) < 0) goto done;
      continue;
    }
    const int meta_form = !r.binary;
    if (binary_add) {
      /* The ADD's head and the raw key, then the value (a meta record's without its \r\n). */
      if (r.binary && add_offset(n->binary, at) < 0) goto done;
      unsigned char head[CW_BIN_ADD_HEAD];
      const uint32_t opaque = (uint32_t)(n->order.len / sizeof(int64_t));
      cw_bin_add_head(head, r.key_len, (uint32_t)r.value_len, r.flags, (uint32_t)t, opaque);
      const int64_t lp[2] = {V2_PIECE_LINE - (int64_t)n->lines.len, (int64_t)(CW_BIN_ADD_HEAD + r.key_len)};
      const int64_t rec = at;
      if (v2buf_put(&n->lines, head, sizeof head) < 0 || v2buf_put(&n->lines, r.key, r.key_len) < 0 ||
          v2buf_put(&n->pieces, lp, sizeof lp) < 0 || add_range(n, r.value_at, (int64_t)r.value_len) < 0 ||
          v2buf_put(&n->order, &rec, sizeof rec) < 0)
        goto nomem;
      const uint64_t wire = CW_BIN_ADD_HEAD + r.key_len + r.value_len;
      if (want_probes && meta_form && add_probe(n, &r, stamped) < 0) goto nomem;
      n->items++;
      n->batch_items++;
      n->batch_bytes += wire;
      if (n->batch_items >= batch_items || n->batch_bytes >= (uint64_t)batch_bytes)
        if (end_batch(n) < 0) goto nomem;
      continue;
    }
    if (r.binary || (!set_mode && r.b64)) {
      if (add_offset(n->binary, at) < 0) goto done;
      continue;
    }
    uint64_t wire = (uint64_t)(r.next - at);
    if (!set_mode) {
      char line[V2_MAX_LINE];
      const size_t ll = cw_add_line(line, (const char *)r.key, r.key_len, r.flags, (uint64_t)t, r.value_len);
      const int64_t lp[2] = {V2_PIECE_LINE - (int64_t)n->lines.len, (int64_t)ll};
      const int64_t rec = at;
      if (v2buf_put(&n->lines, line, ll) < 0 || v2buf_put(&n->pieces, lp, sizeof lp) < 0 ||
          add_range(n, r.value_at, r.next - r.value_at) < 0 || v2buf_put(&n->order, &rec, sizeof rec) < 0)
        goto nomem;
      wire = (uint64_t)ll + (uint64_t)(r.next - r.value_at);
    } else if (t != r.expiry || stamped) { /* set mode, another T than the file's (or a stamp before the
                                              * line): the whole line generated */
      char line[V2_MAX_LINE];
      const cw_ms m = {(const char *)r.tok, r.tok_len, r.b64, r.value_len, (uint64_t)t, r.flags, 0, 1, (uint64_t)at};
      const size_t ll = cw_ms_line(line, &m);
      const int64_t lp[2] = {V2_PIECE_LINE - (int64_t)n->lines.len, (int64_t)ll};
      if (v2buf_put(&n->lines, line, ll) < 0 || v2buf_put(&n->pieces, lp, sizeof lp) < 0 ||
          add_range(n, r.value_at, r.next - r.value_at) < 0)
        goto nomem;
      wire = (uint64_t)ll + (uint64_t)(r.next - r.value_at);
    } else {
      const int64_t s[2] = {V2_PIECE_S, 1};
      if (add_range(n, at, r.mode_at - at) < 0 || v2buf_put(&n->pieces, s, sizeof s) < 0 ||
          add_range(n, r.mode_at + 1, r.next - r.mode_at - 1) < 0)
        goto nomem;
    }
    if (want_probes && add_probe(n, &r, stamped) < 0) goto nomem;
    n->items++;
    n->batch_items++;
    n->batch_bytes += wire;
    if (n->batch_items >= batch_items || n->batch_bytes >= (uint64_t)batch_bytes)
      if (end_batch(n) < 0) goto nomem;
  }
  per_node = PyList_New(n_nodes);
  if (!per_node) goto done;
  for (Py_ssize_t i = 0; i < n_nodes; i++) {
    if (end_batch(&nodes[i]) < 0) goto nomem;
    /* y# of NULL builds None: an empty share is b"". */
    const char *pd = nodes[i].pieces.data ? (const char *)nodes[i].pieces.data : "";
    const char *ld = nodes[i].lines.data ? (const char *)nodes[i].lines.data : "";
    const char *od = nodes[i].order.data ? (const char *)nodes[i].order.data : "";
    const char *qd = nodes[i].probes.data ? (const char *)nodes[i].probes.data : "";
    const char *xd = nodes[i].probe_exp.data ? (const char *)nodes[i].probe_exp.data : "";
    const char *sd = nodes[i].probe_stamps.data ? (const char *)nodes[i].probe_stamps.data : "";
    PyObject *t = Py_BuildValue("(y#llOOy#y#y#y#y#)", pd, (Py_ssize_t)nodes[i].pieces.len, nodes[i].items,
                                nodes[i].expired, nodes[i].oversize, nodes[i].binary, ld,
                                (Py_ssize_t)nodes[i].lines.len, od, (Py_ssize_t)nodes[i].order.len, qd,
                                (Py_ssize_t)nodes[i].probes.len, xd, (Py_ssize_t)nodes[i].probe_exp.len, sd,
                                (Py_ssize_t)nodes[i].probe_stamps.len);
    if (!t) goto done;
    PyList_SET_ITEM(per_node, i, t);
  }
  result = Py_BuildValue("(lO)", records, per_node);
  goto done;
nomem:
  PyErr_NoMemory();
done:
  Py_XDECREF(per_node);
  if (nodes) {
    for (Py_ssize_t i = 0; i < n_nodes; i++) {
      v2buf_free(&nodes[i].pieces);
      v2buf_free(&nodes[i].lines);
      v2buf_free(&nodes[i].order);
      v2buf_free(&nodes[i].probes);
      v2buf_free(&nodes[i].probe_exp);
      v2buf_free(&nodes[i].probe_stamps);
      Py_XDECREF(nodes[i].oversize);
      Py_XDECREF(nodes[i].binary);
    }
    PyMem_Free(nodes);
  }
  PyMem_Free(budget);
  PyMem_Free(offset);
  if (only.buf) PyBuffer_Release(&only);
  PyBuffer_Release(&view);
  return result;
}

PyMethodDef kV2PlanMethods[] = {
    {"plan_v2", plan_v2, METH_VARARGS, "Check 4 of a v2 file and what to send where (see _v2plan.c)."},
    {NULL, NULL, 0, NULL},
};
