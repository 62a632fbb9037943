import pytest

from tests.unit.hook.simulated import build_host, can_build, inventory_of


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory):
    if not can_build():
        pytest.skip("building a simulated host needs root and nvidia-ctk (make venv)")
    host = build_host(tmp_path_factory.mktemp("hook-unit") / "host")
    return host, inventory_of(host)
