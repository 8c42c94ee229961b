"""The run directory: where every file of a training run lives, and which stages have finished.

A stage writes its datasets and checkpoints first and its marker (`_stages/<stage>.json`: outputs,
metrics, seconds, and the size and sha256 of every output file) last, atomically. A stage with a
marker is finished, and resume skips it once its files still match the marker; a stage without
one is redone from the start, overwriting whatever half-done output it left.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rlanything_core.base.atomic import atomic_path
from rlanything_core.base.schemas import read_dataset, rows_frame, write_dataset
from rlanything_core.run.config import ConfigError, RunConfig, dump_config, load_config

ROLES = ("policy", "reward_model")
ROUND_STAGES = (
    "rollout",
    "reward-scoring",
    "advantage-computation",
    "policy-update",
    "rm-update",
    "task-rewriting",
    "acceptance-check",
)
"""The names of a round's seven stages (their markers' names), in order."""
WARM_START = -1  # the round index of the warm start's stage (before round 0)
WARM_START_STAGE = "warm-start"  # its name (its marker's)
EXPLOITATION = -2  # the round index of an RLoop cycle's exploitation stages (after its rounds)


def write_json(path: Path, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


class RunDirError(RuntimeError):
    """A file of a finished stage is missing, truncated or changed; the message names it."""


def _holder(fd: int) -> dict[str, Any] | None:
    """The process a lock file names (pid, host, since), or None when it is empty or unreadable."""
    raw = os.pread(fd, 4096, 0)
    try:
        found = json.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


HASH_LIMIT = 512 * 2**20
# What atomic_path / atomic_dir leave behind when the process dies mid-write.
_PARTIAL = re.compile(r"^\..+\.(?:tmp|old)-(\d+)-[0-9a-f]{8}$")


class RunDir:
    """Paths of one run. Layout (users read these files; names are stable):

    config.yaml, summary.json, state.json,
    round_NNN/{tasks,rollouts,judgments,unit_tests,policy_samples,rm_samples,test_samples,
    candidates,acceptance}.parquet,
    round_NNN/_stages/<stage>.json, checkpoints/{policy,reward_model}/round_NNN/;
    warm_start/ and checkpoints/<role>/warm_start/; with evaluation.every, eval/step_NNN/ (the
    learning curve) and plots/learning_curve.png; an RLoop cycle also has
    exploitation/{harvest,expert_set}.parquet, exploitation/_stages/ and
    checkpoints/policy/refined/.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[dict[str, Any] | None]:
        """Hold the run directory for this process while the block runs: one run directory,
        one process. A second holder stops at once with a RunDirError naming the first one's
        PID and host. The lock (`.lock`, an flock the kernel drops when its process dies) records
        its holder and is emptied on a clean exit; a record found on entry is a process that
        died holding it, taken over here and yielded (None otherwise)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = _holder(fd) or {}
                raise RunDirError(
                    f"{self.root} is in use by PID {held.get('pid', '?')} on host "
                    f"{held.get('host', '?')} (since {held.get('since', '?')}): one run directory "
                    "takes one process. Wait for it to finish or stop it, or choose another "
                    "--run-dir."
                ) from None
            left = _holder(fd)
            me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.ctime()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
            os.fsync(fd)
            try:
                yield left
            finally:
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    def round_dir(self, round_idx: int) -> Path:
        return self.root / f"round_{round_idx:03d}"

    def dataset(self, round_idx: int, name: str) -> Path:
        return self.phase_dir(round_idx) / f"{name}.parquet"

    def read(self, round_idx: int, name: str) -> pd.DataFrame:
        """Round `round_idx`'s dataset `name`, checked against the schema of that name."""
        return read_dataset(self.dataset(round_idx, name), name)

    def write(self, rows: list[dict[str, object]] | pd.DataFrame, round_idx: int, name: str) -> str:
        """Write round `round_idx`'s dataset `name` (rows or a frame, of the schema of that name)
        atomically; returns its path."""
        frame = rows if isinstance(rows, pd.DataFrame) else rows_frame(rows, name)
        return str(write_dataset(frame, self.dataset(round_idx, name), name))

    def checkpoint(self, role: str, round_idx: int) -> Path:
        return self.root / "checkpoints" / role / f"round_{round_idx:03d}"

    def warm_start_checkpoint(self, role: str) -> Path:
        return self.root / "checkpoints" / role / "warm_start"

    def warm_start_record(self, role: str) -> Path:
        """A finished role's warm-start record (its outputs and metrics), written last."""
        return self.root / "warm_start" / f"{role}.json"

    def model_before(self, role: str, round_idx: int, source: str) -> str:
        """The checkpoint a round starts from: the latest one written before it, else the warm
        start's, else `source`."""
        for r in range(round_idx - 1, -1, -1):
            path = self.checkpoint(role, r)
            if path.is_dir():
                return str(path)
        warm = self.warm_start_checkpoint(role)
        return str(warm) if warm.is_dir() else source

    def label(self, model: str) -> str:
        """How a model appears in provenance columns: run-relative for checkpoints of this run."""
        path = Path(model)
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else model

    # -- stage markers ----------------------------------------------------------------------

    def phase_dir(self, round_idx: int) -> Path:
        """Where a stage keeps its files: round_NNN/, or for round_idx WARM_START the warm start's
        directory, for EXPLOITATION an RLoop cycle's exploitation directory."""
        if round_idx >= 0:
            return self.round_dir(round_idx)
        return self.root / {WARM_START: "warm_start", EXPLOITATION: "exploitation"}[round_idx]

    def marker(self, round_idx: int, stage: str) -> Path:
        return self.phase_dir(round_idx) / "_stages" / f"{stage}.json"

    def refined_checkpoint(self) -> Path:
        """RLoop: the cycle's start policy fine-tuned on its expert set."""
        return self.root / "checkpoints" / "policy" / "refined"

    def finished(self, round_idx: int, stage: str) -> dict[str, Any] | None:
        """A finished stage's record, its outputs as paths under this run directory (markers
        store them relative to it, so a moved or copied run directory resumes), or None."""
        path = self.marker(round_idx, stage)
        return self._absolute(_read_marker(path)) if path.is_file() else None

    def _absolute(self, record: dict[str, Any]) -> dict[str, Any]:
        outputs = {k: str(self.root / v) for k, v in record.get("outputs", {}).items()}
        return {**record, "outputs": outputs}

    def output_files(self, outputs: dict[str, str]) -> dict[str, dict[str, Any]]:
        """Size and sha256 of every file of `outputs` (files, or checkpoint directories), keyed by
        their path relative to the run directory."""
        files: dict[str, dict[str, Any]] = {}
        for value in outputs.values():
            path = Path(value)
            found = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
            for f in found:
                if f.is_file():
                    files[self.label(str(f.resolve()))] = {
                        "bytes": f.stat().st_size,
                        "sha256": sha256_file(f),
                    }
        return files

    def verify(
        self, round_idx: int, stage: str, record: dict[str, Any], marker: Path | None = None
    ) -> None:
        """Check that the files a finished stage wrote are still what its marker records; raise
        RunDirError naming the first file that is missing, truncated or changed. Files larger
        than HASH_LIMIT (full-model weights) are checked by size only, so that resuming a run
        with many large checkpoints stays quick."""
        marker = marker or self.marker(round_idx, stage)
        for name, expected in sorted(record.get("files", {}).items()):
            path = self.root / name
            if not path.is_file():
                problem = "is missing"
            elif path.stat().st_size != expected["bytes"]:
                size = path.stat().st_size
                problem = f"has {size} bytes where {expected['bytes']} were written (truncated?)"
            elif expected["bytes"] <= HASH_LIMIT and sha256_file(path) != expected["sha256"]:
                problem = "differs from what was written (sha256 mismatch: corrupted or edited)"
            else:
                continue
            if round_idx >= 0 and stage in ROUND_STAGES:
                redo = f"{round_idx}/{stage}"
            elif round_idx == WARM_START:
                redo = WARM_START_STAGE
            else:
                redo = ""
            remedy = (
                f"`rlanything resume --run-dir {self.root} --redo-from {redo}` redoes that "
                "stage and everything after it"
                if redo
                else "delete that marker so that resume redoes the stage"
            )
            raise RunDirError(
                f"{path} {problem}; the {stage} stage wrote it and finished (marker {marker}). "
                f"Restore the file from a backup, or: {remedy}."
            )

    def complete_rounds(self, rounds: int) -> int:
        """How many rounds from round 0 on have every stage's marker: where training goes on."""
        done = 0
        while done < rounds and all(self.marker(done, s).is_file() for s in ROUND_STAGES):
            done += 1
        return done

    def forget_from(self, round_idx: int, stage: str | None = None) -> list[Path]:
        """Remove the markers of `stage` (default: the round's first) and of every stage after
        it, in `round_idx` and all later rounds, so that resume redoes them; the files stay
        until the stages overwrite them. `round_idx` WARM_START also removes the warm start's
        marker (the stage keeps each role whose files verify and trains the others again).
        Returns the markers removed."""
        if stage is not None and stage not in ROUND_STAGES:
            raise RunDirError(
                f"--redo-from {round_idx}/{stage}: no stage is called {stage!r}; name one of "
                f"{', '.join(ROUND_STAGES)}."
            )
        first = ROUND_STAGES.index(stage) if stage is not None else 0
        removed = []
        for path in sorted(self.root.glob("round_*/_stages/*.json")):
            r = int(path.parent.parent.name.removeprefix("round_"))
            if path.stem in ROUND_STAGES and (
                r > round_idx or (r == round_idx and ROUND_STAGES.index(path.stem) >= first)
            ):
                path.unlink()
                removed.append(path)
        warm = self.marker(WARM_START, WARM_START_STAGE)
        if round_idx == WARM_START and warm.is_file():
            warm.unlink()
            removed.append(warm)
        return removed

    def verify_all(self) -> int:
        """Check every finished stage of the run (all rounds, warm start, RLoop phases) against
        its marker; raise RunDirError naming the first bad file. Returns the markers checked."""
        markers = sorted(self.root.rglob("_stages/*.json"))
        for path in markers:
            record = _read_marker(path)
            self.verify(int(record.get("round", 0)), path.stem, record, path)
        return len(markers)

    def sweep_partial(self) -> list[Path]:
        """Remove what a killed process left mid-write (hidden `.name.tmp-<pid>-…` and
        `.name.old-<pid>-…` files and checkpoint directories of processes no longer alive);
        return what was removed."""
        removed = []
        for path in self.root.rglob(".*"):
            match = _PARTIAL.match(path.name)
            if match is None or _alive(int(match.group(1))):
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
        return removed

    def finish(
        self,
        round_idx: int,
        stage: str,
        outputs: dict[str, str],
        metrics: dict[str, float],
        seconds: float,
    ) -> dict[str, Any]:
        record = {
            "stage": stage,
            "round": round_idx,
            "outputs": {k: self.label(v) for k, v in outputs.items()},
            "files": self.output_files(outputs),
            "metrics": metrics,
            "seconds": seconds,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_json(self.marker(round_idx, stage), record)
        return self._absolute(record)

    # -- config and state -------------------------------------------------------------------

    def init(self, config: RunConfig) -> None:
        """Write config.yaml, or check that an existing one is the same config. A config that
        differs only in `rounds` continues the run (more rounds) or ends it sooner, but never
        below the rounds summary.json lists as done; one that differs in `evaluation` (what the
        held-out sets are, not what a round trains) continues it too, its learning curve's
        evaluations already done keeping the sets they played (eval.json's `held_out`).
        config.yaml then takes the new config."""
        if self.config_path.is_file():
            existing = load_config(self.config_path)
            if existing == config:
                return
            same = {"rounds": config.rounds, "evaluation": config.evaluation}
            if existing.model_copy(update=same) != config:
                raise ConfigError(
                    f"{self.root} already holds a run with a different config; continue it with "
                    f"`rlanything resume --run-dir {self.root}` or choose a new --run-dir."
                )
            done = (
                len(json.loads(self.summary_path.read_text())["rounds"])
                if self.summary_path.is_file()
                else 0
            )
            if config.rounds < done:
                raise ConfigError(
                    f"{self.root} has {done} round(s) done; rounds: {config.rounds} would "
                    f"undo some. Give rounds >= {done} to continue it."
                )
        self.root.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.config_path) as tmp:
            tmp.write_text(dump_config(config))

    def load_state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}

    def save_state(self, state: dict[str, Any]) -> None:
        write_json(self.state_path, state)


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        record = f"unreadable ({exc})"
    if not isinstance(record, dict):
        raise RunDirError(
            f"{path}: the stage marker is {record if isinstance(record, str) else 'not a marker'}"
            f". Delete it, and resume redoes the {path.stem} stage."
        )
    return record


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Inputs:
    """The datasets a stage reads, by name: the paths its flow handed over (what the stages
    before it wrote, and the round's task pool). A stage called on its own, with no paths
    (`task.fn(...)` in a test), reads the datasets of those names in its round's directory."""

    def __init__(self, run: RunDir, round_idx: int, paths: Mapping[str, str] | None) -> None:
        self._run, self._round, self._paths = run, round_idx, paths

    def path(self, name: str) -> Path:
        if self._paths is None:
            return self._run.dataset(self._round, name)
        if name not in self._paths:
            raise RunDirError(
                f"no dataset {name!r} was handed to this stage (it got {sorted(self._paths)}); "
                "run the stages in the flow's order, the one that writes it first"
            )
        return Path(self._paths[name])

    def read(self, name: str, schema: str | None = None) -> pd.DataFrame:
        """Dataset `name`, checked against `schema` (default: the schema called `name`)."""
        return read_dataset(self.path(name), schema or name)
