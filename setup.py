"""Build hooks that have no pyproject.toml spelling: the cffi module and one C extension.

streamlog._native (cffi, API mode) holds the C hot paths: CRC-32C, the record
codec, murmur2, the timing wheel. streamlog._records is the one function that
must make Python objects (decoded records as tuples the cyclic GC need not
track), which cffi cannot do; it shares sl_records.c's decoder.
Everything else about the package is declared in pyproject.toml.
"""
from setuptools import Extension, setup

records = Extension(
    "streamlog._records",
    sources=["native/py_records.c", "native/sl_records.c"],
    include_dirs=["native"],
    extra_compile_args=["-O3", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-fno-strict-aliasing"],
)

setup(cffi_modules=["native/build_native.py:ffibuilder"], ext_modules=[records])
