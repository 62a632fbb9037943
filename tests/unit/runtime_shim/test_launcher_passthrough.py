"""The C launcher's passthrough: every command but create/run goes to the low-level runtime without
Python, decided with the argv table the Python parser is tested with, and only while the cache the
Python side wrote still describes the config, the PATH and the runtime."""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from runtime_shim import runtime_cache
from runtime_shim.runc_argv import parse_runc_argv
from tests.unit.runtime_shim.argv_table import CASES, parametrize_cases
from tests.unit.runtime_shim.shim_env import (  # noqa: F401  (bindir: a module fixture)
    bindir, make_bundle, make_shim_env, minimal_spec)


@pytest.fixture
def shim(tmp_path, bindir):
    env = make_shim_env(tmp_path, bindir)
    first = env.run("state", "warm-up")  # Python resolves the runtime and writes the cache
    assert first.returncode == 0, first.stderr
    assert env.python_ran()
    env.reset()
    return env


@parametrize_cases()
def test_launcher_decides_like_the_table(shim, case):
    result = shim.run(*case["argv"], env=shim.env(CALLER_ONLY="kept", LD_LIBRARY_PATH="/caller/lib"))
    needs_python = case["command"] in ("create", "run")
    assert shim.python_ran() == needs_python, (result.stderr, shim.debug_log.read_text())
    if not case["modify"]:
        # unmodified commands, from C or from Python: the runtime gets the exact argv and the caller's env
        assert result.returncode == 0, result.stderr
        [call] = shim.calls()
        assert call["argv"] == [str(shim.runtime), *case["argv"]]
        assert call["env"]["CALLER_ONLY"] == "kept"
        assert call["env"]["LD_LIBRARY_PATH"] == "/caller/lib"
        # and, of ours, only the path it was started as: a shim it runs again refuses (test_runtime_identity)
        assert {k: v for k, v in call["env"].items() if k.startswith("GCT_")} == {
            "GCT_RUNTIME_STARTED_BY_SHIM": str(shim.runtime)}


MODIFIED = [c for c in CASES if c["modify"]]


def _localise(case, root):
    """The case's argv with its bundles moved under root (the parsing does not depend on the path)."""
    argv = [a.replace("/nonexistent-gct", str(root)) for a in case["argv"]]
    bundle = case["bundle"].replace("/nonexistent-gct", str(root))
    return argv, root / bundle if bundle else root  # relative bundles and "" are under the cwd


@parametrize_cases(MODIFIED)
def test_create_without_a_request_needs_no_python(shim, case):
    argv, bundle = _localise(case, shim.root)
    make_bundle(bundle, minimal_spec(["FOO=bar"], annotations={"other.io/x": "y"}))
    result = shim.run(*argv)
    assert result.returncode == 0, result.stderr
    assert not shim.python_ran()
    printed = case["bundle"].replace("/nonexistent-gct", str(shim.root)) or "."  # as given; "." for the cwd
    assert (f"passthrough of '{case['command']}' without a GPU request (bundle {printed})"
            in shim.debug_log.read_text())
    [call] = shim.calls()
    assert call["argv"] == [str(shim.runtime), *argv]


@parametrize_cases(MODIFIED)
def test_create_with_a_marker_goes_to_python(shim, case):
    argv, bundle = _localise(case, shim.root)
    make_bundle(bundle, minimal_spec(["NVIDIA_VISIBLE_DEVICES=void"]))
    assert shim.run(*argv).returncode == 0
    assert shim.python_ran()
    assert "no GPU requested" in shim.debug_log.read_text()


@pytest.mark.parametrize("spec", [
    minimal_spec(["CUDA_VERSION=12.1"]),                                  # a legacy CUDA image: all GPUs
    minimal_spec(annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}),
    minimal_spec(["A=\\u004e"]),                                          # any backslash: a JSON escape could hide one
])
def test_what_could_be_a_request_goes_to_python(shim, tmp_path, spec):
    bundle = make_bundle(tmp_path / "b", spec)
    shim.run("create", "--bundle", str(bundle), "ctr")
    assert shim.python_ran()


def test_passthrough_is_logged_to_the_configured_debug_log(shim):
    assert shim.run("--root", "/r", "kill", "ctr", "9").returncode == 0
    log = shim.debug_log.read_text()
    assert "passthrough of 'kill' to " + str(shim.runtime) in log
    assert log.startswith('time="') and "level=debug" in log


def test_changed_config_sends_the_next_call_to_python(shim, tmp_path):
    other = tmp_path / "other-runc"
    other.write_text(shim.runtime.read_text())
    other.chmod(0o755)
    shim.write_config(runtimes=[str(other)])
    assert shim.run("state", "x").returncode == 0
    assert shim.python_ran()
    assert shim.calls()[0]["argv"][0] == str(other)
    shim.reset()
    assert shim.run("state", "y").returncode == 0  # the fresh cache serves the next call
    assert not shim.python_ran()
    assert shim.calls()[0]["argv"][0] == str(other)


def test_config_rewritten_with_the_same_size_and_mtime_is_still_noticed(shim):
    st = os.stat(shim.config)
    text = shim.config.read_text()
    time.sleep(0.01)
    shim.config.write_text(text.replace("debug", "DEBUG", 0))  # same bytes: only ctime moves
    os.utime(shim.config, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert shim.run("state", "x").returncode == 0
    assert shim.python_ran()


def test_a_different_path_sends_the_call_to_python(shim):
    assert shim.run("state", "x", env=shim.env(PATH="/usr/bin:/bin")).returncode == 0
    assert shim.python_ran()


def test_cache_writable_by_others_is_ignored(shim):
    cache = runtime_cache.cache_file(shim.env())
    os.chmod(cache, 0o666)
    assert shim.run("state", "x").returncode == 0
    assert shim.python_ran()
    assert os.stat(cache).st_mode & 0o777 == 0o644  # replaced by a good one


def test_cache_symlink_is_not_followed(shim, tmp_path):
    cache = runtime_cache.cache_file(shim.env())
    real = tmp_path / "elsewhere.cache"
    os.rename(cache, real)
    os.symlink(real, cache)
    assert shim.run("state", "x").returncode == 0
    assert shim.python_ran()


def test_runtime_gone_is_reported_by_python(shim):
    shim.runtime.unlink()
    result = shim.run("state", "x")
    assert result.returncode == 1
    assert result.stderr.startswith("nvidia-container-runtime: error: no low-level runtime found (tried ")
    assert result.stderr.count("\n") == 1


def test_config_that_is_not_toml_fails_every_command(shim):
    shim.config.write_text("this is = = not toml\n")
    result = shim.run("delete", "x")
    assert result.returncode == 1
    assert result.stderr.startswith("nvidia-container-runtime: error: invalid TOML")
    assert not shim.calls()


def test_missing_config_is_cached_as_missing(shim, tmp_path):
    env = shim.env(NVIDIA_CTK_CONFIG_FILE_PATH=str(tmp_path / "absent.toml"),
                   PATH=str(shim.runtime.parent))
    os.symlink(shim.runtime, tmp_path / "runc")  # the defaults: runc from PATH
    assert shim.run("state", "x", env=env).returncode == 0
    cached = runtime_cache.read_cache(runtime_cache.cache_file(env))
    assert cached["identity"] == ["missing"]
    assert cached["runtime"] == [str(tmp_path / "runc")]
    assert cached["request-marker"] == ["NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "cdi.k8s.io/"]
    assert "debug-log" not in cached
    assert shim.run("state", "y", env=env).returncode == 0
    assert [c["argv"][1:] for c in shim.calls()] == [["state", "x"], ["state", "y"]]


def test_the_shim_itself_is_never_its_own_runtime(shim):
    os.symlink(shim.shim, shim.root / "runc")
    env = shim.env(PATH=str(shim.root))  # no real runc after it
    shim.write_config(runtimes=["runc", str(shim.runtime)])
    assert shim.run("state", "x", env=env).returncode == 0
    assert shim.calls()[0]["argv"][0] == str(shim.runtime)


def test_cache_name_matches_the_launchers_hash():
    # FNV-1a 64 reference values
    assert runtime_cache.fnv1a64("") == 0xCBF29CE484222325
    assert runtime_cache.fnv1a64("a") == 0xAF63DC4C8601EC8C


def test_caches_of_deleted_configs_are_pruned(shim, tmp_path):
    gone = tmp_path / "gone.toml"
    gone.write_text(shim.config.read_text())
    assert shim.run("state", "x", env=shim.env(NVIDIA_CTK_CONFIG_FILE_PATH=str(gone))).returncode == 0
    gone_cache = runtime_cache.cache_file(shim.env(NVIDIA_CTK_CONFIG_FILE_PATH=str(gone)))
    missing_env = shim.env(NVIDIA_CTK_CONFIG_FILE_PATH=str(tmp_path / "never.toml"),
                           PATH=str(tmp_path))
    os.symlink(shim.runtime, tmp_path / "runc")
    assert shim.run("state", "x", env=missing_env).returncode == 0
    assert os.path.exists(gone_cache)
    gone.unlink()
    shim.write_config(runtimes=[str(shim.runtime), "runc"])  # a changed config: its cache is rewritten
    assert shim.run("state", "x").returncode == 0
    assert not os.path.exists(gone_cache)                                       # pruned
    assert os.path.exists(runtime_cache.cache_file(missing_env))                # "missing" is still true
    assert os.path.exists(runtime_cache.cache_file(shim.env()))


def test_a_runtime_installed_earlier_in_path_is_found(shim, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    os.symlink(shim.runtime, second / "runc")
    env = shim.env(PATH=f"{first}:{second}")
    shim.write_config(runtimes=["runc"])
    assert shim.run("state", "x", env=env).returncode == 0
    shim.reset()
    assert shim.run("state", "y", env=env).returncode == 0
    assert not shim.python_ran()  # cached
    newer = first / "runc"
    newer.write_text(shim.runtime.read_text())
    newer.chmod(0o755)
    assert shim.run("state", "z", env=env).returncode == 0
    assert shim.python_ran()
    assert shim.calls()[-1]["argv"][0] == str(newer)


def test_a_relative_path_entry_means_no_cache(shim, tmp_path):
    env = shim.env(PATH=f"bin:{shim.runtime.parent}", NVIDIA_CTK_CACHE_DIR=str(tmp_path / "other-cache"))
    shim.write_config(runtimes=[str(shim.runtime)])
    assert shim.run("state", "x", env=env).returncode == 0
    assert not (tmp_path / "other-cache").exists() or not os.listdir(tmp_path / "other-cache")


def test_generated_create_lines_never_scan_another_bundle(shim):
    """runc_argv.c's reading of a create's bundle against runtime_shim/runc_argv.py's (docs/c-twins.md), on
    generated create and run command lines (global and command flags in every spelling, values joined
    or apart, unknown flags, "--", ids): the bundle the Python parser names asks for a GPU, every other
    candidate (the cwd, the other directories) asks for none. The launcher may leave a line to Python
    (it declines what is unclear), but it must never pass a create through unedited: that would mean it
    read another bundle than Python, and so than runc."""
    rng = random.Random("runc bundle twin")
    dirs = {name: shim.root / name for name in ("b1", "b2", "b 3")}
    globals_ = [["--root", str(shim.root / "state")], ["--debug"], ["--log", "/dev/null"], ["--systemd-cgroup"],
                ["-root=" + str(shim.root / "state")], ["--log-format", "json"]]
    flags = [["--pid-file", "p"], ["--console-socket", "s"], ["--no-pivot"], ["--no-new-keyring"], ["-d"],
             ["--detach"], ["--preserve-fds", "1"], ["--keep"], ["--foo"], ["--"], ["-"], ["--pid-file=p"]]
    spellings = ["--bundle", "-bundle", "-b", "--b"]

    def line() -> list[str]:
        argv = [a for _ in range(rng.randint(0, 2)) for a in rng.choice(globals_)]
        argv.append(rng.choice(["create", "run"]))
        parts = [rng.choice(flags) for _ in range(rng.randint(0, 3))]
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            value = str(rng.choice([*dirs.values(), "b1", "b2", "b 3", ""]))
            parts.append([f"{rng.choice(spellings)}={value}"] if rng.random() < 0.3 else [rng.choice(spellings), value])
        parts.insert(rng.randint(0, len(parts)), [rng.choice(["ctr", "b1", "-x"])] * rng.choice([1, 1, 2]))
        return argv + [a for part in parts for a in part]

    checked = passed_through = 0
    for _ in range(400):
        argv = line()
        command = parse_runc_argv(argv)
        if command.command not in ("create", "run") or command.error:
            continue   # runc refuses it (or runs something else): no bundle to read
        bundle = Path(command.bundle_dir(str(shim.root)))
        for candidate in [shim.root, *dirs.values()]:
            asks = candidate == bundle
            make_bundle(candidate, minimal_spec(["NVIDIA_VISIBLE_DEVICES=void"] if asks else ["FOO=bar"]))
        shim.reset()
        shim.run(*argv)
        assert shim.python_ran(), (argv, bundle)
        checked += 1
        # the other way round (no candidate asks): the launcher passes what it reads clearly
        for candidate in [shim.root, *dirs.values()]:
            make_bundle(candidate, minimal_spec(["FOO=bar"]))
        shim.reset()
        shim.run(*argv)
        passed_through += not shim.python_ran()
    assert checked > 60 and passed_through > checked // 2, (checked, passed_through)
