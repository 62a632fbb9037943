"""The runtime shim against plain runc, in the same run, on a simulated GPU host (cdi mode).

Rows (busybox `true`, create/start/wait/delete; the shim rows put EVERY call through the shim):
  - plain runc, no GPU: the baseline;
  - the shim, no GPU request: what the shim alone costs (config.json untouched);
  - the shim, one GPU (NVIDIA_VISIBLE_DEVICES=0, cdi mode): the goal is <= 2.0x the baseline;
  - the same in jit-cdi mode (edits built from the driver for this request: utility,compute only);
  - plain runc on the config.json the shim wrote: what the GPU edits themselves cost (device nodes, ~60
    bind mounts, the nvidia-cdi-hook createRuntime hook), with no shim in the way.
The rows are taken round-robin (bench.harness.time_rounds: one lifecycle of each row per round, the
starting row rotated each round, after an untimed round), so that the machine's drift hits every row
alike; plain runc is taken twice, as two rows of the same rounds (how far apart they land is the noise);
paired: the median of each round's ratio to that round's first runc row.
Then passthrough: `state ID` through the shim vs runc's own `state ID` (goal <= 1.5x), the two also
round-robin.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import uuid
from functools import partial
from pathlib import Path

from bench.harness import (Timings, lifecycle, lifecycle_row, report, run_timed, time_rounds,
                           wait_until_settled)
from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.shim_host import SHIM, build_gpu_host, shim_env, write_shim_config

LIFECYCLE_GOAL = 2.0
PASSTHROUGH_GOAL = 1.5


def _verdict(name: str, row: Timings, baseline: Timings, goal: float) -> str:
    ratio = row.median_ms / baseline.median_ms
    return f"{name}: {ratio:.2f}x (goal <= {goal:.1f}x) {'OK' if ratio <= goal else 'OVER BUDGET'}"


def _passthrough_rows(env: dict, state_root: Path, bundle: Path, runs: int) -> tuple[Timings, Timings]:
    """Time `state` on one created container, through runc and through the shim."""
    cid = "bench-state-" + uuid.uuid4().hex[:8]
    base = ["runc", "--root", str(state_root)]
    subprocess.run([*base, "create", "--bundle", str(bundle), cid], check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        via_shim = [str(SHIM), "--root", str(state_root), "state", cid]
        runc, shim = time_rounds([("runc state ID", partial(run_timed, [*base, "state", cid], env)),
                                  ("shim state ID (C passthrough)", partial(run_timed, via_shim, env))], runs * 5)
    finally:
        subprocess.run([*base, "delete", "--force", cid], stdin=subprocess.DEVNULL, capture_output=True)
    return runc, shim


def _wait_until_kept(*configs: Path) -> None:
    """The shim keeps the parsed document of an unchanged config.toml between runs, but not of one
    changed less than config_cache.RECENT_NS ago (a racing edit could go unseen): wait that out, so
    that the rows measure the steady state of a host whose config is older than a few seconds."""
    wait_until_settled(max(c.stat().st_ctime_ns for c in configs))


def run(runs: int) -> str:
    ensure_hugetlb_on_v1()
    with tempfile.TemporaryDirectory(prefix="bench-shim-") as tmp:
        tmp = Path(tmp)
        host = build_gpu_host(tmp)
        config = write_shim_config(tmp / "config.toml", host, runtime="runc", mode="cdi")
        jit_config = write_shim_config(tmp / "config-jit.toml", host, runtime="runc", mode="jit-cdi")
        env = shim_env(config, tmp / "cache")
        plain = make_bundle(tmp / "plain", ["true"])
        gpu = make_bundle(tmp / "gpu", ["true"], env=["NVIDIA_VISIBLE_DEVICES=0"])
        gpu_config = (gpu / "config.json").read_bytes()
        shim, state = [str(SHIM)], tmp / "state"

        _wait_until_kept(config, jit_config)
        lifecycle(shim, gpu, state, env)   # untimed: the config.json the shim writes, for the edits-only row
        edited = (gpu / "config.json").read_bytes()
        assert json.loads(edited) != json.loads(gpu_config), "the shim did not edit config.json"
        baseline, shim_plain, shim_gpu, shim_jit, runc_edited, again = time_rounds([
            lifecycle_row("runc, no GPU", ["runc"], plain, state, env),
            lifecycle_row("shim, no GPU request", shim, plain, state, env),
            lifecycle_row("shim, 1 GPU (cdi mode)", shim, gpu, state, env, gpu_config),
            lifecycle_row("shim, 1 GPU (jit-cdi mode: no spec file)", shim, gpu, state,
                          shim_env(jit_config, tmp / "cache"), gpu_config),
            lifecycle_row("runc on the shim's config.json (edits only)", ["runc"], gpu, state, env, edited),
            lifecycle_row("runc, no GPU (again, a second row)", ["runc"], plain, state, env)],
            runs)
        runc_state, shim_state = _passthrough_rows(env, state, plain, runs)

    lines = [report("runtime shim lifecycle (create/start/wait/delete), busybox `true`",
                    [baseline, shim_plain, shim_gpu, shim_jit, runc_edited, again], baseline, with_paired=True),
             report("passthrough", [runc_state, shim_state], runc_state),
             _verdict("lifecycle, shim with 1 GPU vs plain runc", shim_gpu, baseline, LIFECYCLE_GOAL),
             _verdict("lifecycle, shim with 1 GPU vs runc on the same edits", shim_gpu, runc_edited, LIFECYCLE_GOAL),
             _verdict("passthrough state", shim_state, runc_state, PASSTHROUGH_GOAL)]
    return "\n".join(lines)
