"""The files a real NVIDIA driver installs, as a simulated host reproduces them.

Sonames follow the real driver: most libraries have a stable soname (libcuda.so.1, libGLX_nvidia.so.0),
internal ones are versioned by the driver itself (libnvidia-glcore.so.550.54.15). Every file is named
`<name>.so.<driver version>`, with the soname as a symlink to it.
"""
from __future__ import annotations

from dataclasses import dataclass

VERSIONED = None  # soname = the file name itself


@dataclass(frozen=True)
class DriverLibrary:
    name: str                 # "libcuda"
    capability: str           # utility, compute, video, graphics, ngx
    soname_suffix: str | None  # "1" -> libcuda.so.1; VERSIONED -> libX.so.<driver version>
    has_32bit: bool = True

    def file_name(self, version: str) -> str:
        return f"{self.name}.so.{version}"

    def soname(self, version: str) -> str:
        return f"{self.name}.so.{self.soname_suffix or version}"


LIBRARIES: tuple[DriverLibrary, ...] = (
    # utility
    DriverLibrary("libnvidia-ml", "utility", "1"),
    DriverLibrary("libnvidia-cfg", "utility", "1", has_32bit=False),
    DriverLibrary("libnvidia-nscq", "utility", "2", has_32bit=False),
    # compute
    DriverLibrary("libcuda", "compute", "1"),
    DriverLibrary("libcudadebugger", "compute", "1", has_32bit=False),
    DriverLibrary("libnvidia-opencl", "compute", "1"),
    DriverLibrary("libnvidia-gpucomp", "compute", VERSIONED),
    DriverLibrary("libnvidia-ptxjitcompiler", "compute", "1"),
    DriverLibrary("libnvidia-fatbinaryloader", "compute", VERSIONED),
    DriverLibrary("libnvidia-allocator", "compute", "1"),
    DriverLibrary("libnvidia-compiler", "compute", VERSIONED),
    DriverLibrary("libnvidia-pkcs11", "compute", VERSIONED, has_32bit=False),
    DriverLibrary("libnvidia-pkcs11-openssl3", "compute", VERSIONED, has_32bit=False),
    DriverLibrary("libnvidia-nvvm", "compute", "4", has_32bit=False),
    # video
    DriverLibrary("libvdpau_nvidia", "video", "1"),
    DriverLibrary("libnvidia-encode", "video", "1"),
    DriverLibrary("libnvidia-opticalflow", "video", "1"),
    DriverLibrary("libnvcuvid", "video", "1"),
    # graphics
    DriverLibrary("libnvidia-eglcore", "graphics", VERSIONED),
    DriverLibrary("libnvidia-glcore", "graphics", VERSIONED),
    DriverLibrary("libnvidia-tls", "graphics", VERSIONED),
    DriverLibrary("libnvidia-glsi", "graphics", VERSIONED),
    DriverLibrary("libnvidia-fbc", "graphics", "1"),
    DriverLibrary("libnvidia-ifr", "graphics", "1"),
    DriverLibrary("libnvidia-rtcore", "graphics", VERSIONED, has_32bit=False),
    DriverLibrary("libnvoptix", "graphics", "1", has_32bit=False),
    DriverLibrary("libGLX_nvidia", "graphics", "0"),
    DriverLibrary("libEGL_nvidia", "graphics", "0"),
    DriverLibrary("libGLESv2_nvidia", "graphics", "2"),
    DriverLibrary("libGLESv1_CM_nvidia", "graphics", "1"),
    DriverLibrary("libnvidia-glvkspirv", "graphics", VERSIONED),
    DriverLibrary("libnvidia-cbl", "graphics", VERSIONED, has_32bit=False),
    # ngx
    DriverLibrary("libnvidia-ngx", "ngx", "1", has_32bit=False),
)

# Development symlinks the driver installer adds next to the libraries.
DEV_SYMLINKS = {"libcuda.so": "libcuda.so.1", "libnvidia-ml.so": "libnvidia-ml.so.1"}

BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
            "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
# Built from their own sources (simulator/csrc/mps_*.c); the other helpers are one small program.
MPS_BINARIES = ("nvidia-cuda-mps-control",)
# The simulated CUDA program that connects to MPS: ours, in usr/bin but no driver file (never injected).
MPS_CLIENT = "gct-cuda-mps-client"

GSP_FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")

LIB64_DIR = "usr/lib/x86_64-linux-gnu"
LIB32_DIR = "usr/lib/i386-linux-gnu"
BIN_DIR = "usr/bin"
