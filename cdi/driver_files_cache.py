"""The driver files of a driver root kept between container starts, so that the prestart hook need not
search the root at every GPU container's start.

    files = locate_driver_files_kept(cache_dir, "/", "550.54.15", {"compute", "utility"})

Why: discovery (cdi.driver_files) resolves some sixty paths one component at a time, reads the root's
ld.so.cache and the ELF header of every library: about 2 ms of each start, for files that change only
with a driver install. NVML is still read at every start (the GPU set can change); only the files are
kept.

What is kept, for one question (root, driver version, capabilities, ld.so.cache path, binary search
path, MPS pipe directory, machine): the DriverFiles found, and every answer the root gave on the way,
which is every lstat that discovery made (cdi.driver_root resolves, stats and lists only through
lstat'ed paths):
- a path that was missing: that it was missing;
- a file, a link (its text cannot change in place) or a listed directory: (mode, dev, ino, size,
  mtime_ns, ctime_ns), the identity of what was read;
- a directory only walked through: (mode, dev, ino). What a walk finds in it is the next component's
  own answer, also kept, so a busy directory (/run, /usr/lib) does not throw the files away.
Discovery is a function of these answers. The kept files are used only when every path gives the
same answer again (one lstat each, ~0.2 ms in all), so they are the files a new search would find.
A set of answers that changed less than config_cache.RECENT_NS ago is not kept: a ctime has the kernel's coarse
clock tick, and a change racing with our read could leave the same identity.

Trust: as cdi.config_cache (same directory, same rules: a file owned by our euid and writable by no
one else, in such a directory, opened without following links). A missing, foreign, corrupt or
outdated file only costs a new search.
"""
from __future__ import annotations

import os
import stat
import time

from cdi import config_cache, json_codec
from cdi.driver_files import (DEFAULT_SEARCH_PATH, LD_CACHE, DriverFile, DriverFiles, Symlink, locate_driver_files,
                              mps_pipe_directory_of, parse_capabilities)
from cdi.driver_root import MISSING_ERRNOS, DriverRoot

MAGIC = "gct-driver-files 1"
MAX_CACHE_BYTES = 4 << 20


class RecordingRoot(DriverRoot):
    """A DriverRoot that notes the answer of every lstat (see the module docstring). Also used by jit-cdi's
    create cache (runtime_shim.jit_cdi), whose edits are a function of the same answers."""

    def __init__(self, root: str):
        super().__init__(root)
        self.answers: dict[str, list[int] | None] = {}
        self.listed: set[str] = set()
        self.unsettled = False   # a path gave two answers: something changed while we looked

    def _lstat(self, path_in_root: str):
        st = super()._lstat(path_in_root)
        self._note(self.host_path(path_in_root), st)
        return st

    def listdir(self, path_in_root: str) -> list[str]:
        # its full identity from now on (the listing depends on its entries): listed before the lstat notes it
        self.listed.add(self.host_path(path_in_root))
        self._lstat(path_in_root)
        return super().listdir(path_in_root)

    def _note(self, host: str, st: os.stat_result | None) -> None:
        answer = None if st is None else _answer(st, full=host in self.listed)
        before = self.answers.get(host, answer)
        if (before is None) != (answer is None) or (answer is not None and before[:3] != answer[:3]):
            self.unsettled = True
        self.answers[host] = answer


def _answer(st: os.stat_result, full: bool = False) -> list[int]:
    if stat.S_ISDIR(st.st_mode) and not full:
        return [st.st_mode, st.st_dev, st.st_ino]
    return [st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def same_answers(answers: list) -> bool:
    """Whether every path still gives its kept answer."""
    for host, kept in answers:
        try:
            st = os.lstat(host)
        except OSError as e:
            if e.errno in MISSING_ERRNOS and kept is None:
                continue
            return False
        except ValueError:   # a NUL or a lone surrogate in a damaged file's path: no path answers that
            return False
        if kept is None or _answer(st, full=len(kept) > 3) != kept:
            return False
    return True


def locate_driver_files_kept(cache_dir: str, root: str, driver_version: str, capabilities, *,
                             ld_cache: str = LD_CACHE) -> DriverFiles:
    """locate_driver_files(root, driver_version, capabilities, ld_cache=ld_cache), kept in cache_dir
    between runs (see the module docstring). Raises what locate_driver_files raises."""
    caps = parse_capabilities(capabilities)
    key = [os.path.abspath(root), driver_version, sorted(caps), ld_cache or LD_CACHE, DEFAULT_SEARCH_PATH,
           mps_pipe_directory_of(), os.uname().machine]
    name = f"driver-files-{config_cache.fnv1a64(repr(key)):016x}.json"
    kept = _read(cache_dir, name, key)
    if kept is not None:
        return kept
    recording = RecordingRoot(root)
    files = locate_driver_files(recording, driver_version, caps, ld_cache=ld_cache or LD_CACHE)
    answers = settled_answers(recording)
    if answers is not None:
        config_cache.write_trusted_file(cache_dir, name, {"magic": MAGIC, "key": key, "answers": answers,
                                                          "files": [_file_row(f) for f in files.files]})
    return files


def settled_answers(recording: RecordingRoot) -> list | None:
    """The recorded answers, sorted by path, if they may be kept: none changed while they were read, or
    less than config_cache.RECENT_NS ago (see the module docstring)."""
    answers = sorted(recording.answers.items())
    newest = max((a[5] for _, a in answers if a is not None and len(a) > 3), default=0)
    if recording.unsettled or time.time_ns() - newest < config_cache.RECENT_NS:
        return None
    return answers


def _read(cache_dir: str, name: str, key: list) -> DriverFiles | None:
    data = config_cache.read_trusted_file(cache_dir, name, MAX_CACHE_BYTES)
    if data is None:
        return None
    try:
        kept = json_codec.loads(data)
        if not isinstance(kept, dict) or kept.get("magic") != MAGIC or kept.get("key") != key:
            return None
        answers = kept["answers"]
        if not isinstance(answers, list) or not all(_is_answer(a) for a in answers):
            return None
        files = tuple(_file_of(row) for row in kept["files"])
    except (ValueError, RecursionError, KeyError, TypeError):
        return None
    if not same_answers(answers):
        return None
    return DriverFiles(root=key[0], driver_version=key[1], files=files)


def _is_answer(item: object) -> bool:
    if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str) or not item[0].startswith("/"):
        return False
    answer = item[1]
    return answer is None or (isinstance(answer, list) and len(answer) in (3, 6)
                              and all(type(n) is int for n in answer))


def _file_row(f: DriverFile) -> list:
    return [f.kind, f.capability, f.host_path, f.container_path, f.soname,
            [[link.path, link.target] for link in f.symlinks]]


def _is_path_text(value: object) -> bool:
    """A str a path could be: no NUL, and bytes for every character (a lone surrogate from a damaged
    file has none; the mount and the hook would fail on it later, with a traceback)."""
    if not isinstance(value, str) or "\0" in value:
        return False
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        return False
    return True


def _file_of(row: object) -> DriverFile:
    """A DriverFile from its row; TypeError for anything but what _file_row writes."""
    if not isinstance(row, list) or len(row) != 6:
        raise TypeError("row")
    kind, capability, host_path, container_path, soname, links = row
    if not all(_is_path_text(s) for s in (kind, capability, host_path, container_path)):
        raise TypeError("row")
    if soname is not None and not _is_path_text(soname):
        raise TypeError("soname")
    if not isinstance(links, list) or not all(isinstance(link, list) and len(link) == 2
                                              and all(_is_path_text(s) for s in link) for link in links):
        raise TypeError("links")
    return DriverFile(kind, capability, host_path, container_path, soname,
                      tuple(Symlink(path, target) for path, target in links))
