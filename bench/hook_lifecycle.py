"""The prestart hook's cost: lifecycles through the runtime shim in legacy mode (the shim adds
nvidia-container-runtime-hook, which injects GPU 0 with compute,utility from a simulated host) against
plain runc, in the same run, the two rows round-robin (bench.harness.time_rounds; paired: the median of
each round's ratio to that round's runc); then the hook alone: its wall time and peak memory (ru_maxrss).

The hook's own numbers come from a separate pass in which the hook entry points at a small timing
wrapper (this file, run as a script) that starts the real hook, waits for it with wait4() and
appends "<seconds> <maxrss KiB>" to a file in the bench's temp dir; the timed lifecycles never use it.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
HOOK = BIN / "nvidia-container-runtime-hook"
SHIM = BIN / "nvidia-container-runtime.legacy"
GOAL, AIM = 2.5, 2.0


def _config(work: Path, driver_root: Path) -> Path:
    config = work / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{driver_root}"\n\n'
                      '[nvidia-container-runtime]\nruntimes = ["runc"]\n')
    return config


def _hook_stats(bundle: Path, work: Path, env: dict, runs: int) -> tuple[list[float], list[int]]:
    """Run the bundle through runc with the hook entry wrapped by the timing wrapper."""
    from bench.harness import lifecycle

    stats = work / "hook-stats.txt"
    config = json.loads((bundle / "config.json").read_text())
    config["hooks"] = {"prestart": [{
        "path": sys.executable, "args": [sys.executable, "-I", os.path.abspath(__file__), str(stats), str(HOOK)],
        "env": [f"{k}={v}" for k, v in env.items()]}]}
    original = (bundle / "config.json").read_bytes()
    (bundle / "config.json").write_text(json.dumps(config))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-state-") as state:
            for _ in range(runs):
                lifecycle(["runc"], bundle, Path(state))
    finally:
        (bundle / "config.json").write_bytes(original)
    walls, rss = [], []
    for line in stats.read_text().splitlines():
        seconds, kib = line.split()
        walls.append(float(seconds))
        rss.append(int(kib))
    return walls, rss


def run(runs: int) -> str:
    import time

    from bench.harness import lifecycle_row, report, time_rounds, wait_until_settled
    from tests.e2e.bundle import make_bundle

    if not HOOK.exists() or not SHIM.exists():
        return "== hook lifecycle: skipped (run `make venv`: the hook and shim launchers are missing)"
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        work = Path(tmp)
        host = work / "host"
        subprocess.run([str(BIN / "nvidia-ctk"), "simulate", "create", str(host), "--gpus", "1"],
                       check=True, capture_output=True)
        config = _config(work, host)
        made = time.time_ns()   # everything of the host is older than this
        bundle = make_bundle(work / "bundle", ["true"], glibc=True,
                             env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"])
        pristine = (bundle / "config.json").read_bytes()
        # The cache dir makes the bench's config cached as the system config is in production (the
        # shim's passthrough cache and the hook's parsed config, cdi.config_cache), inside our temp dir.
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_CACHE_DIR": str(work / "cache")}
        # The hook keeps the driver files it found (cdi.driver_files_cache) only once they are older
        # than config_cache.RECENT_NS: wait that out, to measure a host whose driver was installed
        # more than a few seconds ago.
        wait_until_settled(made)
        state = work / "state"
        runc, shim = time_rounds([
            lifecycle_row("runc lifecycle (no GPU)", ["runc"], bundle, state, env, pristine),
            lifecycle_row("shim legacy + hook (GPU 0, compute,utility)", [str(SHIM)], bundle, state, env, pristine)],
            runs)
        (bundle / "config.json").write_bytes(pristine)
        walls, rss = _hook_stats(bundle, work, env, max(5, runs // 2))
        ratio = shim.median_ms / runc.median_ms
        verdict = "ok" if ratio <= GOAL else "OVER BUDGET"
        lines = [report("prestart hook through the shim (legacy) vs plain runc", [runc, shim], runc, with_paired=True),
                 f"hook alone: wall median {statistics.median(walls) * 1000:.1f} ms "
                 f"(min {min(walls) * 1000:.1f}, max {max(walls) * 1000:.1f}, n={len(walls)}), "
                 f"peak RSS {max(rss) / 1024:.1f} MiB",
                 f"goal <= {GOAL}x (aim {AIM}x): {ratio:.2f}x {verdict}"]
        return "\n".join(lines)


def _timing_wrapper(argv: list[str]) -> int:
    """python -I hook_lifecycle.py STATS HOOK: run HOOK prestart with our stdin, record its cost."""
    import time

    stats, hook = argv
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.execv(hook, ["nvidia-container-runtime-hook", "prestart"])
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - start
    with open(stats, "a") as f:
        f.write(f"{elapsed:.6f} {usage.ru_maxrss}\n")
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(_timing_wrapper(sys.argv[1:]))
