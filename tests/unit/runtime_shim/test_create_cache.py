"""The create cache: a GPU container's create edited by the C launcher (launcher/create_fastpath.c)
from what Python recorded (runtime_shim/create_cache.py).

The launcher's edits are held to Python's: the same config.json goes through Python (create cache
removed) and then through the launcher, and both results must be the same document; random config.json
shapes (env, mounts, devices, resources, hooks, user, null members) exercise cdi.apply's list semantics.
Everything the edits came from going stale, a request that differs, a cache file that is not ours or
not whole (cut short, a bit flipped), and a config.json that is not plain must each send the create
back to Python. A runtime that cannot be exec'd after the edits finds config.json put back."""
from __future__ import annotations

import json
import os
import random
import stat

import pytest

from cdi.config import Config
from cdi.request import resolve_device_request
from runtime_shim import create_cache, runtime_cache
from tests.support.damaged_files import damaged_copies
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


def reseal(path, change) -> None:
    """The entry at path with its lines changed by change(text), sealed as a writer would seal them."""
    body = runtime_cache.unsealed(path.read_bytes())
    path.write_bytes(runtime_cache.seal(change(body.decode()).encode()))


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
    text = (shim.spec_dir / "nvidia.json").read_text().replace(json.dumps(str(shim.root / "node-zero")),
                                                                json.dumps(str(node)))
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
    elif damage == "garbage":   # sealed again: what is refused is the key line that is not the key
        reseal(path, lambda text: text.replace("\nmode cdi\n", "\nmode cdi\nenv \"FORGED=1\"\nkey x\n"))
    else:
        reseal(path, lambda text: text.replace("\nconfig ", "\nconfig /elsewhere"))
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


@pytest.mark.parametrize("program", ["nvidia-container-runtime", "nvidia-container-runtime.legacy"])
def test_an_entry_cut_short_or_changed_is_never_applied(shim, tmp_path, program):
    """An entry is applied only whole and unchanged: cut at every line boundary, at many byte offsets,
    with a bit flipped anywhere, the create goes to Python, whose edits the runtime gets (valid JSON,
    the request's devices) and which writes the entry again."""
    spec = minimal_spec(["NVIDIA_VISIBLE_DEVICES=1"])
    expected, _ = by_python_then_launcher(shim, tmp_path, spec, program)
    [entry] = cache_files(shim)
    whole = entry.read_bytes()
    wrong = []
    for n, (what, damaged) in enumerate(damaged_copies(whole)):
        entry.write_bytes(damaged)
        shim.reset()
        result = shim.run("--root", str(shim.root / "state"), "create", "--bundle",
                          str(make_bundle(tmp_path / f"b{n}", spec)), "ctr", program=program)
        handed_over = shim.calls()[-1]["spec"] if shim.calls() else None
        try:
            document = json.loads(handed_over) if handed_over is not None else None
        except ValueError:
            document = "invalid JSON"
        if result.returncode != 0 or document != expected or not shim.python_ran():
            wrong.append(f"{what}: exit {result.returncode}, python ran: {shim.python_ran()}, "
                         f"edits {'right' if document == expected else document}")
        elif runtime_cache.unsealed(entry.read_bytes()) is None:
            wrong.append(f"{what}: the entry was not written again")
    assert not wrong, "\n".join(wrong[:10]) + f"\n({len(wrong)} wrong)"


def test_a_runtime_cache_cut_short_or_changed_is_never_used(shim, tmp_path):
    """The runtime cache lists the request markers last: cut after the first, a request by annotation
    would pass as "no GPU". Damaged anywhere, it is not used at all: Python edits config.json and writes
    the cache again."""
    spec = minimal_spec(annotations={"cdi.k8s.io/x": "nvidia.com/gpu=0"})
    shim.reset()
    expected = create(shim, make_bundle(tmp_path / "first", spec))
    assert shim.python_ran() and "/dev/nvidia0" in [d["path"] for d in expected["linux"]["devices"]]
    [cache] = shim.cache_dir.glob("runtime-*.cache")
    whole = cache.read_bytes()
    wrong = []
    for n, (what, damaged) in enumerate(damaged_copies(whole, offsets=16, flips=16)):
        cache.write_bytes(damaged)
        shim.reset()
        document = create(shim, make_bundle(tmp_path / f"b{n}", spec))
        if document != expected or not shim.python_ran() or runtime_cache.unsealed(cache.read_bytes()) is None:
            wrong.append(f"{what}: python ran: {shim.python_ran()}, edits right: {document == expected}")
    assert not wrong, "\n".join(wrong[:10]) + f"\n({len(wrong)} wrong)"


def one_error_line(result, program="nvidia-container-runtime") -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"{program}: error: "), result.stderr
    return lines[0]


def test_a_runtime_removed_since_the_cache_leaves_config_json_as_it_was(shim, tmp_path):
    """The runtime is a path outside PATH (no search-dir line sees it go): removed, the launcher must
    not edit config.json before finding out; Python then says which runtime is missing."""
    spec, _ = cached_bundle(shim, tmp_path)
    shim.runtime.rename(tmp_path / "runc-elsewhere")
    bundle = make_bundle(tmp_path / "b", spec)
    before = (bundle / "config.json").read_bytes()
    shim.reset()
    result = shim.run("--root", str(shim.root / "state"), "create", "--bundle", str(bundle), "ctr")
    assert str(shim.runtime) in one_error_line(result)
    assert (bundle / "config.json").read_bytes() == before
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]


@pytest.mark.parametrize("side", ["launcher", "python"])
def test_a_runtime_that_fails_to_exec_after_the_edits_rolls_them_back(shim, tmp_path, side):
    """A runtime that passes every check and still fails at the exec (here: open for writing, ETXTBSY):
    config.json is put back as it was, by the launcher and by Python, and the one error line names
    the runtime."""
    spec, _ = cached_bundle(shim, tmp_path)
    if side == "python":
        for path in cache_files(shim):
            path.unlink()
    bundle = make_bundle(tmp_path / "b", spec)
    before = (bundle / "config.json").read_bytes()
    shim.reset()
    writer = os.open(shim.runtime, os.O_WRONLY)
    try:
        result = shim.run("--root", str(shim.root / "state"), "create", "--bundle", str(bundle), "ctr")
    finally:
        os.close(writer)
    assert (bundle / "config.json").read_bytes() == before
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]
    line = one_error_line(result)
    assert "cannot execute the low-level runtime" in line and str(shim.runtime) in line, line
    assert "config.json is as it was" in line


def test_unsealed_gives_the_lines_only_of_a_whole_unchanged_file():
    body = "".join(f"check 1 2 3 4 5 6 7 /dev/nvidia{i}\n" for i in range(40)).encode()
    sealed = runtime_cache.seal(body)
    assert runtime_cache.unsealed(sealed) == body
    assert runtime_cache.seal_checksum(b"") == 0xCBF29CE484222325   # FNV-1a's offset basis: no step
    for what, damaged in damaged_copies(sealed, offsets=len(sealed), flips=len(sealed)):
        assert runtime_cache.unsealed(damaged) is None, what
