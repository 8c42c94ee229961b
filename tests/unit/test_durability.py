"""One run directory, one process (the lock), and writes that survive a power loss (fsync of the
renamed entry's directory)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlanything_core.base.atomic import atomic_dir, atomic_path, entry_lock
from rlanything_core.run.rundir import RunDir, RunDirError

HOLD = """
import sys, time
from rlanything_core.run.rundir import RunDir
with RunDir(sys.argv[1]).exclusive():
    print("held", flush=True)
    time.sleep(600)
"""


def _holder(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_busy_run_directory_is_refused_with_the_holders_pid_and_host(tmp_path: Path) -> None:
    root = tmp_path / "run"
    proc = _holder(root)
    try:
        started = time.monotonic()
        busy = pytest.raises(RunDirError, match=rf"in use by PID {proc.pid} on host ")
        with busy, RunDir(root).exclusive():
            pass
        assert time.monotonic() - started < 5  # at once, no waiting
        from rlanything_flows.cli import main

        code = main(["train", "--config", "configs/tiny.yaml", "--run-dir", str(root)])
        assert code == 2 and not (root / "round_000").exists()  # nothing written
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "run"
    proc = _holder(root)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with RunDir(root).exclusive() as left:
        assert left is not None and left["pid"] == proc.pid
        assert left["host"] == socket.gethostname()
        record = json.loads((root / ".lock").read_text())
        assert record["pid"] == os.getpid()
    with RunDir(root).exclusive() as left:  # a clean exit leaves nothing to take over
        assert left is None


def test_atomic_writes_fsync_the_file_its_directory_and_a_checkpoints_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    with atomic_path(tmp_path / "a" / "x.parquet") as tmp:
        tmp.write_bytes(b"data")
    assert synced[-1] == str(tmp_path / "a")  # after the rename: the directory holding it
    assert synced[0].startswith(str(tmp_path / "a" / ".x.parquet.tmp-"))  # the data first
    synced.clear()
    with atomic_dir(tmp_path / "ckpt") as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "shard.safetensors").write_bytes(b"w")
        (tmp / "config.json").write_text("{}")
    names = [Path(p).name for p in synced]
    assert names[:2] == ["config.json", "shard.safetensors"]  # every file of the checkpoint
    assert names[2] == "sub" and names[3].startswith(".ckpt.tmp-")  # then its directories
    assert synced[-1] == str(tmp_path)  # and the rename, in the parent
    assert (tmp_path / "ckpt" / "sub" / "shard.safetensors").read_bytes() == b"w"


def test_stage_markers_store_outputs_relative_to_a_run_directory_that_can_move(
    tmp_path: Path,
) -> None:
    run = RunDir(tmp_path / "a")
    ckpt = run.root / "checkpoints" / "policy" / "warm_start"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights")
    record = run.finish(-1, "warm-start", {"policy_checkpoint": str(ckpt)}, {}, 1.0)
    assert record["outputs"]["policy_checkpoint"] == str(ckpt)  # callers get real paths
    stored = json.loads(run.marker(-1, "warm-start").read_text())
    assert stored["outputs"] == {"policy_checkpoint": "checkpoints/policy/warm_start"}
    (tmp_path / "b").mkdir()
    moved = RunDir((tmp_path / "a").rename(tmp_path / "b" / "a"))
    found = moved.finished(-1, "warm-start")
    assert found is not None
    assert found["outputs"]["policy_checkpoint"] == str(
        moved.root / "checkpoints/policy/warm_start"
    )
    assert moved.verify_all() == 1


def test_a_full_disk_while_a_file_is_written_names_it_and_the_space_left(tmp_path: Path) -> None:
    """The kernel refuses writes past RLIMIT_FSIZE (EFBIG) as a full disk refuses them (ENOSPC):
    one error naming the file, the bytes it took and the free space; the old file stays."""
    import resource

    from rlanything_core.base.atomic import WriteError

    target = tmp_path / "rollouts.parquet"
    target.write_bytes(b"old")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        with pytest.raises(WriteError) as caught, atomic_path(target) as tmp:
            tmp.write_bytes(b"x" * 100_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    message = str(caught.value)
    assert f"could not write {target}" in message and "bytes are free there" in message
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == [target.name]


LOCK_THEN_BUILD = """
import os, sys
from pathlib import Path
from rlanything_core.base.atomic import entry_lock
from rlanything_core.models.tiny import build_tiny_model
target = Path(sys.argv[1])
with entry_lock(target):
    print("locked", flush=True)
    sys.stdin.readline()
    build_tiny_model(target, seed=3)
    print(os.stat(target).st_ino, flush=True)
"""


def test_a_builder_waits_for_the_process_building_the_same_cache_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes that want the same cache entry take turns (`entry_lock`): while another
    process holds it, an attempt that does not wait is refused, and the tiny-model cache waits,
    then finds the model the other process built instead of building it a second time."""
    from rlanything_core.models.tiny import ensure_tiny_model

    monkeypatch.setenv("RLANYTHING_CACHE", str(tmp_path))
    target = tmp_path / "tiny-llama-seed3"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_THEN_BUILD, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        with entry_lock(target, wait=False) as held:
            assert held is False
        found: list[Path] = []
        waiting = threading.Thread(target=lambda: found.append(ensure_tiny_model(3)))
        waiting.start()
        waiting.join(timeout=3)  # a builder that did not wait would be done by now
        assert waiting.is_alive() and not found
        holder.stdin.write("\n")
        holder.stdin.flush()
        built_inode = int(holder.stdout.readline())
        waiting.join(timeout=120)
        assert found == [target] and os.stat(target).st_ino == built_inode
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    with entry_lock(target, wait=False) as held:  # released with its holder
        assert held is True
