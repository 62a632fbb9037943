"""Container root filesystems for tests, built without a registry.

busybox-static gives a shell and the usual tools; with `glibc=True` the host's C library and the
static ldconfig are added (the simulated nvidia-smi and `ldconfig -p` need them), and the tree is
marked Debian-like so injected libraries go to /usr/lib/x86_64-linux-gnu (docs/reference.md#driver-libraries).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

BUSYBOX = "/bin/busybox"
GLIBC_FILES = [
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libdl.so.2",
    "/lib/x86_64-linux-gnu/libpthread.so.0",
    "/lib/x86_64-linux-gnu/librt.so.1",
]


def make_rootfs(root: Path, glibc: bool = False) -> Path:
    """Create a minimal rootfs at root (which must not exist or be empty) and return it."""
    root.mkdir(parents=True, exist_ok=True)
    for d in ("bin", "sbin", "dev", "proc", "sys", "etc", "tmp", "usr/bin", "usr/sbin", "usr/lib", "var/run", "run"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    subprocess.run(["chroot", str(root), "/bin/busybox", "--install", "-s"], check=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    if glibc:
        for f in GLIBC_FILES:
            dest = root / f.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(f), dest)
        (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True, exist_ok=True)
        ldconfig = root / "sbin/ldconfig"
        if ldconfig.is_symlink() or ldconfig.exists():
            ldconfig.unlink()  # busybox's applet would shadow the real one
        shutil.copy2("/sbin/ldconfig", ldconfig)
        (root / "etc/debian_version").write_text("12.0\n")
        (root / "etc/ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n")
        subprocess.run(["chroot", str(root), "/sbin/ldconfig"], check=True)
    return root


def rootfs_tar(root: Path, out: Path) -> Path:
    """A tar of root, for `docker import` / `podman import`."""
    with tarfile.open(out, "w") as tar:
        for entry in sorted(root.iterdir()):
            tar.add(entry, arcname=entry.name)
    return out


def docker_archive(root: Path, out: Path, name: str) -> Path:
    """A `docker save`-style tar (manifest.json, config, one layer) that `ctr image import` reads."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for entry in sorted(root.iterdir()):
            tar.add(entry, arcname=entry.name)
    layer_bytes = layer.getvalue()
    layer_digest = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name],
                            "Layers": [f"{layer_digest}/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as tar:
        for member, data in ((config_name, config), (f"{layer_digest}/layer.tar", layer_bytes),
                             ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out
