"""Payloads of hostile images: code that leaves a marker file when it runs, so a test can show it did not."""
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
