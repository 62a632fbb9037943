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


# one NVML call broken, every other one the simulated library's: the calls gct-nvml-inventory does not make,
# so the inventory is read and the readers after it (node-label facts, topology) meet the fault
HOSTILE_NVML_CALLS = {
    "attributes-hang": ("nvmlDeviceGetAttributes_v2", "for (;;) pause();"),   # a MIG device's attributes
    "attributes-crash": ("nvmlDeviceGetAttributes_v2", "return *(volatile int *)0;"),
    "topology-hang": ("nvmlDeviceGetTopologyCommonAncestor", "for (;;) pause();"),
}
REAL_NVML = "libnvidia-ml-real.so.1"


def hostile_nvml_call_host(healthy: Path, root: Path, how: str) -> Path:
    """A copy of the simulated host `healthy` at root whose libnvidia-ml.so.1 defines the one call of
    HOSTILE_NVML_CALLS[how] itself and needs the simulated library, copied beside it as REAL_NVML, for every
    other (a handle's dlsym searches the library's needed ones after it); returns root."""
    subprocess.run(["cp", "-a", str(healthy), str(root)], check=True)
    library = (root / NVML_LIBRARY).resolve()
    real = library.parent / REAL_NVML
    library.rename(real)   # it finds its host from its own folder, which stays the same
    call, body = HOSTILE_NVML_CALLS[how]
    work = root.parent / f"{root.name}-nvml"
    work.mkdir()
    # the simulated library's soname is libnvidia-ml.so.1; linked against a stub named REAL_NVML, the
    # hostile one needs REAL_NVML, found in its own folder ($ORIGIN)
    (work / "stub.c").write_text("")
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{REAL_NVML}", "-o", str(work / REAL_NVML),
                    str(work / "stub.c")], check=True)
    (work / "hostile.c").write_text(f"#include <unistd.h>\nint {call}(void) {{ {body} return 0; }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(work / "hostile.c"), "-Wl,--no-as-needed",
                    str(work / REAL_NVML), "-Wl,-rpath,$ORIGIN"], check=True)
    return root
