"""CDI specs as YAML, with names always strings (docs/reference.md#cdi-yaml).

PyYAML's safe_load follows YAML 1.1: an unquoted `name: 1:0` becomes the integer 60 (base 60),
`0` becomes 0 and `on` becomes True. Other CDI tools read YAML type-directed (a field of type string
keeps the scalar's text), so we do the same: plain scalars are loaded as text, then typed by the
field they sit in (integers for major/minor/..., booleans for intelRdt flags, strings everywhere
else). Anything else a plain scalar could be under YAML 1.2 (null, bool, int, float) is resolved
so that the schema can reject it where it does not belong.

Writing quotes every string whose plain form a YAML 1.1 reader would not read back as that same
string, and always quotes device names. PyYAML is imported only here.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

from cdi.errors import SpecError

INT_FIELDS = frozenset({"major", "minor", "fileMode", "uid", "gid", "timeout"})
INT_LIST_FIELDS = frozenset({"additionalGids"})
BOOL_FIELDS = frozenset({"enableCMT", "enableMBM"})
STRING_LIST_FIELDS = frozenset({"env", "args", "options"})
# mappings whose values are free text, whatever they look like
TEXT_MAP_FIELDS = frozenset({"annotations"})

_PLAIN = "tag:cdi.invalid,2024:plain"
# what a CDI spec can hold, which is what JSON can: any other tag (!!binary, !!timestamp, !!set, !!omap,
# !!pairs, !!merge, local ones) is refused where it stands
_JSON_TAGS = frozenset({_PLAIN} | {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null",
                                                                           "map", "seq")})

# YAML 1.2 core schema
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
# bounded: longer digit strings stay text (Python refuses to convert > 4300 digits, the schema then says why)
_INT = re.compile(r"^(?:[-+]?[0-9]{1,30}|0o[0-7]{1,30}|0x[0-9a-fA-F]{1,30})$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$")


class PlainScalar(str):
    """The text of an unquoted scalar, typed later by the field it belongs to."""


def _short_tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else repr(tag)


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        # CDI specs have no use for anchors; refusing aliases also rules out "billion laughs" documents
        if self.check_event(yaml.events.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed in CDI specs", mark)
        return super().compose_node(parent, index)

    def construct_object(self, node, deep=False):
        # a tag's constructor fails with whatever Python raises (`!!int /dev/x`: ValueError, `!!bool maybe`:
        # KeyError, an empty `!!int`: IndexError, 5000 digits: ValueError): a YAML error at the node, like
        # every other problem of the text
        if node.tag not in _JSON_TAGS:
            raise yaml.constructor.ConstructorError(None, None, f"tag {_short_tag(node.tag)} is not allowed in CDI "
                                                    "specs", node.start_mark)
        if isinstance(node, yaml.MappingNode):   # JSON's keys are text: `!!int 5: x` and `? [a]` are not
            for key_node, _ in node.value:
                if key_node.tag not in (_PLAIN, "tag:yaml.org,2002:str"):
                    raise yaml.constructor.ConstructorError(None, None, "a mapping key must be text",
                                                            key_node.start_mark)
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, LookupError, OverflowError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise yaml.constructor.ConstructorError(None, None, f"not a {_short_tag(node.tag)}: {problem}",
                                                    node.start_mark) from None


# every plain scalar resolves to our tag (quoted ones stay str); a copy, so SafeLoader is untouched
_Loader.yaml_implicit_resolvers = {}
_Loader.add_implicit_resolver(_PLAIN, re.compile(r"(?s).*"), None)
_Loader.add_constructor(_PLAIN, lambda loader, node: PlainScalar(loader.construct_scalar(node)))


def _parse_int(text: str) -> int:
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _core(value: PlainScalar) -> Any:
    """YAML 1.2 core resolution of a plain scalar in a position that is not a known field."""
    if _NULL.match(value):
        return None
    if value in _BOOL:
        return _BOOL[value]
    if _INT.match(value):
        return _parse_int(value)
    if _FLOAT.match(value):
        return float(value.replace(".inf", "inf").replace(".Inf", "inf").replace(".INF", "inf")
                     .lower().replace(".nan", "nan"))
    return str(value)


def _typed(value: Any, key: str | None) -> Any:
    if isinstance(value, dict):
        # keys are field names or annotation keys: always text
        keys = [str(k) if isinstance(k, PlainScalar) else k for k in value]
        if key in TEXT_MAP_FIELDS:
            return {k: (str(v) if isinstance(v, PlainScalar) else _typed(v, None))
                    for k, v in zip(keys, value.values())}
        return {k: _typed(v, k if isinstance(k, str) else None) for k, v in zip(keys, value.values())}
    if isinstance(value, list):
        item_key = key if key in INT_LIST_FIELDS or key in STRING_LIST_FIELDS else None
        return [_typed(v, item_key) for v in value]
    if not isinstance(value, PlainScalar):
        return value
    if _NULL.match(value):
        return None
    if key in INT_FIELDS or key in INT_LIST_FIELDS:
        return _parse_int(value) if _INT.match(value) else str(value)
    if key in BOOL_FIELDS:
        return _BOOL.get(value, str(value))
    if key is None:
        return _core(value)
    return str(value)  # a known string field (or an unknown key the schema will reject anyway)


def load_yaml_document(text: str | bytes, path: str) -> Any:
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f": line {mark.line + 1} column {mark.column + 1}" if mark else ""   # as json's messages say it
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"invalid YAML: {problem}{at}", path) from None
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", path) from None
    return _typed(raw, None)


# --- writing ---------------------------------------------------------------------------------------

class _QuotedName(str):
    """A string always written double-quoted (device names: `0` and `1:0` must stay strings)."""


# libyaml's emitter when PyYAML has it: the same text, about 5x faster on big specs (cdi generate).
class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    pass


_RESOLVER_1_1 = yaml.resolver.Resolver()


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Quote whenever a YAML 1.1 reader (PyYAML, old Go yaml) would not read the plain text back as it is.
    tag = _RESOLVER_1_1.resolve(yaml.ScalarNode, value, (True, False))
    style = '"' if isinstance(value, _QuotedName) or tag != "tag:yaml.org,2002:str" else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style=style)  # libyaml takes exact str only


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(_QuotedName, _represent_str)


def _quote_names(document: Any, key: str | None = None) -> Any:
    if isinstance(document, dict):
        return {k: _quote_names(v, k) for k, v in document.items()}
    if isinstance(document, list):
        return [_quote_names(v, key if key != "devices" else None) for v in document]
    if key == "name" and isinstance(document, str):
        return _QuotedName(document)
    return document


def dump_yaml_document(document: dict) -> str:
    return yaml.dump(_quote_names(document), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=4096)
