"""nvidia-cdi-hook alone, with the hook entry `nvidia-ctk cdi generate` writes for a simulated host
(it runs on every CDI container's start): the links only, the links and the params mount, and the
whole entry (with the CUDA compat check and the ldconfig), on a busybox + glibc rootfs whose procfs
stand-in has /proc/driver/nvidia/params and which holds copies of the spec's driver libraries where
the runtime would bind-mount them (the links lead to files, as in a container: ldconfig removes a
dangling `*.so.*` link). Each run is `unshare -m` (the params mount stays in a namespace of its own)
of `sh -c 'exec HOOK ... < state.json'`; the floor is the same with `true`. The rows are taken
round-robin (bench.harness.time_rounds: each row once per round, the starting row rotated each round,
after an untimed round). The rootfs is reused from run to run, as a restarted container's is: after the
first run the links, the ld.so.conf.d drop-in and the cache are already right."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from bench.harness import report, run_timed, time_rounds
from tests.e2e.rootfs import make_rootfs

SUBCOMMANDS = ("create-symlinks", "update-ldcache", "enable-cuda-compat", "disable-device-node-modification")


def _steps(args: list[str], keep: set[str]) -> list[str]:
    """The chain with only the subcommands in keep (each with its options)."""
    out, current = [], None
    for arg in args:
        if arg in SUBCOMMANDS:
            current = arg
        if current in keep:
            out.append(arg)
    return out


def run(runs: int) -> str:
    bin_dir = Path(sys.executable).parent
    ctk, hook = str(bin_dir / "nvidia-ctk"), str(bin_dir / "nvidia-cdi-hook")
    with tempfile.TemporaryDirectory(prefix="bench-cdihook-") as tmp:
        host, bundle = Path(tmp, "host"), Path(tmp, "bundle")
        subprocess.run([ctk, "simulate", "create", str(host), "--gpus", "2"], check=True, capture_output=True)
        spec = Path(tmp, "nvidia.json")
        subprocess.run([ctk, "cdi", "generate", "--driver-root", str(host), "--output", str(spec),
                        "--nvidia-cdi-hook-path", hook], check=True, capture_output=True)
        edits = json.loads(spec.read_text())["containerEdits"]
        (entry,) = edits["hooks"]
        args = entry["args"][1:]
        root = make_rootfs(bundle / "rootfs", glibc=True)
        for mount in edits["mounts"]:
            if ".so" in mount["containerPath"]:
                target = root / mount["containerPath"].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(mount["hostPath"], target)
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/params").write_text("the container's procfs stand-in\n")
        (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
        state = Path(tmp, "state.json")
        state.write_text(json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": 1,
                                     "bundle": str(bundle)}))

        def in_namespace(argv: list[str]) -> list[str]:
            quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
            return ["unshare", "-m", "--propagation", "private", "sh", "-c", f"exec {quoted} < '{state}'"]

        commands = [
            ("unshare -m sh -c 'exec true' (floor)", ["true"]),
            ("hook: links", [hook, *_steps(args, {"create-symlinks"})]),
            ("hook: links, params", [hook, *_steps(args, {"create-symlinks", "disable-device-node-modification"})]),
            ("hook: the spec's whole entry (with ldconfig)", [hook, *args]),
        ]
        rows = time_rounds([(label, partial(run_timed, in_namespace(argv))) for label, argv in commands], runs)
        floor = rows[0]
        return report(f"nvidia-cdi-hook, {len(args)} arguments of the generated spec's one entry", rows, floor)
