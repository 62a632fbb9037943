"""`make kube`: obtain what the Kubernetes e2e tests run, into the user's cache (tests/support/kube/paths.py):
containerd 1.7 from Debian's next release, then kubelet, kube-apiserver, kube-scheduler and
kube-controller-manager built from the Go module proxy (skipped when KUBE_BIN_DIR names the user's own), and
NVIDIA's nvidia-device-plugin (the parity test's reference) built the same way.
Each part is done once per machine; a later run finds it and says nothing.

When a part cannot be obtained, the reason is written to the cache (paths.unavailable_file) and the tests
that need it skip, naming it; under CI (CI=true) a failure fails instead, as CI must run those tests.
"""
from __future__ import annotations

import os
import subprocess
import sys

from cdi.errors import message_line
from tests.support.kube import paths
from tests.support.kube.build import ensure_kube_binaries
from tests.support.kube.containerd17 import ensure_containerd17
from tests.support.kube.nvidia_plugin_build import ensure_nvidia_plugin
from tests.support.kube.setup_common import PROGRAM, SetupError

# nvidia-device-plugin: NVIDIA's own, only for the parity test (its failure skips only that test)
PARTS = (("containerd", ensure_containerd17), ("kube", ensure_kube_binaries),
         ("nvidia-device-plugin", ensure_nvidia_plugin))


def main() -> int:
    failed = False
    for part, ensure in PARTS:
        marker = paths.unavailable_file(part)
        try:
            ensure()
        except (SetupError, OSError, subprocess.SubprocessError) as exc:
            failed = True
            print(message_line(PROGRAM, "error", str(exc)), file=sys.stderr)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(str(exc) + "\n")
        else:
            marker.unlink(missing_ok=True)
    if failed and os.environ.get("CI", "").lower() in ("true", "1"):
        return 1
    if failed:
        print(f"{PROGRAM}: the tests that need what is missing will be skipped (set {paths.KUBE_BIN_DIR_ENV} "
              "to a directory with your own kubelet, kube-apiserver, kube-scheduler, kube-controller-manager)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
