"""One NVIDIA release everywhere (issue 27.3: `nvidia-container-cli -V` said cli-version 1.17.0 while the
packages provided libnvidia-container-tools (= 1.20.0-1)): the CLI's cli-version, the packages' Provides
and what README and docs/packaging.md say all come from cdi.version.NVIDIA_RELEASE."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from cdi.version import NVIDIA_RELEASE
from tests.support.pkgtools import load_pkgtools

REPO = Path(__file__).resolve().parents[2]

load_pkgtools()
from pkgtools import metadata  # noqa: E402


def test_the_cli_prints_the_release_the_packages_provide():
    done = subprocess.run([sys.executable, "-m", "hook.cli", "-V"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    cli_version = re.search(r"^cli-version: (\S+)$", done.stdout, re.M).group(1)
    assert cli_version == NVIDIA_RELEASE
    assert metadata.NVIDIA_VERSION == f"{cli_version}-1"


def test_readme_and_docs_name_the_same_release():
    readme = (REPO / "README.md").read_text()
    assert re.findall(r"cli-version: ([0-9.]+)", readme) == [NVIDIA_RELEASE]
    packaging = (REPO / "docs" / "packaging.md").read_text()
    provided = set(re.findall(r"\(= ([0-9.]+-[0-9]+)\)", packaging))
    assert provided == {metadata.NVIDIA_VERSION}
    assert f"{NVIDIA_RELEASE} is the NVIDIA release this toolkit follows" in packaging
