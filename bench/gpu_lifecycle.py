"""GPU container lifecycles as on a fresh install, every mode side by side with plain runc, in one run.

Issue 15's goals: a lifecycle (create/start/wait/delete of busybox `true`, every call through the
runtime under test) with one GPU at most 1.5x plain runc's in cdi and jit-cdi modes, 2.0x in legacy
mode, with nothing naming the config or the cache dir (bench.fresh_host builds such a host in a
private mount namespace; nothing is written to the machine's /etc or /run).

Rows, taken round-robin (one lifecycle of each row, then the next round, starting one row later each
round), so that the machine's drift hits every row alike:
  - plain runc, no GPU: the baseline;
  - the shim with no GPU request (config.json untouched: the C launcher execs runc);
  - the shim with GPU 0 (NVIDIA_VISIBLE_DEVICES=0, NVIDIA_DRIVER_CAPABILITIES=compute,utility) and the
    packaged config (mode auto, which picks cdi for it: checked against .cdi's output before timing);
  - the same in jit-cdi mode (a second host whose config says mode = "jit-cdi": one config.toml path per
    namespace, so each keeps its caches);
  - legacy: nvidia-container-runtime.legacy, whose prestart hook injects the GPU;
  - plain runc on the config.json the shim wrote in cdi mode: what the edits alone cost.
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
from bench.harness import Timings, report, time_rounds, wait_until_settled
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1

BIN = Path(sys.executable).parent
SHIM = str(BIN / "nvidia-container-runtime")
GPU_ENV = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
GOALS = {"cdi": 1.5, "jit-cdi": 1.5, "legacy": 2.0}


@dataclass
class Row:
    key: str
    label: str
    host: str                 # which FreshHost runs it
    runtime: list[str]
    bundle: Path
    config: Path | None       # the config.json each run starts from (a shim edits it), None: left as is
    env: dict[str, str]


def _simulated_host(workdir: Path) -> Path:
    root = workdir / "gpu-host"
    subprocess.run([str(BIN / "nvidia-ctk"), "simulate", "create", str(root), "--gpus", "2",
                    "--mig", "1=1g.5gb,1g.5gb"], check=True, capture_output=True, text=True)
    return root


def _rows(workdir: Path, env_rows: bool) -> list[Row]:
    env = runtime_env()
    plain = make_bundle(workdir / "plain", ["true"])
    pristine = workdir / "gpu-config.json"

    def gpu_bundle(key: str) -> Path:
        bundle = make_bundle(workdir / key, ["true"], env=GPU_ENV, glibc=True)
        if not pristine.exists():
            shutil.copyfile(bundle / "config.json", pristine)
        return bundle

    rows = [Row("runc", "runc, no GPU", "auto", ["runc"], plain, None, env),
            Row("shim", "shim, no GPU request", "auto", [SHIM], plain, None, env),
            Row("cdi", "shim, 1 GPU, cdi (auto mode picks it)", "auto", [SHIM], gpu_bundle("cdi"), pristine, env),
            Row("jit-cdi", 'shim, 1 GPU, jit-cdi (mode = "jit-cdi")', "jit", [SHIM], gpu_bundle("jit"),
                pristine, env),
            Row("legacy", "shim .legacy + prestart hook, 1 GPU", "auto", [SHIM + ".legacy"], gpu_bundle("legacy"),
                pristine, env),
            Row("edits", "runc on the cdi row's config.json", "auto", ["runc"], gpu_bundle("edits"),
                workdir / "edited-config.json", env)]
    if env_rows:
        config = workdir / "env-config.toml"
        config.write_text(packaged_config(workdir / "gpu-host"))
        cache = workdir / "env-cache"
        cache.mkdir(mode=0o755)
        by_path = {**env, "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
        rows += [Row("env-cache", "cdi, config by env var + cache dir", "auto", [SHIM], gpu_bundle("env-cache"),
                     pristine, {**by_path, "NVIDIA_CTK_CACHE_DIR": str(cache)}),
                 Row("env", "cdi, config by env var, no cache dir", "auto", [SHIM], gpu_bundle("env"),
                     pristine, by_path)]
    return rows


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
    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as tmp:
        workdir = Path(tmp)
        before = machine_state(workdir)
        driver_root = _simulated_host(workdir)
        rows = _rows(workdir, env_rows)
        hosts: dict[str, FreshHost] = {}
        try:
            hosts["auto"] = FreshHost("auto", workdir, driver_root)
            hosts["jit"] = FreshHost("jit", workdir, driver_root, mode="jit-cdi")
            _prepare(hosts, {row.key: row for row in rows}, workdir)
            timed = time_rounds([(row.label, partial(hosts[row.host].lifecycle, row.runtime, row.bundle, row.config,
                                                     row.env)) for row in rows], runs)
            timings = {row.key: timing for row, timing in zip(rows, timed)}
        finally:
            for host in hosts.values():
                host.close()
        after = machine_state(workdir)
    if before != after:
        raise RuntimeError(f"changed during the run (a mount of the bench's namespaces leaked, or another "
                           f"program wrote there meanwhile): before {before}, after {after}")
    baseline = timings["runc"]
    lines = [report("GPU container lifecycles as on a fresh install (create/start/wait/delete), busybox `true`, "
                    "rows round-robin; paired: the median of each round's ratio to that round's runc",
                    [timings[row.key] for row in rows], baseline, with_paired=True)]
    lines += [_verdict(timings[key], baseline, goal) for key, goal in GOALS.items()]
    lines.append(f"machine left as found: the {len(traces())} fresh-install paths (config, spec, caches and "
                 "their dirs) as before the run, no mount left")
    return "\n".join(lines)
