"""The toolkit's name and version, as every program's --version prints them: `<program>
(gpu-container-toolkit) <version>`.

One source: the version of the installed distribution, i.e. pyproject.toml's [project] version. The
static launcher has it baked in at install time (libcontainer_c/install_launchers.py reads it here), so
the C programs (the runtime's passthrough, nvidia-cdi-hook) print the same line. importlib.metadata
costs ~20 ms: it is imported only when a version is asked for.
"""
from __future__ import annotations

DISTRIBUTION = "gpu-container-toolkit"


def toolkit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def version_line(program: str) -> str:
    return f"{program} ({DISTRIBUTION}) {toolkit_version()}"
