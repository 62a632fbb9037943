"""Spec dirs: priority, conflicts, invalid files, request resolution and the validation cache."""
import json
import os

import pytest

import cdi.validate
from cdi.errors import RequestError
from cdi.registry import Registry, ValidatedSpecCache, inject_devices  # noqa: F401


def write(path, kind="vendor.example/cls", devices=None, common=None, version="0.3.0"):
    document = {"cdiVersion": version, "kind": kind,
                "devices": devices or [{"name": "dev0", "containerEdits": {"env": [f"FROM={path.name}"]}}]}
    if common:
        document["containerEdits"] = common
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def dirs(tmp_path):
    low, high = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    low.mkdir()
    high.mkdir()
    return low, high


def test_lists_devices_with_their_files(dirs):
    low, high = dirs
    write(low / "a.json", devices=[{"name": "0", "containerEdits": {"env": ["A=0"]}},
                                   {"name": "1", "containerEdits": {"env": ["A=1"]}}], version="0.5.0")
    (low / "b.yaml").write_text('cdiVersion: 0.5.0\nkind: other.example/x\ndevices:\n- name: "1:0"\n'
                                '  containerEdits: {env: [B=1]}\n')
    registry = Registry((str(low), str(high)))
    assert {n: d.path for n, d in registry.devices.items()} == {
        "vendor.example/cls=0": str(low / "a.json"), "vendor.example/cls=1": str(low / "a.json"),
        "other.example/x=1:0": str(low / "b.yaml")}
    assert registry.problems == [] and registry.conflicts == []


def test_only_json_and_yaml_files_count(dirs):
    low, _ = dirs
    write(low / "a.yml")
    write(low / "a.json.bak")
    write(low / ".a.json.123.tmp")
    assert Registry((str(low),)).devices == {}


def test_higher_priority_dir_wins(dirs):
    low, high = dirs
    write(low / "a.json")
    write(high / "z.json")
    registry = Registry((str(low), str(high)))
    assert registry.devices["vendor.example/cls=dev0"].path == str(high / "z.json")
    assert registry.conflicts == []


def test_same_device_at_equal_priority_is_a_conflict(dirs):
    low, high = dirs
    write(low / "a.json")
    write(low / "b.json")
    write(low / "c.json")
    registry = Registry((str(low), str(high)))
    assert "vendor.example/cls=dev0" not in registry.devices
    assert len(registry.conflicts) == 1 and "a.json" in registry.conflicts[0] and "b.json" in registry.conflicts[0]
    write(high / "d.json")  # a higher dir settles it
    assert Registry((str(low), str(high))).devices["vendor.example/cls=dev0"].path == str(high / "d.json")


def test_invalid_files_are_reported_and_do_not_hide_others(dirs):
    low, _ = dirs
    write(low / "good.json", kind="good.example/x")
    (low / "broken.json").write_text("{")
    write(low / "invalid.json", devices=[{"name": "bad name", "containerEdits": {"env": ["A=1"]}}])
    (low / "dir.json").mkdir()
    registry = Registry((str(low), "/nonexistent-dir-for-test"))
    assert list(registry.devices) == ["good.example/x=dev0"]
    files = {p.file for p in registry.problems}
    assert files == {str(low / "broken.json"), str(low / "invalid.json"), str(low / "dir.json")}


def test_edits_in_request_order_with_common_edits_once(dirs):
    low, _ = dirs
    write(low / "a.json", devices=[{"name": "x", "containerEdits": {"env": ["X=1"]}},
                                   {"name": "y", "containerEdits": {"env": ["Y=1"]}}],
          common={"env": ["COMMON=1"]})
    write(low / "b.json", kind="other.example/k")
    registry = Registry((str(low),))
    edits = registry.edits_for(["vendor.example/cls=y", "other.example/k=dev0", "vendor.example/cls=x",
                                "vendor.example/cls=y"])
    assert edits.env == ["COMMON=1", "Y=1", "FROM=b.json", "X=1"]


def test_unresolvable_name_fails_the_whole_request(dirs):
    low, _ = dirs
    write(low / "a.json")
    registry = Registry((str(low),))
    spec = {"process": {"env": []}}
    with pytest.raises(RequestError) as info:
        inject_devices(spec, ["vendor.example/cls=dev0", "vendor.example/cls=nope", "not a name"], registry)
    assert "vendor.example/cls=nope" in str(info.value) and "'not a name'" in str(info.value)
    assert spec == {"process": {"env": []}}
    result = inject_devices(spec, ["vendor.example/cls=dev0"], registry)
    assert result["process"]["env"] == ["FROM=a.json"]


def test_unresolvable_names_say_what_to_do(dirs):
    """Issue 27.5: with no spec of the kind asked for, the error says to generate one; with the kind
    there but not the device, where to look."""
    low, _ = dirs
    registry = Registry((str(low),))
    with pytest.raises(RequestError) as info:
        registry.edits_for(["nvidia.com/gpu=0"])
    assert info.value.what == ("unresolvable CDI device nvidia.com/gpu=0: no CDI spec defines nvidia.com/gpu "
                               "devices; generate one: nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml")
    write(low / "a.json")
    registry = Registry((str(low),))
    with pytest.raises(RequestError) as info:
        registry.edits_for(["vendor.example/cls=nope"])
    assert info.value.what.endswith(": no such device in the specs (nvidia-ctk cdi list shows them; "
                                    "regenerate after a GPU change)")


def test_cache_skips_the_schema_for_unchanged_files(dirs, monkeypatch):
    low, _ = dirs
    write(low / "a.json")
    cache = ValidatedSpecCache()
    Registry((str(low),), cache=cache)

    def no_validation(*args, **kwargs):
        raise AssertionError("validated again")

    monkeypatch.setattr(cdi.validate, "validate_document", no_validation)
    assert "vendor.example/cls=dev0" in Registry((str(low),), cache=cache).devices
    # a changed file is validated again (and here the stub proves it)
    write(low / "a.json", devices=[{"name": "dev1", "containerEdits": {"env": ["A=2"]}}])
    with pytest.raises(AssertionError):
        Registry((str(low),), cache=cache)


def test_cache_never_lets_an_invalid_change_through(dirs):
    low, _ = dirs
    path = write(low / "a.json")
    cache = ValidatedSpecCache()
    Registry((str(low),), cache=cache)
    st = os.stat(path)
    path.write_text(path.read_text().replace("dev0", "de v"))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime and size: only ctime tells
    registry = Registry((str(low),), cache=cache)
    assert registry.devices == {} and registry.problems


def test_persistent_cache_round_trip_and_trust(dirs, tmp_path, monkeypatch):
    low, _ = dirs
    write(low / "a.json")
    cache_file = tmp_path / "cache" / "validated.json"
    Registry((str(low),), cache=ValidatedSpecCache(cache_file))
    assert cache_file.exists()
    assert ValidatedSpecCache(cache_file).is_valid(str(low / "a.json"), os.stat(low / "a.json"))
    os.chmod(cache_file, 0o666)  # writable by others: worthless
    assert not ValidatedSpecCache(cache_file).is_valid(str(low / "a.json"), os.stat(low / "a.json"))
    os.chmod(cache_file, 0o600)
    monkeypatch.setattr(cdi.validate, "schema_key", lambda: "another-schema")
    assert not ValidatedSpecCache(cache_file).is_valid(str(low / "a.json"), os.stat(low / "a.json"))


def test_a_verdict_of_older_rules_is_not_trusted(dirs, tmp_path, monkeypatch):
    """A YAML spec with a lone surrogate that an older version cached as valid (the kept document
    skips parsing) is judged again, and refused, once the rules refuse it (issue 22, item 10)."""
    low, _ = dirs
    spec = low / "lone.yaml"
    spec.write_text('cdiVersion: 0.5.0\nkind: a.example/y\ndevices:\n- name: "x"\n'
                    '  containerEdits: {env: ["A=\\ud800"]}\n')
    old = ValidatedSpecCache(tmp_path / "validated.json")
    with monkeypatch.context() as m:   # what a version before the surrogate rule wrote
        m.setattr(cdi.validate, "schema_key", lambda: cdi.validate.schema_bytes().decode("utf-8"))
        old.remember(str(spec), os.stat(spec), {"cdiVersion": "0.5.0", "kind": "a.example/y", "devices": [
            {"name": "x", "containerEdits": {"env": ["A=\ud800"]}}]})
        old.save()
        assert "a.example/y=x" in Registry((str(low),), cache=ValidatedSpecCache(tmp_path / "validated.json")).devices
    registry = Registry((str(low),), cache=ValidatedSpecCache(tmp_path / "validated.json"))
    assert registry.devices == {} and "lone surrogate" in str(registry.problems[0])


def test_cache_forgets_removed_files_and_survives_an_unwritable_path(dirs, tmp_path):
    low, _ = dirs
    a = write(low / "a.json")
    write(low / "b.json", kind="other.example/k")
    cache = ValidatedSpecCache(tmp_path / "cache.json")
    Registry((str(low),), cache=cache)
    a.unlink()
    Registry((str(low),), cache=cache)
    stored = json.loads((tmp_path / "cache.json").read_text())["entries"]
    assert [e[0] for e in stored] == [str(low / "b.json")]
    blocked = tmp_path / "file"
    blocked.write_text("")
    registry = Registry((str(low),), cache=ValidatedSpecCache(blocked / "cache.json"))  # parent is a file
    assert list(registry.devices) == ["other.example/k=dev0"]


def test_open_registry_uses_the_configured_dirs(dirs):
    from cdi.config import parse_config
    from cdi.registry import open_registry

    low, high = dirs
    write(high / "a.json")
    config = parse_config(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{low}", "{high}"]\n', "c.toml")
    registry = open_registry(config, cache_path=None)
    assert registry.spec_dirs == (str(low), str(high)) and "vendor.example/cls=dev0" in registry.devices


def test_cache_path_from_environment(dirs, tmp_path, monkeypatch):
    from cdi.config import parse_config
    from cdi.registry import DEFAULT_CACHE_PATH, default_cache_path, open_registry

    assert default_cache_path({}) == DEFAULT_CACHE_PATH
    assert default_cache_path({"NVIDIA_CTK_CDI_CACHE_FILE": ""}) is None
    low, _ = dirs
    write(low / "a.json")
    monkeypatch.setenv("NVIDIA_CTK_CDI_CACHE_FILE", str(tmp_path / "c.json"))
    open_registry(parse_config(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{low}"]\n', "c.toml"))
    assert json.loads((tmp_path / "c.json").read_text())["entries"][0][0] == str(low / "a.json")


def test_cdi_mode_path_from_request_to_oci_spec(dirs):
    """What the shim does in cdi mode: request -> qualified names -> registry -> edits applied."""
    from cdi.config import Config
    from cdi.request import resolve_device_request
    from cdi.spec import ContainerEdits, Device, DeviceNode, Spec
    from cdi.spec_file import write_spec

    low, _ = dirs
    node = DeviceNode(path="/dev/nvidia1", type="c", major=195, minor=1, file_mode=0o666)
    spec = Spec(kind="nvidia.com/gpu",
                devices=[Device(name="1:0", container_edits=ContainerEdits(env=["MIG=1:0"], device_nodes=[node])),
                         Device(name="GPU-abcd", container_edits=ContainerEdits(env=["UUID=1"]))],
                container_edits=ContainerEdits(env=["NVIDIA_VISIBLE_DEVICES=void"]))
    write_spec(spec, low / "nvidia.yaml")
    oci = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=1:0,GPU-ABCD"]}}
    request = resolve_device_request(oci, Config())
    result = inject_devices(oci, request.cdi_device_names(), Registry((str(low),)))
    assert result["process"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void", "MIG=1:0", "UUID=1"]
    assert result["linux"]["devices"] == [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1,
                                           "fileMode": 0o666}]


def test_yaml_documents_are_kept_so_no_yaml_parser_is_needed(dirs, tmp_path, monkeypatch):
    import cdi.registry

    low, _ = dirs
    spec = low / "nvidia.yaml"
    spec.write_text('cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "1:0"\n  containerEdits: {env: [A=1]}\n')
    write(low / "other.json")
    cache_file = tmp_path / "cache.json"
    Registry((str(low),), cache=ValidatedSpecCache(cache_file))
    parsed = []
    real_parse = cdi.registry.parse_spec_text
    monkeypatch.setattr(cdi.registry, "parse_spec_text", lambda text, path: parsed.append(path) or real_parse(text, path))
    registry = Registry((str(low),), cache=ValidatedSpecCache(cache_file))
    assert registry.devices["nvidia.com/gpu=1:0"].device.container_edits.env == ["A=1"]
    assert parsed == [str(low / "other.json")]  # JSON is parsed (cheap), YAML comes from the cache
    spec.write_text(spec.read_text().replace("A=1", "A=2"))
    registry = Registry((str(low),), cache=ValidatedSpecCache(cache_file))
    assert registry.devices["nvidia.com/gpu=1:0"].device.container_edits.env == ["A=2"]
    assert str(spec) in parsed


def test_tampered_cache_entries_are_ignored(dirs, tmp_path):
    low, _ = dirs
    write(low / "a.json")
    cache_file = tmp_path / "cache.json"
    cache_file.write_text(json.dumps({"schema": "x", "entries": [[1, 2]]}))
    os.chmod(cache_file, 0o600)
    assert "vendor.example/cls=dev0" in Registry((str(low),), cache=ValidatedSpecCache(cache_file)).devices
    cache_file.write_text("not json")
    assert "vendor.example/cls=dev0" in Registry((str(low),), cache=ValidatedSpecCache(cache_file)).devices
