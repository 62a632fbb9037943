"""Many at once: GPU containers created at the same moment through the shim in each mode, and
`nvidia-ctk cdi generate` runs writing one spec file while readers check it (issue 15)."""
from __future__ import annotations

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cdi.validate import validate_document
from tests.e2e.shim_host import NVIDIA_CTK, parse_gpu_report
from tests.reliability.containers import (MODES, REQUESTS, container_ids, expected, gpu_bundle, leftovers_of,
                                          lifecycle)
from tests.support import leftovers

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("mode", MODES)
def test_gpu_containers_created_at_once(gpu_host, template, tmp_path, profile, figures, mode):
    """profile.containers_at_once containers, each asking for one of REQUESTS, all created at the same
    moment (a barrier), each with its own lifecycle through the shim: every one sees exactly its devices,
    and nothing of theirs is left on the machine: no mount, process or cgroup."""
    count = profile.containers_at_once
    requests = [REQUESTS[i % len(REQUESTS)] for i in range(count)]
    bundles = [gpu_bundle(tmp_path / f"c{i}", template, request) for i, request in enumerate(requests)]
    runs = [lifecycle(gpu_host, tmp_path / f"run{i}", mode) for i in range(count)]
    barrier = threading.Barrier(count)

    def run(i):
        barrier.wait()
        return runs[i].run(bundles[i], timeout=120)

    before = leftovers.take()
    started = time.monotonic()
    with ThreadPoolExecutor(count) as pool:
        results = list(pool.map(run, range(count)))
    seconds = time.monotonic() - started
    seen = [{k: v for k, v in parse_gpu_report(out).items() if k != "libs"} if code == 0 else err
            for code, out, err in results]
    right = [one == expected(gpu_host, request, mode) for one, request in zip(seen, requests)]
    left = leftovers_of(before, [str(tmp_path) + "/", *container_ids(*runs)])
    figures.update(containers=count, right_devices=sum(right), wall_seconds=round(seconds, 1),
                   leftover_mounts=len(left["mounts"]), leftover_processes=len(left["processes"]),
                   leftover_cgroups=len(left["cgroups"]), leftover_files=len(left["files"]))
    wrong = [(request, one, expected(gpu_host, request, mode)) for ok, one, request in zip(right, seen, requests)
             if not ok]
    assert not wrong, f"{len(wrong)} of {count} containers did not see their devices; first (asked, saw, " \
                      f"expected): {wrong[0]}"
    assert not any(left.values()), "\n".join(leftovers.describe(left))


def test_cdi_generate_at_once_never_leaves_a_partial_file(gpu_host, tmp_path, profile, figures):
    """profile.generates_at_once `nvidia-ctk cdi generate -o ONE-FILE` at once while two readers parse and
    validate that file in a loop: every read is a whole, valid spec, and no temp file stays beside it."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "nvidia.json"
    argv = [str(NVIDIA_CTK), "cdi", "generate", "--driver-root", str(gpu_host.root), "-o", str(out)]
    subprocess.run(argv, check=True, capture_output=True)
    reads, partial, stop = [0], [], threading.Event()

    def reader():
        while not stop.is_set():
            data = out.read_bytes()
            reads[0] += 1
            try:
                problems = validate_document(json.loads(data), str(out))
            except ValueError as exc:
                problems = [str(exc)]
            if problems:
                partial.append((len(data), str(problems[0])))

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers:
        thread.start()
    started = time.monotonic()
    try:
        writers = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                   for _ in range(profile.generates_at_once)]
        codes = [(w.wait(timeout=300), w.stderr.read().decode()) for w in writers]
        for w in writers:
            w.stderr.close()
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    failed = [c for c in codes if c[0] != 0]
    others = sorted(p.name for p in out_dir.iterdir() if p != out)
    figures.update(writers=len(codes), writers_failed=len(failed), reads=reads[0], partial_reads=len(partial),
                   temp_files_left=len(others), wall_seconds=round(time.monotonic() - started, 1))
    assert not failed, failed[0]
    assert not partial, partial[:3]
    assert reads[0] > 0 and not others, others
