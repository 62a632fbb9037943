"""cdi.json_codec gives what the json package gives: the same values, the same text, the same errors."""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from cdi import json_codec

DOCUMENTS = [
    b'{"ociVersion": "1.0.2", "process": {"env": ["PATH=/bin", "A=\\u00e9\\ud83d\\ude00"]}, "root": {"path": "rootfs"}}',
    b'  \n\t{"a": 1}\r\n ',
    b'[1, -2, 3.5, 1e400, -0.0, 12345678901234567890, true, false, null]',
    b'"just a string"',
    b'{"dup": 1, "dup": 2}',
    b'{"nan": NaN, "inf": Infinity, "ninf": -Infinity}',
    "{\"k\": \"caf\u00e9 \u2603\"}".encode(),
    b'{}',
    b'[]',
    b'0',
    b'\xef\xbb\xbf{"a": 1}',   # json.loads takes bytes with a UTF-8 BOM (not a str with one)
    '{"utf16": "\u00e9"}'.encode("utf-16"),
]
BAD = [
    b'', b'   ', b'{', b'{"a": 1} x', b'{"a": 1}{}', '\ufeff{"a": 1}', b'\xff\xfe\x00', b'{"a": "\x01"}',
    b'[1,]', b'{"a" 1}', b"{'a': 1}", b'[' * 100000 + b']' * 100000,
]


def _same(a, b) -> bool:
    """Equal, with NaN equal to NaN and -0.0 told from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("data", DOCUMENTS)
def test_loads_gives_json_loads_value(data):
    assert _same(json_codec.loads(data), json.loads(data))
    text = data.decode("utf-8", "replace")
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            json_codec.loads(text)
    else:
        assert _same(json_codec.loads(text), expected)


@pytest.mark.parametrize("data", BAD)
def test_loads_fails_as_json_loads_does(data):
    with pytest.raises(Exception) as ours:
        json_codec.loads(data)
    with pytest.raises(Exception) as theirs:
        json.loads(data)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def _random_value(rng: random.Random, depth: int = 0):
    kinds = ["int", "float", "str", "bool", "none"] + (["list", "dict"] if depth < 5 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-2**70, 2**70)
    if kind == "float":
        return rng.choice([rng.uniform(-1e6, 1e6), 1e-300, 5e-324, 1.7976931348623157e308, -0.0])
    if kind == "str":
        alphabet = "ab\"\\/\b\f\n\r\t\x00\x1f\x7f é€\u2028\ud83d\ude00" + chr(0x10FFFF)
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {str(_random_value(rng, 5)): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def test_dumps_compact_and_loads_match_json_on_random_documents():
    rng = random.Random(20261123)
    for _ in range(2000):
        value = _random_value(rng)
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert json_codec.dumps_compact(value) == text
        assert _same(json_codec.loads(text), json.loads(text))
        ascii_text = json.dumps(value, indent=1)
        assert _same(json_codec.loads(ascii_text.encode()), json.loads(ascii_text))


@pytest.mark.parametrize("value", [
    {"a": [1, 2.5, None, True, "x\u00e9"], "b": {}}, "bare \"string\"", 7, None, [float("nan"), float("inf")],
    {1: "int key", 2.5: "float key", True: "bool key", None: "none key"},
])
def test_dumps_compact_gives_json_dumps_text(value):
    assert json_codec.dumps_compact(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", [{"a": object()}, {(1, 2): "tuple key"}, {1, 2}])
def test_dumps_compact_refuses_what_json_dumps_refuses(value):
    with pytest.raises(TypeError) as ours:
        json_codec.dumps_compact(value)
    with pytest.raises(TypeError) as theirs:
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert str(ours.value) == str(theirs.value)


def test_circular_documents_are_refused_as_json_does():
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference detected"):
        json_codec.dumps_compact(loop)


def test_no_json_or_re_import():
    code = ("import sys; from cdi import json_codec; "
            "json_codec.loads(b'{\"a\": [1, \"x\"]}'); json_codec.dumps_compact({'a': [1.5, 'y']}); "
            "print(' '.join(m for m in ('json', 're', 'enum', 'functools') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {sys.path[0]!r}); " + code],
                          capture_output=True, text=True, check=True, cwd="/")
    assert done.stdout.strip() == ""
