"""Payloads of hostile images (code that leaves a marker file when it runs, so a test can show it did not),
and hostile driver libraries (an NVML that hangs or crashes)."""
from __future__ import annotations

import subprocess
from pathlib import Path


def marker_preload_library(directory: Path, markers: Path) -> Path:
    """directory/preload.so, an LD_PRELOAD library whose constructor creates markers/ld_preload."""
    source = directory / "preload.c"
    source.write_text(
        '#include <fcntl.h>\n#include <unistd.h>\n'
        f'__attribute__((constructor)) static void run(void) {{ close(open("{markers}/ld_preload", '
        'O_CREAT | O_WRONLY, 0644)); }\n')
    library = directory / "preload.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def marker_python_files(directory: Path, markers: Path, names, marker_prefix: str = "") -> None:
    """directory/<name>.py for each name: a module that creates markers/<marker_prefix><name> on import."""
    for name in names:
        (directory / f"{name}.py").write_text(f"open({str(markers / (marker_prefix + name))!r}, 'w').close()\n")


NVML_LIBRARY = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"   # in a simulated host

# libnvidia-ml.so.1 variants that are whole ELF objects, each broken in its own code
HOSTILE_NVML_SOURCES = {
    "hang": "#include <unistd.h>\nint nvmlInit_v2(void) { for (;;) pause(); }\n",   # nvmlInit_v2 never returns
    "load-hang": ("#include <unistd.h>\n"                                             # dlopen never returns
                  "__attribute__((constructor)) static void stuck(void) { for (;;) pause(); }\n"
                  "int nvmlInit_v2(void) { return 0; }\n"),
    "init-crash": "int nvmlInit_v2(void) { return *(volatile int *)0; }\n",           # SIGSEGV in nvmlInit_v2
}


def hostile_nvml_host(healthy: Path, root: Path, how: str) -> Path:
    """A copy of the simulated host `healthy` at root whose libnvidia-ml.so.1 (the file its link names)
    is HOSTILE_NVML_SOURCES[how], built there; returns root."""
    subprocess.run(["cp", "-a", str(healthy), str(root)], check=True)
    library = (root / NVML_LIBRARY).resolve()
    source = root.parent / f"{root.name}-nvml.c"
    source.write_text(HOSTILE_NVML_SOURCES[how])
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return root
