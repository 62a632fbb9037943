"""packaging/pkgtools (the package build's own library) for tests, importable as the module `pkgtools`."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "packaging"


def load_pkgtools() -> None:
    """packaging/pkgtools as the module `pkgtools`, without putting packaging/ on sys.path (its
    directories, e.g. rpm/ and debian/, would become importable namespace packages for every test)."""
    if "pkgtools" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location("pkgtools", PACKAGING / "pkgtools" / "__init__.py",
                                                  submodule_search_locations=[str(PACKAGING / "pkgtools")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["pkgtools"] = module
    spec.loader.exec_module(module)
