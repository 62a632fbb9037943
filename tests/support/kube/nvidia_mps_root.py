"""Run NVIDIA's device plugin with sharing.mps outside its container: `python -m
tests.support.kube.nvidia_mps_root RESOURCE -- COMMAND...`, inside a private mount namespace that already
shows the simulated host (`nvidia-ctk simulate exec HOST -- python -m ...`).

NVIDIA's plugin looks for its MPS control daemon at /mps/<resource>/pipe, a fixed path (the mount of
--mps-root inside its container, where NVIDIA's mps-control-daemon started the daemon), and refuses to
register without it. A test must not make /mps on the machine, so this makes a root of its own: an
overlay of / (its upper layer on a tmpfs, so nothing is written anywhere) with every other top-level mount
of the namespace bound into it (/dev, /proc, /sys, /run, /etc, /var/lib, /tmp where they are mounts: the
simulated nodes, the kubelet's socket folder), makes /mps/<resource>/{pipe,log} there, starts the
simulated host's nvidia-cuda-mps-control -d with them (as NVIDIA's mps-control-daemon does), runs
COMMAND in that root, passes it SIGTERM, and at its end sends the daemon `quit`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

WORK = Path("/mnt")  # an existing folder covered by a tmpfs in this namespace only
CONTROL = "nvidia-cuda-mps-control"


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _top_mounts() -> list[str]:
    """The namespace's mount points below / that no other mount point (but /) contains."""
    targets = sorted({line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()} - {"/"})
    top: list[str] = []
    for target in targets:
        if not any(target.startswith(t.rstrip("/") + "/") for t in top) and not target.startswith(str(WORK)):
            top.append(target)
    return top


def make_root() -> Path:
    mounts = _top_mounts()
    _mount("-t", "tmpfs", "gct-mps-root", str(WORK))
    for name in ("upper", "work", "root"):
        (WORK / name).mkdir()
    root = WORK / "root"
    _mount("-t", "overlay", "gct-mps-root", "-o", f"lowerdir=/,upperdir={WORK}/upper,workdir={WORK}/work", str(root))
    for target in mounts:
        inside = root / target.lstrip("/")
        if not inside.is_dir():  # a file mount (e.g. /etc/resolv.conf) under a folder bound already
            continue
        _mount("--rbind", target, str(inside))
    return root


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m tests.support.kube.nvidia_mps_root RESOURCE -- COMMAND...", file=sys.stderr)
        return 2
    resource, command = argv[0], argv[2:]
    root = make_root()
    os.chroot(root)
    os.chdir("/")
    env = {"CUDA_MPS_PIPE_DIRECTORY": f"/mps/{resource}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"/mps/{resource}/log"}
    for folder in env.values():
        os.makedirs(folder)
    subprocess.run([CONTROL, "-d"], env={**os.environ, **env}, check=True)
    plugin = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: plugin.send_signal(signal.SIGTERM))
    try:
        return plugin.wait()
    finally:
        subprocess.run([CONTROL], input="quit\n", text=True, env={**os.environ, **env}, check=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
