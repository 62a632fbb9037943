import os

import pytest

from tests.support.simulated_host import NVIDIA_CTK, inventory_from_marker, simulate_create


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory):
    if os.geteuid() != 0 or not NVIDIA_CTK.exists():
        pytest.skip("building a simulated host needs root and nvidia-ctk (make venv)")
    host = simulate_create(tmp_path_factory.mktemp("hook-unit") / "host")
    return host, inventory_from_marker(host)
