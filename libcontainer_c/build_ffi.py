"""cffi build script (API mode) for libcontainer_c._native.

The header src/libcontainer.h is both the C header the sources include and the cffi cdef: it holds
declarations only (no preprocessor lines), so cffi can parse it as it is.
"""
from pathlib import Path

from cffi import FFI

SRC = Path(__file__).resolve().parent / "src"

ffi = FFI()
ffi.cdef((SRC / "libcontainer.h").read_text())
ffi.set_source(
    "libcontainer_c._native",
    '#include "libcontainer.h"',
    sources=[str(p.relative_to(SRC.parent.parent)) for p in sorted(SRC.glob("*.c"))],
    include_dirs=[str(SRC)],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE"],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
