"""A fake driver root: real ELF libraries of every capability (64- and 32-bit), decoys, binaries,
firmware, a persistenced socket behind an absolute /var/run -> /run link, and a real ld.so.cache."""
from __future__ import annotations

import os

from .helpers import build_library, make_socket, run_ldconfig

V = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"
LIB32 = "/usr/lib/i386-linux-gnu"
FW = f"/lib/firmware/nvidia/{V}"

# (file name, soname, capability) of the driver's 64-bit libraries in the fake root.
LIBRARIES_64 = [
    (f"libnvidia-ml.so.{V}", "libnvidia-ml.so.1", "utility"),
    (f"libnvidia-cfg.so.{V}", "libnvidia-cfg.so.1", "utility"),
    (f"libcuda.so.{V}", "libcuda.so.1", "compute"),
    (f"libcudadebugger.so.{V}", "libcudadebugger.so.1", "compute"),
    (f"libnvidia-ptxjitcompiler.so.{V}", "libnvidia-ptxjitcompiler.so.1", "compute"),
    (f"libnvidia-pkcs11-openssl3.so.{V}", f"libnvidia-pkcs11-openssl3.so.{V}", "compute"),
    (f"libnvcuvid.so.{V}", "libnvcuvid.so.1", "video"),
    (f"libnvidia-encode.so.{V}", "libnvidia-encode.so.1", "video"),
    (f"libnvidia-opticalflow.so.{V}", "libnvidia-opticalflow.so.1", "video"),
    (f"libnvidia-allocator.so.{V}", "libnvidia-allocator.so.1", "compute"),
    (f"libGLX_nvidia.so.{V}", "libGLX_nvidia.so.0", "graphics"),
    (f"libnvidia-glcore.so.{V}", f"libnvidia-glcore.so.{V}", "graphics"),
    (f"libnvidia-ngx.so.{V}", "libnvidia-ngx.so.1", "ngx"),
]
LIBRARIES_32 = [
    (f"libcuda.so.{V}", "libcuda.so.1", "compute"),
    (f"libnvidia-ml.so.{V}", "libnvidia-ml.so.1", "utility"),
    (f"libGLX_nvidia.so.{V}", "libGLX_nvidia.so.0", "graphics"),
]


def build_driver_root(root: str, *, with_cache: bool = True) -> str:
    for name, soname, _ in LIBRARIES_64:
        build_library(f"{root}{LIB}/{name}", soname)
    for name, soname, _ in LIBRARIES_32:
        build_library(f"{root}{LIB32}/{name}", soname, bits=32)
    os.symlink("libcuda.so.1", f"{root}{LIB}/libcuda.so")
    # Decoys: an NVIDIA name of another version, a library not in any table, a linker script.
    build_library(f"{root}{LIB}/libnvidia-nscq.so.2.0", "libnvidia-nscq.so.2")
    build_library(f"{root}{LIB}/libnotnvidia.so.{V}", "libnotnvidia.so.1")
    with open(f"{root}{LIB}/libnvidia-fbc.so.{V}", "w") as f:
        f.write("INPUT(-lnothing)\n")
    # Binaries: found in usr/bin and sbin; one not executable, one a directory.
    for path, mode in [("/usr/bin/nvidia-smi", 0o755), ("/usr/bin/nvidia-cuda-mps-control", 0o755),
                       ("/sbin/nvidia-persistenced", 0o755), ("/usr/bin/nvidia-debugdump", 0o644)]:
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        with open(root + path, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(root + path, mode)
    os.makedirs(f"{root}/usr/sbin/nvidia-cuda-mps-server")
    os.makedirs(root + FW)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin", "README.txt"):
        with open(f"{root}{FW}/{name}", "wb") as f:
            f.write(b"\0" * 16)
    # /var/run -> /run with an ABSOLUTE link: followed naively it would be the host's /run.
    os.makedirs(f"{root}/var")
    os.symlink("/run", f"{root}/var/run")
    make_socket(f"{root}/run/nvidia-persistenced/socket")
    os.makedirs(f"{root}/run/nvidia-fabricmanager")
    with open(f"{root}/run/nvidia-fabricmanager/socket", "w") as f:
        f.write("not a socket")
    os.makedirs(f"{root}/tmp/nvidia-mps")
    if with_cache:
        run_ldconfig(root, [LIB, LIB32])
    return root
