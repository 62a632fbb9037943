"""The spec-validation verdict cache (cdi.spec_cache): a bad cache costs a validation, never a start;
verdicts are kept per spec file, so callers with other spec dirs sharing one cache do not evict each
other; the shim keeps it where NVIDIA_CTK_CDI_CACHE_FILE says."""
from __future__ import annotations

import json
import os
import random

import pytest

import cdi.validate
from cdi.registry import Registry, cache_path_in, default_cache_path
from cdi.spec_cache import ValidatedSpecCache
from tests.unit.runtime_shim.shim_env import (  # noqa: F401  (bindir: a module fixture)
    bindir, make_bundle, make_shim_env, minimal_spec)


def write_spec(path, kind="vendor.example/cls", name="dev0"):
    path.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": kind,
                                "devices": [{"name": name, "containerEdits": {"env": [f"FROM={path.name}"]}}]}))
    return path


def write_yaml_spec(path, kind="yaml.example/cls"):
    path.write_text(f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n- name: \"0\"\n  containerEdits: {{env: [Y=1]}}\n")
    return path


@pytest.fixture
def spec_dir(tmp_path):
    path = tmp_path / "cdi"
    path.mkdir()
    write_spec(path / "a.json")
    write_yaml_spec(path / "b.yaml")
    return path


def listed(spec_dir, cache_path):
    return sorted(Registry((str(spec_dir),), cache=ValidatedSpecCache(cache_path)).devices)


EXPECTED = ["vendor.example/cls=dev0", "yaml.example/cls=0"]


def schema_text() -> str:
    return cdi.validate.schema_key()


def write_cache(path, entries, schema=None):
    path.write_text(json.dumps({"schema": schema or schema_text(), "entries": entries}))
    os.chmod(path, 0o600)


# -- a bad cache costs speed only ---------------------------------------------------------------------

def test_a_directory_or_a_fifo_as_the_cache(spec_dir, tmp_path):
    as_dir = tmp_path / "dir.json"
    as_dir.mkdir()
    assert listed(spec_dir, as_dir) == EXPECTED
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert listed(spec_dir, fifo) == EXPECTED   # opened O_NONBLOCK: no hang


@pytest.mark.parametrize("document", [
    {"schema": None, "entries": 5},
    {"entries": {"a": 1}},
    [1, 2],
    "text",
    {"entries": [[["x"], 1, 2, 3, 4, 5, None]]},          # a list where the path goes: unhashable
    {"entries": [[{"a": 1}, 1, 2, 3, 4, 5, None]]},
    {"entries": [["/p", 1, 2, 3, 4, 5, 6]]},
    {"entries": [["/p", 1, 2, 3, 4, 5]]},
    {"entries": [None, 5, "x", [], {}]},
])
def test_wrongly_shaped_caches(spec_dir, tmp_path, document):
    cache = tmp_path / "cache.json"
    if isinstance(document, dict) and "schema" not in document:
        document = {"schema": schema_text(), **document}
    cache.write_text(json.dumps(document))
    os.chmod(cache, 0o600)
    assert listed(spec_dir, cache) == EXPECTED


def test_a_damaged_verdict_is_judged_again(spec_dir, tmp_path):
    """Entries of the right shape for the very files, with documents that are no spec: the files are
    read and validated again (and still listed), the cache is mended."""
    cache = tmp_path / "cache.json"
    assert listed(spec_dir, cache) == EXPECTED
    entries = json.loads(cache.read_text())["entries"]
    for entry in entries:
        entry[6] = {"devices": 5} if entry[0].endswith(".yaml") else entry[6]
    write_cache(cache, entries)
    assert listed(spec_dir, cache) == EXPECTED
    yaml_entry = next(e for e in json.loads(cache.read_text())["entries"] if e[0].endswith(".yaml"))
    assert yaml_entry[6]["kind"] == "yaml.example/cls"
    for entry in entries:   # a YAML file's verdict without its document
        entry[6] = None
    write_cache(cache, entries)
    assert listed(spec_dir, cache) == EXPECTED


def test_random_caches(spec_dir, tmp_path):
    """Property: whatever JSON the cache holds, the same devices are listed (fixed seed)."""
    rng = random.Random(16_3)
    cache = tmp_path / "cache.json"
    assert listed(spec_dir, cache) == EXPECTED
    good = json.loads(cache.read_text())["entries"]
    pieces = [None, True, 0, -1, 2 ** 70, 1.5, "", "/x", [], {}, {"devices": []}, {"kind": 1}, [1] * 7,
              str(spec_dir / "a.json"), str(spec_dir / "b.yaml")]
    for _ in range(300):
        entries = json.loads(json.dumps(good))
        for _ in range(rng.randrange(1, 4)):
            entry = rng.choice([e for e in entries if isinstance(e, list) and e] or [[None]])
            if rng.random() < 0.2:
                entries.append(rng.choice(pieces))
            elif rng.random() < 0.2:
                entry.pop(rng.randrange(len(entry)))
            else:
                entry[rng.randrange(len(entry))] = rng.choice(pieces)
        write_cache(cache, entries)
        assert listed(spec_dir, cache) == EXPECTED


def test_a_cache_that_cannot_be_written(spec_dir, tmp_path):
    blocked = tmp_path / "blocked.json"
    blocked.mkdir()
    (blocked / "x").write_text("")   # a non-empty directory: the rename onto it fails
    assert listed(spec_dir, blocked) == EXPECTED
    assert listed(spec_dir, blocked) == EXPECTED
    assert sorted(os.listdir(tmp_path / "blocked.json")) == ["x"]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".cdi-cache.")]


# -- one cache, callers with other spec dirs ----------------------------------------------------------

def test_callers_with_other_spec_dirs_share_the_cache(tmp_path, monkeypatch):
    """Two configs with their own spec dirs and one cache dir: once both have run, neither validates
    nor rewrites the cache again (the shim validated on every create before: 4.4x runc)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    write_spec(first / "a.json", kind="first.example/x")
    write_yaml_spec(second / "b.yaml", kind="second.example/y")
    cache = tmp_path / "cache.json"
    assert listed(first, cache) == ["first.example/x=dev0"]
    assert listed(second, cache) == ["second.example/y=0"]
    written = os.stat(cache).st_mtime_ns, os.stat(cache).st_ino

    def no_validation(*args, **kwargs):
        raise AssertionError("validated again")

    monkeypatch.setattr(cdi.validate, "validate_document", no_validation)
    for _ in range(2):
        assert listed(first, cache) == ["first.example/x=dev0"]
        assert listed(second, cache) == ["second.example/y=0"]
    assert (os.stat(cache).st_mtime_ns, os.stat(cache).st_ino) == written


def test_files_gone_from_a_listed_dir_are_forgotten(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    gone = write_spec(first / "gone.json", kind="first.example/x")
    write_spec(second / "b.json", kind="second.example/y")
    cache = tmp_path / "cache.json"
    listed(first, cache)
    listed(second, cache)
    gone.unlink()
    listed(first, cache)
    assert [e[0] for e in json.loads(cache.read_text())["entries"]] == [str(second / "b.json")]
    second_dir_removed = tmp_path / "second"
    for f in second_dir_removed.iterdir():
        f.unlink()
    second_dir_removed.rmdir()
    listed(second, cache)
    assert json.loads(cache.read_text())["entries"] == []


# -- where the shim keeps it --------------------------------------------------------------------------

def test_cache_paths():
    assert default_cache_path({}) == "/var/run/nvidia-container-toolkit/cdi-validated.json"
    assert default_cache_path({"NVIDIA_CTK_CDI_CACHE_FILE": "rel.json"}) is None
    assert cache_path_in({}, "/run/x") == "/run/x/cdi-validated.json"
    assert cache_path_in({"NVIDIA_CTK_CDI_CACHE_FILE": "/c/v.json"}, "/run/x") == "/c/v.json"
    assert cache_path_in({"NVIDIA_CTK_CDI_CACHE_FILE": ""}, "/run/x") is None
    assert cache_path_in({}, "relative") is None and cache_path_in({}, None) is None


@pytest.fixture
def shim(tmp_path, bindir):
    env = make_shim_env(tmp_path, bindir)
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    write_spec(spec_dir / "nvidia.json", kind="nvidia.com/gpu", name="0")
    env.write_config(f'mode = "cdi"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{spec_dir}"]\n')
    return env


def shim_create(shim, tmp_path, **env):
    bundle = make_bundle(tmp_path / "bundle", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    return shim.run("create", "--bundle", str(bundle), "ctr", env=shim.env(**env))


def test_the_shim_keeps_verdicts_where_nvidia_ctk_cdi_cache_file_says(shim, tmp_path):
    chosen = tmp_path / "chosen" / "verdicts.json"
    result = shim_create(shim, tmp_path, NVIDIA_CTK_CDI_CACHE_FILE=str(chosen))
    assert result.returncode == 0, result.stderr
    assert json.loads(chosen.read_text())["entries"][0][0] == str(tmp_path / "cdi" / "nvidia.json")
    assert not (shim.cache_dir / "cdi-validated.json").exists()
    result = shim_create(shim, tmp_path, NVIDIA_CTK_CDI_CACHE_FILE="")   # in memory only
    assert result.returncode == 0, result.stderr
    assert not (shim.cache_dir / "cdi-validated.json").exists()
    for entry in shim.cache_dir.glob("create-*.cache"):   # the same request again would not read the specs
        entry.unlink()
    assert shim_create(shim, tmp_path).returncode == 0                     # unset: in the cache dir
    assert (shim.cache_dir / "cdi-validated.json").exists()


@pytest.mark.parametrize("damage", ["directory", "entries", "not-a-list"])
def test_a_bad_cache_does_not_fail_the_shims_create(shim, tmp_path, damage):
    shim.cache_dir.mkdir(exist_ok=True)
    cache = shim.cache_dir / "cdi-validated.json"
    if damage == "directory":
        cache.mkdir()
    else:
        write_cache(cache, [[["x"], 1, 2, 3, 4, 5, None]] if damage == "entries" else 5)
    result = shim_create(shim, tmp_path)
    assert result.returncode == 0, result.stderr
    [call] = shim.calls()
    assert "FROM=nvidia.json" in json.loads(call["spec"])["process"]["env"]
