"""Edit one key of a JSON document in its text, leaving every other byte as the user wrote it.

Re-dumping daemon.json would reflow every array and object the user kept on one line. Instead each
edit finds the member's span in the text (the stdlib decoder reports where each value ends) and
replaces, inserts or deletes only that member; a new member copies the indentation of its siblings.
Documents are small, so every edit re-scans from the start.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


@dataclass
class _Member:
    key: str
    key_start: int
    value_start: int
    value_end: int


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _members(text: str, open_pos: int) -> tuple[list[_Member], int]:
    """The members of the object whose `{` is at open_pos, and the position of its `}`."""
    members: list[_Member] = []
    i = _skip(text, open_pos + 1)
    if text[i] == "}":
        return members, i
    while True:
        key, after_key = _DECODER.raw_decode(text, i)
        colon = _skip(text, after_key)
        value_start = _skip(text, colon + 1)
        _, value_end = _DECODER.raw_decode(text, value_start)
        members.append(_Member(key, i, value_start, value_end))
        i = _skip(text, value_end)
        if text[i] == "}":
            return members, i
        i = _skip(text, i + 1)  # the comma


def _line_indent(text: str, pos: int) -> str | None:
    """The whitespace before pos on its line, None when something else precedes it on that line."""
    line_start = text.rfind("\n", 0, pos) + 1
    prefix = text[line_start:pos]
    return prefix if prefix.strip(_WS) == "" else None


class JsonTextEditor:
    def __init__(self, text: str, indent_unit: str | None):
        self.text = text
        self.unit = indent_unit  # None: a one-line document

    def _render(self, value: Any, base: str | None) -> str:
        """value as JSON; one line when the surroundings are one line (base None)."""
        if self.unit is None or base is None:
            return json.dumps(value, ensure_ascii=False)
        dumped = json.dumps(value, indent=self.unit, ensure_ascii=False)
        return dumped.replace("\n", "\n" + base)

    def _find(self, path: tuple[str, ...]) -> tuple[int, list[_Member], int, _Member | None]:
        """(open pos, members, close pos) of the object holding path[-1], and that member if present.
        Every object along path[:-1] must exist and be an object."""
        open_pos = _skip(self.text, 0)
        for part in path[:-1]:
            members, _ = _members(self.text, open_pos)
            member = next(m for m in reversed(members) if m.key == part)
            open_pos = member.value_start
        members, close = _members(self.text, open_pos)
        found = next((m for m in reversed(members) if m.key == path[-1]), None)  # last one wins in JSON
        return open_pos, members, close, found

    def set(self, path: tuple[str, ...], value: Any) -> None:
        """Set path to value; every object along path[:-1] must exist already."""
        open_pos, members, close, found = self._find(path)
        if found is not None:
            base = _line_indent(self.text, found.key_start)
            old_value = self.text[found.value_start:found.value_end]
            if "\n" not in old_value and old_value[:1] in "{[":
                base = None  # the user wrote this value on one line: keep it so
            self.text = self.text[:found.value_start] + self._render(value, base) + self.text[found.value_end:]
            return
        key = json.dumps(path[-1], ensure_ascii=False)
        if members:
            last = members[-1]
            base = _line_indent(self.text, last.key_start)
            if base is None or self.unit is None:
                insert = f", {key}: {self._render(value, None)}"
            else:
                insert = f",\n{base}{key}: {self._render(value, base)}"
            self.text = self.text[:last.value_end] + insert + self.text[last.value_end:]
            return
        if self.unit is None:
            inner = f"{key}: {self._render(value, None)}"
        else:
            # an empty object: indent one unit more than the line its `{` is on
            line_start = self.text.rfind("\n", 0, open_pos) + 1
            line = self.text[line_start:open_pos]
            outer = line[: len(line) - len(line.lstrip(" \t"))]
            base = outer + self.unit
            inner = f"\n{base}{key}: {self._render(value, base)}\n{outer}"
        self.text = self.text[:open_pos + 1] + inner + self.text[close:]

    def delete(self, path: tuple[str, ...]) -> None:
        _, members, close, found = self._find(path)
        if found is None:
            return
        index = members.index(found)
        if index > 0:
            start, end = members[index - 1].value_end, found.value_end
        elif index + 1 < len(members):
            start, end = found.key_start, members[index + 1].key_start
        else:
            start, end = self.text.rfind("{", 0, found.key_start) + 1, close
        self.text = self.text[:start] + self.text[end:]
