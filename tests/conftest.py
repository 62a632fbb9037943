"""Suite-wide rules: which tests are e2e, the shared fixture modules, and a check that the suite is a
good guest (it leaves no process, mount, cgroup or file behind on the machine)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support import leftovers

# fixtures every test may use without importing them: private dockerd/containerd/podman, CDI podman, a
# Kubernetes node (tests/support/kube)
pytest_plugins = ["tests.e2e.engines", "tests.e2e.podman_env", "tests.support.kube.fixtures"]

TESTS = Path(__file__).resolve().parent
# e2e: starts real runtimes or daemons. All of tests/e2e, and these security tests.
E2E_DIRS = (TESTS / "e2e",)
E2E_FILES = (TESTS / "security" / "test_hook_attacks.py", TESTS / "security" / "test_cdi_hostile_image_podman.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(item.path)
        if path in E2E_FILES or any(d in path.parents for d in E2E_DIRS):
            item.add_marker(pytest.mark.e2e)


# ---- pytest's temp dirs: one private dir per run, removed at its end ---------------------------------

_OWN_BASETEMP = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Without --basetemp, pytest keeps its temp dirs in /tmp/pytest-of-<user> for later runs (and
    prunes older runs' dirs there, also those of a run beside this one): this run's go to a dir of its
    own in TMPDIR instead, removed when the run ends. A --basetemp given is used and kept as given."""
    if config.option.basetemp is None:
        config.option.basetemp = config.stash[_OWN_BASETEMP] = tempfile.mkdtemp(prefix="gct-tests-")


def pytest_unconfigure(config):
    base = config.stash.get(_OWN_BASETEMP, None)
    if base is None or not os.path.isdir(base):
        return
    # never remove through a mount a test left below it (the leftover check has failed the run then)
    with open("/proc/self/mountinfo") as f:
        if any(line.split()[4].startswith(base + "/") for line in f):
            print(f"\nkept {base}: a mount is still below it")
            return
    shutil.rmtree(base, ignore_errors=True)


# ---- leftovers: per test module and for the whole session ----------------------------------------

_FOUND = pytest.StashKey[list]()
_END = pytest.StashKey[dict]()
_OTHER_WORK = pytest.StashKey[set]()
_WRITTEN_DURING = pytest.StashKey[dict]()


def _markers(tmp_path_factory) -> list[str]:
    """Paths only this run uses: what lies below its pytest base temp dir (pytest-7/ is not pytest-70/)."""
    return [str(tmp_path_factory.getbasetemp()) + "/"]


@pytest.fixture(scope="session", autouse=True)
def machine_left_as_found(request, tmp_path_factory):
    """Fails the run (at the teardown of its last test) if anything that names this run's temp dirs is
    still on the machine at the end, or anything appeared at leftovers.FIXED_PLACES or as a cgroup of
    leftovers.FIXED_CGROUP_NAMES while no other work ran on the machine; everything else that appeared
    is listed in the summary."""
    request.config.stash[_FOUND] = []
    other_work = request.config.stash[_OTHER_WORK] = set()
    before = leftovers.take()
    yield
    after = leftovers.take()
    other_work |= leftovers.other_work(before, os.getpid()) | leftovers.other_work(after, os.getpid())
    found = leftovers.new_since(before, after, os.getpid())
    request.config.stash[_FOUND].append(("the whole run", found))
    request.config.stash[_END] = found
    ours = leftovers.certainly_ours(found, _markers(tmp_path_factory))
    if not other_work:
        ours["files"] = sorted(set(ours["files"]) | set(leftovers.at_fixed_places(found)))
        ours["cgroups"] = sorted(set(ours["cgroups"]) | set(leftovers.at_fixed_cgroups(found)))
    if any(ours.values()):
        written_during = request.config.stash.get(_WRITTEN_DURING, {})
        pytest.fail("the test run left behind on the machine:\n"
                    + "\n".join(leftovers.describe(ours, written_during)), pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def module_left_as_found(request, machine_left_as_found):
    """Notes what appeared on the machine while a module ran (its module fixtures included), for the
    summary; which module leaked is what one needs to fix it."""
    before = leftovers.take()
    yield
    after = leftovers.take()
    request.config.stash[_OTHER_WORK].update(leftovers.other_work(before, os.getpid()),
                                             leftovers.other_work(after, os.getpid()))
    found = leftovers.new_since(before, after, os.getpid())
    if any(found.values()):
        request.config.stash[_FOUND].append((request.node.nodeid, found))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Notes which test (its fixtures' set-up and tear-down included) wrote at leftovers.FIXED_PLACES: the
    run's check names it beside what it finds there. Files only: a few listings per test."""
    before = leftovers.take_files()
    yield
    found = leftovers.new_since(before, leftovers.take_files(), os.getpid())
    written_during = item.config.stash.setdefault(_WRITTEN_DURING, {})
    for path in leftovers.at_fixed_places(found):
        written_during.setdefault(path, item.nodeid)


def pytest_terminal_summary(terminalreporter, config):
    """Each module's leftovers that were still there at the end of the run, then the run's own list."""
    end = config.stash.get(_END, None)
    if not end or not any(end.values()):
        return
    terminalreporter.section("left on the machine (may include other users' work meanwhile)")
    other_work = config.stash.get(_OTHER_WORK, set())
    if other_work and (leftovers.at_fixed_places(end) or leftovers.at_fixed_cgroups(end)):
        terminalreporter.line("not judged at fixed places, as other work ran meanwhile, e.g. "
                              + sorted(other_work)[0][:100])
    for where, found in config.stash.get(_FOUND, []):
        kept = {kind: [item for item in items if item in end[kind]] for kind, items in found.items()}
        if any(kept.values()):
            terminalreporter.line(f"{where}:")
            for line in leftovers.describe(kept, config.stash.get(_WRITTEN_DURING, {})):
                terminalreporter.line(line)
