import os

import pytest

from tests.e2e.rootfs import make_rootfs
from tests.support.simulated_host import NVIDIA_CTK, inventory_from_marker, simulate_create

# the ld cache tests mount (root) and run the host's ldconfig
needs_root_and_ldconfig = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/sbin/ldconfig"),
                                             reason="mounts need root, and the host's ldconfig")


@pytest.fixture
def rootfs(tmp_path):
    """A busybox + glibc rootfs (ldconfig and ld.so work in it)."""
    return make_rootfs(tmp_path / "rootfs", glibc=True)


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory):
    if os.geteuid() != 0 or not NVIDIA_CTK.exists():
        pytest.skip("building a simulated host needs root and nvidia-ctk (make venv)")
    host = simulate_create(tmp_path_factory.mktemp("hook-unit") / "host")
    return host, inventory_from_marker(host)
