"""tests.support.leftovers, the suite's check that it leaves nothing behind: what counts as new, and
what is certainly this run's."""
import os

from tests.support import leftovers
from tests.support.leftovers import Snapshot, at_fixed_places, certainly_ours, new_since


def test_new_orphaned_runtime_processes_mounts_cgroups_and_files_are_reported():
    before = Snapshot({10: (1, "/usr/sbin/runc init")}, {"/a"}, {"/sys/fs/cgroup/pids/x"}, {"/tmp/old"})
    after = Snapshot({10: (1, "/usr/sbin/runc init"),            # was there before
                      11: (1, "/usr/sbin/runc init"),            # orphaned runtime: reported
                      12: (1, "bash /dev/fd/3"),                 # someone's shell: not ours to judge
                      13: (500, "conmon --cid x"),               # parent gone: reported
                      14: (10, "sleep 120"),                     # parent alive: still owned
                      99: (1, "python -m pytest")},              # this process
                     {"/a", "/b"}, {"/sys/fs/cgroup/pids/x", "/sys/fs/cgroup/pids/gct-shim-1",
                                    "/sys/fs/cgroup/memory/process_api/x"},
                     {"/tmp/old", "/tmp/new", "/tmp/bash_tool_1"})
    assert new_since(before, after, own_pid=99) == {
        "processes": ["pid 11: /usr/sbin/runc init", "pid 13: conmon --cid x"],
        "mounts": ["/b"],
        "cgroups": ["/sys/fs/cgroup/pids/gct-shim-1"],
        "files": ["/tmp/new"]}


def test_only_what_names_this_run_is_certainly_ours():
    found = {"processes": ["pid 5: crun --root /tmp/pytest-of-root/pytest-7/t0/state create x",
                           "pid 6: crun --root /tmp/pytest-of-root/pytest-70/t0/state create y"],
             "mounts": [], "cgroups": ["/sys/fs/cgroup/pids/gct-shim-1"], "files": []}
    assert certainly_ours(found, ["/tmp/pytest-of-root/pytest-7/"]) == {
        "processes": [found["processes"][0]], "mounts": [], "cgroups": [], "files": []}


def test_new_watched_dirs_and_their_entries_count_as_files(tmp_path, monkeypatch):
    """A watched dir that was not there is new itself (`/run/docker/` with `/run/docker/plugins`)."""
    watched = tmp_path / "run-docker"
    monkeypatch.setattr(leftovers, "WATCHED_DIRS", (str(watched),))
    before = leftovers.take()
    (watched / "plugins").mkdir(parents=True)
    assert new_since(before, leftovers.take(), own_pid=0)["files"] == [f"{watched}/", f"{watched}/plugins"]


def test_what_appears_at_fixed_places_is_picked_out():
    found = {"processes": [], "mounts": [], "cgroups": [],
             "files": ["/run/docker/", "/run/docker/plugins", "/run/containerd/s", "/tmp/containerd.42.stacks.log",
                       "/tmp/pytest-of-root", "/tmp/someone-elses", "/run/user/0"]}
    assert at_fixed_places(found) == ["/run/docker/", "/run/docker/plugins", "/run/containerd/s",
                                      "/tmp/containerd.42.stacks.log", "/tmp/pytest-of-root"]


def test_the_cgroup_lxc_leaves_for_its_monitors_is_a_fixed_place():
    found = {"processes": [], "mounts": [], "files": [],
             "cgroups": ["/sys/fs/cgroup/pids/lxc.pivot", "/sys/fs/cgroup/memory/gct-lxc-pivot-x/lxc.pivot",
                         "/sys/fs/cgroup/pids/lxc.payload.c1", "/sys/fs/cgroup/pids/gct-shim-1"]}
    assert leftovers.at_fixed_cgroups(found) == found["cgroups"][:2]


def test_other_work_is_what_neither_this_run_started_nor_started_it():
    snapshot = Snapshot({1: (0, "/sbin/init"),
                         5: (1, "timeout 900 python -m pytest tests"),     # started this run
                         10: (5, "python -m pytest tests"),               # this run
                         11: (10, "dockerd --data-root /tmp/x"),           # started by it
                         12: (11, "containerd --config /tmp/x/c.toml"),
                         20: (1, "python -m pytest tests/unit"),           # another run
                         21: (1, "/usr/bin/containerd"),                   # the machine's engine
                         22: (1, "sleep 5"),
                         23: (1, "[lxc monitor] /var/lib/lxc c1")})       # someone's LXC container
    assert leftovers.other_work(snapshot, own_pid=10) == {"python -m pytest tests/unit", "/usr/bin/containerd",
                                                          "[lxc monitor] /var/lib/lxc c1"}


def test_a_file_written_again_in_a_stamped_dir_counts_as_a_file(tmp_path, monkeypatch):
    """The runtime cache's name is fixed (runtime-<hash of the config path>.cache): a run that writes it
    over one an earlier run left adds no new name, yet wrote to the machine."""
    stamped = tmp_path / "run-nvidia-container-toolkit"
    stamped.mkdir()
    cache = stamped / "runtime-37a148b3a8e8cc4a.cache"
    cache.write_text("left by an earlier run")
    monkeypatch.setattr(leftovers, "WATCHED_DIRS", (str(stamped),))
    monkeypatch.setattr(leftovers, "STAMPED_DIRS", (str(stamped),))
    before = leftovers.take_files()
    assert new_since(before, leftovers.take_files(), own_pid=0)["files"] == []
    os.utime(cache, ns=(0, cache.stat().st_mtime_ns + 1))
    (stamped / "cdi-validated.json").write_text("{}")
    assert new_since(before, leftovers.take_files(), own_pid=0)["files"] == [
        f"{stamped}/cdi-validated.json", f"{cache} (written again)"]


def test_the_default_cache_dirs_and_etc_configs_are_fixed_places():
    found = {"processes": [], "mounts": [], "cgroups": [],
             "files": ["/run/nvidia-container-toolkit/runtime-37a148b3a8e8cc4a.cache (written again)",
                       "/run/nvidia/mps/", "/etc/nvidia-container-runtime/config.toml (written again)",
                       "/etc/docker/daemon.json (written again)", "/etc/containerd/config.toml", "/run/user/0"]}
    assert at_fixed_places(found) == found["files"][:-1]
    assert {d + "/" for d in leftovers.STAMPED_DIRS} <= {p for p in leftovers.FIXED_PLACES if p.endswith("/")}


def test_a_file_at_a_fixed_place_names_the_test_it_appeared_during():
    found = {"processes": ["pid 5: sleep 9"], "mounts": [], "cgroups": [],
             "files": ["/run/nvidia-container-toolkit/", "/run/nvidia-container-toolkit/runtime-1.cache"]}
    during = {"/run/nvidia-container-toolkit/runtime-1.cache": "tests/e2e/test_x.py::test_y"}
    assert leftovers.describe(found, during) == [
        "  processes: pid 5: sleep 9", "  files: /run/nvidia-container-toolkit/",
        "  files: /run/nvidia-container-toolkit/runtime-1.cache (during tests/e2e/test_x.py::test_y)"]
