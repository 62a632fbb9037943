"""Editing one JSON member in place: every other byte stays as the user wrote it."""
import json

import pytest

from runtime_shim.engine_config.docker import detect_indent
from runtime_shim.engine_config.json_text import JsonTextEditor


def edit(text, *ops):
    editor = JsonTextEditor(text, detect_indent(text))
    for op in ops:
        editor.set(*op[1:]) if op[0] == "set" else editor.delete(op[1])
    return editor.text


def test_insert_into_multi_line_objects_keeps_one_line_values():
    text = ('{\n  "registry-mirrors": ["https://m"],\n  "runtimes": {\n    "kata": {"path": "/k"}\n  },\n'
            '  "features": {"buildkit": true}\n}')
    out = edit(text, ("set", ("runtimes", "nvidia"), {"path": "/n", "args": []}),
               ("set", ("features", "cdi"), True), ("set", ("default-runtime",), "nvidia"))
    assert out == ('{\n  "registry-mirrors": ["https://m"],\n  "runtimes": {\n    "kata": {"path": "/k"},\n'
                   '    "nvidia": {\n      "path": "/n",\n      "args": []\n    }\n  },\n'
                   '  "features": {"buildkit": true, "cdi": true},\n  "default-runtime": "nvidia"\n}')


@pytest.mark.parametrize("text, op, expected", [
    ("{}", ("set", ("a",), {"b": 1}), '{"a": {"b": 1}}'),
    ('{"debug": true}', ("set", ("a",), [1]), '{"debug": true, "a": [1]}'),
    ('{\n\t"features": {}\n}\n', ("set", ("features", "cdi"), True), '{\n\t"features": {\n\t\t"cdi": true\n\t}\n}\n'),
    ('{\n  "x": "runc"\n}\n', ("set", ("x",), "nvidia"), '{\n  "x": "nvidia"\n}\n'),
    ('{\n  "x": {"a": 1}\n}\n', ("set", ("x",), {"a": 2, "b": 3}), '{\n  "x": {"a": 2, "b": 3}\n}\n'),
    ('{\n  "x": 1\n}\n', ("set", ("x",), {"a": 2}), '{\n  "x": {\n    "a": 2\n  }\n}\n'),
    ('{\n    "a": 1,\n    "b": 2,\n    "c": 3\n}\n', ("delete", ("a",)), '{\n    "b": 2,\n    "c": 3\n}\n'),
    ('{\n    "a": 1,\n    "b": 2,\n    "c": 3\n}\n', ("delete", ("b",)), '{\n    "a": 1,\n    "c": 3\n}\n'),
    ('{\n    "a": 1,\n    "b": 2,\n    "c": 3\n}\n', ("delete", ("c",)), '{\n    "a": 1,\n    "b": 2\n}\n'),
    ('{\n    "a": {\n        "x": 1\n    }\n}\n', ("delete", ("a", "x")), '{\n    "a": {}\n}\n'),
    ('{"a": 1, "b": 2}', ("delete", ("a",)), '{"b": 2}'),
    ('{"a": "}{\\"", "b": 2}', ("set", ("c",), True), '{"a": "}{\\"", "b": 2, "c": true}'),
    ('{"a": 1}', ("delete", ("zz",)), '{"a": 1}'),
])
def test_single_edits(text, op, expected):
    out = edit(text, op)
    assert out == expected
    json.loads(out)
