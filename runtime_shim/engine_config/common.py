"""What every engine writer shares: the request, a plan of file changes, its diff, and applying it.

An engine module never touches the disk itself beyond reading: it turns the current files into a
`Plan` (each file's text before and after), so `--dry-run` is just printing the plan's diff and a
real run is writing exactly that. Writes are atomic (temp file in the same directory, fsync, rename)
and keep the file's mode and owner; when one file of a plan fails, the files already written are put
back, so an engine never sees half a configuration.
"""
from __future__ import annotations

import difflib
import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field

from cdi.errors import ConfigError, printable, what_where
from cdi.new_file import write_atomically  # noqa: F401 (the engine editors and ctk config import it from here)
from cdi.regular_file import config_text, read_config_file

RUNTIME_EXECUTABLE = "nvidia-container-runtime"
HOOK_EXECUTABLE = "nvidia-container-runtime-hook"
# Where the packages install the programs; used when they are found neither next to nvidia-ctk nor in PATH.
SYSTEM_BIN_DIR = "/usr/bin"


class EngineConfigError(Exception):
    """A configuration that cannot be changed safely; `where` names the file or option."""

    def __init__(self, what: str, where: str | None = None):
        super().__init__(what)
        self.what = what
        self.where = where

    def __str__(self) -> str:
        return what_where(self.what, self.where)


@dataclass(frozen=True)
class RuntimeRequest:
    """What the user asked for, independent of the engine."""

    name: str = "nvidia"
    runtime_path: str = f"{SYSTEM_BIN_DIR}/{RUNTIME_EXECUTABLE}"
    hook_path: str = f"{SYSTEM_BIN_DIR}/{HOOK_EXECUTABLE}"
    set_as_default: bool = False
    enable_cdi: bool = False


@dataclass
class FileChange:
    """One file's text before and after; None means the file does not exist (or is to be deleted)."""

    path: str
    before: str | None
    after: str | None
    # bookkeeping files (undo records) are written and removed with the plan but not shown in diffs
    show_diff: bool = True
    # the mode of a file this creates (an existing file keeps its own)
    mode: int = 0o644

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        if not self.changed:
            return ""
        before = (self.before or "").splitlines(keepends=True)
        after = (self.after or "").splitlines(keepends=True)
        lines = difflib.unified_diff(
            before, after,
            fromfile=printable(self.path) if self.before is not None else "/dev/null",
            tofile=printable(self.path) if self.after is not None else "/dev/null",
        )
        # difflib leaves a last line without "\n" unterminated; a diff must stay line-oriented
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


# Appended to a permission error of a non-root run: the engines' configs are root's files.
RUN_AS_ROOT = "; run as root (sudo nvidia-ctk ...)"


@dataclass
class Plan:
    """The changes one `runtime configure` run makes, in the order they must be written."""

    engine: str
    changes: list[FileChange] = field(default_factory=list)
    # the daemon that must be restarted to read the new configuration, None when none needs it
    restart: str | None = None
    # True when reloading that daemon (SIGHUP, `systemctl reload`) is enough: it re-reads the changed
    # keys in place and its running containers keep running
    reload_enough: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def pending(self) -> list[FileChange]:
        return [c for c in self.changes if c.changed]

    def diff(self) -> str:
        parts = []
        for change in self.pending:
            if change.show_diff:
                parts.append(change.diff())
            else:
                verb = "delete" if change.after is None else "write"
                parts.append(f"# would also {verb} {printable(change.path)} (undo record for --remove)\n")
        return "".join(parts)


def read_config_text(path: str) -> str | None:
    """The file's text, or None when it does not exist; read as every config file is
    (cdi.regular_file.read_config_file: bounded, a symlink followed to a regular file only, never
    blocking). Anything else unreadable is an error."""
    try:
        read = read_config_file(path)
        return None if read is None else config_text(read[0], path)
    except ConfigError as exc:
        denied = exc.what.endswith(os.strerror(errno.EACCES)) and os.geteuid() != 0
        raise EngineConfigError(exc.what + (RUN_AS_ROOT if denied else ""), exc.where) from None


def parse_json(text: str, path: str) -> object:
    """json.loads(text); an invalid or too deeply nested document is an EngineConfigError naming path."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineConfigError(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", path) from None
    except RecursionError:
        raise EngineConfigError("invalid JSON: nested too deeply", path) from None


def _put(path: str, text: str | None, mode: int) -> None:
    if text is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    else:
        write_atomically(path, text, mode)


def apply_plan(plan: Plan) -> list[str]:
    """Write every pending change in order; on failure restore what was already written. Returns the paths."""
    done: list[FileChange] = []
    failed = None
    try:
        for failed in plan.pending:
            _put(failed.path, failed.after, failed.mode)
            done.append(failed)
    except OSError as exc:
        for change in reversed(done):
            try:
                _put(change.path, change.before, change.mode)
            except OSError:
                pass  # the first error is the one to report
        # the file the user named, not the temp file beside it whose creation failed
        what = f"cannot write config: {exc.strerror or exc}"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and os.geteuid() != 0:
            what += RUN_AS_ROOT
        raise EngineConfigError(what, failed.path) from None
    return [c.path for c in done]


def find_program(name: str, next_to: list[str] | tuple[str, ...] = ()) -> str:
    """Absolute path of name: beside nvidia-ctk first (a virtualenv or /usr/bin), then PATH, then /usr/bin."""
    for directory in next_to:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    found = shutil.which(name)
    return os.path.abspath(found) if found else f"{SYSTEM_BIN_DIR}/{name}"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

