"""Build hook: cffi_modules has no pyproject.toml spelling, so it lives here.

Everything else about the package is declared in pyproject.toml.
"""
from setuptools import setup

setup(cffi_modules=["native/build_native.py:ffibuilder"])
