"""One after another: containers with the host's `/` rshared, counting mounts, and a soak of full
lifecycles watching file descriptors, mounts and files (issue 15).

Both run in a forked child in its own mount namespace (tests/support/mountns.py), so the mounts counted
are only those our programs make, whatever else runs on the machine, and nothing can reach its mount
table. The soak's child also has its own tmpfs at /tmp, holding everything it uses (simulated host,
rootfs, bundles, state, caches): a file any program leaves in /tmp, ours or a temp file of a library,
is counted. A checkout (or venv) under /tmp is bound back over that tmpfs, and not counted."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from cdi import config_cache

from tests.e2e.shim_host import GPU_REPORT, build_gpu_host, parse_gpu_report
from tests.reliability.containers import MODES, REQUESTS, expected, gpu_bundle, lifecycle, template_rootfs
from tests.support.mountns import cover_with_tmpfs, mountinfo_lines, run_in_private_mount_ns

pytestmark = pytest.mark.e2e
FD_REPORT = GPU_REPORT + "; echo FDS $(ls /proc/self/fd | wc -l)"


def _run_checked(run, bundle, host, request, mode) -> str:
    """One lifecycle on bundle, which is reused: its config.json is put back as the engine wrote it
    (the shim rewrote it), the container's output and pid files are removed."""
    original = bundle / "config.json.original"
    if not original.exists():
        original.write_bytes((bundle / "config.json").read_bytes())
    (bundle / "config.json").write_bytes(original.read_bytes())
    code, out, err = run.run(bundle, timeout=60)
    assert code == 0, f"{mode} {request}: {err}"
    report = "\n".join(line for line in out.splitlines() if not line.startswith("FDS"))
    seen = {k: v for k, v in parse_gpu_report(report).items() if k != "libs"}
    assert seen == expected(host, request, mode), f"{mode} {request}: {seen}"
    for name in os.listdir(bundle):
        if name.endswith((".out", ".pid")) or name == "log.json":
            os.unlink(bundle / name)
    return out


def test_sequential_containers_with_rshared_root_leak_no_mount(gpu_host, template, tmp_path, profile, figures):
    """profile.sequential_rshared containers, modes and requests in turn, with `/` made rshared in the
    test's mount namespace (as systemd makes the host's): a mount our programs made in the wrong
    namespace, or one that propagated back out of a container, would stay in it."""
    bundles = {r: gpu_bundle(tmp_path / f"b{i}", template, r) for i, r in enumerate(REQUESTS)}
    runs = {mode: lifecycle(gpu_host, tmp_path / mode, mode) for mode in MODES}

    def in_namespace():
        subprocess.run(["mount", "-n", "--make-rshared", "/"], check=True)
        # mounts this namespace did not have at the start: a mount the machine's other users remove goes from
        # here too (the kernel detaches mounts on a dentry removed in another namespace), which is no leak
        before = mountinfo_lines()
        leaked_after = []
        for i in range(profile.sequential_rshared):
            mode, request = MODES[i % len(MODES)], REQUESTS[(i // len(MODES)) % len(REQUESTS)]
            _run_checked(runs[mode], bundles[request], gpu_host, request, mode)
            added = mountinfo_lines() - before
            if added:
                leaked_after.append((i, mode, sorted(added)[:3]))
        return {"containers": profile.sequential_rshared, "mounts_at_start": len(before),
                "mounts_added_at_the_end": len(mountinfo_lines() - before),
                "containers_leaving_mounts": len(leaked_after), "first_leak": leaked_after[:1]}

    started = time.monotonic()
    result = run_in_private_mount_ns(in_namespace)
    first_leak = result.pop("first_leak")
    figures.update(result, wall_seconds=round(time.monotonic() - started, 1))
    assert result["containers_leaving_mounts"] == 0, first_leak


def _files_under(root: str, skip: list[str]) -> set[str]:
    found = set()
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if os.path.join(directory, d) not in skip]
        found.update(os.path.join(directory, name) for name in names)
    return found


def test_soak_lifecycles_grow_nothing(tmp_path, profile, figures):
    """profile.soak_lifecycles lifecycles (modes and requests in turn), sampled profile.soak_samples
    times: the fds a container's process starts with, this process' fds, the mounts the namespace did not
    have before the first lifecycle and the files in the private /tmp. Every sample after the first must
    equal the first."""
    if os.geteuid() != 0:
        pytest.skip("needs root")

    def in_namespace():
        checkout = cover_with_tmpfs("/tmp", "gct-soak", mode="1777")
        work = Path("/tmp/gct-soak")
        host = build_gpu_host(work)
        template = template_rootfs(work)
        bundles = {r: gpu_bundle(work / f"b{i}", template, r, ["sh", "-c", FD_REPORT])
                   for i, r in enumerate(REQUESTS)}
        runs = {mode: lifecycle(host, work / mode, mode) for mode in MODES}
        # configs written less than RECENT_NS ago are not kept (cdi.config_cache): wait that out, as on a
        # host whose config is older than a few seconds, so that the warm-up writes every cache (with the
        # shim's create done by the launcher the warm-up alone no longer takes that long)
        time.sleep(config_cache.RECENT_NS / 1e9 + 0.1)
        # the first sample once every mode ran every request twice: by then the rootfs copies have the
        # mount points runc and the hook make in them, and every cache is written
        warm_up = 2 * len(MODES) * len(REQUESTS)
        every = max(1, (profile.soak_lifecycles - warm_up) // profile.soak_samples)
        samples, last_files, mounts_at_start = [], None, mountinfo_lines()
        for i in range(profile.soak_lifecycles):
            mode, request = MODES[i % len(MODES)], REQUESTS[(i // len(MODES)) % len(REQUESTS)]
            out = _run_checked(runs[mode], bundles[request], host, request, mode)
            runs[mode].calls.clear()
            if i + 1 >= warm_up and ((i + 1 - warm_up) % every == 0 or i + 1 == profile.soak_lifecycles):
                container_fds = int(next(line for line in out.splitlines() if line.startswith("FDS")).split()[1])
                files = _files_under("/tmp", skip=checkout)
                samples.append({"after": i + 1, "container_fds": container_fds,
                                "own_fds": len(os.listdir("/proc/self/fd")),
                                "mounts": len(mountinfo_lines() - mounts_at_start),
                                "tmp_files": len(files), "new_files": sorted(files - (last_files or files))[:5]})
                last_files = files
        return samples

    started = time.monotonic()
    samples = run_in_private_mount_ns(in_namespace)
    first, last = samples[0], samples[-1]
    growth = {key: last[key] - first[key] for key in ("container_fds", "own_fds", "mounts", "tmp_files")}
    figures.update(lifecycles=profile.soak_lifecycles, samples=len(samples),
                   first_sample={k: v for k, v in first.items() if k != "new_files"},
                   growth=growth, wall_seconds=round(time.monotonic() - started, 1))
    changed = [s for s in samples if any(s[k] != first[k] for k in growth)]
    assert not changed, f"first sample {first}, then {changed[:2]}"
