"""OCI bundles for runc/crun tests: `runc spec` plus the changes a test asks for."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
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


USERNS_BASE = 100000   # the host uid and gid that are root inside the containers with a user namespace


@contextlib.contextmanager
def userns_work_dir():
    """A work dir (removed afterwards) that the root of a container with a user namespace (an
    unprivileged host uid) can traverse, unlike pytest's (0700): runc and crun bind-mount the rootfs
    and the driver's files from inside that namespace."""
    work = Path(tempfile.mkdtemp(prefix="gct-userns-"))
    try:
        work.chmod(0o755)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def with_user_namespace(bundle: Path) -> Path:
    """config.json with a user namespace: the container's ids 0-65535 are the host's 100000-165535, and
    the rootfs belongs to the container's root, as a userns-remapped engine prepares them."""
    subprocess.run(["chown", "-R", "-h", f"{USERNS_BASE}:{USERNS_BASE}", str(bundle / "rootfs")], check=True)
    config = json.loads((bundle / "config.json").read_text())
    config["linux"]["namespaces"].append({"type": "user"})
    mapping = [{"containerID": 0, "hostID": USERNS_BASE, "size": 65536}]
    config["linux"]["uidMappings"] = mapping
    config["linux"]["gidMappings"] = mapping
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle
