"""Container images for the kubelet without a registry: OCI image archives built here, for
`ctr -n k8s.io image import`.

- the pause image, the pod sandbox's one process: a static C program that sleeps until SIGINT/SIGTERM and
  reaps what it inherits (what Kubernetes' own pause does);
- a busybox image from busybox-static (tests.e2e.rootfs), optionally with the host's C library for
  programs a CDI spec injects (the simulated nvidia-smi).

Each image is one uncompressed layer; the index names it with `io.containerd.image.name`, which the import
takes as the image's name.
"""
from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from tests.e2e.rootfs import make_rootfs

PAUSE_IMAGE = "gct.test/pause:1"
BUSYBOX_IMAGE = "gct.test/busybox:1"
BUSYBOX_GLIBC_IMAGE = "gct.test/busybox-glibc:1"

PAUSE_SOURCE = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGINT, stop);
    signal(SIGTERM, stop);
    signal(SIGCHLD, reap);
    for (;;)
        pause();
}
"""


def _blob(layout: tarfile.TarFile, data: bytes, media_type: str) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest.split(":", 1)[1])
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _layer_of(root: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for entry in sorted(root.iterdir()):
            layer.add(entry, arcname=entry.name)
    return buffer.getvalue()


def oci_archive(root: Path, name: str, command: list[str], out: Path) -> Path:
    """An OCI image layout tar of the tree at root, named name, running command."""
    layer = _layer_of(root)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": command, "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
    with tarfile.open(out, "w") as layout:
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": _blob(layout, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"),
                    "layers": [_blob(layout, layer, "application/vnd.oci.image.layer.v1.tar")]}
        described = _blob(layout, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
        described["annotations"] = {"io.containerd.image.name": name,
                                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
        for file_name, content in (("oci-layout", {"imageLayoutVersion": "1.0.0"}),
                                   ("index.json", {"schemaVersion": 2, "manifests": [described]})):
            data = json.dumps(content).encode()
            info = tarfile.TarInfo(file_name)
            info.size = len(data)
            layout.addfile(info, io.BytesIO(data))
    return out


def pause_archive(workdir: Path) -> Path:
    root = workdir / "pause-root"
    root.mkdir(parents=True)
    source = workdir / "pause.c"
    source.write_text(PAUSE_SOURCE)
    subprocess.run(["gcc", "-static", "-Os", "-o", str(root / "pause"), str(source)], check=True)
    return oci_archive(root, PAUSE_IMAGE, ["/pause"], workdir / "pause.tar")


def busybox_archive(workdir: Path, glibc: bool = False) -> Path:
    name = BUSYBOX_GLIBC_IMAGE if glibc else BUSYBOX_IMAGE
    root = make_rootfs(workdir / ("busybox-glibc-root" if glibc else "busybox-root"), glibc=glibc)
    return oci_archive(root, name, ["/bin/sh"], workdir / f"{root.name}.tar")
