"""cdi.driver_files_cache: the driver files are kept per set of answers the root gave, used only while
every path still gives the same answer, and only from a cache that is ours and private."""
from __future__ import annotations

import json
import os
import time

import pytest

import cdi.driver_files_cache as kept_module
from cdi import config_cache
from cdi.driver_files import locate_driver_files
from cdi.driver_files_cache import locate_driver_files_kept

from .fake_driver_root import FW, LIB, V, build_driver_root
from .helpers import build_library, run_ldconfig

CAPS = {"compute", "utility"}


@pytest.fixture(autouse=True)
def settled(monkeypatch):
    monkeypatch.setattr(config_cache, "RECENT_NS", 0)   # files written by the test count as settled
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)


@pytest.fixture
def root(tmp_path):
    return build_driver_root(str(tmp_path / "driver-root"))


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def kept_file(cache):
    names = [n for n in os.listdir(cache) if not n.startswith(".")]
    assert len(names) == 1, names
    return os.path.join(cache, names[0])


def searched(monkeypatch):
    """Count the real searches from now on."""
    calls = []

    def counting(*args, **kwargs):
        calls.append(args)
        return locate_driver_files(*args, **kwargs)
    monkeypatch.setattr(kept_module, "locate_driver_files", counting)
    return calls


def test_the_second_start_uses_the_kept_files(root, cache, monkeypatch):
    first = locate_driver_files_kept(cache, root, V, CAPS)
    assert first == locate_driver_files(root, V, CAPS)
    assert oct(os.stat(kept_file(cache)).st_mode & 0o777) == "0o644"
    calls = searched(monkeypatch)
    assert locate_driver_files_kept(cache, root, V, CAPS) == first
    assert calls == []


def changed_library(root):
    """libnvidia-ml rebuilt in place with another soname: only the file's own identity changes."""
    path = f"{root}{LIB}/libnvidia-ml.so.{V}"
    time.sleep(0.01)
    build_library(path, "libnvidia-ml.so.7")


def new_binary(root):
    """nvidia-smi appears earlier in the search path: the answer of a path that was missing changes."""
    os.makedirs(f"{root}/usr/local/bin")
    with open(f"{root}/usr/local/bin/nvidia-smi", "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(f"{root}/usr/local/bin/nvidia-smi", 0o755)


def new_firmware(root):
    """A file in a listed directory: the directory's identity changes."""
    with open(f"{root}{FW}/gsp_ad10x.bin", "wb") as f:
        f.write(b"\0" * 16)


def removed_library(root):
    """A library gone, and the root's ld.so.cache rebuilt without it."""
    os.unlink(f"{root}{LIB}/libcudadebugger.so.{V}")
    run_ldconfig(root, [LIB])


def replaced_link(root):
    """/var/run -> /run becomes a directory of its own (no socket in it)."""
    os.unlink(f"{root}/var/run")
    os.makedirs(f"{root}/var/run")


@pytest.mark.parametrize("change", [changed_library, new_binary, new_firmware, removed_library, replaced_link])
def test_a_changed_root_is_searched_again(root, cache, monkeypatch, change):
    before = locate_driver_files_kept(cache, root, V, CAPS)
    change(root)
    fresh = locate_driver_files(root, V, CAPS)
    assert fresh != before                      # the change matters to discovery
    calls = searched(monkeypatch)
    assert locate_driver_files_kept(cache, root, V, CAPS) == fresh
    assert len(calls) == 1
    assert locate_driver_files_kept(cache, root, V, CAPS) == fresh   # and the new answer is kept
    assert len(calls) == 1


def test_a_busy_directory_walked_through_keeps_the_files(root, cache, monkeypatch):
    """/run and the library folder change all the time on a host; what discovery found there does not."""
    before = locate_driver_files_kept(cache, root, V, CAPS)
    with open(f"{root}/run/some-daemon.pid", "w") as f:
        f.write("1\n")
    with open(f"{root}{LIB}/libsomething-else.so.1", "w") as f:
        f.write("not ours\n")
    calls = searched(monkeypatch)
    assert locate_driver_files_kept(cache, root, V, CAPS) == before
    assert calls == []


def test_each_question_has_its_own_kept_files(root, cache):
    utility = locate_driver_files_kept(cache, root, V, {"utility"})
    compute = locate_driver_files_kept(cache, root, V, {"compute"})
    assert utility != compute
    assert locate_driver_files_kept(cache, root, V, {"utility"}) == utility
    assert len([n for n in os.listdir(cache) if not n.startswith(".")]) == 2


def test_a_recent_change_is_not_kept(root, cache, monkeypatch):
    monkeypatch.setattr(config_cache, "RECENT_NS", 3600 * 10**9)   # everything in the root is "recent"
    locate_driver_files_kept(cache, root, V, CAPS)
    assert not os.path.exists(cache) or not [n for n in os.listdir(cache) if not n.startswith(".")]


def forged(kept_path):
    """The kept files with every library pointing at /evil."""
    with open(kept_path) as f:
        document = json.load(f)
    for row in document["files"]:
        row[2] = "/evil" + row[2]
    return document


@pytest.mark.parametrize("spoil", ["group-writable", "foreign-owner", "symlink", "not-json", "other-magic",
                                   "other-key", "bad-row", "bad-answer", "nul-in-path",
                                   "surrogate-in-path", "nul-in-file", "surrogate-in-file", "surrogate-in-link"])
def test_an_untrustworthy_or_corrupt_cache_is_ignored(root, cache, tmp_path, spoil):
    expected = locate_driver_files_kept(cache, root, V, CAPS)
    kept = kept_file(cache)
    document = forged(kept)
    if spoil == "group-writable":
        with open(kept, "w") as f:
            json.dump(document, f)
        os.chmod(kept, 0o664)
    elif spoil == "foreign-owner":
        with open(kept, "w") as f:
            json.dump(document, f)
        os.chown(kept, 1234, 1234)
    elif spoil == "symlink":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(json.dumps(document))
        os.unlink(kept)
        os.symlink(elsewhere, kept)
    elif spoil == "not-json":
        with open(kept, "w") as f:
            f.write("{not json")
    elif spoil == "other-magic":
        with open(kept, "w") as f:
            json.dump(dict(document, magic="gct-driver-files 0"), f)
    elif spoil == "other-key":
        with open(kept, "w") as f:
            json.dump(dict(document, key=[*document["key"][:1], "999.0", *document["key"][2:]]), f)
    elif spoil == "bad-row":
        document["files"][0] = [1, 2, 3]
        with open(kept, "w") as f:
            json.dump(document, f)
    elif spoil == "bad-answer":
        document["answers"][0][1] = "a string"
        with open(kept, "w") as f:
            json.dump(document, f)
    elif spoil in ("nul-in-path", "surrogate-in-path"):   # os.lstat raises ValueError for these, not OSError
        document["answers"][0][0] += "\0" if spoil == "nul-in-path" else "\ud800"
        with open(kept, "w") as f:
            json.dump(document, f)
    elif spoil in ("nul-in-file", "surrogate-in-file", "surrogate-in-link"):   # a kept row no path can be
        row = next(r for r in document["files"] if r[5]) if spoil == "surrogate-in-link" else document["files"][0]
        if spoil == "surrogate-in-link":
            row[5][0][1] += "\ud800"
        else:
            row[2] += "\0" if spoil == "nul-in-file" else "\ud800"
        with open(kept, "w") as f:
            json.dump(document, f)
    assert locate_driver_files_kept(cache, root, V, CAPS) == expected


def test_a_forged_but_well_formed_cache_of_ours_is_used(root, cache):
    """The control for the test above: the forgery itself is read when the file is trustworthy, so
    that test fails if the trust rules go."""
    locate_driver_files_kept(cache, root, V, CAPS)
    kept = kept_file(cache)
    document = forged(kept)
    with open(kept, "w") as f:
        json.dump(document, f)
    assert all(f.host_path.startswith("/evil") for f in locate_driver_files_kept(cache, root, V, CAPS).files)


def test_a_foreign_cache_directory_is_not_used(root, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)   # other-writable: anyone could plant files there
    locate_driver_files_kept(str(cache), root, V, CAPS)
    assert os.listdir(cache) == []


def test_a_kept_answer_imports_no_ld_cache_parser(root, cache):
    """Speed (issue 25): cdi.ldcache is only for a search; a start that uses the kept files (every
    prestart hook run but the first) does not import it."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    code = ("import sys\n"
            f"sys.path[:0] = [{str(repo)!r}]\n"
            "from cdi import config_cache; config_cache.RECENT_NS = 0   # the root was written just now\n"
            "from cdi.driver_files_cache import locate_driver_files_kept\n"
            f"locate_driver_files_kept({cache!r}, {root!r}, {V!r}, {sorted(CAPS)!r})\n"
            "print('cdi.ldcache' in sys.modules)\n")
    runs = [subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
            for _ in range(2)]
    assert [(r.returncode, r.stdout, r.stderr) for r in runs] == [(0, "True\n", ""), (0, "False\n", "")]
