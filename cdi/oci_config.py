"""The shape of a container's config.json, checked before anything reads it.

config.json is valid JSON when we get it, but nothing says its members have the types the OCI spec
gives them (`"linux": "x"`, a list as a mount's destination): the runtime shim and the prestart hook
would then fail somewhere inside with a TypeError. So every member they read (SHAPE below: the
request's env, capabilities, mounts and annotations; what cdi.apply and the shim's modes edit: linux
devices and resources, hooks, the process user) is held to its type first, and a wrong one is one
line naming the member: `config.json: "linux" is not an object (linux)`. `null` is an absent member, as
Go's encoding/json (runc) reads it. Members nobody reads are not looked at, except that the whole
document is walked once (iteratively) for two things no later step could handle: nesting deeper than
MAX_DEPTH (copying and writing the document back recurse) and a lone surrogate in a string or key
(`"\\ud800"`, which json reads and UTF-8 cannot write; no engine writes one: Go's encoder never does).
"""
from __future__ import annotations

from cdi.errors import CdiError

MAX_DEPTH = 256   # levels of objects and lists; an OCI config.json has about 6

# a member's shape: a type, or (list, item shape), or (dict, {member: shape}), or (dict, shape of every value).
# Members not named are not looked at (Go ignores unknown ones too).
STR, INT = str, int
STRS = (list, str)
# a uid or gid: an integer runc can take (Go's uint32); NaN and 1e3 are not integers to begin with
ID = (int, range(0, 1 << 32))
HOOK = (dict, {"path": STR, "args": STRS, "env": STRS, "timeout": INT})
SHAPE = (dict, {
    "process": (dict, {
        "env": STRS,
        "capabilities": (dict, {"bounding": STRS}),
        "user": (dict, {"uid": ID, "gid": ID, "additionalGids": (list, ID)}),
    }),
    "mounts": (list, (dict, {"destination": STR, "source": STR, "type": STR, "options": STRS})),
    "annotations": (dict, STR),
    "root": (dict, {"path": STR}),
    "hooks": (dict, {name: (list, HOOK) for name in ("prestart", "createRuntime", "createContainer",
                                                      "startContainer", "poststart", "poststop")}),
    "linux": (dict, {
        "devices": (list, (dict, {"path": STR})),
        "resources": (dict, {"devices": (list, dict)}),
        "intelRdt": dict,
        "netDevices": dict,
    }),
})
_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
_SCALARS = (str, int)
_CONTAINERS = frozenset({dict, list})


class OciConfigError(CdiError):
    """A container's config.json whose members do not have the shape the OCI spec gives them."""


def check_config_json(document: object, raw: bytes | None = None) -> None:
    """Raise OciConfigError for the first member of document (a parsed config.json) that has the wrong
    type, for nesting deeper than MAX_DEPTH, or for a lone surrogate anywhere. raw, the bytes document
    was parsed from, saves looking at every string: strict UTF-8 cannot carry a surrogate, so only a
    \\uD800-\\uDFFF escape in the text can make one (Go's encoder never writes one)."""
    strings = raw is None or b"\\ud" in raw or b"\\uD" in raw
    # no deeper than the text has brackets: docker's config.json has ~150, so the walk is mostly skipped
    if strings or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        _check_walk(document, strings)
    _check_shape(document, SHAPE, "config.json", "")


def _check_shape(value: object, shape: object, name: str, where: str) -> None:
    kind, inner = shape if isinstance(shape, tuple) else (shape, None)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        what = f'"{name}" is' if not name.endswith("]") else f'an item of "{name.partition("[")[0]}" is'
        raise OciConfigError(f"config.json: {what if where else 'the document is'} not {_KINDS[kind]}", where or "$")
    if inner is None:
        return
    if isinstance(inner, range):
        if value not in inner:
            what = f'"{name}"' if not name.endswith("]") else f'an item of "{name.partition("[")[0]}"'
            raise OciConfigError(f"config.json: {what} is not an id from {inner.start} to {inner.stop - 1}", where)
        return
    if kind is list:
        if inner in _SCALARS and set(map(type, value)) <= {inner}:   # the usual case, tested in C
            return
        for i, item in enumerate(value):
            _check_shape(item, inner, f"{name}[{i}]", f"{where}[{i}]")
    elif isinstance(inner, dict):
        for key, member_shape in inner.items():
            member = value.get(key)
            if member is not None:
                _check_shape(member, member_shape, key, f"{where}.{key}" if where else key)
    else:   # every value of a map (annotations: strings)
        if set(map(type, value.values())) <= {inner}:
            return
        for key, member in value.items():
            _check_shape(member, inner, key, f"{where}.{key}")


def _check_walk(document: object, strings: bool) -> None:
    """Depth (and with strings, every string and key) of the whole document, without recursion."""
    if strings and isinstance(document, str):
        _check_text(document, "$")
    stack = [(document, 1, "")] if isinstance(document, (dict, list)) else []
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise OciConfigError(f"config.json: nested deeper than {MAX_DEPTH} levels", where)
        # the path is spelled out for the first levels only (a deep document would build long strings)
        named = depth <= 8
        members = value.values() if type(value) is dict else value
        if not strings and _CONTAINERS.isdisjoint(map(type, members)):
            continue   # only scalars below: nothing deeper (the test runs in C, for docker's long lists)
        for key, member in (value.items() if type(value) is dict else enumerate(value)):
            kind = type(member)
            if kind is dict or kind is list:
                if named:
                    at = f"{where}[{key}]" if type(key) is int else (f"{where}.{key}" if where else key)
                else:
                    at = where
                stack.append((member, depth + 1, at))
            elif strings and kind is str:
                _check_text(member, f"{where}[{key}]" if type(key) is int else (f"{where}.{key}" if where else key))
            if strings and type(key) is str:
                _check_text(key, where or "$")


def _check_text(text: str, where: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise OciConfigError("config.json: a string holds a lone surrogate", where or "$") from None
