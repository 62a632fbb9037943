"""Faults injected for real (issue 15): each must end in one error line, `<program>: error: ...`, with
what the program was given left as it was (config.json byte for byte, the spec file, no temp file, no
mount, process or cgroup), or, where the fault only costs speed (caches), in the right devices."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.shim_host import NVIDIA_CTK, SHIM, parse_gpu_report, shim_env, write_shim_config
from tests.reliability.containers import container_ids, expected, gpu_bundle, leftovers_of, lifecycle
from tests.support import leftovers
from tests.support.damaged_files import damaged_copies, spread
from tests.support.mountns import run_in_private_mount_ns

pytestmark = pytest.mark.e2e


def one_error_line(stderr: str, program: str) -> bool:
    lines = stderr.splitlines()
    return len(lines) == 1 and lines[0].startswith(f"{program}: error: ")


def shim_create(env: dict, bundle: Path, state: Path, log: Path, shim: Path = SHIM) -> tuple[int, str]:
    """`create` through the shim (nothing else); a container it made is deleted again with runc."""
    cid = "gct-fault-" + uuid.uuid4().hex[:10]
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w+") as err:
        code = subprocess.run([str(shim), "--root", str(state), "--log", str(log), "create", "--bundle", str(bundle),
                               cid], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=120).returncode
        err.seek(0)
        stderr = err.read()
    subprocess.run(["runc", "--root", str(state), "delete", "--force", cid], capture_output=True)
    return code, stderr


def copy_of_host(gpu_host, directory: Path):
    """A copy of the simulated host's driver root (with its device nodes) that a test may break."""
    root = directory / "gpu-host"
    subprocess.run(["cp", "-a", str(gpu_host.root), str(root)], check=True)
    return type(gpu_host)(root, gpu_host.spec_dir, gpu_host.gpu_uuids, gpu_host.mig_uuids, gpu_host.mig_caps)


def _nvml_library(root: Path) -> Path:
    return Path(os.path.realpath(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))


def break_nvml(root: Path, how: str, work: Path) -> None:
    library = _nvml_library(root)
    if how == "not-elf":
        library.write_bytes(b"this is not a shared object\n" * 10)
    elif how == "missing-symbol":  # a real shared object, without most of NVML
        source = work / "nvml.c"
        source.write_text("int nvmlInit_v2(void) { return 0; }\nint nvmlShutdown(void) { return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["not-elf", "missing-symbol"])
def test_broken_nvml_library(gpu_host, template, tmp_path, figures, how):
    """nvidia-ctk cdi generate and the shim in jit-cdi mode: one line; the spec file and config.json as
    they were. The legacy hook: the container does not start, the hook's error is one line."""
    host = copy_of_host(gpu_host, tmp_path)
    break_nvml(host.root, how, tmp_path)
    spec = tmp_path / "spec.json"
    spec.write_text("kept\n")
    generate = subprocess.run([str(NVIDIA_CTK), "cdi", "generate", "--driver-root", str(host.root), "-o", str(spec)],
                              capture_output=True, text=True, timeout=120)
    bundle = gpu_bundle(tmp_path / "bundle", template, "0")
    before = (bundle / "config.json").read_bytes()
    config = write_shim_config(tmp_path / "config.toml", host, mode="jit-cdi")
    code, stderr = shim_create(shim_env(config, tmp_path / "cache"), bundle, tmp_path / "state", tmp_path / "log")
    legacy = lifecycle(host, tmp_path / "legacy", "legacy")
    legacy_code, _, legacy_err = legacy.run(bundle)
    hook_lines = [line for line in legacy_err.splitlines() if "nvidia-container-runtime-hook: error:" in line]
    figures.update(generate_exit=generate.returncode, generate_stderr_lines=len(generate.stderr.splitlines()),
                   jit_cdi_exit=code, jit_cdi_stderr_lines=len(stderr.splitlines()), legacy_exit=legacy_code,
                   spec_kept=spec.read_text() == "kept\n")
    assert generate.returncode != 0 and one_error_line(generate.stderr, "nvidia-ctk"), generate.stderr
    assert spec.read_text() == "kept\n"
    assert code != 0 and one_error_line(stderr, "nvidia-container-runtime"), stderr
    assert legacy_code != 0 and len(hook_lines) == 1, legacy_err


@pytest.mark.parametrize("how", ["runtimes-path", "not-in-path", "not-executable"])
def test_low_level_runtime_missing(gpu_host, template, tmp_path, figures, how):
    """The low-level runtime is not there (or cannot be run): one line, config.json as it was."""
    bundle = gpu_bundle(tmp_path / "bundle", template, "0")
    before = (bundle / "config.json").read_bytes()
    runtime = {"runtimes-path": "/nonexistent/runc", "not-in-path": "runc",
               "not-executable": str(tmp_path / "runc")}[how]
    (tmp_path / "runc").write_text("#!/bin/sh\n")  # mode 0644
    config = write_shim_config(tmp_path / "config.toml", gpu_host, mode="cdi", runtime=runtime)
    env = shim_env(config, tmp_path / "cache")
    if how == "not-in-path":
        env["PATH"] = str(tmp_path / "empty-bin")
    code, stderr = shim_create(env, bundle, tmp_path / "state", tmp_path / "log")
    kept = (bundle / "config.json").read_bytes() == before
    figures.update(exit=code, stderr_lines=len(stderr.splitlines()), config_json_kept=kept)
    assert code != 0 and one_error_line(stderr, "nvidia-container-runtime"), stderr
    assert kept
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json", "rootfs"]


def test_enospc_while_rewriting_config_json(gpu_host, template, tmp_path, figures):
    """The bundle on a full tmpfs (in a private mount namespace): the rewrite fails with ENOSPC, and
    config.json is whole and unchanged, with no temp file beside it."""
    rootfs = template  # read only by this test: create fails before runc starts
    config = write_shim_config(tmp_path / "config.toml", gpu_host, mode="cdi")
    env = shim_env(config, tmp_path / "cache")
    small = tmp_path / "small"
    small.mkdir()

    def in_namespace():
        subprocess.run(["mount", "-n", "-t", "tmpfs", "-o", "size=64k", "gct-enospc", str(small)], check=True)
        bundle = small / "bundle"
        bundle.mkdir()
        subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
        document = json.loads((bundle / "config.json").read_text())
        document["root"] = {"path": str(rootfs)}
        document["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
        (bundle / "config.json").write_text(json.dumps(document))
        before = (bundle / "config.json").read_bytes()
        with open(small / "filler", "wb", buffering=0) as filler:  # fill the filesystem to the last byte
            try:
                while True:
                    filler.write(b"\0" * 4096)
                    filler.flush()
            except OSError:
                pass
        code, stderr = shim_create(env, bundle, tmp_path / "state", tmp_path / "log")
        return code, stderr, (bundle / "config.json").read_bytes() == before, sorted(os.listdir(bundle))

    code, stderr, kept, names = run_in_private_mount_ns(in_namespace)
    figures.update(exit=code, stderr_lines=len(stderr.splitlines()), config_json_kept=kept, bundle_files=names)
    assert code != 0 and one_error_line(stderr, "nvidia-container-runtime"), stderr
    assert "No space left on device" in stderr
    assert kept and names == ["config.json"], names


HOOK_KILLER = """#!/bin/sh
# the real prestart hook, SIGKILLed after {delay} s
state=$(cat)
printf '%s' "$state" | {hook} "$@" &
pid=$!
sleep {delay}
kill -9 $pid 2>/dev/null
wait $pid
"""


def test_hook_sigkilled_mid_injection(gpu_host, template, tmp_path, profile, figures):
    """The legacy prestart hook killed (SIGKILL) at several moments of its work: each kill that lands
    fails the start; nothing is left on the machine (mounts, processes, cgroups); the bundle, given its
    config.json back as the engine wrote it, then starts with the right devices."""
    hook = SHIM.with_name("nvidia-container-runtime-hook")
    delays = [f"{ms / 1000:g}" for ms in range(0, profile.hook_kill_until_ms + 1, profile.hook_kill_step_ms)]
    bundle = gpu_bundle(tmp_path / "bundle", template, "0")
    original = (bundle / "config.json").read_bytes()
    landed, runs = 0, []
    before = leftovers.take()
    for delay in delays:
        killer = tmp_path / f"hook-killer-{delay}"
        killer.write_text(HOOK_KILLER.format(hook=hook, delay=delay))
        killer.chmod(0o755)
        run = lifecycle(gpu_host, tmp_path / f"run-{delay}", "legacy")
        config = Path(run.env["NVIDIA_CTK_CONFIG_FILE_PATH"])
        config.write_text(config.read_text() + f'[nvidia-container-runtime-hook]\npath = "{killer}"\n')
        (bundle / "config.json").write_bytes(original)
        code, out, err = run.run(bundle, timeout=60)
        runs.append(run)
        if code != 0:
            landed += 1
            assert "exit status 137" in err or "signal: killed" in err, err
        else:
            assert {k: v for k, v in parse_gpu_report(out).items() if k != "libs"} == \
                expected(gpu_host, "0", "legacy")
    left = leftovers_of(before, [str(tmp_path) + "/", *container_ids(*runs)])
    (bundle / "config.json").write_bytes(original)
    code, out, err = lifecycle(gpu_host, tmp_path / "after", "legacy").run(bundle)
    figures.update(kill_delays_s=delays, kills_landed=landed, leftover_mounts=len(left["mounts"]),
                   leftover_processes=len(left["processes"]), leftover_cgroups=len(left["cgroups"]),
                   next_start_right=code == 0)
    assert landed > 0
    assert not any(left.values()), "\n".join(leftovers.describe(left))
    assert code == 0, err
    assert {k: v for k, v in parse_gpu_report(out).items() if k != "libs"} == expected(gpu_host, "0", "legacy")


@pytest.mark.parametrize("mode", ["legacy", "cdi", "jit-cdi"])
def test_read_only_rootfs(gpu_host, template, tmp_path, figures, mode):
    """root.readonly: the container still gets exactly its devices."""
    bundle = gpu_bundle(tmp_path / "bundle", template, "1:0")
    document = json.loads((bundle / "config.json").read_text())
    document["root"]["readonly"] = True
    (bundle / "config.json").write_text(json.dumps(document))
    code, out, err = lifecycle(gpu_host, tmp_path / "run", mode).run(bundle)
    figures.update(exit=code, stderr_lines=len(err.splitlines()))
    assert code == 0, err
    assert {k: v for k, v in parse_gpu_report(out).items() if k != "libs"} == expected(gpu_host, "1:0", mode)


CACHE_FAULTS = ["garbage", "truncated", "empty", "foreign-owner", "writable-by-others", "symlink", "directory"]


def _damage(path: Path, how: str, victim: Path) -> None:
    data = path.read_bytes()
    if how in ("symlink", "directory"):
        path.unlink()
        path.symlink_to(victim) if how == "symlink" else path.mkdir()
    elif how == "garbage":
        path.write_bytes(b"\x00\xffnot a cache{[" * 50)
    elif how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "foreign-owner":
        os.chown(path, 4242, 4242)
    elif how == "writable-by-others":
        path.chmod(0o666)


def _wait_until_settled(root: Path) -> None:
    """The prestart hook keeps the driver files, and jit-cdi its create cache entry, only once the driver
    root is older than config_cache.RECENT_NS (cdi.driver_files_cache): wait that out, so that its file
    is damaged too."""
    from cdi.config_cache import RECENT_NS

    newest = max(os.lstat(os.path.join(d, n)).st_ctime_ns for d, dirs, files in os.walk(root) for n in dirs + files)
    time.sleep(max(0.0, (newest + RECENT_NS - time.time_ns()) / 1e9) + 0.05)


@pytest.mark.parametrize("mode", ["cdi", "legacy", "jit-cdi"])
@pytest.mark.parametrize("how", CACHE_FAULTS)
def test_damaged_cache_files(gpu_host, template, tmp_path, figures, how, mode):
    """Every file in the cache dir (launcher's runtime cache, the create cache, CDI verdicts, kept config;
    in legacy mode the prestart hook's kept driver files too; in jit-cdi mode a create cache entry with
    the NVML transcript), damaged one at a time after a first start: the next start still gets the right
    devices, and a symlink is not followed (the file it points to is unchanged)."""
    bundle = gpu_bundle(tmp_path / "bundle", template, "0")
    original = (bundle / "config.json").read_bytes()
    run = lifecycle(gpu_host, tmp_path / "run", mode)
    cache = Path(run.env["NVIDIA_CTK_CACHE_DIR"])
    if mode != "cdi":
        _wait_until_settled(gpu_host.root)
    assert run.run(bundle)[0] == 0
    if mode == "legacy":
        assert any(name.startswith("driver-files-") for name in os.listdir(cache)), os.listdir(cache)
    if mode == "jit-cdi":
        assert any("\nmode jit-cdi\n" in (cache / name).read_text() for name in os.listdir(cache)
                   if name.startswith("create-")), os.listdir(cache)
    victim = tmp_path / "victim"
    victim.write_text("not a cache\n")
    results = {}
    for name in sorted(os.listdir(cache)):
        shutil.copytree(cache, tmp_path / "kept-cache", dirs_exist_ok=True)
        _damage(cache / name, how, victim)
        (bundle / "config.json").write_bytes(original)
        code, out, err = run.run(bundle)
        right = code == 0 and {k: v for k, v in parse_gpu_report(out).items() if k != "libs"} == \
            expected(gpu_host, "0", mode)
        results[name.split("-")[0]] = "right devices" if right else f"exit {code}: {err.strip()[:200]}"
        target = cache / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        shutil.copytree(tmp_path / "kept-cache", cache, dirs_exist_ok=True)
    figures.update(cache_files=results, victim_unchanged=victim.read_text() == "not a cache\n")
    assert victim.read_text() == "not a cache\n"
    assert all(r == "right devices" for r in results.values()), results


@pytest.mark.parametrize("mode", ["cdi", "legacy", "jit-cdi"])
def test_create_cache_entry_cut_short_or_changed(gpu_host, template, tmp_path, profile, figures, mode):
    """The create cache entry of a real request, cut at every line boundary and inside lines and with a
    bit flipped (the full profile: every such copy; the short one: a spread sample), each the entry of
    the next start: the container gets its devices every time, config.json is valid JSON, and it was
    Python that decided (it writes the entry again, whole); the whole entry is used by the launcher
    (the file is left as it is)."""
    from runtime_shim.runtime_cache import unsealed

    bundle = gpu_bundle(tmp_path / "bundle", template, "0")
    original = (bundle / "config.json").read_bytes()
    assert b"\\" not in original   # else the launcher would leave every create to Python
    run = lifecycle(gpu_host, tmp_path / "run", mode)
    if mode != "cdi":
        _wait_until_settled(gpu_host.root)
    assert run.run(bundle)[0] == 0
    [entry] = Path(run.env["NVIDIA_CTK_CACHE_DIR"]).glob("create-*.cache")
    whole = entry.read_bytes()
    copies = spread(list(damaged_copies(whole)), profile.cache_damages)
    wrong = []
    for what, data in [("whole", whole), *copies]:
        entry.write_bytes(data)
        written = entry.stat().st_ino
        (bundle / "config.json").write_bytes(original)
        code, out, err = run.run(bundle)
        try:
            json.loads((bundle / "config.json").read_bytes())
            valid = True
        except ValueError:
            valid = False
        right = code == 0 and {k: v for k, v in parse_gpu_report(out).items() if k != "libs"} == \
            expected(gpu_host, "0", mode)
        by_python = entry.stat().st_ino != written and unsealed(entry.read_bytes()) is not None
        if not (right and valid and by_python == (data is not whole)):
            wrong.append(f"{what}: exit {code}, right devices {right}, config.json valid {valid}, "
                         f"entry written again {by_python}: {err.strip()[:200]}")
    figures.update(entry_bytes=len(whole), entry_lines=whole.count(b"\n"), damaged_copies=len(copies),
                   wrong=len(wrong))
    assert not wrong, "\n".join(wrong[:10])
