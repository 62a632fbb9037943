"""nvidia-cdi-hook alone, with the hook entry `nvidia-ctk cdi generate` writes for a simulated host
(it runs on every CDI container's start): the links only, the links and the params mount, and the
whole entry (with the CUDA compat check and the ldconfig), on a busybox + glibc rootfs whose procfs
stand-in has /proc/driver/nvidia/params and which holds copies of the spec's driver libraries where
the runtime would bind-mount them (the links lead to files, as in a container: ldconfig removes a
dangling `*.so.*` link). Each run is `unshare -m` (the params mount stays in a namespace of its own)
of `sh -c 'exec HOOK ... < state.json'`; the floor is the same with `true`. The rootfs is reused from
run to run, as a restarted container's is: after the first run the links, the ld.so.conf.d drop-in
and the cache are already right."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.harness import report, time_command
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
        time_command("(setup) simulate create", [ctk, "simulate", "create", str(host), "--gpus", "2"], 0)
        spec = Path(tmp, "nvidia.json")
        time_command("(setup) cdi generate", [ctk, "cdi", "generate", "--driver-root", str(host),
                                              "--output", str(spec), "--nvidia-cdi-hook-path", hook], 0)
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

        floor = time_command("unshare -m sh -c 'exec true' (floor)", in_namespace(["true"]), runs)
        rows = [
            floor,
            time_command("hook: links", in_namespace([hook, *_steps(args, {"create-symlinks"})]), runs),
            time_command("hook: links, params",
                         in_namespace([hook, *_steps(args, {"create-symlinks", "disable-device-node-modification"})]),
                         runs),
            time_command("hook: the spec's whole entry (with ldconfig)", in_namespace([hook, *args]), runs),
        ]
        return report(f"nvidia-cdi-hook, {len(args)} arguments of the generated spec's one entry", rows, floor)
