"""cdi.schema_check, the compiled form of schema.json: its "valid" must be jsonschema's "no problem",
on every rule, on fuzzed documents, and it steps aside for schema features it does not implement."""
import copy
import decimal
import json
import subprocess
import sys

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdi.schema_check import compile_schema
from cdi.validate import schema_bytes

from .test_validate import test_each_rule_is_enforced

SCHEMA = json.loads(schema_bytes())
is_valid = compile_schema(SCHEMA)
authority = jsonschema.Draft202012Validator(SCHEMA)

# every field the schema knows, each set to a valid value
RICH = {
    "cdiVersion": "1.1.0",
    "kind": "nvidia.com/gpu",
    "annotations": {"example.com/key": "v", "k2": "v2"},
    "devices": [
        {"name": "0", "annotations": {"a": "b"},
         "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0", "type": "c",
                                             "major": 195, "minor": 0, "fileMode": 0o666, "permissions": "rw",
                                             "uid": 0, "gid": 0}]}},
        {"name": "GPU-1:0", "containerEdits": {"env": ["A=1"]}},
    ],
    "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=void", "EMPTY="],
        "mounts": [{"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1",
                    "options": ["ro", "nosuid", "bind"], "type": "bind"}],
        "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                   "args": ["nvidia-cdi-hook", "--link", "a::/b"], "env": ["PATH=/usr/bin"], "timeout": 5}],
        "intelRdt": {"closID": "c", "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=50", "enableCMT": True,
                     "enableMBM": False},
        "additionalGids": [44, 0],
        "netDevices": [{"hostInterfaceName": "eth0", "name": "net0"}],
    },
}


def authority_says_valid(document):
    return next(authority.iter_errors(document), None) is None


def test_the_schema_compiles_and_passes_a_document_using_every_field():
    assert is_valid is not None
    assert authority_says_valid(RICH) and is_valid(RICH)


@pytest.mark.parametrize("change", [case[0] for case in test_each_rule_is_enforced.pytestmark[0].args[1]])
def test_each_rule_of_the_file_fails_the_compiled_form(document, change):
    document["cdiVersion"] = "1.1.0"
    assert is_valid(document)
    change(document)
    assert not authority_says_valid(document)
    assert not is_valid(document)


# values a JSON or YAML parser could put anywhere: every type, the edges of the schema's bounds
texts = st.one_of(st.sampled_from(["", "a", "0", "/", "/dev/x", "A=1", "=x", "a\n", "x" * 256, "x" * 257, "x" * 64,
                                   "x" * 65, "x" * 15, "x" * 16, "x" * 513, "a/" + "b" * 511, "rwm", "rr",
                                   "c", "prestart", "1.1.0", "a/b", "eth0", "..", "\x00", "k:v", "é"]),
                  st.text(max_size=12))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([4095, 4096, 2 ** 32 - 1, 2 ** 32]),
                    st.floats(allow_nan=False), st.sampled_from([1.0, -1.0, 0.5, 195.0]), texts)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                      max_leaves=6)


def _paths(node, at=()):
    yield at
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from _paths(child, at + (key,))


PATHS = list(_paths(RICH))


@st.composite
def mutated(draw):
    """RICH with one to three changes: a value replaced, a key or item removed, a key added."""
    document = copy.deepcopy(RICH)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent, node = None, document
        try:
            for key in path:
                if not isinstance(node, (dict, list)):
                    raise LookupError(key)   # an earlier change took this path away
                parent, node = node, node[key]
        except (LookupError, TypeError):
            continue
        how = draw(st.sampled_from(["replace", "remove", "add"]))
        if how == "add" and isinstance(node, dict):
            node[draw(texts)] = draw(values)
        elif how == "add" and isinstance(node, list):
            node.append(draw(values))
        elif how == "remove" and parent is not None:
            del parent[path[-1]]
        elif parent is not None:
            parent[path[-1]] = draw(values)
        else:
            document = draw(values)
    return document


EDGES = ["", "a", "0", "/", "/dev/x", "A=1", "=x", "a\n", "x" * 15, "x" * 16, "x" * 64, "x" * 65, "x" * 256, "x" * 257,
         "x" * 317, "x" * 318, "a/" + "b" * 511, "a/" + "b" * 512, "/" + "x" * 4095, "/" + "x" * 4096, "rwm", "rr",
         "c", "prestart", "1.1.0", "a/b", "eth0", "..", "\x00", "é", None, True, False, -1, 0, 1, 4095, 4096,
         1048575, 1048576, 2 ** 32 - 1, 2 ** 32, 1.0, 0.5, -1.0, [], ["A=1"], {}, {"k": "v"}]


def test_every_edge_value_at_every_place_gets_the_same_verdict():
    for path in PATHS[1:]:
        for value in EDGES:
            document = copy.deepcopy(RICH)
            node = document
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            assert is_valid(document) == authority_says_valid(document), (path, value)


@settings(max_examples=1500, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_the_compiled_form_agrees_with_jsonschema(document):
    assert is_valid(document) == authority_says_valid(document)


@pytest.mark.parametrize("schema", [
    {"type": "string", "format": "email"},                       # a keyword not implemented
    {"$ref": "https://example.com/other.json"},                  # not a local definition
    {"$defs": {"a": {"type": "string"}}, "properties": {"x": {"$id": "sub", "$ref": "#/$defs/a"}}},
    {"enum": [1, True]},                                          # jsonschema's equal() tells 1 from True
    {"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": False},
    {"prefixItems": [{}], "items": False},
    {"ref": "#/$defs/a"},                                         # not "$ref": no meaning, but not ours to guess
    {"type": [{}]},                                               # malformed: jsonschema says how
])
def test_what_is_not_implemented_leaves_the_verdict_to_jsonschema(schema):
    assert compile_schema(schema) is None


def test_a_value_no_json_parser_makes_is_not_judged_here():
    document = copy.deepcopy(RICH)
    document["devices"][0]["containerEdits"]["deviceNodes"][0]["major"] = decimal.Decimal(1)
    assert is_valid(document) is False   # jsonschema decides (numbers.Number: it would accept)


def test_a_pattern_re_refuses_leaves_the_verdict_to_jsonschema():
    check = compile_schema({"pattern": "(unclosed"})
    assert check("x") is False and check(1) is True   # the pattern is compiled on its first string


def test_a_cycle_of_definitions_compiles():
    check = compile_schema({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}},
                                               "additionalProperties": False}},
                            "$ref": "#/$defs/node"})
    assert check({"next": {"next": {}}}) and not check({"next": {"next": {"x": 1}}})
    deep = {}
    for _ in range(100000):
        deep = {"next": deep}
    assert check(deep) is False   # too deep for the compiled form: jsonschema decides


def test_a_valid_spec_is_written_without_importing_jsonschema(tmp_path):
    """The point of the compiled form: `cdi generate` validates its own output without jsonschema."""
    code = ("import sys\n"
            "from cdi.spec import Spec\n"
            "from cdi.spec_file import write_spec\n"
            "spec = Spec.from_dict(json.loads(sys.argv[1]))\n"
            "write_spec(spec, sys.argv[2])\n"
            "print('jsonschema' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", "import json\n" + code, json.dumps(RICH), str(tmp_path / "s.json")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    bad = copy.deepcopy(RICH)
    bad["containerEdits"]["env"] = ["no-equals-sign"]
    result = subprocess.run([sys.executable, "-c", "import json\n" + code, json.dumps(bad), str(tmp_path / "t.json")],
                            capture_output=True, text=True)
    assert "invalid CDI spec: $.containerEdits.env[0]: 'no-equals-sign': an env entry is KEY=VALUE" in result.stderr
