"""tests.support.leftovers, the suite's check that it leaves nothing behind: what counts as new, and
what is certainly this run's."""
from tests.support.leftovers import Snapshot, certainly_ours, new_since


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
