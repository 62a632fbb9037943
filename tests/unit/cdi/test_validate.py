"""The strict schema and the two rules beside it: each rule can fail, problems are one line naming
the file, the JSON path and the rule."""
import json

import pytest

from cdi.spec_file import check_spec_file
from cdi.validate import validate_document


def problems_of(document):
    return validate_document(document, "spec.json")


def edits(document):
    return document["devices"][0]["containerEdits"]


def with_edits(**fields):
    """A change that sets fields of the first device's containerEdits."""
    return lambda document: edits(document).update(**fields)


CE = "$.devices[0].containerEdits"


def test_minimal_spec_is_valid(document):
    assert problems_of(document) == []


@pytest.mark.parametrize("change, path, rule", [
    (lambda d: d.pop("kind"), "$", "required"),
    (lambda d: d.update(devices=[]), "$.devices", "minItems"),
    (lambda d: d.update(extra=1), "$", "additionalProperties"),
    (lambda d: d.update(cdiVersion="0.9.9"), "$.cdiVersion", "enum"),
    (lambda d: d.update(cdiVersion=3), "$.cdiVersion", "enum"),
    (lambda d: d.update(kind="nvidia.com"), "$.kind", "pattern"),
    (lambda d: d.update(kind="nvidia.com/gpu\n"), "$.kind", "pattern"),
    (lambda d: d["devices"][0].update(name="a b"), "$.devices[0].name", "pattern"),
    (lambda d: d["devices"][0].update(name="dev0\n"), "$.devices[0].name", "pattern"),
    (lambda d: d["devices"][0].update(name="x" * 300), "$.devices[0].name", "maxLength"),
    (lambda d: d["devices"][0].update(extra=1), "$.devices[0]", "additionalProperties"),
    (lambda d: d["devices"][0].update(containerEdits={}), CE, "anyOf"),
    (lambda d: d["devices"][0].update(containerEdits={"env": []}), CE, "anyOf"),
    (with_edits(bogus=[]), CE, "additionalProperties"),
    (with_edits(env=["=x"]), CE + ".env[0]", "pattern"),
    (with_edits(env=["NOEQUALS"]), CE + ".env[0]", "pattern"),
    (with_edits(env=["A=\x00"]), CE + ".env[0]", "pattern"),
    (with_edits(env=[1]), CE + ".env[0]", "type"),
    (with_edits(deviceNodes=[{"path": "dev/x"}]), CE + ".deviceNodes[0].path", "pattern"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "type": "x"}]), CE + ".deviceNodes[0].type", "enum"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "major": -1}]), CE + ".deviceNodes[0].major", "minimum"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "fileMode": 0o10000}]), CE + ".deviceNodes[0].fileMode", "maximum"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "permissions": "rwx"}]), CE + ".deviceNodes[0].permissions", "pattern"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "permissions": "rr"}]), CE + ".deviceNodes[0].permissions", "pattern"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "uid": 2 ** 32}]), CE + ".deviceNodes[0].uid", "maximum"),
    (with_edits(deviceNodes=[{"path": "/dev/x", "color": "red"}]), CE + ".deviceNodes[0]", "additionalProperties"),
    (with_edits(mounts=[{"hostPath": "/a"}]), CE + ".mounts[0]", "required"),
    (with_edits(mounts=[{"hostPath": "/a", "containerPath": "rel"}]), CE + ".mounts[0].containerPath", "pattern"),
    (with_edits(hooks=[{"hookName": "preStart", "path": "/x"}]), CE + ".hooks[0].hookName", "enum"),
    (with_edits(hooks=[{"hookName": "prestart", "path": "/x", "timeout": 0}]), CE + ".hooks[0].timeout", "minimum"),
    (with_edits(hooks=[{"hookName": "prestart", "path": "/x", "env": ["bad"]}]), CE + ".hooks[0].env[0]", "pattern"),
    (with_edits(additionalGids=[-1]), CE + ".additionalGids[0]", "minimum"),
    (with_edits(intelRdt={"closID": "a/b"}), CE + ".intelRdt.closID", "pattern"),
    (with_edits(netDevices=[{"hostInterfaceName": "eth0"}]), CE + ".netDevices[0]", "required"),
    (with_edits(netDevices=[{"hostInterfaceName": "eth0", "name": "a/b"}]), CE + ".netDevices[0].name", "pattern"),
    (with_edits(netDevices=[{"hostInterfaceName": "x" * 16, "name": "e"}]), CE + ".netDevices[0].hostInterfaceName", "pattern"),
    (lambda d: d.update(annotations={"bad key!": "v"}), "$.annotations", "pattern"),
    (lambda d: d.update(annotations={"k": 1}), "$.annotations.k", "type"),
    (lambda d: d.update(containerEdits={"env": ["x"]}), "$.containerEdits.env[0]", "pattern"),
])
def test_each_rule_is_enforced(document, change, path, rule):
    document["cdiVersion"] = "1.1.0"  # so that only the rule under test can fail
    change(document)
    problems = problems_of(document)
    assert (path, rule) in [(p.json_path, p.rule) for p in problems], problems


def test_duplicate_device_names_are_rejected(document):
    document["devices"].append({"name": "dev0", "containerEdits": {"env": ["B=2"]}})
    [problem] = problems_of(document)
    assert (problem.json_path, problem.rule) == ("$.devices[1].name", "unique-device-names")


@pytest.mark.parametrize("declared, change, ok", [
    ("0.3.0", lambda e: e.update(mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]), False),
    ("0.4.0", lambda e: e.update(mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]), True),
    ("0.4.0", lambda e: e.update(deviceNodes=[{"path": "/dev/a", "hostPath": "/dev/b"}]), False),
    ("0.5.0", lambda e: e.update(deviceNodes=[{"path": "/dev/a", "hostPath": "/dev/b"}]), True),
    ("0.6.0", lambda e: e.update(additionalGids=[4]), False),
    ("0.7.0", lambda e: e.update(additionalGids=[4]), True),
    ("0.8.0", lambda e: e.update(netDevices=[{"hostInterfaceName": "a", "name": "b"}]), False),
    ("1.1.0", lambda e: e.update(netDevices=[{"hostInterfaceName": "a", "name": "b"}]), True),
    ("0.2.0", lambda e: None, False),   # older than the base version
])
def test_declared_version_must_cover_the_content(document, declared, change, ok):
    document["cdiVersion"] = declared
    change(edits(document))
    problems = problems_of(document)
    assert (problems == []) == ok, problems
    if not ok:
        assert problems[-1].rule == "minimum-version"


def test_annotations_need_0_6_0(document):
    document["devices"][0]["annotations"] = {"a": "b"}
    document["cdiVersion"] = "0.5.0"
    [problem] = problems_of(document)
    assert "annotations needs 0.6.0" in problem.message


def test_problem_lines_name_file_path_and_rule(tmp_path, document):
    document["devices"][0]["name"] = "bad name"
    edits(document)["env"] = ["=x"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(document))
    spec, problems = check_spec_file(path)
    assert spec is None
    lines = [str(p) for p in problems]
    assert len(lines) == 2
    for line in lines:
        assert "\n" not in line and line.endswith(f"({path})") and "[pattern]" in line
    assert lines[0].startswith(CE + ".env[0]: '=x'")
    assert lines[1].startswith("$.devices[0].name: 'bad name'")


@pytest.mark.parametrize("content, rule", [
    (b"\xff\xfe", "parse"),
    (b"{", "parse"),
    (b"[]", "type"),
])
def test_unreadable_files_are_one_problem(tmp_path, content, rule):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    spec, problems = check_spec_file(path)
    assert spec is None and problems and problems[0].rule == rule


def test_missing_file_and_directory_are_problems(tmp_path):
    assert check_spec_file(tmp_path / "none.json")[1][0].rule == "read"
    assert check_spec_file(tmp_path)[1][0].rule in ("read", "parse")


def test_many_errors_are_capped(document):
    edits(document)["env"] = ["bad"] * 500
    document["cdiVersion"] = "1.1.0"
    assert len(problems_of(document)) == 50


def test_load_spec_file(tmp_path, document):
    from cdi.errors import SpecError
    from cdi.spec_file import load_spec_file

    path = tmp_path / "a.json"
    path.write_text(json.dumps(document))
    assert load_spec_file(path).devices[0].name == "dev0"
    document["devices"][0]["name"] = "bad name"
    document["extra"] = 1
    path.write_text(json.dumps(document))
    with pytest.raises(SpecError, match=r"invalid CDI spec: .* \(and 1 more\)"):
        load_spec_file(path)


def test_special_and_huge_files_are_refused_without_reading_them(tmp_path):
    import os

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening must not block, reading must not happen
    assert "not a regular file" in check_spec_file(fifo)[1][0].message
    assert "not a regular file" in check_spec_file("/dev/zero")[1][0].message
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(17 * 1024 * 1024)
    assert "larger than" in check_spec_file(big)[1][0].message


def test_the_compiled_schema_holds_no_refs_and_judges_as_the_file_does(document):
    """cdi.validate validates with $refs inlined (speed); every rule above must give the very problems
    the schema file as written gives."""
    import copy

    import jsonschema

    from cdi import validate
    from cdi.validate import inline_local_refs, schema_bytes

    raw = json.loads(schema_bytes())
    compiled = inline_local_refs(raw)
    assert "$ref" not in json.dumps({k: v for k, v in compiled.items() if k != "$defs"})
    assert raw == json.loads(schema_bytes())  # the input is left alone
    as_written = jsonschema.Draft202012Validator(raw)
    cases = [change for change, _, _ in test_each_rule_is_enforced.pytestmark[0].args[1]]
    for change in cases:
        broken = copy.deepcopy(document)
        broken["cdiVersion"] = "1.1.0"
        change(broken)
        ours = problems_of(broken)
        validate._validator, saved = as_written, validate._validator
        try:
            theirs = problems_of(broken)
        finally:
            validate._validator = saved
        assert ours == theirs and ours
