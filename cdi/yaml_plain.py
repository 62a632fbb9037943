"""A spec document as the very YAML text cdi.spec_yaml (PyYAML) writes, without importing PyYAML, for
documents whose every scalar is plain text that needs no quoting; None for any other document.

Why: importing PyYAML costs ~9 ms and dumping an 8-GPU spec through it ~15 ms, a fifth of `nvidia-ctk cdi
generate`. A generated spec holds paths, KEY=VALUE entries, option words, hook arguments and small
integers, all of which PyYAML writes plain, so its text is simple to produce. Anything this module cannot
prove PyYAML would write the same way (a character outside a small safe set, a word YAML 1.1 reads as a
bool, null or number, an empty list, a list in a list, a long key) makes it return None, and the caller
asks PyYAML. tests/unit/cdi/test_yaml_plain.py holds the two to the same bytes on real and fuzzed specs.

The layout is PyYAML's block style (indent 2, a list at its key's indent, `- ` before an item's first
key), with the values of `name` keys double-quoted, as cdi.spec_yaml._quote_names has them written
(device names such as 0 and 1:0 must stay strings).
"""
from __future__ import annotations

# characters a plain scalar may hold here: none is a YAML indicator in block context, none needs escaping
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:+-")
# every character YAML 1.1's int, float and timestamp forms can hold (a superset): text starting like
# a number is plain only with some other character in it
_NUMBERISH = frozenset("0123456789_.:+-eEinfINFaAbBcdCDxXoOTtZz")
_DOTTED = frozenset("0123456789.")
# YAML 1.1 bools and null (PyYAML's resolver), compared case-blind: a superset again
_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})
_MAX_KEY = 128     # PyYAML writes a longer mapping key in the explicit `? key` form
_MAX_QUOTED = 1000  # a double-quoted scalar is never folded this far below the width of 4096


def _plain(text: str) -> bool:
    """Would PyYAML write this string plain, and would a YAML 1.1 reader read it back as a string?"""
    if not text or not _SAFE.issuperset(text) or text.endswith(":") or text[0] in ":=":
        return False
    if text.startswith(("---", "...")) or text == "-":
        return False
    first = text[0]
    if first in "-+0123456789.":
        # each YAML 1.1 number holds at most one '.' and a timestamp a '-': 0.5.0 and 550.54.15 are text
        dotted = first.isdigit() and text.count(".") >= 2 and _DOTTED.issuperset(text)
        return dotted or not _NUMBERISH.issuperset(text)
    if first in "yYnNtTfFoO":
        return text.lower() not in _WORDS
    return True


def _scalar(value: object, key: str | None) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is not str:
        return None
    if key == "name":  # cdi.spec_yaml._QuotedName: always double-quoted
        if len(value) > _MAX_QUOTED or not _SAFE.issuperset(value) or not value:
            return None
        return f'"{value}"'
    return value if _plain(value) else None


class _NotPlain(Exception):
    pass


def _mapping(document: dict, indent: int, out: list[str], first_prefix: str | None = None) -> None:
    if not document:
        raise _NotPlain
    pad = " " * indent
    for i, (key, value) in enumerate(document.items()):
        if type(key) is not str or len(key) > _MAX_KEY or not _plain(key):
            raise _NotPlain
        prefix = first_prefix if i == 0 and first_prefix is not None else pad
        if isinstance(value, dict):
            out.append(f"{prefix}{key}:\n")
            _mapping(value, indent + 2, out)
        elif isinstance(value, list):
            out.append(f"{prefix}{key}:\n")
            _sequence(value, indent, out, key if key != "devices" else None)
        else:
            text = _scalar(value, key)
            if text is None:
                raise _NotPlain
            out.append(f"{prefix}{key}: {text}\n")


def _sequence(items: list, indent: int, out: list[str], key: str | None) -> None:
    if not items:
        raise _NotPlain
    pad = " " * indent
    for item in items:
        if isinstance(item, dict):
            _mapping(item, indent + 2, out, first_prefix=f"{pad}- ")
        elif isinstance(item, list):
            raise _NotPlain
        else:
            text = _scalar(item, key)
            if text is None:
                raise _NotPlain
            out.append(f"{pad}- {text}\n")


def dump_plain_yaml(document: dict) -> str | None:
    """cdi.spec_yaml.dump_yaml_document(document), or None where this module cannot be sure of it."""
    out: list[str] = []
    try:
        _mapping(document, 0, out)
    except (_NotPlain, RecursionError):
        return None
    return "".join(out)
