"""Validation of CDI specs against our strict schema (cdi/schema.json), the one authority on valid CDI.

jsonschema is imported on first use only, for a document that cdi.schema_check (a compiled form of the
same file, which only says valid or not) does not pass: a valid spec, such as the one `cdi generate`
writes, is checked without it. The container start path normally finds a spec in the registry's cache
of already validated files (cdi.registry) and does not even get here. Besides the schema,
two rules a JSON Schema cannot express are checked here: device names are unique within a spec, and
`cdiVersion` is at least the version the content needs (cdi.spec_version).

Every problem names the file, the JSON path and the rule broken, one line each. Reading a spec file
and checking it with these rules is cdi/spec_file.py's.
"""
from __future__ import annotations

import os

from cdi.errors import SpecError, what_where
from cdi.record import Record
from cdi.spec_version import KNOWN_VERSIONS, minimum_version_of, version_key

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.json")
MAX_PROBLEMS_PER_FILE = 50

_schema = None     # schema.json parsed, once per process: both checks below read it, neither changes it
_validator = None
_is_valid = None  # cdi.schema_check's compiled form of the same file: a fast "no problem" verdict


class Problem(Record, frozen=True):  # a Record, not a dataclass: imported on the create path
    file: str
    json_path: str
    rule: str
    message: str

    @property
    def what(self) -> str:
        return f"{self.json_path}: {self.message} [{self.rule}]"

    def __str__(self) -> str:  # the `<what> (<where>)` of the project's error lines
        return what_where(self.what, self.file)


def schema_bytes() -> bytes:
    with open(SCHEMA_PATH, "rb") as f:
        return f.read()


# The rules a spec is held to beyond the schema (cdi.spec's checks), by version: raised whenever they
# come to refuse more, so that a verdict an older version reached is not trusted (2: a lone surrogate).
RULES_VERSION = 2


def schema_key() -> str:
    """Identifies the rules a cached verdict was reached with, so that changed rules invalidate the
    cache: RULES_VERSION and the schema's own text (a few KiB), compared whole. Exact, and it needs no
    hash function: importing hashlib would cost the create path ~3 ms."""
    return f"rules {RULES_VERSION}\n" + schema_bytes().decode("utf-8")


def _schema_document() -> dict:
    global _schema
    if _schema is None:
        from cdi import json_codec  # json.loads' result without importing json (the create path)

        _schema = json_codec.loads(schema_bytes())
    return _schema


def _schema_says_valid(document: object) -> bool:
    """True only if jsonschema would find no problem; False: ask jsonschema (which names them)."""
    global _is_valid
    if _is_valid is None:
        from cdi.schema_check import compile_schema

        _is_valid = compile_schema(_schema_document()) or (lambda document: False)
    return _is_valid(document)


def _get_validator():
    global _validator
    if _validator is None:
        import jsonschema  # 140-210 ms cold: only when a spec really must be validated

        _validator = jsonschema.Draft202012Validator(inline_local_refs(_schema_document()))
    return _validator


def inline_local_refs(schema: dict) -> dict:
    """The schema with each `{"$ref": "#/$defs/NAME"}` replaced by a copy of that definition.

    jsonschema resolves a $ref anew at every use (a registry lookup and a new resolver each time),
    which made up some 40% of validating a spec. The result means exactly what the file says: a $ref
    without sibling keywords stands for its target, and the file stays the one authority. A $ref
    with siblings, to anything but a local definition, or on a cycle of definitions is kept for
    jsonschema to resolve ($defs stays in the schema for it)."""
    defs = schema.get("$defs") or {}

    def inline(node: object, expanding: tuple[str, ...]) -> object:
        if isinstance(node, list):
            return [inline(item, expanding) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and len(node) == 1 and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/"):]
            if name in defs and "/" not in name and "~" not in name and name not in expanding:
                return inline(defs[name], expanding + (name,))
        return {key: (value if key == "$defs" else inline(value, expanding)) for key, value in node.items()}

    return inline(schema, ())


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _message(error) -> str:
    # Patterns and "not empty" rules read badly as regexes; their schema says in words what is wanted.
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator in ("pattern", "anyOf") and description:
        return f"{_short(error.instance)}: {description}"
    text = " ".join(error.message.split())
    return text if len(text) <= 200 else text[:197] + "..."


def _semantic_problems(document: dict, file: str) -> list[Problem]:
    problems = []
    seen: dict[str, int] = {}
    devices = document.get("devices")
    for i, device in enumerate(devices if isinstance(devices, list) else []):
        name = device.get("name") if isinstance(device, dict) else None
        if isinstance(name, str):
            if name in seen:
                problems.append(Problem(file, f"$.devices[{i}].name", "unique-device-names",
                                        f"device {name!r} already defined at $.devices[{seen[name]}]"))
            seen.setdefault(name, i)
    declared = document.get("cdiVersion")
    if declared in KNOWN_VERSIONS:
        needed, why = minimum_version_of(document)
        if version_key(declared) < version_key(needed):
            problems.append(Problem(file, "$.cdiVersion", "minimum-version",
                                    f"cdiVersion {declared} is too old: {why} needs {needed} or later"))
    return problems


def validate_document(document: object, file: str, raise_first: bool = False) -> list[Problem]:
    """Every problem of a parsed spec document; with raise_first, a SpecError for the first one.
    jsonschema is imported only for a document the compiled schema does not pass."""
    problems = []
    if not _schema_says_valid(document):
        errors = sorted(_get_validator().iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)),
                                                                              e.validator))
        problems = [Problem(file, e.json_path, str(e.validator), _message(e)) for e in errors]
    if isinstance(document, dict):
        problems += _semantic_problems(document, file)
    problems = problems[:MAX_PROBLEMS_PER_FILE]
    if raise_first and problems:
        raise SpecError(f"invalid CDI spec: {problems[0].what}", file)
    return problems
