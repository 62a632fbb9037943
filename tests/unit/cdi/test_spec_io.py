"""Spec data types, JSON and YAML: round trips, names always strings, strict reading, atomic writes."""
import json
import os

import pytest

from cdi.errors import SpecError
from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, IntelRdt, Mount, NetDevice, Spec
from cdi.spec_file import check_spec_file, load_document, parse_spec_text, render_spec, write_spec


def full_spec() -> Spec:
    edits = ContainerEdits(
        env=["A=1", "EMPTY="],
        device_nodes=[DeviceNode(path="/dev/nvidia0", host_path="/dev/nvidia0", type="c", major=195, minor=0,
                                 file_mode=0o666, permissions="rw", uid=0, gid=0)],
        mounts=[Mount(host_path="/usr/lib/libcuda.so.1", container_path="/usr/lib/libcuda.so.1",
                      options=["ro", "nosuid", "nodev", "bind"], type="bind")],
        hooks=[Hook(hook_name="createContainer", path="/usr/bin/nvidia-cdi-hook", args=["nvidia-cdi-hook", "x"],
                    env=["PATH=/usr/bin"], timeout=10)],
    )
    return Spec(kind="nvidia.com/gpu", devices=[Device(name="0", container_edits=edits),
                                                Device(name="1:0", container_edits=ContainerEdits(env=["B=2"])),
                                                Device(name="on", container_edits=ContainerEdits(env=["C=3"]))],
                container_edits=ContainerEdits(env=["NVIDIA_VISIBLE_DEVICES=void"]))


def test_json_round_trip_keeps_every_field():
    spec = full_spec()
    document = json.loads(render_spec(spec, "full-spec"))
    assert document["cdiVersion"] == "0.5.0"  # hostPath and a digit-first name need 0.5.0
    assert list(document)[:3] == ["cdiVersion", "kind", "devices"]
    assert Spec.from_dict(document).to_dict() == document
    node = document["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0,
                    "fileMode": 0o666, "permissions": "rw", "uid": 0, "gid": 0}


def test_unset_fields_are_left_out():
    document = Spec(kind="v/c", devices=[Device(name="d", container_edits=ContainerEdits(env=["A=1"]))]).to_dict()
    assert document == {"cdiVersion": "0.3.0", "kind": "v/c",
                        "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}]}


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_file_round_trip_names_stay_strings(tmp_path, suffix):
    spec = full_spec()
    path = write_spec(spec, tmp_path / f"nvidia{suffix}")
    loaded, problems = check_spec_file(path)
    assert problems == []
    assert [d.name for d in loaded.devices] == ["0", "1:0", "on"]
    assert loaded.to_dict() == spec.to_dict()


def test_yaml_writes_names_quoted(tmp_path):
    text = write_spec(full_spec(), tmp_path / "s.yaml").read_text()
    assert 'name: "0"' in text and 'name: "1:0"' in text and 'name: "on"' in text


def test_json_to_yaml_to_json(tmp_path):
    spec = full_spec()
    write_spec(spec, tmp_path / "a.json")
    first, _ = load_document(tmp_path / "a.json")
    write_spec(Spec.from_dict(first), tmp_path / "b.yaml")
    second, _ = load_document(tmp_path / "b.yaml")
    write_spec(Spec.from_dict(second), tmp_path / "c.json")
    assert json.loads((tmp_path / "c.json").read_text()) == first


@pytest.mark.parametrize("yaml_name, expected", [
    ("1:0", "1:0"),        # YAML 1.1 would read base 60: 60
    ("0", "0"),
    ("010", "010"),        # YAML 1.1 octal
    ("1_000", "1_000"),
    ("yes", "yes"),
    ("1e3", "1e3"),
    ("'0'", "0"),
    ('"1:0"', "1:0"),
])
def test_hand_written_yaml_names_are_read_as_text(yaml_name, expected):
    text = f"cdiVersion: 0.5.0\nkind: v/c\ndevices:\n- name: {yaml_name}\n  containerEdits:\n    env: [A=1]\n"
    document = parse_spec_text(text, "x.yaml")
    assert document["devices"][0]["name"] == expected


def test_yaml_numbers_stay_numbers_where_the_schema_wants_numbers():
    text = ("cdiVersion: 0.5.0\nkind: v/c\ndevices:\n- name: d\n  containerEdits:\n"
            "    deviceNodes: [{path: /dev/x, major: 195, minor: 0x10, fileMode: 0o644}]\n"
            "    additionalGids: [44]\n")
    node = parse_spec_text(text, "x.yaml")["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {"path": "/dev/x", "major": 195, "minor": 16, "fileMode": 0o644}


@pytest.mark.parametrize("text, message", [
    ("a: [1\n", "invalid YAML"),
    ("a: &x [1]\nb: *x\n", "aliases are not allowed"),
    ("!!python/object:os.system {}\n", "invalid YAML"),
    ("\t- x", "invalid YAML"),
])
def test_bad_yaml_is_a_clear_error(text, message):
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "bad.yaml")
    assert message in str(info.value) and "bad.yaml" in str(info.value)


@pytest.mark.parametrize("text", ["{", "[1,", "", "\x00", "[" * 100000])
def test_bad_json_is_a_clear_error(text):
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "bad.json")
    assert str(info.value).startswith("invalid JSON") and "bad.json" in str(info.value)


@pytest.mark.parametrize("document, where", [
    ([], "$"),
    ({"cdiVersion": "0.3.0", "kind": "v/c", "devices": [{"name": 0, "containerEdits": {}}]}, "$.devices[0].name"),
    ({"cdiVersion": "0.3.0", "kind": "v/c", "devices": [{"name": "d"}]}, "$.devices[0]"),
    ({"cdiVersion": "0.3.0", "kind": "v/c", "devices": "x"}, "$.devices"),
    ({"cdiVersion": "0.3.0", "kind": "v/c", "devices": [], "extra": 1}, "$"),
    ({"cdiVersion": "0.3.0", "kind": "v/c", "devices": [{"name": "d", "containerEdits": {"deviceNodes": [{"path": "/x", "major": True}]}}]},
     "$.devices[0].containerEdits.deviceNodes[0].major"),
])
def test_from_dict_rejects_wrong_shapes_with_the_path(document, where):
    with pytest.raises(SpecError) as info:
        Spec.from_dict(document)
    assert info.value.where == where


def test_write_is_atomic_and_refuses_invalid_content(tmp_path):
    target = tmp_path / "s.json"
    target.write_text("old")
    bad = Spec(kind="v/c", devices=[Device(name="bad name", container_edits=ContainerEdits(env=["A=1"]))])
    with pytest.raises(SpecError) as info:
        write_spec(bad, target)
    assert "$.devices[0].name" in str(info.value)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["s.json"]  # no temp file left behind
    write_spec(full_spec(), target)
    assert json.loads(target.read_text())["kind"] == "nvidia.com/gpu"
    assert os.listdir(tmp_path) == ["s.json"]


def test_newer_features_raise_the_written_version():
    def spec_with(edits, **kw):
        return Spec(kind=kw.get("kind", "v/c"), annotations=kw.get("annotations", {}),
                    devices=[Device(name=kw.get("name", "d"), container_edits=edits)]).to_dict()["cdiVersion"]

    env = ContainerEdits(env=["A=1"])
    assert spec_with(env) == "0.3.0"
    assert spec_with(ContainerEdits(mounts=[Mount(host_path="/a", container_path="/a", type="bind")])) == "0.4.0"
    assert spec_with(ContainerEdits(device_nodes=[DeviceNode(path="/dev/a", host_path="/dev/b")])) == "0.5.0"
    assert spec_with(env, name="0") == "0.5.0"
    assert spec_with(env, annotations={"a": "b"}) == "0.6.0"
    assert spec_with(env, kind="v/c.d") == "0.6.0"
    assert spec_with(ContainerEdits(intel_rdt=IntelRdt(clos_id="x"))) == "0.7.0"
    assert spec_with(ContainerEdits(additional_gids=[44])) == "0.7.0"
    assert spec_with(ContainerEdits(net_devices=[NetDevice(host_interface_name="eth1", name="eth0")])) == "1.1.0"


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "a:\n" + "".join(" " * i + "- \n" for i in range(1, 2000))])
def test_deeply_nested_yaml_is_a_clear_error_or_a_document(text):
    try:
        parse_spec_text(text, "deep.yaml")
    except SpecError as exc:
        assert "deep.yaml" in str(exc)


def test_writer_refuses_hooks_without_env(tmp_path):
    hook = Hook(hook_name="createContainer", path="/usr/bin/nvidia-cdi-hook", args=["nvidia-cdi-hook"])
    spec = Spec(kind="v/c", devices=[Device(name="d", container_edits=ContainerEdits(hooks=[hook]))])
    with pytest.raises(SpecError, match=r"\$.devices\[0\].containerEdits.hooks\[0\]: .*non-empty env"):
        write_spec(spec, tmp_path / "s.json")
    hook.env = ["PATH=/usr/bin:/bin"]
    write_spec(spec, tmp_path / "s.json")


def test_render_spec_and_explicit_format(tmp_path):
    from cdi.spec_file import render_spec

    spec = full_spec()
    assert json.loads(render_spec(spec, "<stdout>")) == spec.to_dict()
    assert 'name: "1:0"' in render_spec(spec, "<stdout>", yaml_format=True)
    path = write_spec(spec, tmp_path / "spec.out", yaml_format=True)
    assert parse_spec_text(path.read_text(), str(path), yaml_format=True) == spec.to_dict()
    bad = Spec(kind="v/c", devices=[Device(name="a b", container_edits=ContainerEdits(env=["A=1"]))])
    with pytest.raises(SpecError, match=r"\(<stdout>\)"):
        render_spec(bad, "<stdout>")


def test_absurd_numbers_are_schema_errors_not_crashes(tmp_path):
    from cdi.spec_file import check_spec_file

    digits = "9" * 5000
    path = tmp_path / "n.yaml"
    path.write_text(f"cdiVersion: 0.5.0\nkind: v/c\ndevices:\n- name: d\n  containerEdits:\n"
                    f"    deviceNodes: [{{path: /dev/x, major: {digits}}}]\n    other: {digits}\n")
    spec, problems = check_spec_file(path)
    assert spec is None and {p.rule for p in problems} == {"type", "additionalProperties"}
    path = tmp_path / "n.json"
    path.write_text('{"cdiVersion": "0.5.0", "kind": "v/c", "devices": [{"name": "d", "containerEdits": '
                    '{"deviceNodes": [{"path": "/dev/x", "major": ' + digits + '}]}}]}')
    spec, problems = check_spec_file(path)
    assert spec is None and problems[0].rule == "parse"
