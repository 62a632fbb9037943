"""cdi.new_file: the one way our writers create their temp files."""
import os
import stat

import pytest

from cdi import new_file
from cdi.new_file import create_new_file


def test_a_new_file_named_from_a_random_token(tmp_path):
    fd, path = create_new_file(str(tmp_path), ".config.json.42.", ".tmp", 0o600)
    try:
        os.write(fd, b"x")
        assert os.fstat(fd).st_ino == os.stat(path).st_ino
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)
    name = os.path.basename(path)
    assert os.path.dirname(path) == str(tmp_path)
    token = name[len(".config.json.42."):-len(".tmp")]
    assert name.startswith(".config.json.42.") and name.endswith(".tmp")
    assert len(token) == 8 and all(c in "0123456789abcdef" for c in token)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 & ~_umask()


def test_token_length_and_dir_fd(tmp_path):
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd, name = create_new_file("", ".kept.", "", 0o644, token_bytes=6, dir_fd=dir_fd)
        os.close(fd)
    finally:
        os.close(dir_fd)
    assert "/" not in name and len(name) == len(".kept.") + 12
    assert os.listdir(tmp_path) == [name]


def test_a_taken_name_is_tried_again(tmp_path, monkeypatch):
    (tmp_path / "t.aaaa").write_text("someone else's")
    os.symlink("/etc/passwd", tmp_path / "t.bbbb")     # a link under the name is never followed
    tokens = iter([b"\xaa\xaa", b"\xbb\xbb", b"\xcc\xcc"])
    monkeypatch.setattr(new_file.os, "urandom", lambda n: next(tokens))
    fd, path = create_new_file(str(tmp_path), "t.", "", 0o600, token_bytes=2)
    os.close(fd)
    assert path == str(tmp_path / "t.cccc")
    assert (tmp_path / "t.aaaa").read_text() == "someone else's"


def test_no_free_name_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "t.aaaa").write_text("")
    monkeypatch.setattr(new_file.os, "urandom", lambda n: b"\xaa\xaa")
    with pytest.raises(FileExistsError) as caught:
        create_new_file(str(tmp_path), "t.", "", 0o600)
    assert caught.value.filename == str(tmp_path / "t.*")
    assert "no free name" in caught.value.strerror
    assert os.listdir(tmp_path) == ["t.aaaa"]


def test_other_errors_are_raised_at_once(tmp_path, monkeypatch):
    calls = []
    real = os.urandom
    monkeypatch.setattr(new_file.os, "urandom", lambda n: calls.append(n) or real(n))
    with pytest.raises(FileNotFoundError):
        create_new_file(str(tmp_path / "missing"), "t.", "", 0o600)
    assert len(calls) == 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
