"""The toolkit's name and version, as every program's --version prints them: `<program>
(gpu-container-toolkit) <version>`.

One source: the version of the installed distribution, i.e. pyproject.toml's [project] version. The
static launcher has it baked in at install time (launcher/install_launchers.py reads it here), so
the C programs (the runtime's passthrough, nvidia-cdi-hook) print the same line. importlib.metadata
costs ~20 ms: it is imported only when a version is asked for.
"""
from __future__ import annotations

DISTRIBUTION = "gpu-container-toolkit"
# The release of NVIDIA's Container Toolkit (and libnvidia-container, released in step with it) whose
# programs, options, config keys and CDI output these follow. One constant for every place that names
# it: `nvidia-container-cli --version` (cli-version), the packages' Provides (packaging/pkgtools reads
# it from this file's source, NVIDIA_RELEASE-1) and README/docs (tests/unit/test_nvidia_release.py
# checks they agree).
NVIDIA_RELEASE = "1.20.0"


def toolkit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def version_line(program: str) -> str:
    return f"{program} ({DISTRIBUTION}) {toolkit_version()}"
