/* hashkit (../../../dumper-cpp/hashkit/, the placement core shared with the C++ dumper) bound for Python:
 *
 * Placement(description: bytes)   a placement (hashkit/placement.h); ValueError on a bad description
 *   .place(key) -> int            the index of key's node; ValueError when the scheme cannot place it
 *   .ring() -> (points, owners)   ketama's sorted points and their owners as little-endian u32 bytes
 *   .nodes -> int
 * hash(name, key) -> int          a key hash by its name (hashkit.c's table)
 * ketama_weighted_points(weight, total, n, base, libmemcached=False) -> int
 * furc_hash(key, m) -> int
 * wch3_hash(key, weights) -> int  (mcrouter's WeightedCh3 over len(weights) servers)
 * spooky32(key, seed) -> int
 *
 * plan_v2 (_v2plan.c) routes with a Placement through placement_of().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../../dumper-cpp/hashkit/hashkit.h"
#include "../../../dumper-cpp/hashkit/placement.h"

typedef struct {
  PyObject_HEAD cw_placement *p;
} PlacementObject;

static PyTypeObject PlacementType;

const cw_placement *placement_of(PyObject *o) {
  return PyObject_TypeCheck(o, &PlacementType) ? ((PlacementObject *)o)->p : NULL;
}

static int placement_init(PyObject *self, PyObject *args, PyObject *kw) {
  (void)kw;
  Py_buffer d;
  if (!PyArg_ParseTuple(args, "y*", &d)) return -1;
  char err[256] = "";
  cw_placement *p = cw_placement_parse(d.buf, (size_t)d.len, err, sizeof err);
  PyBuffer_Release(&d);
  if (!p) {
    PyErr_SetString(PyExc_ValueError, err);
    return -1;
  }
  PlacementObject *po = (PlacementObject *)self;
  cw_placement_free(po->p);
  po->p = p;
  return 0;
}

static void placement_dealloc(PyObject *self) {
  cw_placement_free(((PlacementObject *)self)->p);
  Py_TYPE(self)->tp_free(self);
}

static PlacementObject *ready(PyObject *self) {
  PlacementObject *po = (PlacementObject *)self;
  if (!po->p) PyErr_SetString(PyExc_ValueError, "Placement not initialized");
  return po->p ? po : NULL;
}

static PyObject *placement_place(PyObject *self, PyObject *args) {
  PlacementObject *po = ready(self);
  Py_buffer key;
  if (!po || !PyArg_ParseTuple(args, "y*", &key)) return NULL;
  const long idx = cw_place(po->p, key.buf, (size_t)key.len);
  PyBuffer_Release(&key);
  if (idx < 0) {
    PyErr_SetString(PyExc_ValueError, "out of memory placing a key");
    return NULL;
  }
  return PyLong_FromLong(idx);
}

static PyObject *placement_ring(PyObject *self, PyObject *unused) {
  (void)unused;
  PlacementObject *po = ready(self);
  if (!po) return NULL;
  const uint32_t *points, *owners;
  const size_t n = cw_placement_ring(po->p, &points, &owners);
  PyObject *pb = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 * n));
  PyObject *ob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 * n));
  if (!pb || !ob) {
    Py_XDECREF(pb);
    Py_XDECREF(ob);
    return NULL;
  }
  unsigned char *pd = (unsigned char *)PyBytes_AS_STRING(pb), *od = (unsigned char *)PyBytes_AS_STRING(ob);
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < 4; k++) {
      pd[4 * i + (size_t)k] = (unsigned char)(points[i] >> (8 * k));
      od[4 * i + (size_t)k] = (unsigned char)(owners[i] >> (8 * k));
    }
  return Py_BuildValue("(NN)", pb, ob);
}

static PyObject *placement_nodes(PyObject *self, void *closure) {
  (void)closure;
  PlacementObject *po = ready(self);
  return po ? PyLong_FromSize_t(cw_placement_nodes(po->p)) : NULL;
}

static PyMethodDef kPlacementMethods[] = {
    {"place", placement_place, METH_VARARGS, "The index of key's node."},
    {"ring", placement_ring, METH_NOARGS, "Ketama's points and owners (little-endian u32 bytes)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kPlacementGetSet[] = {
    {"nodes", placement_nodes, NULL, "The number of nodes.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PlacementType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cachewarm.datapath._speedups.Placement",
    .tp_basicsize = sizeof(PlacementObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A key placement built from a hashkit description (hashkit/placement.h).",
    .tp_new = PyType_GenericNew,
    .tp_init = placement_init,
    .tp_dealloc = placement_dealloc,
    .tp_methods = kPlacementMethods,
    .tp_getset = kPlacementGetSet,
};

static PyObject *py_hash(PyObject *self, PyObject *args) {
  (void)self;
  const char *name;
  Py_ssize_t name_len;
  Py_buffer key;
  if (!PyArg_ParseTuple(args, "s#y*", &name, &name_len, &key)) return NULL;
  const int id = cw_hash_by_name(name, (size_t)name_len);
  if (id < 0) {
    PyBuffer_Release(&key);
    return PyErr_Format(PyExc_ValueError, "unknown hash %s", name);
  }
  const uint32_t h = cw_hash((cw_hash_id)id, key.buf, (size_t)key.len);
  PyBuffer_Release(&key);
  return PyLong_FromUnsignedLong(h);
}

static PyObject *py_weighted_points(PyObject *self, PyObject *args) {
  (void)self;
  unsigned int w, total, n, base;
  int libmemcached = 0;
  if (!PyArg_ParseTuple(args, "IIII|p", &w, &total, &n, &base, &libmemcached)) return NULL;
  if (total == 0 || w > total) return PyErr_Format(PyExc_ValueError, "weight %u of a total %u", w, total);
  return PyLong_FromUnsignedLong(libmemcached ? cw_libmemcached_weighted_points(w, total, n, base)
                                              : cw_ketama_weighted_points(w, total, n, base));
}

static PyObject *py_furc(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer key;
  unsigned int m;
  if (!PyArg_ParseTuple(args, "y*I", &key, &m)) return NULL;
  const uint32_t h = cw_furc_hash(key.buf, (size_t)key.len, m);
  PyBuffer_Release(&key);
  return PyLong_FromUnsignedLong(h);
}

static PyObject *py_wch3(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer key;
  PyObject *seq;
  if (!PyArg_ParseTuple(args, "y*O", &key, &seq)) return NULL;
  PyObject *fast = PySequence_Fast(seq, "weights: a sequence of floats");
  if (!fast) {
    PyBuffer_Release(&key);
    return NULL;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  double *w = n > 0 ? PyMem_Malloc((size_t)n * sizeof *w) : NULL;
  PyObject *result = NULL;
  if (n <= 0 || n > CW_FURC_MAX || !w) {
    PyErr_SetString(PyExc_ValueError, "weights: 1 .. 2^23 of them");
  } else {
    Py_ssize_t i = 0;
    for (; i < n; i++) {
      w[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
      if (w[i] == -1.0 && PyErr_Occurred()) break;
    }
    if (i == n) result = PyLong_FromUnsignedLong(cw_wch3_hash(key.buf, (size_t)key.len, w, (uint32_t)n));
  }
  PyMem_Free(w);
  Py_DECREF(fast);
  PyBuffer_Release(&key);
  return result;
}

static PyObject *py_spooky32(PyObject *self, PyObject *args) {
  (void)self;
  Py_buffer key;
  unsigned int seed;
  if (!PyArg_ParseTuple(args, "y*I", &key, &seed)) return NULL;
  const uint32_t h = cw_spooky32(key.buf, (size_t)key.len, seed);
  PyBuffer_Release(&key);
  return PyLong_FromUnsignedLong(h);
}

PyMethodDef kPlacementModuleMethods[] = {
    {"spooky32", py_spooky32, METH_VARARGS, "SpookyHash V2's 32-bit hash."},
    {"wch3_hash", py_wch3, METH_VARARGS, "mcrouter's WeightedCh3."},
    {"hash", py_hash, METH_VARARGS, "A key hash by its name (hashkit)."},
    {"ketama_weighted_points", py_weighted_points, METH_VARARGS, "Weighted ketama's points for a server."},
    {"furc_hash", py_furc, METH_VARARGS, "mcrouter's furc_hash (Ch3)."},
    {NULL, NULL, 0, NULL},
};

int placement_add_type(PyObject *m) {
  if (PyType_Ready(&PlacementType) < 0) return -1;
  Py_INCREF(&PlacementType);
  if (PyModule_AddObject(m, "Placement", (PyObject *)&PlacementType) < 0) {
    Py_DECREF(&PlacementType);
    return -1;
  }
  return PyModule_AddFunctions(m, kPlacementModuleMethods);
}
