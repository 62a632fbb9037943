"""cdi.config_cache: the parsed config.toml is kept per file identity, used only while the file is
unchanged and the cache is ours and private, and never changes what the config means."""
import json
import os
import stat

import pytest

from cdi import config as config_module
from cdi import config_cache
from cdi.config import load_config
from cdi.errors import ConfigError

TEXT = '[nvidia-container-cli]\nroot = "/drivers"\nno-cgroups = true\n'


@pytest.fixture(autouse=True)
def old_enough(monkeypatch):
    monkeypatch.setattr(config_cache, "RECENT_NS", 0)   # files written by the test count as settled


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(TEXT)
    cache = tmp_path / "cache"
    return path, cache, {config_cache.CACHE_DIR_ENV: str(cache)}


def no_toml(monkeypatch):
    def refuse(text, source):
        raise AssertionError("parsed again")
    monkeypatch.setattr(config_module, "_parse_toml", refuse)


def kept_file(cache):
    names = [n for n in os.listdir(cache) if not n.startswith(".")]
    assert len(names) == 1, names
    return cache / names[0]


def test_second_load_uses_the_kept_document(setup, monkeypatch):
    path, cache, env = setup
    first = load_config(path, environ=env, use_cache=True)
    assert first.nvidia_container_cli.root == "/drivers" and first.nvidia_container_cli.no_cgroups
    assert oct(kept_file(cache).stat().st_mode & 0o777) == "0o644"
    no_toml(monkeypatch)
    assert load_config(path, environ=env, use_cache=True) == first


def test_an_edit_in_place_is_seen(setup):
    path, cache, env = setup
    load_config(path, environ=env, use_cache=True)
    path.write_text(TEXT.replace("true", "false"))   # same size
    assert not load_config(path, environ=env, use_cache=True).nvidia_container_cli.no_cgroups


def test_without_a_cache_dir_a_named_config_is_not_kept(setup, tmp_path):
    path, cache, _ = setup
    assert config_cache.cache_dir_for(str(path), "/etc/nvidia-container-runtime/config.toml", {}) is None
    assert config_cache.cache_dir_for("/etc/x.toml", "/etc/x.toml", {}) == config_cache.DEFAULT_CACHE_DIR
    assert config_cache.cache_dir_for("/etc/x.toml", "/etc/x.toml", {config_cache.CACHE_DIR_ENV: "rel"}) is None
    load_config(path, environ={}, use_cache=True)
    load_config(path, environ={config_cache.CACHE_DIR_ENV: str(cache)})   # use_cache off: nothing kept
    assert not cache.exists()


@pytest.mark.parametrize("spoil", ["group-writable", "foreign-owner", "symlink", "open-dir", "other-identity",
                                   "other-path", "not-json"])
def test_an_untrustworthy_or_foreign_cache_is_ignored(setup, spoil):
    path, cache, env = setup
    load_config(path, environ=env, use_cache=True)
    kept = kept_file(cache)
    document = json.loads(kept.read_text())
    forged = dict(document, document={"nvidia-container-cli": {"root": "/evil"}})
    if spoil == "group-writable":
        kept.write_text(json.dumps(forged))
        kept.chmod(0o664)
    elif spoil == "foreign-owner":
        kept.write_text(json.dumps(forged))
        os.chown(kept, 1234, 1234)
    elif spoil == "symlink":
        elsewhere = cache.parent / "elsewhere.json"
        elsewhere.write_text(json.dumps(forged))
        kept.unlink()
        kept.symlink_to(elsewhere)
    elif spoil == "open-dir":
        kept.write_text(json.dumps(forged))
        cache.chmod(0o777)
    elif spoil == "other-identity":
        kept.write_text(json.dumps(dict(forged, identity=[0, 0, 0, 0, 0])))
    elif spoil == "other-path":
        kept.write_text(json.dumps(dict(forged, config="/elsewhere.toml")))
    else:
        kept.write_text("{not json")
    assert load_config(path, environ=env, use_cache=True).nvidia_container_cli.root == "/drivers"


def test_a_recently_changed_config_is_not_kept(setup, monkeypatch):
    path, cache, env = setup
    monkeypatch.setattr(config_cache, "RECENT_NS", 3600 * 10**9)
    load_config(path, environ=env, use_cache=True)
    assert not cache.exists() or not [n for n in os.listdir(cache) if not n.startswith(".")]


def test_documents_json_cannot_hold_and_bad_configs_are_not_kept(tmp_path):
    cache = tmp_path / "cache"
    env = {config_cache.CACHE_DIR_ENV: str(cache)}
    dated = tmp_path / "dated.toml"
    dated.write_text("unknown-date = 1979-05-27\n")
    load_config(dated, environ=env, use_cache=True)
    bad = tmp_path / "bad.toml"
    bad.write_text("disable-require = 1\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="disable-require must be a boolean"):
            load_config(bad, environ=env, use_cache=True)
    assert not cache.exists() or not [n for n in os.listdir(cache) if not n.startswith(".")]


def test_the_kept_document_still_goes_through_every_check(setup, monkeypatch):
    """A kept document that fails the checks is not used: the file is read again and decides (it failed
    every start before: a bad cache costs speed, never a start)."""
    path, cache, env = setup
    expected = load_config(path, environ=env, use_cache=True)
    kept = kept_file(cache)
    document = json.loads(kept.read_text())
    kept.write_text(json.dumps(dict(document, document={"disable-require": "yes"})))
    assert load_config(path, environ=env, use_cache=True) == expected
    path.write_text('disable-require = "yes"\n')   # the file itself still fails them
    with pytest.raises(ConfigError, match="disable-require must be a boolean"):
        load_config(path, environ=env, use_cache=True)


def test_a_fifo_or_a_directory_as_config_toml_is_one_error_not_a_hang(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(ConfigError, match="cannot read config: not a regular file"):
            load_config(path)


def test_a_kept_file_that_grew_after_its_fstat_is_not_read(tmp_path, monkeypatch):
    """read_trusted_file never hands back more than max_bytes, even when the file grows between its
    fstat and its read (simulated: the fstat of the file reports the size it had before)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    (cache / "kept").write_bytes(b"x" * 11)
    os.chmod(cache / "kept", 0o644)
    assert config_cache.read_trusted_file(str(cache), "kept", 11) == b"x" * 11
    real_fstat = os.fstat

    def earlier_size(fd):
        st = real_fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return st
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 10,
                               st.st_atime, st.st_mtime, st.st_ctime))
    monkeypatch.setattr(os, "fstat", earlier_size)
    assert config_cache.read_trusted_file(str(cache), "kept", 10) is None


def test_a_cache_dir_not_ours_costs_no_json_import(tmp_path):
    """Where the cache dir is not ours (LXC's unprivileged hook: the host root's dir shows as the
    overflow uid's) nothing is written, and the JSON encoder (with re) is not imported for it: that
    runs at every container start."""
    import subprocess
    import sys

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 1234, 1234)
    code = ("import sys; from cdi import config_cache; "
            f"config_cache.write_trusted_file({str(foreign)!r}, 'kept.json', {{'a': 1}}); "
            "print('json' in sys.modules, 're' in sys.modules)")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(config_cache.__file__)))
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {repo!r}); {code}"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
    assert os.listdir(foreign) == []
    config_cache.write_trusted_file(str(tmp_path / "ours"), "kept.json", {"a": 1})
    assert json.loads((tmp_path / "ours/kept.json").read_text()) == {"a": 1}
