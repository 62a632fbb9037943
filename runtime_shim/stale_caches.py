"""Cache files whose config file is gone: the runtime cache's and the create cache's, which share a
directory. One file (or, for the create cache, a few hundred) per config path would otherwise pile up,
e.g. for configs in temp dirs; the shim prunes them when it has just written a runtime cache, which is
rare. Here, beside both caches' formats, so that neither cache module needs the other's."""
from __future__ import annotations

import os

from runtime_shim import create_cache
from runtime_shim.runtime_cache import config_identity, read_cache


def prune_stale(directory: str, keep: str) -> None:
    """Remove cache files whose config file is gone (it existed when they were written): one file per
    config path would otherwise pile up, e.g. for configs in temp dirs. Runs only when a cache was
    just written, which is rare; a file another process still wants is merely rewritten."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(("runtime-", "create-")) and n.endswith(".cache")]
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if path == keep:
            continue
        if name.startswith("runtime-"):
            fields = read_cache(path)
        else:
            fields = read_cache(path, create_cache.MAGIC, create_cache.MAX_CACHE_BYTES)
        config, identity = fields.get("config", [None])[0], fields.get("identity", [None])[0]
        if config and identity and identity != "missing" and config_identity(config) == "missing":
            try:
                os.unlink(path)
            except OSError:
                pass
