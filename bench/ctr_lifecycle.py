"""The CLI path of containerd: `ctr run --gpus 0` against plain `ctr run`, with plain runc in the same rounds.

containerd 1.6's `ctr run --gpus N` adds the prestart hook `containerd oci-hook -- nvidia-container-cli
--load-kmods configure --device=N --compute --compat32 --graphics --utility --video --display
--pid={{pid}} {{rootfs}}`, with nvidia-container-cli found in ctr's PATH and ctr's environment as the
hook's (docs/reference.md#ctr-gpus). The bench starts a private containerd (own root, state, socket and
mount namespace, as tests/e2e start it; stopped at the end with everything it left), imports a busybox +
glibc image from a docker-archive tar made here (no registry), and times, round-robin (bench.harness
.time_rounds):
  - plain runc: create/start/wait/delete of busybox `true` on a new copy of the same rootfs each run
    (the copy is not timed);
  - `ctr run --rm IMAGE ID true`: containerd makes a new snapshot (a fresh rootfs) for every run;
  - the same with `--gpus 0`: our nvidia-container-cli injects GPU 0 of a simulated host (2 GPUs) with
    every capability ctr asks for.
ctr runs with the venv's programs first in PATH and the toolkit config named by
NVIDIA_CTK_CONFIG_FILE_PATH with NVIDIA_CTK_CACHE_DIR set (ctr has no other way to reach a config that
is not the machine's /etc one; with the cache dir the config is kept parsed, as the system config is).
Goal (issue 25): `ctr run --gpus 0` at most 1.8x plain `ctr run`.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from functools import partial
from pathlib import Path

from bench.fresh_host import fresh_copy
from bench.harness import lifecycle, load_line, report, run_timed, time_rounds, wait_until_settled

BIN = Path(sys.executable).parent
CLI = BIN / "nvidia-container-cli"
IMAGE = "gct.bench/ctr-busybox:latest"
GOAL = 1.8


def _runc_once(bundle: Path, image: Path, state: Path) -> float:
    fresh_copy(image, bundle / "rootfs")
    return lifecycle(["runc"], bundle, state)


def run(runs: int) -> str:
    from tests.e2e.bundle import make_bundle
    from tests.e2e.engines import short_tempdir, start_containerd, stop_daemon, write_containerd_config_without_cri
    from tests.e2e.host_setup import ensure_hugetlb_on_v1
    from tests.e2e.rootfs import docker_archive, make_rootfs
    from tests.support.cgroups import remove_cgroup_everywhere

    missing = [name for name in ("containerd", "ctr", "runc") if shutil.which(name) is None]
    if missing or not CLI.exists():
        what = ", ".join(missing) or "the nvidia-container-cli launcher (run `make venv`)"
        return f"== ctr run --gpus: skipped ({what} not installed)"
    ensure_hugetlb_on_v1()
    load_before = load_line("before")
    workdir = short_tempdir("bench-ctr-")     # unix socket paths must stay short
    namespace = f"gct-bench-{uuid.uuid4().hex[:8]}"
    daemon = None
    try:
        host = workdir / "host"
        subprocess.run([str(BIN / "nvidia-ctk"), "simulate", "create", str(host), "--gpus", "2"], check=True,
                       capture_output=True)
        made = time.time_ns()
        toolkit_config = workdir / "toolkit.toml"
        toolkit_config.write_text(f'[nvidia-container-cli]\nroot = "{host}"\n')
        (workdir / "cache").mkdir(mode=0o755)
        socket, dirs = workdir / "c.sock", [workdir / "root", workdir / "state", workdir / "opt"]
        config = write_containerd_config_without_cri(workdir, socket, dirs)
        daemon = start_containerd(config, socket, dirs, workdir=workdir)
        env = {"PATH": f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "NVIDIA_CTK_CONFIG_FILE_PATH": str(toolkit_config), "NVIDIA_CTK_CACHE_DIR": str(workdir / "cache")}

        def ctr(*args: str) -> list[str]:
            return daemon.enter(["ctr", "--address", str(socket), "--namespace", namespace, *args])

        image = make_rootfs(workdir / "image-root", glibc=True)
        subprocess.run(ctr("image", "import", str(docker_archive(image, workdir / "image.tar", IMAGE))), check=True,
                       capture_output=True, env=env)
        bundle = make_bundle(workdir / "bundle", ["true"], glibc=True)
        counter = iter(range(10**9))

        def ctr_run(*flags: str) -> float:
            return run_timed(ctr("run", "--rm", *flags, IMAGE, f"bench-{next(counter)}", "true"), env)

        wait_until_settled(made)   # the driver files are kept once older than a few seconds (cdi.config_cache)
        ctr_run("--gpus", "0")     # untimed: fails loudly here if the hook cannot inject
        runc, plain, gpus = time_rounds([
            ("runc, no GPU (fresh rootfs copy)", partial(_runc_once, bundle, image, workdir / "runc-state")),
            ("ctr run --rm (new snapshot)", ctr_run),
            ("ctr run --rm --gpus 0 (nvidia-container-cli)", partial(ctr_run, "--gpus", "0"))], runs)
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        remove_cgroup_everywhere(namespace)
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = gpus.median_ms / plain.median_ms
    lines = [report("ctr run (containerd 1.6, private daemon), busybox + glibc `true`, rows round-robin; paired: the "
                    "median of each round's ratio to that round's runc", [runc, plain, gpus], runc, with_paired=True),
             f"ctr run --gpus 0 vs ctr run: {ratio:.2f}x (goal <= {GOAL:.1f}x) {'OK' if ratio <= GOAL else 'OVER'}",
             load_before, load_line("after")]
    return "\n".join(lines)
