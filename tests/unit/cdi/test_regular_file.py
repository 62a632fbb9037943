"""cdi.regular_file: the bounded, non-blocking reader of config.json and CDI specs."""
import os

import pytest

from cdi.regular_file import read_regular_file


def test_reads_a_file_and_returns_its_fstat(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100_000)  # more than one chunk
    data, st = read_regular_file(path, 100_000)
    assert data == b"x" * 100_000 and st.st_ino == os.stat(path).st_ino


def test_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path, "/dev/zero"):
        with pytest.raises(ValueError, match="not a regular file"):
            read_regular_file(path, 10)


def test_refuses_a_file_over_the_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    with pytest.raises(ValueError, match="larger than 10 bytes"):
        read_regular_file(path, 10)
    assert read_regular_file(path, 11)[0] == b"x" * 11


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", 10)
