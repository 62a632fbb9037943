"""A malformed spec file is one problem of that file, never an exception: `cdi validate` reports it,
`cdi list` and the registry (the shim's cdi mode) skip it and keep every other file's devices. Fixed
cases from the outside probe, then random mutations of a full spec (fixed seeds), as JSON and YAML."""
from __future__ import annotations

import copy
import json
import random
import subprocess
import sys

import pytest

from cdi.registry import Registry
from cdi.spec_cache import ValidatedSpecCache
from cdi.spec_file import check_spec_file
from tests.support.json_mutation import member_paths, random_value, replace_or_remove

FULL = {
    "cdiVersion": "0.7.0",
    "kind": "vendor.example/cls",
    "annotations": {"a": "b"},
    "devices": [
        {"name": "0", "annotations": {"x": "y"},
         "containerEdits": {"env": ["A=1"],
                            "deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/null", "type": "c", "major": 1,
                                             "minor": 3, "fileMode": 438, "permissions": "rw", "uid": 0,
                                             "gid": 0}]}},
        {"name": "all", "containerEdits": {"mounts": [{"hostPath": "/a", "containerPath": "/b",
                                                       "options": ["ro", "bind"], "type": "bind"}]}},
    ],
    "containerEdits": {"hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"],
                                  "env": ["PATH=/bin"], "timeout": 5}],
                       "intelRdt": {"closID": "c", "enableCMT": True}, "additionalGids": [5]},
}

GOOD = {"cdiVersion": "0.5.0", "kind": "good.example/gpu", "devices": [{"name": "0", "containerEdits": {"env": ["G=1"]}}]}


def assert_reported_and_skipped(tmp_path, name: str, text: str) -> None:
    """check_spec_file reports the file; a registry over its dir keeps the good spec's device."""
    spec_dir = tmp_path / "dir"
    spec_dir.mkdir(exist_ok=True)
    bad = spec_dir / name
    bad.write_text(text)
    (spec_dir / "good.json").write_text(json.dumps(GOOD))
    spec, problems = check_spec_file(bad)
    assert (spec is None) == bool(problems)
    cache = ValidatedSpecCache(tmp_path / "cache.json")
    registry = Registry((str(spec_dir),), cache=cache)
    assert "good.example/gpu=0" in registry.devices
    assert bool(problems) == any(p.file == str(bad) for p in registry.problems)
    # the verdicts kept are read back by the next process as they were
    again = Registry((str(spec_dir),), cache=ValidatedSpecCache(tmp_path / "cache.json"))
    assert sorted(again.devices) == sorted(registry.devices)
    bad.unlink()


@pytest.mark.parametrize("name, text", [
    ("devices5.json", '{"cdiVersion": "0.5.0", "kind": "a.com/b", "devices": 5}'),
    ("devices-str.json", '{"cdiVersion": "0.5.0", "kind": "a.com/b", "devices": "abc"}'),
    ("devices-map.json", '{"cdiVersion": "0.5.0", "kind": "a.com/b", "devices": {"a": 1}}'),
    ("edits5.json", '{"cdiVersion": "0.5.0", "kind": "a.com/b", "devices": [{"name": "x", "containerEdits": 5}],'
                    ' "containerEdits": [1]}'),
    ("int-tag.yaml", 'cdiVersion: "0.5.0"\nkind: a.com/b\ndevices:\n- name: x\n  containerEdits:\n'
                     '    deviceNodes:\n    - path: !!int /dev/x\n'),
    ("float-tag.yaml", 'cdiVersion: !!float x\nkind: a.com/b\n'),
    ("empty-int.yaml", 'cdiVersion: 0.5.0\nkind: a.com/b\ndevices: []\ncontainerEdits:\n  deviceNodes:\n  - path: !!int'),
    ("empty-float.yaml", 'cdiVersion: !!float ""\nkind: a.com/b\n'),
    ("empty-bool.yaml", 'cdiVersion: "0.5.0"\nkind: !!bool\n'),
    ("bool-tag.yaml", 'cdiVersion: "0.5.0"\nkind: !!bool maybe\n'),
    ("time-tag.yaml", 'cdiVersion: "0.5.0"\nkind: !!timestamp 2001-13-45\n'),
    ("time-ok.yaml", 'cdiVersion: "0.5.0"\nkind: !!timestamp 2001-12-14\ndevices: []\n'),
    ("binary.yaml", 'cdiVersion: "0.5.0"\nkind: !!binary aGVsbG8=\n'),
    ("bad-binary.yaml", 'cdiVersion: "0.5.0"\nkind: !!binary "%%%"\n'),
    ("set.yaml", 'cdiVersion: "0.5.0"\nkind: a.com/b\nannotations: !!set {a, b}\n'),
    ("omap.yaml", 'cdiVersion: "0.5.0"\nkind: a.com/b\ndevices: !!omap [a: 1]\n'),
    ("int-key.yaml", 'cdiVersion: "0.5.0"\nkind: a.com/b\n!!int 5: x\n'),
    ("list-key.yaml", 'cdiVersion: "0.5.0"\nkind: a.com/b\n? [a]\n: x\n'),
    ("huge-int.yaml", 'cdiVersion: "0.5.0"\nkind: a.com/b\ndevices:\n- name: x\n  containerEdits:\n'
                      '    deviceNodes:\n    - {path: /dev/x, major: !!int ' + "9" * 5000 + '}\n'),
    ("python.yaml", 'cdiVersion: !!python/name:os.system "0.5.0"\n'),
    ("deep.json", '{"cdiVersion": "0.5.0", "kind": "a.com/b", "x": ' + "[" * 100000 + "]" * 100000 + "}"),
    ("deep.yaml", "a: " + "[" * 100000 + "]" * 100000 + "\n"),
    ("nan.json", '{"cdiVersion": NaN, "kind": "a.com/b", "devices": [{"name": "x", "containerEdits": '
                 '{"deviceNodes": [{"path": "/dev/x", "major": Infinity}]}}]}'),
    ("surrogate.json", '{"cdiVersion": "0.5.0", "kind": "a.com/\\ud800", "devices": []}'),
    ("top-list.json", '[1, 2]'),
    ("top-str.yaml", 'just text\n'),
    ("empty.yaml", ''),
    ("multi.yaml", 'a: 1\n---\nb: 2\n'),
])
def test_malformed_spec_is_one_problem(tmp_path, name, text):
    assert_reported_and_skipped(tmp_path, name, text)


# -- random mutations -------------------------------------------------------------------------------

SCALARS = [None, True, 5, -1, 2 ** 70, 1.5, "", "x", "/dev/x", "0", "A=1", "a.com/b", "\u2028", [], {}]
KEYS = ["name", "path", "env", "devices", "containerEdits", "hostPath", "z"]


def mutated(rng: random.Random) -> object:
    document = copy.deepcopy(FULL)
    for _ in range(rng.randrange(1, 4)):
        every = member_paths(document)
        # half the time a member near the top, where one wrong type changes the most
        path = rng.choice([p for p in every if len(p) <= 3] if rng.random() < 0.5 else every)
        if not path:
            return random_value(rng, SCALARS, KEYS)
        replace_or_remove(document, path, rng, SCALARS, KEYS)
    return document


YAML_TAGS = ["!!int", "!!float", "!!bool", "!!null", "!!str", "!!binary", "!!timestamp", "!!set", "!!omap",
             "!!pairs", "!!seq", "!!map", "!!merge", "!!value", "!!yaml", "!foo", "!!python/none"]


def yaml_text(rng: random.Random, document: object) -> str:
    """The document as YAML (JSON is YAML), with a random tag put before some values."""
    text = json.dumps(document, indent=1)
    out = []
    for line in text.splitlines():
        if ": " in line and rng.random() < 0.15:
            key, _, value = line.partition(": ")
            line = f"{key}: {rng.choice(YAML_TAGS)} {value}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_random_malformed_json_specs(tmp_path):
    rng = random.Random(16_2)
    for i in range(150):
        assert_reported_and_skipped(tmp_path, f"m{i}.json", json.dumps(mutated(rng)))


def test_random_malformed_yaml_specs(tmp_path):
    rng = random.Random(16_22)
    for i in range(150):
        assert_reported_and_skipped(tmp_path, f"m{i}.yaml", yaml_text(rng, mutated(rng)))


# -- the commands -----------------------------------------------------------------------------------

def test_cdi_validate_and_list_report_such_files_in_one_line_each(tmp_path):
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "a.json").write_text('{"cdiVersion": "0.5.0", "kind": "a.com/b", "devices": 5}')
    (spec_dir / "b.yaml").write_text('cdiVersion: "0.5.0"\nkind: a.com/b\ndevices:\n- name: x\n'
                                     '  containerEdits:\n    deviceNodes:\n    - path: !!int /dev/x\n')
    (spec_dir / "good.json").write_text(json.dumps(GOOD))
    ctk = [sys.executable, "-m", "ctk.main", "cdi"]
    done = subprocess.run([*ctk, "validate", str(spec_dir / "a.json"), str(spec_dir / "b.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(line.startswith("nvidia-ctk: error: $") for line in done.stderr.splitlines()), done.stderr
    assert f"$.devices: 5 is not of type 'array' [type] ({spec_dir / 'a.json'})" in done.stderr
    assert f"line 7 column 13 [parse] ({spec_dir / 'b.yaml'})" in done.stderr
    done = subprocess.run([*ctk, "list", "--spec-dir", str(spec_dir)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"good.example/gpu=0\t{spec_dir / 'good.json'}\n", done.stderr
    assert "Traceback" not in done.stderr
    assert all(line.startswith("nvidia-ctk: warning: skipping invalid spec: $") for line in done.stderr.splitlines())
