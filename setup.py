# cffi_modules cannot be declared in pyproject.toml (REFERENCE §5); everything else lives there.
from setuptools import setup

setup(cffi_modules=["libcontainer_c/build_ffi.py:ffi"])
