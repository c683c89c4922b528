"""The record codec in use: the native functions when loaded, else the Python reference.

Both implementations share one interface (see streamlog.native and
storage.records_py); this module binds the names once at import so the hot
paths pay no per-call dispatch. NATIVE says which one is bound.
"""
from .. import native
from . import records_py

NATIVE = native.AVAILABLE

# records_py re-exports the Python CRC so both sources offer the same names.
_source = native if NATIVE else records_py

crc32c = _source.crc32c
records_bound = _source.records_bound
records_encode_into = _source.records_encode_into
records_decode = _source.records_decode
records_to_tuples = _source.records_to_tuples
slices_to_list = _source.slices_to_list
gather = _source.gather
gather_many = _source.gather_many


def implementation():
    """'native' or 'python', for diagnostics and for tests that assert what loaded."""
    return "native" if NATIVE else "python"
