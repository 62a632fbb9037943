"""The repo explains itself: no tracked file cites the team's private notes, which are not in the repo.

Code, docs, tests and packaging cite docs/reference.md (or another doc in the repo, or an upstream spec
by name) instead. The cited names are built from parts here so that this file does not match itself."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("REFERENCE" + " §", "REFERENCE" + ".md", "DESIGN" + ".md")
SKIPPED_DIRS = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache"}


def tracked_files():
    """The files git tracks; in a copy without git, every file outside build and cache dirs."""
    try:
        listing = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True)
        return [REPO / name for name in listing.stdout.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for top, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
            found.extend(Path(top, name) for name in files)
        return found


def citations_of_private_notes():
    found = []
    for path in tracked_files():
        if path.resolve() == Path(__file__).resolve() or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if any(name in line for name in FORBIDDEN):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_no_tracked_file_cites_documents_outside_the_repo():
    assert citations_of_private_notes() == []
