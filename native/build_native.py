"""cffi API-mode build of streamlog._native.

Every public header `native/sl_*.h` contributes its declarations to the cdef
(preprocessor lines are dropped: the headers keep the cdef-able subset plain
C), and every `native/*.c` file but the CPython extension's (`py_*.c`, see
setup.py) is compiled into the one cffi module. A new native component
therefore adds its own header and source and touches nothing here.
"""
import glob
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _headers():
    return sorted(glob.glob(os.path.join(HERE, "sl_*.h")))


def _cdef_text(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # cffi parses plain declarations only: drop include guards and includes.
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


ffibuilder = FFI()
for header in _headers():
    ffibuilder.cdef(_cdef_text(header))

ffibuilder.set_source(
    "streamlog._native",
    "\n".join(f'#include "{os.path.basename(h)}"' for h in _headers()),
    # Relative paths: setuptools refuses absolute source paths in editable builds.
    sources=[os.path.relpath(p, ROOT) for p in sorted(glob.glob(os.path.join(HERE, "*.c")))
             if not os.path.basename(p).startswith("py_")],
    include_dirs=[os.path.relpath(HERE, ROOT)],
    extra_compile_args=["-O3", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-fno-strict-aliasing"],
)
