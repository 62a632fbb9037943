"""nvidia-cdi-hook alone, with the hook entry `nvidia-ctk cdi generate` writes for a simulated host
(it runs on every CDI container's start): the links only, the links and the params mount, and the
whole entry (with the CUDA compat check and the ldconfig), on a busybox + glibc rootfs whose procfs
stand-in has /proc/driver/nvidia/params and which holds copies of the spec's driver libraries where
the runtime would bind-mount them (the links lead to files, as in a container: ldconfig removes a
dangling `*.so.*` link). The hook is a createRuntime hook: it joins the mount namespace of the state's
pid (and refuses pid 1, the machine's), so each run gets a process of its own in a new private mount
namespace (`unshare -m sleep`, started and ended outside the timing; the params mount goes with it) and
the hook is timed alone, its state on stdin; the floor is `true` in the same place. The rows are taken
round-robin (bench.harness.time_rounds: each row once per round, the starting row rotated each round,
after an untimed round). Each row runs twice: on a fresh copy of the rootfs (made and written out before
the run, not timed: a new container; in a new bundle dir each run, all removed at the end, as
bench.fresh_host does and for its reason: freed inodes make new ones dear on a file system without a
journal) and on a rootfs reused from run to run (a restarted container, where the links, the
ld.so.conf.d drop-in and the cache are already right)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import os
import time

from bench.fresh_host import fresh_copy
from bench.harness import report, time_rounds
from hook.cdi_hook import SUBCOMMANDS
from tests.e2e.rootfs import make_rootfs


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
        image = make_rootfs(Path(tmp, "image"), glibc=True)
        for mount in edits["mounts"]:
            if ".so" in mount["containerPath"]:
                target = image / mount["containerPath"].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(mount["hostPath"], target)
        (image / "proc/driver/nvidia").mkdir(parents=True)
        (image / "proc/driver/nvidia/params").write_text("the container's procfs stand-in\n")
        commands = [
            ("true in the hook's place (floor)", ["true"]),
            ("hook: links", [hook, *_steps(args, {"create-symlinks"})]),
            ("hook: links, params", [hook, *_steps(args, {"create-symlinks", "disable-device-node-modification"})]),
            ("hook: the spec's whole entry (with ldconfig)", [hook, *args]),
        ]
        rows = []
        for fresh in (True, False):
            for label, argv in commands:
                bundle = Path(tmp, f"bundle-{len(rows)}")
                bundle.mkdir()
                (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
                shutil.copytree(image, bundle / "rootfs", symlinks=True)
                rows.append((f"{'' if fresh else 'restart: '}{label}",
                             partial(_hook_once, argv, bundle, image if fresh else None)))
        timed = time_rounds(rows, runs)
        head = f"nvidia-cdi-hook, {len(args)} arguments of the generated spec's one entry"
        return "\n".join([report(head + ", on a fresh rootfs", timed[:4], timed[0]),
                          report(head + ", on a reused rootfs (a restart)", timed[4:], timed[4])])


def _hook_once(argv: list[str], bundle: Path, image: Path | None) -> float:
    """Seconds of one run of argv as the createRuntime hook of a container of bundle: its state names a
    process in a new private mount namespace. image: the run gets a new bundle dir beside bundle with a
    fresh copy of it (left there until the bench's temporary dir goes)."""
    if image is not None:
        runs = len(list(bundle.parent.glob(bundle.name + ".run-*")))
        fresh = bundle.with_name(f"{bundle.name}.run-{runs}")
        fresh.mkdir()
        shutil.copyfile(bundle / "config.json", fresh / "config.json")
        fresh_copy(image, fresh / "rootfs")
        bundle = fresh
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "600"],
                              stdin=subprocess.DEVNULL)
    try:
        ours = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/mnt") == ours:
            if time.monotonic() > deadline or holder.poll() is not None:
                raise RuntimeError("unshare -m sleep did not get a mount namespace of its own")
            time.sleep(0.001)
        state = json.dumps({"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": holder.pid,
                            "bundle": str(bundle)}).encode()
        start = time.perf_counter()
        done = subprocess.run(argv, input=state, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode().strip()}")
        return elapsed
    finally:
        holder.kill()
        holder.wait()
