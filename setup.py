"""Build hooks that have no pyproject.toml spelling: the cffi module and one C extension.

streamlog._native (cffi, API mode) holds the C hot paths that run once per
batch: CRC-32C, the record codec, murmur2 over a column of keys, the timing
wheel. streamlog._per_record holds what runs once per record, where a cffi
crossing would cost more than the work, and what must make Python objects:
building decoded records as tuples the cyclic GC need not track, and a key's
partition. It shares the decoder and the hash with the cffi module's sources.
Everything else about the package is declared in pyproject.toml.
"""
from setuptools import Extension, setup

per_record = Extension(
    "streamlog._per_record",
    sources=["native/py_per_record.c", "native/sl_records.c", "native/sl_murmur2.c"],
    include_dirs=["native"],
    extra_compile_args=["-O3", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-fno-strict-aliasing"],
)

setup(cffi_modules=["native/build_native.py:ffibuilder"], ext_modules=[per_record])
