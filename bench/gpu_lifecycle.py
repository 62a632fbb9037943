"""GPU container lifecycles as on a fresh install, every mode side by side with plain runc, in one run.

Goals (issues 15 and 25): a lifecycle (create/start/wait/delete of busybox `true`, every call through
the runtime under test) with one GPU, on a fresh rootfs, at most 1.5x plain runc's on a fresh rootfs in
cdi and jit-cdi modes, 1.8x in legacy mode; on a reused rootfs (a restart) within issue 15's 1.5x/2.0x.
Nothing names the config or the cache dir (bench.fresh_host builds such a host in a private mount
namespace; nothing is written to the machine's /etc or /run).

Every row is taken twice: on a fresh rootfs (a new copy of the image's rootfs before each run, outside
the timing: what every `docker run`, `podman run` and pod starts on; the default rows) and on the
bundle's rootfs reused from run to run (labelled "restart:": a restarted container, where the mount
targets, links and ld cache the edits made are already there). Rows, taken round-robin (one lifecycle
of each row, then the next round, starting one row later each round), so that the machine's drift hits
every row alike:
  - plain runc, no GPU: the baseline (of the fresh rows; its restart twin of the restart rows);
  - the shim with no GPU request (config.json untouched: the C launcher execs runc);
  - the shim with GPU 0 (NVIDIA_VISIBLE_DEVICES=0, NVIDIA_DRIVER_CAPABILITIES=compute,utility) and the
    packaged config (mode auto, which picks cdi for it: checked against .cdi's output before timing);
  - the same in jit-cdi mode (a second host whose config says mode = "jit-cdi": one config.toml path per
    namespace, so each keeps its caches);
  - legacy: nvidia-container-runtime.legacy, whose prestart hook injects the GPU;
  - plain runc on the config.json the shim wrote in cdi mode: what the edits alone cost.
  - NVIDIA's nvidia-container-runtime.cdi on the same host (same config.toml and spec), when a build of
    NVIDIA's toolkit is named by GCT_BENCH_NVIDIA_BIN (the dir holding it); none is on our machines, so
    the run says in one line that the row was skipped.
With env_rows, also the cdi row with the config named by NVIDIA_CTK_CONFIG_FILE_PATH, with and without
NVIDIA_CTK_CACHE_DIR (what the older benchmarks and tests run; without the cache dir nothing of the
config is kept between runs).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.fresh_host import FreshHost, machine_state, packaged_config, runtime_env, traces
from bench.harness import Timings, load_line, report, time_rounds, wait_until_settled
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.rootfs import make_rootfs

BIN = Path(sys.executable).parent
SHIM = str(BIN / "nvidia-container-runtime")
GPU_ENV = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
GOALS = {"cdi": 1.5, "jit-cdi": 1.5, "legacy": 1.8}            # fresh rootfs vs runc's (issue 25)
RESTART_GOALS = {"cdi": 1.5, "jit-cdi": 1.5, "legacy": 2.0}    # reused rootfs vs runc's (issue 15)
RESTART = "restart: "
NVIDIA_BIN_VAR = "GCT_BENCH_NVIDIA_BIN"


@dataclass
class Row:
    key: str
    label: str
    host: str                 # which FreshHost runs it
    runtime: list[str]
    bundle: Path
    config: Path | None       # the config.json each run starts from (a shim edits it), None: left as is
    env: dict[str, str]
    rootfs: Path | None = None  # a pristine rootfs copied to the bundle before each run; None: reused

    def restart(self) -> "Row":
        """The same row on its own bundle whose rootfs is reused from run to run."""
        bundle = self.bundle.with_name(self.bundle.name + "-restart")
        shutil.copytree(self.bundle, bundle, symlinks=True)
        return Row(self.key, RESTART + self.label, self.host, self.runtime, bundle, self.config, self.env)


def _simulated_host(workdir: Path) -> Path:
    root = workdir / "gpu-host"
    subprocess.run([str(BIN / "nvidia-ctk"), "simulate", "create", str(root), "--gpus", "2",
                    "--mig", "1=1g.5gb,1g.5gb"], check=True, capture_output=True, text=True)
    return root


def nvidia_build(environ: dict[str, str], scratch: Path) -> tuple[Path | None, str]:
    """NVIDIA's nvidia-container-runtime.cdi named by GCT_BENCH_NVIDIA_BIN, or None and why not.
    Its `--version` runs with the timed calls' environment and the runtime cache dir in scratch: when
    the dir holds this project's runtime, that call writes its runtime cache, which would otherwise
    go to the machine's /run/nvidia-container-toolkit and stay there."""
    directory = environ.get(NVIDIA_BIN_VAR)
    if not directory:
        return None, f"NVIDIA's runtime: row skipped ({NVIDIA_BIN_VAR} does not name a dir with NVIDIA's build)"
    runtime = Path(directory, "nvidia-container-runtime.cdi")
    if not os.access(runtime, os.X_OK):
        return None, f"NVIDIA's runtime: row skipped (no executable {runtime})"
    version = subprocess.run([str(runtime), "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             env={**runtime_env(), "NVIDIA_CTK_CACHE_DIR": str(scratch)})
    if "(gpu-container-toolkit)" in version.stdout:
        return None, f"NVIDIA's runtime: row skipped ({runtime} is this project's, not NVIDIA's)"
    return runtime, f"NVIDIA's runtime: {runtime} ({version.stdout.strip().splitlines()[0] if version.stdout else '?'})"


def _bundle(path: Path, image: Path, env: list[str]) -> Path:
    """A bundle running `true` on its own copy of image (in rootfs/, as an engine's bundle has it)."""
    make_bundle(path, ["true"], env=env, rootfs=image)
    config = json.loads((path / "config.json").read_text())
    config["root"]["path"] = "rootfs"
    (path / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copytree(image, path / "rootfs", symlinks=True)
    return path


def _rows(workdir: Path, env_rows: bool, nvidia: Path | None) -> list[Row]:
    """The rows on a fresh rootfs, then each again as a restart (its rootfs reused)."""
    env = runtime_env()
    pristine = workdir / "gpu-config.json"
    # the images' rootfs as pulled: each fresh run starts from a new copy of one of these
    busybox = make_rootfs(workdir / "image-busybox")
    glibc = make_rootfs(workdir / "image-glibc", glibc=True)
    plain = _bundle(workdir / "plain", busybox, [])

    def gpu(key: str) -> Path:
        bundle = _bundle(workdir / key, glibc, GPU_ENV)
        if not pristine.exists():
            shutil.copyfile(bundle / "config.json", pristine)
        return bundle

    rows = [Row("runc", "runc, no GPU", "auto", ["runc"], plain, None, env, busybox),
            Row("shim", "shim, no GPU request", "auto", [SHIM], _bundle(workdir / "shim", busybox, []), None, env,
                busybox),
            Row("cdi", "shim, 1 GPU, cdi (auto mode picks it)", "auto", [SHIM], gpu("cdi"), pristine, env, glibc),
            Row("jit-cdi", 'shim, 1 GPU, jit-cdi (mode = "jit-cdi")', "jit", [SHIM], gpu("jit"), pristine, env,
                glibc),
            Row("legacy", "shim .legacy + prestart hook, 1 GPU", "auto", [SHIM + ".legacy"], gpu("legacy"),
                pristine, env, glibc),
            Row("edits", "runc on the cdi row's config.json", "auto", ["runc"], gpu("edits"),
                workdir / "edited-config.json", env, glibc)]
    if nvidia:
        rows.append(Row("nvidia", "NVIDIA's nvidia-container-runtime.cdi, 1 GPU", "auto", [str(nvidia)],
                        gpu("nvidia"), pristine, env, glibc))
    if env_rows:
        config = workdir / "env-config.toml"
        config.write_text(packaged_config(workdir / "gpu-host"))
        cache = workdir / "env-cache"
        cache.mkdir(mode=0o755)
        by_path = {**env, "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
        rows += [Row("env-cache", "cdi, config by env var + cache dir", "auto", [SHIM], gpu("env-cache"),
                     pristine, {**by_path, "NVIDIA_CTK_CACHE_DIR": str(cache)}, glibc),
                 Row("env", "cdi, config by env var, no cache dir", "auto", [SHIM], gpu("env"), pristine, by_path,
                     glibc)]
    return rows + [row.restart() for row in rows]


def _edited(host: FreshHost, row: Row, runtime: list[str] | None = None, config: Path | None = None) -> dict:
    """The config.json one (untimed) lifecycle of row left, through runtime and from config if given."""
    host.lifecycle(runtime or row.runtime, row.bundle, config or row.config, row.env)
    return json.loads((row.bundle / "config.json").read_text())


def _prepare(hosts: dict[str, FreshHost], rows: dict[str, Row], workdir: Path) -> None:
    """Untimed: check that auto mode took cdi for the GPU row and jit-cdi differs from it and was kept in
    the create cache (as on a host whose driver files are older than a few seconds), and keep the cdi
    row's config.json for the edits row."""
    # a config changed less than RECENT_NS ago is not kept (cdi.config_cache): wait that out, as on a
    # host whose config is older than a few seconds
    wait_until_settled(max(host.ready_at for host in hosts.values()))
    pristine = json.loads(rows["cdi"].config.read_text())
    forced_cdi = _edited(hosts["auto"], rows["edits"], [SHIM + ".cdi"], rows["cdi"].config)
    auto = _edited(hosts["auto"], rows["cdi"])
    jit = _edited(hosts["jit"], rows["jit-cdi"])
    if auto == pristine or auto != forced_cdi:
        raise RuntimeError("the shim in auto mode did not edit config.json as nvidia-container-runtime.cdi does")
    if jit == auto:
        raise RuntimeError("jit-cdi mode wrote the same config.json as cdi mode: was it taken?")
    if not hosts["jit"].has_create_entry("jit-cdi"):
        raise RuntimeError("jit-cdi mode kept no create cache entry: every timed create would run Python")
    (workdir / "edited-config.json").write_text(json.dumps(auto))


def _verdict(row: Timings, baseline: Timings, goal: float) -> str:
    ratio = row.median_ms / baseline.median_ms
    return f"{row.label}: {ratio:.2f}x plain runc (goal <= {goal:.1f}x) {'OK' if ratio <= goal else 'OVER'}"


def run(runs: int, env_rows: bool = False) -> str:
    ensure_hugetlb_on_v1()
    load_before = load_line("before")
    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as tmp:
        workdir = Path(tmp)
        before = machine_state(workdir)
        driver_root = _simulated_host(workdir)
        nvidia, nvidia_line = nvidia_build(os.environ, workdir / "version-cache")
        rows = _rows(workdir, env_rows, nvidia)
        hosts: dict[str, FreshHost] = {}
        try:
            hosts["auto"] = FreshHost("auto", workdir, driver_root)
            hosts["jit"] = FreshHost("jit", workdir, driver_root, mode="jit-cdi")
            _prepare(hosts, {row.key: row for row in rows if row.rootfs}, workdir)
            timed = time_rounds([(row.label, partial(hosts[row.host].lifecycle, row.runtime, row.bundle, row.config,
                                                     row.env, row.rootfs)) for row in rows], runs)
            timings = {(row.key, row.rootfs is None): timing for row, timing in zip(rows, timed)}
        finally:
            for host in hosts.values():
                host.close()
        after = machine_state(workdir)
    if before != after:
        raise RuntimeError(f"changed during the run (a mount of the bench's namespaces leaked, or another "
                           f"program wrote there meanwhile): before {before}, after {after}")
    fresh = [timings[key] for key in timings if not key[1]]
    restart = [timings[key] for key in timings if key[1]]
    baseline, restart_baseline = timings["runc", False], timings["runc", True]
    lines = [report("GPU container lifecycles as on a fresh install (create/start/wait/delete), busybox `true`, "
                    "on a fresh rootfs (a new copy before each run, not timed), all rows round-robin; paired: "
                    "the median of each round's ratio to that round's runc", fresh, baseline, with_paired=True),
             report("the same rows on a reused rootfs (a restarted container), in the same rounds; ratios to the "
                    "restart runc row", restart, restart_baseline, with_paired=True)]
    lines += [_verdict(timings[key, False], baseline, goal) for key, goal in GOALS.items()]
    lines += [_verdict(timings[key, True], restart_baseline, goal) for key, goal in RESTART_GOALS.items()]
    lines.append(nvidia_line)
    lines.append(f"machine left as found: the {len(traces())} fresh-install paths (config, spec, caches and "
                 "their dirs) as before the run, no mount left")
    lines += [load_before, load_line("after")]
    return "\n".join(lines)
