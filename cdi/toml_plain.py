"""A reader for plain config.toml files, without importing tomllib.

tomllib's import costs ~20-25 ms (it brings typing, datetime, re and string), paid by every program
that reads a config.toml it has not kept parsed: `nvidia-container-cli configure` from LXC's hook in
an unprivileged container (the kept documents belong to the host's root, whom a user namespace does
not see as itself), a config named by NVIDIA_CTK_CONFIG_FILE_PATH without a cache dir, the first run
after an edit. The packaged config.toml and the files `nvidia-ctk config` writes use a small part of
TOML, which `loads_plain` reads:

  - blank lines and `#` comments; a `[table.sub]` header of bare keys (defined once);
  - `key = value` with a bare key, the value a string without backslashes ("..." or '...'), true,
    false, a decimal integer, or a one-line array of such strings; a comment may follow.

Anything else (escapes, dotted or quoted keys, floats, dates, inline tables, multi-line values, array
tables, CR, control characters, a duplicate, anything invalid) gives None, and the caller reads the text
with tomllib, which then decides and words every error. So whatever it accepts, tomllib reads the same
(tests/unit/cdi/test_toml_plain.py compares the two on the packaged file and on random mutations of it).
"""
from __future__ import annotations

BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
BLANK = " \t"


def _bare(name: str) -> bool:
    return name != "" and all(c in BARE for c in name)


def _rest_is_comment(rest: str) -> bool:
    rest = rest.lstrip(BLANK)
    return rest == "" or rest[0] == "#"


def _string(text: str):
    """(value, rest) for a plain string at the start of text, else None."""
    if not text or text[0] not in "\"'":
        return None
    end = text.find(text[0], 1)
    if end < 0:
        return None
    value = text[1:end]
    if "\\" in value and text[0] == '"':
        return None            # an escape: tomllib's
    return value, text[end + 1:]


def _integer(text: str):
    digits = text[1:] if text[:1] in "+-" else text
    # beyond 18 digits: tomllib's (TOML's integers are 64-bit; tomllib's own handling of more decides)
    if not digits.isascii() or not digits.isdigit() or (len(digits) > 1 and digits[0] == "0") or len(digits) > 18:
        return None
    return int(text)


def _value(text: str):
    """(value, rest) for the value at the start of text, else None."""
    if text[:1] in ("'", '"'):
        return _string(text)
    if text[:1] == "[":
        items, rest = [], text[1:].lstrip(BLANK)
        while not rest.startswith("]"):
            found = _string(rest)
            if found is None:
                return None
            items.append(found[0])
            rest = found[1].lstrip(BLANK)
            if rest.startswith(","):
                rest = rest[1:].lstrip(BLANK)
            elif not rest.startswith("]"):
                return None
        return items, rest[1:]
    word, _, rest = text.partition("#")
    word = word.rstrip(BLANK)
    rest = text[len(word):]
    if word in ("true", "false"):
        return word == "true", rest
    number = _integer(word)
    return None if number is None else (number, rest)


def loads_plain(text: str) -> dict | None:
    """The document of a plain TOML text (see the module docstring), or None: read it with tomllib."""
    if "\r" in text or text.startswith("\ufeff") or any(c < " " and c not in "\t\n" or c == "\x7f" for c in text):
        return None
    document: dict = {}
    table, defined = document, set()
    for raw in text.split("\n"):
        line = raw.strip(BLANK)
        if line == "" or line[0] == "#":
            continue
        if line[0] == "[":
            end = line.find("]")
            names = line[1:end].split(".") if end > 0 else []
            if line.startswith("[[") or not names or not all(_bare(n) for n in names) \
                    or not _rest_is_comment(line[end + 1:]) or tuple(names) in defined:
                return None
            defined.add(tuple(names))
            table = document
            for name in names:
                table = table.setdefault(name, {})
                if not isinstance(table, dict):
                    return None
            continue
        key, eq, rest = line.partition("=")
        key = key.rstrip(BLANK)
        if not eq or not _bare(key) or key in table:
            return None
        found = _value(rest.lstrip(BLANK))
        if found is None or not _rest_is_comment(found[1]):
            return None
        table[key] = found[0]
    return document
