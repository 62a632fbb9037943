"""Which low-level runtime the shim hands over to: config `nvidia-container-runtime.runtimes`.

Each entry is a name looked up in the caller's PATH (`runc`, `crun`) or a path (anything with a `/`);
the first that the kernel can start wins (runtime_shim.executable: an ELF or `#!` file whose loader or
interpreter is there too). This is decided before config.json is edited, so a runtime that cannot be
started fails the create with the bundle untouched. A candidate that is one of this toolkit's own
launchers (a `runc` in PATH that is a link or copy of the shim, another installation's shim) is
skipped: exec'ing it would start the shim again, for ever. When none is left, the error names every
candidate that was there but refused, and why.
"""
from __future__ import annotations

import os

from runtime_shim.errors import ShimError
from runtime_shim.executable import start_problem


class NoRuntimeError(ShimError):
    """None of the configured low-level runtimes can be started (`--version` still prints ours)."""


def _candidates(entry: str, search_path: str) -> list[str]:
    if "/" in entry:
        return [os.path.abspath(entry)]
    return [os.path.join(d or ".", entry) for d in search_path.split(os.pathsep)]


def find_low_level_runtime(runtimes: tuple[str, ...] | list[str], search_path: str) -> str:
    """The absolute path of the first usable runtime; ShimError naming all of them if none is."""
    refused = []
    for entry in runtimes:
        if not entry:
            continue
        for candidate in _candidates(entry, search_path):
            if not os.path.lexists(candidate) and "/" not in entry:
                continue  # not in this PATH directory
            problem = start_problem(candidate)
            if problem is None:
                return os.path.abspath(candidate)
            refused.append(f"{candidate!r}: {problem}")
    tried = ", ".join(runtimes) or "none"
    raise NoRuntimeError(f"no low-level runtime found (tried {tried}" + "".join(f"; {r}" for r in refused)
                         + "): install runc or crun, or name one in the config's runtimes",
                         "nvidia-container-runtime.runtimes")
