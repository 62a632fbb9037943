"""cffi_modules cannot be declared in pyproject.toml (docs/reference.md#building); everything else lives there but the
wheel's scripts: the static launcher under every program's name (launcher/install_launchers.py),
beside the file through which the installer tells the launchers their interpreter."""
import importlib.util
from pathlib import Path

from setuptools import Distribution, setup

HERE = Path(__file__).resolve().parent
INTERPRETER_FILE = "launcher/.gpu-container-toolkit-python"


def _install_launchers():
    spec = importlib.util.spec_from_file_location("install_launchers", HERE / "launcher/install_launchers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class build_scripts_with_launchers(Distribution().get_command_class("build_scripts")):
    """Copies INTERPRETER_FILE (keeping "#!python" for the installer to rewrite), then compiles the
    static launcher into the same folder under each program's name (gcc and libc6-dev's libc.a), and
    gct-nvml-inventory, an internal helper, into the wheel's data for <prefix>/libexec (beside bin/,
    off PATH: cdi.nvml.libexec_dir)."""

    def run(self):
        super().run()
        helper_dir = "build/gct-libexec"   # data_files take paths relative to this folder (the build's cwd)
        _install_launchers().build_wheel_scripts(Path(self.build_dir), HERE / helper_dir,
                                                 self.distribution.get_version())
        # install_data (run after the build) takes data_files as they are then
        self.distribution.data_files = [("libexec", [f"{helper_dir}/{p.name}"
                                                     for p in sorted((HERE / helper_dir).iterdir())])]


setup(cffi_modules=["libcontainer_c/build_ffi.py:ffi"], scripts=[INTERPRETER_FILE],
      cmdclass={"build_scripts": build_scripts_with_launchers})
