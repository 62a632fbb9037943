"""Docker: merge the runtime into daemon.json, keeping every other key, the key order and the indentation.

Only the keys that change are edited in the file's text (json_text.py); every other byte stays.

daemon.json is the user's file and JSON has no comments, and dockerd refuses unknown keys, so what
`configure` changed is kept in an undo record beside it (`daemon.json.nvidia-ctk-undo.json`): the
original text, a hash of what was written and, per key, the value it replaced. `--remove` then writes
the original bytes back when the file is still exactly what was written, and otherwise undoes key by
key, leaving any key the user changed since. Without a record (a file configured by another tool) it
removes `runtimes.<name>` and a `default-runtime` naming it, as NVIDIA's tool does.
"""
from __future__ import annotations

import json
from typing import Any

from runtime_shim.engine_config.common import (
    EngineConfigError,
    FileChange,
    Plan,
    RuntimeRequest,
    parse_json,
    read_config_text,
    sha256_text,
)
from runtime_shim.engine_config.json_text import JsonTextEditor

DEFAULT_CONFIG = "/etc/docker/daemon.json"
UNDO_SUFFIX = ".nvidia-ctk-undo.json"
DEFAULT_INDENT = "    "

# The daemon.json keys dockerd re-reads on SIGHUP (`systemctl reload docker`) without stopping anything
# (its daemon reload: runtimes and default-runtime, among others; `features` only at a start).
RELOADABLE_KEYS = frozenset({"runtimes", "default-runtime"})

_MISSING = object()
Key = tuple[str, ...]


def undo_record_path(config_path: str) -> str:
    return config_path + UNDO_SUFFIX


def load_daemon_json(text: str | None, path: str) -> dict:
    if text is None or not text.strip():
        return {}
    obj = parse_json(text, path)
    if not isinstance(obj, dict):
        raise EngineConfigError("invalid daemon.json: the top level must be a JSON object", path)
    return obj


def detect_indent(text: str | None) -> str | None:
    """The file's indentation unit (first indented line), None for a one-line file."""
    if text is None or not text.strip():
        return DEFAULT_INDENT
    for line in text.splitlines()[1:]:
        body = line.lstrip(" \t")
        if body and body != line:
            return line[: len(line) - len(body)]
    return None


def render_daemon_json(obj: dict, like: str | None) -> str:
    out = json.dumps(obj, indent=detect_indent(like), ensure_ascii=False)
    keeps_newline = like is None or not like.strip() or like.endswith("\n")
    return out + "\n" if keeps_newline else out


def _get(obj: Any, key: Key) -> Any:
    for part in key:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _set(obj: dict, key: Key, value: Any, path: str) -> None:
    for i, part in enumerate(key[:-1]):
        child = obj.setdefault(part, {})
        if not isinstance(child, dict):
            raise EngineConfigError(f"`{'.'.join(key[: i + 1])}` in daemon.json is not a JSON object", path)
        obj = child
    obj[key[-1]] = value


def _delete(obj: dict, key: Key) -> None:
    parent = _get(obj, key[:-1]) if len(key) > 1 else obj
    if isinstance(parent, dict):
        parent.pop(key[-1], None)


class _TextEdits:
    """Mirrors each change made to the parsed document in the file's text, so untouched keys keep their bytes."""

    def __init__(self, obj: dict, text: str | None):
        self.obj = obj
        self.original = text
        self.editor = JsonTextEditor(text, detect_indent(text)) if text is not None and text.strip() else None

    def set(self, key: Key, value: Any, path: str) -> None:
        missing = next((key[:d] for d in range(1, len(key) + 1) if _get(self.obj, key[:d]) is _MISSING), None)
        _set(self.obj, key, value, path)
        if self.editor is not None:
            edited = missing or key  # a new object is written whole at the first level that did not exist
            self.editor.set(edited, _get(self.obj, edited))

    def delete(self, key: Key) -> None:
        _delete(self.obj, key)
        if self.editor is not None:
            self.editor.delete(key)

    def text(self) -> str:
        if self.editor is not None:
            try:
                if json.loads(self.editor.text) == self.obj:
                    return self.editor.text
            except (json.JSONDecodeError, RecursionError):
                pass
            # never write something other than the document meant: fall back to re-dumping it
        return render_daemon_json(self.obj, self.original)


def _desired_values(obj: dict, request: RuntimeRequest) -> dict[Key, Any]:
    entry = _get(obj, ("runtimes", request.name))
    runtime = dict(entry) if isinstance(entry, dict) else {}
    runtime["path"] = request.runtime_path
    runtime.setdefault("args", [])
    wanted: dict[Key, Any] = {("runtimes", request.name): runtime}
    if request.set_as_default:
        wanted[("default-runtime",)] = request.name
    if request.enable_cdi:
        wanted[("features", "cdi")] = True
    return wanted


def _reload_enough(before: str | None, after: str | None) -> bool:
    """Whether every top-level key that differs between the two daemon.json texts is one dockerd reloads."""
    try:
        old = json.loads(before) if before else {}
        new = json.loads(after) if after else {}
    except (json.JSONDecodeError, RecursionError):
        return False
    if not isinstance(old, dict) or not isinstance(new, dict):
        return False
    changed = {key for key in old.keys() | new.keys() if old.get(key, _MISSING) != new.get(key, _MISSING)}
    return changed <= RELOADABLE_KEYS


def _load_record(config_path: str) -> tuple[str | None, dict | None]:
    text = read_config_text(undo_record_path(config_path))
    if text is None:
        return None, None
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError):   # not ours: --remove undoes key by key
        return text, None
    if not isinstance(record, dict) or not isinstance(record.get("changes"), list):
        return text, None
    return text, record


def _record_text(config_path: str, original: dict | None, written: str, changes: list[dict]) -> str:
    record = {
        "note": "written by `nvidia-ctk runtime configure`; `--remove` uses it to undo exactly its changes",
        "config": config_path,
        "original": original,
        "written_sha256": sha256_text(written),
        "changes": changes,
    }
    return json.dumps(record, indent=2, ensure_ascii=False) + "\n"


def _is_prefix(short: list, long: list) -> bool:
    return len(short) <= len(long) and list(long[: len(short)]) == list(short)


def plan_configure(config_path: str, request: RuntimeRequest) -> Plan:
    text = read_config_text(config_path)
    obj = load_daemon_json(text, config_path)
    edits = _TextEdits(obj, text)
    record_text, record = _load_record(config_path)
    changes: list[dict] = list(record["changes"]) if record else []

    for key, value in _desired_values(obj, request).items():
        if _get(obj, key) == value:
            continue
        # remember the shallowest key this creates (so undo removes `features`, not just `features.cdi`,
        # when there was no `features`), or the value it replaces
        entry: dict = {"key": list(key), "before": _get(obj, key)}
        for depth in range(1, len(key) + 1):
            if _get(obj, key[:depth]) is _MISSING:
                entry = {"key": list(key[:depth]), "absent": True}
                break
        if not any(_is_prefix(old["key"], entry["key"]) for old in changes):
            changes = [old for old in changes if not _is_prefix(entry["key"], old["key"])] + [entry]
        edits.set(key, value, config_path)

    new_text = edits.text()
    plan = Plan("docker", restart="docker")
    if new_text == text:
        return plan
    for entry in changes:
        entry["after"] = _get(obj, tuple(entry["key"]))

    if record is not None and text is not None and record.get("written_sha256") == sha256_text(text):
        original = record.get("original")  # still the file we wrote: its original is still known
    elif record is None:
        original = {"text": text} if text is not None else {"absent": True}
    else:
        original = None  # edited by hand since: only the per-key undo is trustworthy
    plan.changes.append(FileChange(config_path, text, new_text))
    plan.reload_enough = _reload_enough(text, new_text)
    plan.changes.append(FileChange(undo_record_path(config_path), record_text,
                                   _record_text(config_path, original, new_text, changes), show_diff=False,
                                   mode=0o600))  # it holds a copy of the user's config: root's eyes only
    return plan


def plan_remove(config_path: str, request: RuntimeRequest) -> Plan:
    text = read_config_text(config_path)
    record_text, record = _load_record(config_path)
    plan = Plan("docker", restart="docker")

    original = record.get("original") if record else None
    if record and text is not None and record.get("written_sha256") == sha256_text(text) \
            and isinstance(original, dict):
        # untouched since configure: put the user's bytes back exactly
        plan.changes.append(FileChange(config_path, text, None if original.get("absent") else original.get("text")))
        plan.reload_enough = _reload_enough(text, plan.changes[-1].after)
        plan.changes.append(FileChange(undo_record_path(config_path), record_text, None, show_diff=False))
        return plan

    obj = load_daemon_json(text, config_path)
    edits = _TextEdits(obj, text)
    if record:
        for entry in reversed(record["changes"]):
            key = tuple(entry["key"])
            current = _get(obj, key)
            if current == entry.get("after"):
                if entry.get("absent"):
                    edits.delete(key)
                else:
                    edits.set(key, entry.get("before"), config_path)
            elif current != (_MISSING if entry.get("absent") else entry.get("before")):
                plan.notes.append(f"left `{'.'.join(key)}` as it is: it was changed after configure")
    else:
        if record_text is not None:
            plan.notes.append(f"ignored an unreadable undo record ({undo_record_path(config_path)})")
        runtimes = obj.get("runtimes")
        if isinstance(runtimes, dict) and request.name in runtimes:
            edits.delete(("runtimes", request.name))
            if not runtimes:
                edits.delete(("runtimes",))
        if obj.get("default-runtime") == request.name:
            edits.delete(("default-runtime",))

    new_text = edits.text() if text is not None else None
    if new_text is not None and not obj and isinstance(original, dict) and original.get("absent"):
        new_text = None  # configure created the file
    if text is not None and new_text != text:
        plan.changes.append(FileChange(config_path, text, new_text))
        plan.reload_enough = _reload_enough(text, new_text)
    if record_text is not None:
        plan.changes.append(FileChange(undo_record_path(config_path), record_text, None, show_diff=False))
    return plan
