"""The create cache: a GPU container's create edited by the C launcher (libcontainer_c/create_fastpath.c)
from what Python recorded (runtime_shim/create_cache.py).

The launcher's edits are held to Python's: the same config.json goes through Python (create cache
removed) and then through the launcher, and both results must be the same document; random config.json
shapes (env, mounts, devices, resources, hooks, user, null members) exercise cdi.apply's list semantics.
Everything the edits came from going stale, a request that differs, a cache file that is not ours,
and a config.json that is not plain must each send the create back to Python."""
from __future__ import annotations

import json
import os
import random
import stat

import pytest

from cdi.config import Config
from cdi.request import resolve_device_request
from runtime_shim import create_cache
from tests.unit.runtime_shim.shim_env import (  # noqa: F401  (bindir: a module fixture)
    DOCKER_HOOK, bindir, make_bundle, make_cdi_shim_env, minimal_spec)

FROM_CACHE = "from the create cache"


@pytest.fixture
def shim(tmp_path, bindir):
    return make_cdi_shim_env(tmp_path, bindir)


def create(shim, bundle, program="nvidia-container-runtime", env=None):
    result = shim.run("--root", str(shim.root / "state"), "create", "--bundle", str(bundle), "ctr",
                      program=program, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads((bundle / "config.json").read_text())


def cache_files(shim) -> list:
    return sorted(shim.cache_dir.glob("create-*.cache")) if shim.cache_dir.exists() else []


def by_python_then_launcher(shim, tmp_path, spec, program="nvidia-container-runtime", env=None):
    """(Python's config.json, the launcher's) for the same spec; asserts which side did each."""
    for path in cache_files(shim):
        path.unlink()
    shim.reset()
    python_doc = create(shim, make_bundle(tmp_path / "py", spec), program, env)
    assert shim.python_ran()
    assert len(cache_files(shim)) == 1
    shim.reset()
    launcher_doc = create(shim, make_bundle(tmp_path / "c", spec), program, env)
    assert not shim.python_ran() and FROM_CACHE in shim.debug_log.read_text()
    return python_doc, launcher_doc


def python_runs(shim, bundle, program="nvidia-container-runtime") -> bool:
    shim.reset()
    create(shim, bundle, program)
    return shim.python_ran()


DESTINATIONS = ["/proc", "/dev", "/dev/shm", "/etc/hosts", "/usr/lib/libfake.so", "/usr/lib", "/a/../b/c", "//x/y",
                "rel/path", "/", "/a/./b", "../up", "/usr/lib/x/../../lib/z", None]


def random_spec(rng: random.Random) -> dict:
    env = [rng.choice(["FOO=1", "NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                       "BAR", "NVIDIA_REQUIRE_X=", "PATH=/usr/bin"]) for _ in range(rng.randrange(4))]
    env.append(f"NVIDIA_VISIBLE_DEVICES={rng.choice(['0', '1', 'all', 'GPU-abc', '0,1'])}")
    spec = minimal_spec(env)
    mounts = []
    for _ in range(rng.randrange(8)):
        mount = {"type": "bind"}
        destination = rng.choice(DESTINATIONS)
        if destination is not None:
            mount["destination"] = destination
        if rng.random() < 0.8:
            mount["source"] = "/s"
        mounts.append(mount)
    if mounts or rng.random() < 0.5:
        spec["mounts"] = mounts
    spec["linux"] = rng.choice([
        None, {}, {"devices": None}, {"devices": [{"path": "/dev/nvidia1", "type": "c", "major": 1, "minor": 1}]},
        {"devices": [{"path": "/dev/other", "type": "c", "major": 1, "minor": 2}, {"type": "c"}]},
        {"resources": None}, {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
        {"resources": {"memory": {"limit": 1}}, "namespaces": [{"type": "pid"}]}])
    if spec["linux"] is None:
        del spec["linux"]
    hooks = rng.choice([None, "null", {"prestart": [DOCKER_HOOK]}, {"prestart": [{"path": "/bin/true"}, DOCKER_HOOK]},
                        {"prestart": []}, {"prestart": None, "createContainer": [{"path": "/bin/x"}]},
                        {"poststop": [{"path": "/bin/true", "args": ["a"]}]},
                        {"prestart": [{"path": "/x", "args": ["/usr/bin/nvidia-container-runtime-hook"]}]}])
    if hooks == "null":
        spec["hooks"] = None
    elif hooks is not None:
        spec["hooks"] = hooks
    user = rng.choice([None, {"uid": 1000, "gid": 1001}, {"uid": 0, "gid": 0}, {"uid": 5}])
    if user is not None:
        spec["process"]["user"] = user
    if rng.random() < 0.3:
        spec["annotations"] = {"org.example": "x"}
    if rng.random() < 0.3:
        spec["x-unknown"] = {"kept": [1, 2.5, None, True]}
    return spec


@pytest.mark.parametrize("seed", range(30))
def test_launcher_edits_as_python_does(shim, tmp_path, seed):
    spec = random_spec(random.Random(seed))
    python_doc, launcher_doc = by_python_then_launcher(shim, tmp_path, spec)
    assert launcher_doc == python_doc


def test_launcher_edits_a_docker_like_config_as_python_does(shim, tmp_path):
    spec = minimal_spec(["HOSTNAME=abc", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1"])
    spec["mounts"] = [{"destination": d, "type": "bind", "source": "/s", "options": ["rbind"]}
                      for d in ("/proc", "/dev", "/dev/pts", "/dev/shm", "/etc/resolv.conf", "/etc/hosts")]
    spec["hooks"] = {"prestart": [DOCKER_HOOK]}
    spec["linux"]["resources"] = {"devices": [{"allow": False, "access": "rwm"}]}
    python_doc, launcher_doc = by_python_then_launcher(shim, tmp_path, spec)
    assert launcher_doc == python_doc
    assert "prestart" not in launcher_doc["hooks"]
    # a second container of the same request with another name and host name: from the cache too
    spec["process"]["env"][1] = "HOSTNAME=def"
    shim.reset()
    other = create(shim, make_bundle(tmp_path / "other", spec))
    assert not shim.python_ran()
    assert other["process"]["env"] == ["PATH=/bin", "HOSTNAME=def", *python_doc["process"]["env"][2:]]
    assert {**other, "process": python_doc["process"]} == python_doc


@pytest.mark.parametrize("hooks", [None, {"prestart": [{"path": "/bin/true"}]}, {"prestart": [DOCKER_HOOK]}])
def test_legacy_mode_from_the_cache_as_python_does(shim, tmp_path, bindir, hooks):
    spec = minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    if hooks:
        spec["hooks"] = hooks
    program = "nvidia-container-runtime.legacy"
    python_doc, launcher_doc = by_python_then_launcher(shim, tmp_path, spec, program)
    assert launcher_doc == python_doc
    prestart = launcher_doc["hooks"]["prestart"]
    assert sum(os.path.basename(h["path"]) == "nvidia-container-runtime-hook" for h in prestart) == 1


def cached_bundle(shim, tmp_path, env=("NVIDIA_VISIBLE_DEVICES=1",)):
    """A bundle whose request is in the cache, and the spec it came back from the launcher with."""
    spec = minimal_spec(list(env))
    _, doc = by_python_then_launcher(shim, tmp_path, spec)
    return spec, doc


def test_another_request_goes_to_python(shim, tmp_path):
    spec, _ = cached_bundle(shim, tmp_path)
    for env in (["NVIDIA_VISIBLE_DEVICES=0"], ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=all"],
                ["NVIDIA_VISIBLE_DEVICES=1", "CUDA_VERSION=12.0"]):
        assert python_runs(shim, make_bundle(tmp_path / env[-1], minimal_spec(env)))
    privileged = minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"])
    privileged["process"]["capabilities"] = {"bounding": ["CAP_SYS_ADMIN"]}
    assert python_runs(shim, make_bundle(tmp_path / "priv", privileged))
    annotated = minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"], annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"})
    assert python_runs(shim, make_bundle(tmp_path / "ann", annotated))
    user = minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"])
    user["process"]["user"] = {"uid": 7, "gid": 7}
    assert python_runs(shim, make_bundle(tmp_path / "user", user))
    # and the cached one still is served
    assert not python_runs(shim, make_bundle(tmp_path / "again", spec))


def test_a_changed_spec_dir_or_file_goes_to_python(shim, tmp_path):
    spec, _ = cached_bundle(shim, tmp_path)
    (shim.spec_dir / "nvidia.json").write_text((shim.spec_dir / "nvidia.json").read_text())   # same text, new ctime
    assert python_runs(shim, make_bundle(tmp_path / "b1", spec))
    assert not python_runs(shim, make_bundle(tmp_path / "b2", spec))
    (shim.spec_dir / "other.json").write_text("{}")   # a new spec file (invalid: a warning, and no cache)
    assert python_runs(shim, make_bundle(tmp_path / "b3", spec))
    assert python_runs(shim, make_bundle(tmp_path / "b4", spec))


def test_a_changed_host_device_node_goes_to_python(shim, tmp_path):
    node = tmp_path / "nvidia-fake"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(node, 0o666)   # whatever the umask
    text = (shim.spec_dir / "nvidia.json").read_text().replace('"/dev/zero"', json.dumps(str(node)))
    (shim.spec_dir / "nvidia.json").write_text(text)
    spec, doc = cached_bundle(shim, tmp_path)
    assert [d.get("fileMode") for d in doc["linux"]["devices"] if d["path"] == "/dev/nvidia1"] == [0o666]
    os.chmod(node, 0o600)
    shim.reset()
    assert [d.get("fileMode") for d in create(shim, make_bundle(tmp_path / "b", spec))["linux"]["devices"]
            if d["path"] == "/dev/nvidia1"] == [0o600]
    assert shim.python_ran()


def test_a_changed_config_goes_to_python(shim, tmp_path):
    spec, _ = cached_bundle(shim, tmp_path)
    shim.write_config(f'mode = "cdi"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{shim.spec_dir}"]\n')
    assert python_runs(shim, make_bundle(tmp_path / "b", spec))


@pytest.mark.parametrize("damage", ["group-writable", "foreign", "symlink", "garbage", "other-config"])
def test_a_cache_file_not_ours_goes_to_python(shim, tmp_path, damage):
    spec, _ = cached_bundle(shim, tmp_path)
    [path] = cache_files(shim)
    if damage == "group-writable":
        path.chmod(0o664)
    elif damage == "foreign":
        os.chown(path, 12345, 12345)
    elif damage == "symlink":
        real = tmp_path / "real.cache"
        path.rename(real)
        path.symlink_to(real)
    elif damage == "garbage":
        path.write_text(path.read_text().replace("\nmode cdi\n", "\nmode cdi\nenv \"FORGED=1\"\nkey x\n"))
    else:
        path.write_text(path.read_text().replace("\nconfig ", "\nconfig /elsewhere"))
    assert python_runs(shim, make_bundle(tmp_path / "b", spec))


@pytest.mark.parametrize("change", ["backslash", "wrong-shape", "repeated-key", "temp-file", "many-members"])
def test_a_config_json_that_is_not_plain_goes_to_python(shim, tmp_path, change):
    spec, _ = cached_bundle(shim, tmp_path)
    if change == "wrong-shape":
        spec["root"]["path"] = 1
    elif change == "many-members":   # more than the launcher lists (its repeated-key check is quadratic)
        spec["annotations"] = {f"org.example/{i}": "x" for i in range(1025)}
    bundle = make_bundle(tmp_path / "b", spec)
    path = bundle / "config.json"
    text = path.read_text()
    if change == "backslash":
        path.write_text(text.replace('"PATH=/bin"', '"PATH=\\/bin"'))
    elif change == "repeated-key":
        path.write_text(text.replace('"process": {', '"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], '))
    elif change == "temp-file":
        (bundle / ".config.json.1.abcdef01.tmp").write_text("left by a killed writer")
    shim.reset()
    result = shim.run("--root", str(shim.root / "state"), "create", "--bundle", str(bundle), "ctr")
    assert shim.python_ran()
    if change == "wrong-shape":
        assert result.returncode == 1 and "is not a string (root.path)" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
    if change == "temp-file":
        assert not (bundle / ".config.json.1.abcdef01.tmp").exists()


def test_the_edits_keep_the_file_mode_and_leave_no_temp_file(shim, tmp_path):
    spec, _ = cached_bundle(shim, tmp_path)
    bundle = make_bundle(tmp_path / "b", spec, mode=0o640)
    assert not python_runs(shim, bundle)
    assert stat.S_IMODE(os.stat(bundle / "config.json").st_mode) == 0o640
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]


def test_a_warning_means_no_cache(shim, tmp_path):
    (shim.spec_dir / "broken.json").write_text("{")
    bundle = make_bundle(tmp_path / "b", minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    shim.run("--root", str(shim.root / "state"), "create", "--bundle", str(bundle), "ctr")
    assert cache_files(shim) == []


def test_the_request_view_gives_the_request_of_the_whole_config():
    """The key decides the request because the shim resolves it from request_view: the view must give
    what the whole config.json gives (random configs, env, annotations, mounts, capabilities)."""
    config = Config()
    rng = random.Random(7)
    names = ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_VERSION", "NVIDIA_REQUIRE_CUDA",
             "NVIDIA_DISABLE_REQUIRE", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_IMEX_CHANNELS", "OTHER", "NVIDIA_X"]
    values = ["0", "all", "1,GPU-abc", "none", "void", "compute", "12.0", "cuda>=11", "true", "0:1", ""]
    for _ in range(500):
        spec = minimal_spec([f"{rng.choice(names)}={rng.choice(values)}" for _ in range(rng.randrange(5))])
        if rng.random() < 0.3:
            spec["process"]["capabilities"] = {"bounding": rng.sample(["CAP_SYS_ADMIN", "CAP_CHOWN"], rng.randrange(3))}
        if rng.random() < 0.3:
            spec["annotations"] = {rng.choice(["cdi.k8s.io/a", "other/b"]): rng.choice(["nvidia.com/gpu=0", "x"])}
        if rng.random() < 0.3:
            spec["mounts"] = [{"destination": "/var/run/nvidia-container-devices/" + rng.choice(["0", "all"]),
                               "source": rng.choice(["/dev/null", "/x"])}, {"destination": "/proc", "source": "proc"}]
        outcomes = []
        for document in (spec, create_cache.request_view(spec, config)):
            try:
                outcomes.append(resolve_device_request(document, config))
            except Exception as exc:   # the same error either way
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1], spec


def test_at_most_max_entries_files_per_config_the_oldest_go(tmp_path, monkeypatch):
    monkeypatch.setattr(create_cache, "MAX_ENTRIES", 5)
    environ = {"NVIDIA_CTK_CACHE_DIR": str(tmp_path / "cache")}
    config = tmp_path / "config.toml"
    config.write_text("")
    identity = create_cache.runtime_cache.config_identity(str(config))
    for i in range(8):
        create_cache.write_entry(environ, str(config), identity, [f"env NVIDIA_VISIBLE_DEVICES={i}"], "cdi", [],
                                 ['env "NVIDIA_VISIBLE_DEVICES=void"'])
        os.utime(max((tmp_path / "cache").iterdir(), key=lambda p: p.stat().st_mtime_ns), ns=(i, i))
    kept = sorted((tmp_path / "cache").glob("create-*.cache"))
    assert len(kept) == 5
    assert sorted(p.read_text().split("key env NVIDIA_VISIBLE_DEVICES=")[1][0] for p in kept) == ["3", "4", "5", "6", "7"]
