"""What a device plugin makes a real kubelet offer: `python -m tests.support.kube.allocatable -- COMMAND...`
starts a test node (a standalone kubelet and containerd 1.7 in a private mount namespace,
docs/kubernetes-testing.md), runs COMMAND there (a device plugin: its sockets go to the node's
/var/lib/kubelet/device-plugins, where NVIDIA's plugin puts them too), waits until what the kubelet can
allocate has stayed the same for --settle seconds, prints it as JSON (resource -> sorted device IDs, as
the kubelet's pod-resources GetAllocatableResources gives them) and stops everything. Root only.

For comparing this project's plugin with NVIDIA's on one simulated host (docs/device-plugin.md, "Comparing
with NVIDIA's plugin"):

    python -m tests.support.kube.allocatable -- nvidia-device-plugin --nvidia-driver-root /tmp/host --mig-strategy mixed
    python -m tests.support.kube.allocatable -- nvidia-ctk simulate exec /tmp/host -- /path/to/nvidia-device-plugin --mig-strategy mixed
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time

from tests.support.kube import paths
from tests.support.kube.containerd import ContainerdSettings
from tests.support.kube.node import kube_node


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.kube.allocatable", description=__doc__.split("\n")[0])
    parser.add_argument("--settle", type=float, default=5.0, help="seconds the offer must stay the same (default 5)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait in all (default 60)")
    parser.add_argument("--log", help="file for the plugin's output (default: this program's stderr)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]: the device plugin")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the plugin's command after --")
    out = open(args.log, "w") if args.log else sys.stderr
    with kube_node(paths.kube_bin_dir(), containerd=ContainerdSettings(version="1.7")) as node:
        plugin = node.popen(command, stdout=out, stderr=out)
        try:
            offer, since, deadline = None, time.monotonic(), time.monotonic() + args.timeout
            while time.monotonic() < deadline and time.monotonic() - since < args.settle:
                if plugin.poll() is not None:
                    print(f"allocatable: error: the plugin ended with status {plugin.returncode}", file=sys.stderr)
                    return 1
                now = {r: sorted(ids) for r, ids in node.allocatable_devices().items() if ids}
                if now != offer:
                    offer, since = now, time.monotonic()
                time.sleep(0.5)
        finally:
            if plugin.poll() is None:
                plugin.send_signal(signal.SIGTERM)
                try:
                    plugin.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    plugin.kill()
    json.dump({"resources": {r: {"count": len(ids), "ids": ids} for r, ids in sorted(offer.items())}},
              sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
