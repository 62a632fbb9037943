"""A compiled form of cdi/schema.json that answers one question fast: is this document valid?

jsonschema stays the authority and the only source of problem reports: importing it and building its
validator costs 40-60 ms, more than everything else `nvidia-ctk cdi generate` does, while the spec it
checks is almost always valid. So the schema file is compiled here into closures that say valid or not
valid, and only a document they do not pass goes to jsonschema (cdi.validate), which then names every
problem as before. A yes from here must mean jsonschema finds nothing; a no costs only time.

The rules are the schema file's, never written here: this module knows what each JSON Schema keyword
means (draft 2020-12, as jsonschema implements it), for the keywords the file uses. A keyword it does not
know, a `$ref` other than `#/$defs/NAME`, or a value of a type JSON cannot hold makes it step aside
(`compile_schema` returns None, or a check raises Unsure), and jsonschema decides alone. The tests hold
the two to the same verdict on real specs and on fuzzed ones (tests/unit/cdi/test_schema_check.py).
"""
from __future__ import annotations

import re
from collections.abc import Callable

Check = Callable[[object], bool]

# keywords that only annotate: they never change a verdict
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description", "default",
                          "examples", "deprecated", "readOnly", "writeOnly"})
_JSON_SCALARS = (str, int, float, bool, type(None))


class Unsupported(Exception):
    """The schema uses something this compiler does not implement: jsonschema alone decides."""


class Unsure(Exception):
    """The document holds a value no JSON parser makes (e.g. a Decimal): jsonschema alone decides."""


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if isinstance(value, (str, list, dict, type(None))):
        return False
    raise Unsure(type(value).__name__)


_TYPES: dict[str, Check] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _is_number,
    # draft 6 on: 1.0 is an integer
    "integer": lambda v: _is_number(v) and (isinstance(v, int) or v.is_integer()),
}


class _Compiler:
    def __init__(self, root: dict):
        self.root = root
        self.defs = root.get("$defs") or {}
        self.compiled: dict[str, Check] = {}

    def ref(self, ref: object) -> Check:
        if not (isinstance(ref, str) and ref.startswith("#/$defs/")):
            raise Unsupported(f"$ref {ref!r}")
        name = ref[len("#/$defs/"):]
        if "/" in name or "~" in name or name not in self.defs:
            raise Unsupported(f"$ref {ref!r}")
        if name not in self.compiled:
            self.compiled[name] = lambda v: self.compiled[name](v)  # a cycle sees the finished check
            self.compiled[name] = self.schema(self.defs[name])
        return lambda v: self.compiled[name](v)

    def schema(self, schema: object) -> Check:
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        if not isinstance(schema, dict):
            raise Unsupported(f"schema {schema!r}")
        if "$id" in schema and schema is not self.root:  # a new base for the $refs below it
            raise Unsupported("$id below the root")
        return _all_of([self.keyword(key, value, schema) for key, value in schema.items()
                        if key not in _ANNOTATIONS])

    def keyword(self, key: str, value: object, schema: dict) -> Check:
        if key == "$ref":
            return self.ref(value)
        compile_keyword = getattr(self, "kw_" + key, None) if key.isalnum() else None
        if compile_keyword is None:
            raise Unsupported(f"keyword {key!r}")
        return compile_keyword(value, schema)

    # --- each keyword as jsonschema's _keywords.py applies it -----------------------------------------

    def kw_type(self, types, schema):
        names = types if isinstance(types, list) else [types]
        if not all(name in _TYPES for name in names):
            raise Unsupported(f"type {types!r}")
        if len(names) == 1:
            return _TYPES[names[0]]
        checks = [_TYPES[name] for name in names]
        return lambda v: any(c(v) for c in checks)

    def kw_enum(self, values, schema):
        if not (isinstance(values, list) and all(type(e) is str for e in values)):
            raise Unsupported("enum of anything but strings")  # jsonschema's equal() has more cases
        allowed = frozenset(values)
        return lambda v: isinstance(v, str) and v in allowed

    def kw_pattern(self, pattern, schema):
        if not isinstance(pattern, str):
            raise Unsupported(f"pattern {pattern!r}")
        search = _lazy_search(pattern)
        return lambda v: not isinstance(v, str) or search(v)

    def kw_minLength(self, n, schema):
        _need_count(n)
        return lambda v: not isinstance(v, str) or len(v) >= n

    def kw_maxLength(self, n, schema):
        _need_count(n)
        return lambda v: not isinstance(v, str) or len(v) <= n

    def kw_minItems(self, n, schema):
        _need_count(n)
        return lambda v: not isinstance(v, list) or len(v) >= n

    def kw_minimum(self, n, schema):
        if not _is_number(n):
            raise Unsupported(f"minimum {n!r}")
        return lambda v: not _is_number(v) or v >= n

    def kw_maximum(self, n, schema):
        if not _is_number(n):
            raise Unsupported(f"maximum {n!r}")
        return lambda v: not _is_number(v) or v <= n

    def kw_required(self, names, schema):
        if not (isinstance(names, list) and all(type(n) is str for n in names)):
            raise Unsupported(f"required {names!r}")
        return lambda v: not isinstance(v, dict) or all(name in v for name in names)

    def kw_properties(self, properties, schema):
        if not isinstance(properties, dict):
            raise Unsupported(f"properties {properties!r}")
        checks = [(name, self.schema(sub)) for name, sub in properties.items()]

        def check(v):
            if isinstance(v, dict):
                for name, c in checks:
                    if name in v and not c(v[name]):
                        return False
            return True
        return check

    def kw_additionalProperties(self, extra, schema):
        if "patternProperties" in schema:
            raise Unsupported("patternProperties")
        known = frozenset(schema.get("properties") or ())
        check_extra = self.schema(extra)

        def check(v):
            if isinstance(v, dict):
                for k in v:
                    if k not in known and not check_extra(v[k]):
                        return False
            return True
        return check

    def kw_propertyNames(self, names, schema):
        check = self.schema(names)
        return lambda v: not isinstance(v, dict) or all(check(k) for k in v)

    def kw_items(self, items, schema):
        if "prefixItems" in schema:
            raise Unsupported("prefixItems")
        check_item = self.schema(items)

        def check(v):
            if isinstance(v, list):
                for item in v:
                    if not check_item(item):
                        return False
            return True
        return check

    def kw_allOf(self, subschemas, schema):
        if not isinstance(subschemas, list):
            raise Unsupported(f"allOf {subschemas!r}")
        return _all_of([self.schema(s) for s in subschemas])

    def kw_anyOf(self, subschemas, schema):
        if not isinstance(subschemas, list):
            raise Unsupported(f"anyOf {subschemas!r}")
        checks = [self.schema(s) for s in subschemas]
        return lambda v: any(c(v) for c in checks)


def _all_of(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def check(v):
        for c in checks:
            if not c(v):
                return False
        return True
    return check


def _need_count(n: object) -> None:
    if type(n) is not int or n < 0:
        raise Unsupported(f"a count of {n!r}")


def _lazy_search(pattern: str) -> Check:
    """re.search(pattern, text), as jsonschema's `pattern` keyword, compiled on first use: a spec that
    never holds a field does not pay for its pattern."""
    compiled = None

    def search(text: str) -> bool:
        nonlocal compiled
        if compiled is None:
            compiled = re.compile(pattern)
        return compiled.search(text) is not None
    return search


def compile_schema(schema: dict) -> Check | None:
    """A function document -> bool (True: jsonschema would find no problem), or None if the schema uses
    something not implemented here."""
    try:
        check = _Compiler(schema).schema(schema)
    except (Unsupported, TypeError, ValueError, RecursionError):  # a schema jsonschema must judge alone
        return None

    def is_valid(document: object) -> bool:
        try:
            return check(document)
        except Exception:  # noqa: BLE001 - Unsure, a document too deep, a pattern re refuses: jsonschema decides
            return False
    return is_valid
