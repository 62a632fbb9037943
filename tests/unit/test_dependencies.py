"""The declared dependencies are what the product imports (issue 14 item 22): pyroute2 was declared and
never imported; python-prctl did one job the C helper does (libcontainer_c.privileges) and made pip
users install gcc, libcap-dev and python3-dev to build it."""
import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("cdi", "runtime_shim", "hook", "libcontainer_c", "launcher", "ctk", "simulator", "device_plugin")
# distribution name -> the top-level module it provides
MODULE_OF = {"click": "click", "jsonschema": "jsonschema", "cffi": "cffi", "pyyaml": "yaml", "tomlkit": "tomlkit",
             "grpcio": "grpc", "protobuf": "google"}


def declared() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]]


def imported_top_level_modules() -> set[str]:
    modules = set()
    for package in PRODUCT_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    return modules


def test_every_declared_dependency_is_imported_by_the_product():
    imported = imported_top_level_modules()
    unused = [d for d in declared() if MODULE_OF.get(d, d) not in imported]
    assert not unused, f"declared but never imported: {unused}"


def test_no_dependency_needs_libcap_or_a_compiler_of_its_own():
    assert "python-prctl" not in declared()
    assert "prctl" not in imported_top_level_modules()
