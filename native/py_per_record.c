/*
 * py_per_record.c -- streamlog._per_record: per-record work through the CPython API.
 *
 * The native code whose cost is per record, so it is a CPython extension
 * rather than cffi: cffi cannot hand back Python objects, and each cffi call
 * drops and retakes the GIL (~250 ns here, more than the work itself).
 *
 * key_partition(key, partitions): the default partitioner's placement of a
 * keyed record, (murmur2(key) & 0x7fffffff) % partitions with sl_murmur2.c's
 * hash, in one call instead of a cffi crossing plus two Python operations.
 *
 * records_to_list(...): walks a batch's records section with the same decoder
 * as sl_records.c and builds, per record, either
 *   (offset, timestamp, key, value)                       short form, or
 *   record_type(topic, partition, offset, timestamp, timestamp_type, key, value, headers)
 * where record_type is a tuple subclass (the client's Record named tuple).
 *
 * Why here and not in Python: building a record in Python costs a zip tuple,
 * a tuple.__new__ call and a list slot; worse, a tuple *subclass* is never
 * untracked by the cyclic GC (CPython untracks only exact tuples), so every
 * record held in a poll() result was traversed by each collection until it
 * died -- measured at more than half of a 1M-record drain. Every tuple made
 * here holds only str, int, bytes, None and tuples made here, none of which
 * can be part of a reference cycle, so each is untracked as it is made, as
 * CPython itself does for exact tuples of atomic items.
 *
 * Invariants:
 *  1. The decoder checks are sl_records.c's (sl_record_next); a corrupt batch
 *     raises ValueError(code, position) and no partial list escapes.
 *  2. Only objects whose items are all atomic or untracked are untracked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sl_murmur2.h"
#include "sl_records.h"

/* ValueError(code, position): native.py turns it into CorruptRecordError. */
static void raise_decode_error(int code, Py_ssize_t position)
{
    PyObject *detail = Py_BuildValue("(in)", code, position);
    if (detail != NULL) {
        PyErr_SetObject(PyExc_ValueError, detail);
        Py_DECREF(detail);
    }
}

/* Headers of one record as a tuple of (str key, bytes-or-None value) pairs, or the
 * empty tuple. Keys decode as UTF-8 with replacement, as the Python reference does.
 * The section was framed and bounds-checked by sl_record_next. */
static PyObject *decode_headers(const uint8_t *p, const uint8_t *end, int32_t count)
{
    PyObject *headers = PyTuple_New(count);
    if (headers == NULL || count == 0)
        return headers;
    int32_t ignored;
    int used = sl_read_varint(p, end, &ignored); /* headerCount, already known */
    if (used <= 0)
        goto corrupt;
    p += used;
    for (int32_t j = 0; j < count; j++) {
        int32_t key_len, value_len;
        used = sl_read_varint(p, end, &key_len);
        if (used <= 0 || key_len < 0 || end - (p + used) < key_len)
            goto corrupt; /* unreachable after sl_record_next's checks; kept as a guard */
        p += used;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)p, key_len, "replace");
        p += key_len;
        used = sl_read_varint(p, end, &value_len);
        if (used <= 0 || value_len < -1 || end - (p + used) < (value_len > 0 ? value_len : 0)) {
            Py_XDECREF(key);
            goto corrupt;
        }
        p += used;
        PyObject *value;
        if (value_len < 0) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)p, value_len);
            p += value_len;
        }
        PyObject *pair = (key && value) ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(headers);
            return NULL;
        }
        PyObject_GC_UnTrack(pair);
        PyTuple_SET_ITEM(headers, j, pair);
    }
    PyObject_GC_UnTrack(headers);
    return headers;
corrupt:
    Py_DECREF(headers);
    raise_decode_error(SL_ERR_RECORD_LENGTH, 0);
    return NULL;
}

static PyObject *bytes_or_none(const uint8_t *buf, int32_t pos, int32_t len)
{
    if (len < 0)
        return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)buf + pos, len);
}

/*
 * records_to_list(buf, n, base_offset, base_timestamp, fixed_timestamp, min_offset,
 *                 topic, partition, timestamp_type, record_type) -> (list, with_headers)
 *
 * buf: the records section (any contiguous buffer). fixed_timestamp: an int that
 * every record gets (LogAppendTime) or None. topic None: short form, else record
 * form with record_type (a tuple subclass, or None for plain tuples). Records below
 * min_offset are left out. with_headers counts emitted records that have headers.
 */
static PyObject *records_to_list(PyObject *module, PyObject *args)
{
    Py_buffer view;
    int32_t n;
    long long base_offset, base_timestamp, min_offset;
    PyObject *fixed, *topic, *partition, *timestamp_type, *record_type;
    if (!PyArg_ParseTuple(args, "y*iLLOLOOOO:records_to_list", &view, &n, &base_offset,
                          &base_timestamp, &fixed, &min_offset, &topic, &partition,
                          &timestamp_type, &record_type))
        return NULL;

    PyObject *out = NULL, *last_ts = NULL, *result = NULL;
    long long last_ts_value = 0;
    int record_form = topic != Py_None;
    PyTypeObject *type = &PyTuple_Type;
    if (record_form && !(PyUnicode_Check(topic) && PyLong_Check(partition) &&
                         PyLong_Check(timestamp_type))) {
        /* invariant 2 rests on these being atomic */
        PyErr_SetString(PyExc_TypeError, "topic must be a str, partition and type ints");
        goto fail;
    }
    if (record_form && record_type != Py_None) {
        if (!PyType_Check(record_type) ||
            !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
            goto fail;
        }
        type = (PyTypeObject *)record_type;
    }
    if (n < 0 || view.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "negative record count or oversized buffer");
        goto fail;
    }
    if (fixed != Py_None) {
        last_ts = Py_NewRef(fixed);
        last_ts_value = PyLong_AsLongLong(fixed);
        if (last_ts_value == -1 && PyErr_Occurred())
            goto fail;
    }
    out = PyList_New(0);
    if (out == NULL)
        goto fail;

    const uint8_t *buf = view.buf;
    const uint8_t *p = buf;
    const uint8_t *const end = buf + view.len;
    long with_headers = 0;
    for (int32_t i = 0; i < n; i++) {
        sl_record_view r;
        int rc = sl_record_next(buf, &p, end, &r);
        if (rc != SL_OK) {
            raise_decode_error(rc, (Py_ssize_t)(p - buf));
            goto fail;
        }
        long long offset = base_offset + r.offset_delta;
        if (offset < min_offset)
            continue;
        /* Timestamps repeat within a batch (often all equal): share one int object. */
        if (fixed == Py_None) {
            long long ts = base_timestamp + r.timestamp_delta;
            if (last_ts == NULL || ts != last_ts_value) {
                Py_XDECREF(last_ts);
                last_ts = PyLong_FromLongLong(ts);
                if (last_ts == NULL)
                    goto fail;
                last_ts_value = ts;
            }
        }
        PyObject *rec = record_form ? type->tp_alloc(type, 8) : PyTuple_New(4);
        if (rec == NULL)
            goto fail;
        PyObject *off = PyLong_FromLongLong(offset);
        PyObject *key = bytes_or_none(buf, r.key_pos, r.key_len);
        PyObject *value = bytes_or_none(buf, r.value_pos, r.value_len);
        PyObject *headers = NULL;
        if (record_form)
            headers = decode_headers(buf + r.header_pos, buf + r.header_pos + r.header_len,
                                     r.header_count);
        if (off == NULL || key == NULL || value == NULL || (record_form && headers == NULL)) {
            Py_XDECREF(off);
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_XDECREF(headers);
            Py_DECREF(rec); /* its NULL slots are skipped on deallocation */
            goto fail;
        }
        if (record_form) {
            PyTuple_SET_ITEM(rec, 0, Py_NewRef(topic));
            PyTuple_SET_ITEM(rec, 1, Py_NewRef(partition));
            PyTuple_SET_ITEM(rec, 2, off);
            PyTuple_SET_ITEM(rec, 3, Py_NewRef(last_ts));
            PyTuple_SET_ITEM(rec, 4, Py_NewRef(timestamp_type));
            PyTuple_SET_ITEM(rec, 5, key);
            PyTuple_SET_ITEM(rec, 6, value);
            PyTuple_SET_ITEM(rec, 7, headers);
        } else {
            PyTuple_SET_ITEM(rec, 0, off);
            PyTuple_SET_ITEM(rec, 1, Py_NewRef(last_ts));
            PyTuple_SET_ITEM(rec, 2, key);
            PyTuple_SET_ITEM(rec, 3, value);
        }
        with_headers += r.header_count > 0;
        PyObject_GC_UnTrack(rec); /* invariant 2: topic is a str, the rest made here */
        int appended = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (appended < 0)
            goto fail;
    }
    if (p != end) {
        raise_decode_error(SL_ERR_TRAILING_BYTES, (Py_ssize_t)(p - buf));
        goto fail;
    }
    result = Py_BuildValue("(Nl)", out, with_headers);
    out = NULL;
fail:
    Py_XDECREF(out);
    Py_XDECREF(last_ts);
    PyBuffer_Release(&view);
    return result;
}

/* key_partition(key: bytes-like, partitions: int > 0) -> int */
static PyObject *key_partition(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "key_partition(key, partitions) takes 2 arguments");
        return NULL;
    }
    long partitions = PyLong_AsLong(args[1]);
    if (partitions == -1 && PyErr_Occurred())
        return NULL;
    if (partitions < 1 || partitions > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "partitions must be in [1, 2^31), got %ld", partitions);
        return NULL;
    }
    int32_t hash;
    if (PyBytes_CheckExact(args[0])) {
        hash = sl_murmur2((const uint8_t *)PyBytes_AS_STRING(args[0]),
                          (size_t)PyBytes_GET_SIZE(args[0]));
    } else {
        Py_buffer view;
        if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
            return NULL;
        hash = sl_murmur2(view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    return PyLong_FromLong((long)(((uint32_t)hash & 0x7fffffffu) % (uint32_t)partitions));
}

static PyMethodDef methods[] = {
    {"records_to_list", records_to_list, METH_VARARGS,
     "Decode a records section into a list of tuples (see py_per_record.c)."},
    {"key_partition", (PyCFunction)(void (*)(void))key_partition, METH_FASTCALL,
     "The default partitioner's partition of a key (see py_per_record.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "streamlog._per_record",
    .m_doc = "Per-record work through the CPython API (see native/py_per_record.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__per_record(void)
{
    return PyModule_Create(&module);
}
