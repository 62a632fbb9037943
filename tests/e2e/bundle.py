"""OCI bundles for runc/crun tests: `runc spec` plus the changes a test asks for."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.e2e.rootfs import make_rootfs


def make_bundle(bundle: Path, args: list[str], env: list[str] | None = None, rootfs: Path | None = None,
                glibc: bool = False, annotations: dict | None = None) -> Path:
    """A bundle at `bundle` whose process runs `args` without a terminal; returns the bundle path."""
    bundle.mkdir(parents=True, exist_ok=True)
    if rootfs is None:
        make_rootfs(bundle / "rootfs", glibc=glibc)
        root_path = "rootfs"
    else:
        root_path = str(rootfs)
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    config["root"] = {"path": root_path, "readonly": False}
    config["process"]["terminal"] = False
    config["process"]["args"] = args
    base_env = [e for e in config["process"].get("env", []) if e.startswith("PATH=")]
    config["process"]["env"] = base_env + list(env or [])
    if annotations:
        config["annotations"] = annotations
    config_path.write_text(json.dumps(config, indent=2))
    return bundle
