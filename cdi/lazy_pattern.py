"""Regular expressions compiled on first use.

Why: importing re (with enum, functools, collections) and compiling every pattern at import cost
the prestart hook about 4 ms of CPU at every GPU container start, for checks most requests never
reach (annotation keys, NVIDIA_REQUIRE_*, UUID and PCI ids). The checks every request does (device
indices, CDI kinds, the driver version) are plain string tests where they are defined.
Flags go inline in the pattern (`(?ai)...`): the re module's constants would need re imported.
"""
from __future__ import annotations


class LazyPattern:
    __slots__ = ("pattern", "_compiled")

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._compiled = None

    def compiled(self):
        if self._compiled is None:
            import re

            self._compiled = re.compile(self.pattern)
        return self._compiled

    def match(self, text: str):
        return self.compiled().match(text)

    def fullmatch(self, text: str):
        return self.compiled().fullmatch(text)
