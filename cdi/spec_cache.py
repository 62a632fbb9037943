"""Verdicts of the schema on spec files, so a container start need not validate unchanged files again.

Validating with jsonschema costs far more than the rest of a container start (importing it alone takes
140-210 ms), so a file found valid is remembered by its identity: path, device, inode, size, mtime and
ctime (a file's owner can set mtime back, not ctime), under the text of the schema that judged it.
For a YAML file the validated document is kept too, as JSON, so that the start path does not import a
YAML parser either (NVIDIA's usual spec is YAML). The schema stays the only judge of what is valid:
the cache only remembers what it said.

A persistent cache is trusted only if it is owned by us and writable by nobody else; it is written
through a temp file and a rename, mode 0600. Failing to write it only costs time.
"""
from __future__ import annotations

import os
import stat

from cdi import json_codec
from cdi.log import get_logger
from cdi.regular_file import read_regular_file

MAX_CACHE_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 1024   # spec files; a host has a handful

log = get_logger(__name__)  # imports logging only when a message can be shown


def _identity(path: str, st: os.stat_result) -> tuple:
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _is_entry(entry: object) -> bool:
    """[path, dev, ino, size, mtime_ns, ctime_ns, document or null], as _write writes them."""
    return (isinstance(entry, list) and len(entry) == 7 and isinstance(entry[0], str)
            and all(type(n) is int for n in entry[1:6]) and (entry[6] is None or isinstance(entry[6], dict)))


class ValidatedSpecCache:
    """Files already found valid (and the documents of YAML ones). `path=None`: in memory only."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = os.fspath(path) if path else None
        self._schema: str | None = None
        self._entries: dict[tuple, dict | None] = {}
        self._dirty = False
        if self.path is not None:
            self._load()

    def _schema_key(self) -> str:
        if self._schema is None:
            from cdi.validate import schema_key

            self._schema = schema_key()
        return self._schema

    def _load(self) -> None:
        """The verdicts of the file, if it can be trusted and has the right shape; else none: a cache
        that is missing, damaged, foreign or not a file at all costs a validation, never a start."""
        try:
            data, st = read_regular_file(self.path, MAX_CACHE_BYTES, follow_symlinks=False)
        except (OSError, ValueError):   # missing, a link, a directory, a FIFO, too large
            return
        # a verdict anyone else could have written is worth nothing
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning("ignoring CDI validation cache %s: not a file owned by us and writable only by us",
                        self.path)
            return
        try:
            document = json_codec.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(document, dict) or document.get("schema") != self._schema_key():
            return
        entries = document.get("entries")
        for entry in entries if isinstance(entries, list) else ():
            if _is_entry(entry):
                self._entries[tuple(entry[:6])] = entry[6]

    def is_valid(self, path: str, st: os.stat_result) -> bool:
        return _identity(path, st) in self._entries

    def document(self, path: str, st: os.stat_result) -> dict | None:
        """The validated document kept for this very file (YAML files only), else None."""
        return self._entries.get(_identity(path, st))

    def remember(self, path: str, st: os.stat_result, document: dict | None = None) -> None:
        key = _identity(path, st)
        if key not in self._entries or self._entries[key] != document:
            self._entries = {k: v for k, v in self._entries.items() if k[0] != path}
            self._entries[key] = document
            self._dirty = True

    def forget(self, path: str) -> None:
        """Drop the verdict on path (one that did not hold: the file is judged again)."""
        kept = {k: v for k, v in self._entries.items() if k[0] != path}
        if len(kept) != len(self._entries):
            self._entries, self._dirty = kept, True

    def retain(self, dirs: set[str], paths: set[str]) -> None:
        """Forget files gone from `dirs`, the spec dirs just listed (`paths`: the files they hold).
        Verdicts are kept per spec file, not per caller: the files of other dirs stay, since callers
        with other spec dirs (two configs, one cache dir) share the cache; beyond MAX_ENTRIES only the
        files just listed are kept."""
        kept = {k: v for k, v in self._entries.items() if k[0] in paths or os.path.dirname(k[0]) not in dirs}
        if len(kept) > MAX_ENTRIES:
            kept = {k: v for k, v in kept.items() if k[0] in paths}
        if len(kept) != len(self._entries):
            self._entries, self._dirty = kept, True

    def save(self) -> None:
        """Keep the verdicts for the next process."""
        if self.path is None or not self._dirty:
            return
        try:
            self._write()
        except (OSError, ValueError, TypeError) as exc:   # only costs a validation next time
            log.debug("cannot write CDI validation cache %s: %s", self.path, exc)

    def _write(self) -> None:
        import json   # writing is rare (a spec file changed): json and the file creator only then

        from cdi.new_file import create_new_file

        entries = [[*key, document] for key, document in sorted(self._entries.items(), key=lambda kv: kv[0])]
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = create_new_file(directory, ".cdi-cache.", "", 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump({"schema": self._schema_key(), "entries": entries}, out)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        self._dirty = False
