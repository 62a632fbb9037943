"""The shipped config.toml (a conffile) says what README says about each key: the keys README lists
as accepted without effect are marked "No effect" in the file, the keys that have an effect are
not, and csv is not offered as a mode (issue 14, item 19)."""
from __future__ import annotations

import re

from cdi.config import FEATURES
from tests.support.pkgtools import PACKAGING, REPO

CONFIG = (PACKAGING / "config" / "config.toml").read_text()
README = (REPO / "README.md").read_text()


def comments_by_key(text: str) -> dict[str, str]:
    """'table.key' (or 'key' at the top) -> the comment lines above its commented-out line (a run of
    keys shares the comment above the run)."""
    found, table, comment, in_keys = {}, "", [], False
    for line in text.splitlines():
        if m := re.fullmatch(r"\[([^\]]+)\]", line):
            table, comment, in_keys = m[1] + ".", [], False
        elif m := re.match(r"#([a-z0-9-]+) = ", line):
            found[table + m[1]] = " ".join(comment)
            in_keys = True
        elif line.startswith("#"):
            if in_keys:
                comment, in_keys = [], False
            comment.append(line.lstrip("# "))
        elif not line.strip():
            comment, in_keys = [], False
    return found


def readme_keys_without_effect() -> set[str]:
    paragraph = re.search(r"Accepted for compatibility but without effect:(.*?)\n\n", README, re.S)[1]
    keys = set()
    for part in paragraph.replace("\n", " ").split(";"):
        table = ""
        for token in re.findall(r"`([^`]+)`", part):
            if m := re.fullmatch(r"\[([^\]]+)\] (\S+)", token):
                table, token = m[1] + ".", m[2]
            if token == "features":  # "every other `features` flag"
                keys.update(f"features.{f}" for f in FEATURES if f"`[features] {f}`" not in README)
            else:
                keys.add(table + token)
    return keys


def readme_keys_with_effect() -> set[str]:
    keys = set()
    for row in re.findall(r"(?m)^\| `([^`]+)`(?:, `([^`]+)`)? \|", README.split("Keys that have an effect:")[1].split("\n\n")[1]):
        first = row[0]
        table = ""
        if m := re.fullmatch(r"\[([^\]]+)\] (\S+)", first):
            table, first = m[1] + ".", m[2]
        keys.update(table + k for k in (first, row[1]) if k)
    return keys


def test_keys_without_effect_say_so():
    comments = comments_by_key(CONFIG)
    without = readme_keys_without_effect()
    assert {"nvidia-container-cli.load-kmods", "nvidia-container-runtime.modes.csv.mount-spec-path",
            "features.allow-cuda-compat-libs-from-container", "features.allow-ldconfig-from-container"} <= without
    for key in sorted(without):
        assert key in comments, f"{key} is not in config.toml"
        assert comments[key].startswith("No effect"), f"{key}: {comments[key]!r}"


def test_keys_with_effect_do_not_say_no_effect():
    comments = comments_by_key(CONFIG)
    with_effect = readme_keys_with_effect()
    assert {"nvidia-container-cli.root", "nvidia-container-runtime.mode"} <= with_effect
    for key in sorted(with_effect):
        assert key in comments, f"{key} is not in config.toml"
        assert "no effect" not in comments[key].lower(), f"{key}: {comments[key]!r}"


def test_csv_is_not_offered_as_a_mode():
    comment = comments_by_key(CONFIG)["nvidia-container-runtime.mode"]
    assert re.search(r"csv mode \([^)]*\) is not supported", comment), comment
    assert "`csv` is refused" in README


def test_conffile_comments_agree_with_readme_on_lookup_order_and_swarm_resource():
    """Two comments said otherwise than README (issue 27, item 10): the hook's bare name is looked
    for beside the runtime before PATH (runtime_shim.modes.find_hook), and swarm-resource is a comma
    list of variables tried before NVIDIA_VISIBLE_DEVICES (cdi.request.swarm_names)."""
    comments = comments_by_key(CONFIG)
    assert "beside the shim, then `PATH`" in README
    hook = comments["nvidia-container-runtime-hook.path"]
    assert re.search(r"beside\s+nvidia-container-runtime first.*then in PATH", hook), hook
    assert "comma-separated variables that name the devices, tried before `NVIDIA_VISIBLE_DEVICES`" in README
    swarm = comments["swarm-resource"]
    assert "comma-separated" in swarm and "before NVIDIA_VISIBLE_DEVICES" in swarm, swarm
