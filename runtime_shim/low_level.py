"""Which low-level runtime the shim hands over to: config `nvidia-container-runtime.runtimes`.

Each entry is a name looked up in the caller's PATH (`runc`, `crun`) or a path (anything with a `/`);
the first that is an executable file wins. An entry that resolves to the shim itself is skipped: a
PATH where `runc` is our launcher would otherwise exec us forever.
"""
from __future__ import annotations

import os
import stat

from runtime_shim.errors import ShimError


def _executable(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK):
        return st
    return None


def _candidates(entry: str, search_path: str) -> list[str]:
    if "/" in entry:
        return [os.path.abspath(entry)]
    return [os.path.join(d or ".", entry) for d in search_path.split(os.pathsep)]


def find_low_level_runtime(runtimes: tuple[str, ...] | list[str], search_path: str,
                           self_exe: str | None = None) -> str:
    """The absolute path of the first usable runtime; ShimError naming all of them if none is."""
    own = _executable(self_exe) if self_exe else None
    for entry in runtimes:
        if not entry:
            continue
        for candidate in _candidates(entry, search_path):
            st = _executable(candidate)
            if st is None:
                continue
            if own is not None and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
                continue
            return os.path.abspath(candidate)
    raise ShimError(f"no low-level runtime found (tried {', '.join(runtimes) or 'none'})",
                    "nvidia-container-runtime.runtimes")
