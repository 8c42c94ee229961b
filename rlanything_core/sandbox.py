"""Run untrusted Python (policy programs, generated tests) so that it cannot harm the run or the
machine. The reference implementation runs model-written code with no sandbox at all.

Every run gets, at every isolation level:
1. a process of its own session (process group), killed as a whole at the wall-clock timeout;
2. resource limits (prlimit): CPU seconds, address space, file size, and processes (counted
   for the real user, so the limit is what that user already runs plus `Limits.processes`);
3. a fresh temporary working directory, deleted afterwards; the program's files are read from a
   separate directory, so a program that deletes its working directory deletes nothing of ours;
4. a scrubbed environment (PATH, HOME, LANG only): the trainer's secrets are not inherited;
5. stdout and stderr written to files capped by the file-size limit, of which the first
   `Limits.output_bytes` are kept: 1 GB of output costs nothing but the cap;
6. Python in isolated mode (`-I`): no user site-packages, no PYTHON* variables;
7. a pids cgroup of its own where the machine lets us create one (`process_limiter()`): the
   kernel ignores RLIMIT_NPROC for root, so only the cgroup stops a fork bomb there; it also
   finds every process of the run when the run is killed.
A small launcher of ours starts the program as its child and reports, on a pipe the program
cannot reach, how it ended and the CPU time it used: launchers such as bwrap do not pass on
either exactly.

Namespaces add, where the machine allows them (`isolation_level()` reports which one holds):
- "bwrap" (bubblewrap): new user, PID, network, IPC and UTS namespaces; the file system is the
  system's directories and Python's prefix read-only, a size-capped tmpfs /tmp, and nothing else
  (no /home, /root or project directory); all capabilities dropped; killed with its parent.
- "unshare" (util-linux): new user, PID, network, IPC and UTS namespaces, the PID namespace killed
  with the launcher. The file system is the host's, so a program can read and write where the
  user can.
- "rlimits": only the list above. No network or file-system isolation; a program could signal
  processes of the same user.
At most `os.cpu_count()` programs run at once, whichever thread asks.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Isolation = Literal["bwrap", "unshare", "rlimits"]
Status = Literal["ok", "error", "timeout", "killed", "limit"]
LEVELS: tuple[Isolation, ...] = ("bwrap", "unshare", "rlimits")

WORK_DIR = "/tmp/work"  # the program's working directory inside the bwrap sandbox
SRC_DIR = "/tmp/src"  # its files, read-only, inside the bwrap sandbox
_MB = 1 << 20
_SLOTS = threading.BoundedSemaphore(os.cpu_count() or 1)


class SandboxError(RuntimeError):
    """The sandbox itself cannot run (not the program in it): e.g. a requested isolation level
    that this machine does not offer."""


@dataclass(frozen=True)
class Limits:
    """What one run may use."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole process group is killed (status "timeout")."""
    cpu_s: int = 10
    """CPU seconds (RLIMIT_CPU); past it the kernel kills the program (status "limit")."""
    memory_mb: int = 1024
    """Address space in MiB (RLIMIT_AS); allocations past it fail (status "limit")."""
    processes: int = 32
    """Processes and threads it may run: the limit of its pids cgroup, or (without one) what
    its user already runs plus this (RLIMIT_NPROC)."""
    file_size_mb: int = 16
    """Largest file it may write, stdout and stderr included (RLIMIT_FSIZE), in MiB."""
    tmpfs_mb: int = 64
    """Size of its writable /tmp (bwrap only)."""
    output_bytes: int = 16_384
    """Bytes of stdout and of stderr kept in the verdict; the rest is dropped."""


@dataclass(frozen=True)
class Verdict:
    """What happened to one run."""

    status: Status
    """ok: exit 0; error: other exit code; timeout: killed at the wall-clock limit; limit: a
    resource limit stopped it (see `limit`); killed: ended by any other signal."""
    exit_code: int | None
    """Exit code, or None when a signal ended it."""
    signal: int | None
    """The signal that ended it, if any."""
    limit: str | None
    """Which limit stopped it: "cpu", "memory", "file_size", "processes" (or None)."""
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    wall_s: float
    cpu_s: float | None
    """CPU seconds (user + system) of the program and of the processes it waited for; None
    when the run was killed before our launcher could report them (a timeout)."""
    isolation: Isolation

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def python_executable() -> str:
    """The interpreter the sandbox runs: the base installation's, not the project's virtual
    environment (the sandbox must not see our packages)."""
    base = getattr(sys, "_base_executable", sys.executable)
    return os.path.realpath(base)


def _bwrap_args(src: Path, limits: Limits) -> list[str]:
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    args += ["--dev", "/dev", "--proc", "/proc"]
    args += ["--size", str(limits.tmpfs_mb * _MB), "--tmpfs", "/tmp"]
    args += ["--ro-bind", str(src), SRC_DIR, "--dir", WORK_DIR, "--chdir", WORK_DIR]
    return [*args, "--remount-ro", "/"]  # the sandbox's own root (a tmpfs) read-only too


def _unshare_args() -> list[str]:
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--net",
        "--pid",
        "--ipc",
        "--uts",
        "--mount",
        "--mount-proc",
        "--fork",
        "--kill-child",
        "--",
    ]


LAUNCHER = "_rlanything_launcher.py"
_LAUNCHER_SOURCE = """\
import json, os, sys
fd, target = int(sys.argv[1]), sys.argv[2]
try:
    pid = os.fork()
except OSError as exc:
    os.write(fd, json.dumps({"fork_error": str(exc)}).encode())
    os._exit(1)
if pid == 0:
    os.close(fd)
    os.execv(sys.executable, [sys.executable, "-I", target])
_, status, usage = os.wait4(pid, 0)
os.write(fd, json.dumps({"status": status, "cpu_s": usage.ru_utime + usage.ru_stime}).encode())
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""


def _user_processes(uid: int) -> int:
    """Processes and threads `uid` runs now (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return count


def _limited(argv: list[str], limits: Limits, nproc: int | None, cgroup: Path | None) -> list[str]:
    """`argv` started by a shell that joins `cgroup` (if any) and by prlimit with the limits.

    No preexec_fn: it is unsafe in a threaded parent (coding runs many sandboxes from threads).
    """
    cpu = max(1, int(limits.cpu_s))
    mem, size = limits.memory_mb * _MB, limits.file_size_mb * _MB
    join = 'if [ -n "$1" ]; then echo 0 > "$1" || exit 125; fi; shift; exec "$@"'
    return [
        "/bin/sh",
        "-c",
        join,
        "sh",
        str(cgroup / "cgroup.procs") if cgroup is not None else "",
        "prlimit",
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={mem}:{mem}",
        f"--fsize={size}:{size}",
        *([] if nproc is None else [f"--nproc={nproc}:{nproc}"]),  # None: the cgroup caps it
        "--core=0:0",
        "--",
        *argv,
    ]


def _read_capped(path: Path, cap: int) -> tuple[str, bool]:
    with path.open("rb") as f:
        data = f.read(cap + 1)
    return data[:cap].decode("utf-8", errors="replace"), len(data) > cap


_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc")
_PROCESS_MARKERS = ("BlockingIOError", "Resource temporarily unavailable", "can't start new thread")
_FILE_SIZE_MARKERS = ("File too large",)


def _classify(
    code: int | None, sig: int | None, stderr: str, timed_out: bool, report: dict[str, object]
) -> tuple[Status, str | None]:
    if timed_out:
        return "timeout", None
    if "fork_error" in report:
        return "limit", "processes"
    if sig == signal.SIGXCPU:
        return "limit", "cpu"
    if sig == signal.SIGXFSZ:
        return "limit", "file_size"
    if code == 0:
        return "ok", None
    if sig is not None:
        return "killed", None
    # Python ignores SIGXFSZ and dies of the exception a limit raised instead.
    tail = stderr[-2000:]
    for markers, limit in (
        (_MEMORY_MARKERS, "memory"),
        (_PROCESS_MARKERS, "processes"),
        (_FILE_SIZE_MARKERS, "file_size"),
    ):
        if any(m in tail for m in markers):
            return "limit", limit
    return "error", None


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, bool]:
    """Wait for `proc`, killing its process group at the timeout; return its raw wait status
    and whether it timed out."""
    deadline = time.monotonic() + timeout_s
    timed_out = False
    delay = 0.001
    while True:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            _kill_group(proc.pid)
            pid, status = os.waitpid(proc.pid, 0)
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    _kill_group(proc.pid)  # whatever it left behind in its group
    return status, timed_out


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _decode(status: int) -> tuple[int | None, int | None]:
    """(exit code, signal) of a wait status."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    code = os.WEXITSTATUS(status)
    return code, None


def run_python(
    files: Mapping[str, str],
    main: str,
    *,
    stdin: str = "",
    limits: Limits = Limits(),
    isolation: Isolation | None = None,
) -> Verdict:
    """Run `python -I <main>` on `files` (name → source) in a fresh sandbox; never raises for
    anything the program does.

    Args:
        files: the program's files; they are read-only to it. `main` must be one of them.
        stdin: what the program reads on standard input.
        isolation: a level from LEVELS, or None for the strongest this machine offers.
    """
    if main not in files or LAUNCHER in files:
        raise SandboxError(
            f"the sandbox needs {main!r} among its files and no file named {LAUNCHER!r}; got "
            f"{sorted(files)}"
        )
    level = isolation or isolation_level()
    if level not in available_levels():
        raise SandboxError(
            f"isolation level {level!r} is not available on this machine (available: "
            f"{available_levels()}). Install bubblewrap (apt-get install bubblewrap) for 'bwrap'."
        )
    with _SLOTS, tempfile.TemporaryDirectory(prefix="rlanything-sandbox-") as tmp:
        root = Path(tmp)
        src, work, out = root / "src", root / "work", root / "out"
        for d in (src, work, out):
            d.mkdir()
        for name, text in {**files, LAUNCHER: _LAUNCHER_SOURCE}.items():
            (src / name).write_text(text)
        (out / "stdin").write_text(stdin)
        inside = Path(SRC_DIR) if level == "bwrap" else src
        prefix = {"bwrap": _bwrap_args(src, limits), "unshare": _unshare_args(), "rlimits": []}
        read_end, write_end = os.pipe()
        open_fds = {read_end, write_end}
        argv = [*prefix[level], python_executable(), "-I", str(inside / LAUNCHER)]
        argv += [str(write_end), str(inside / main)]
        home = WORK_DIR if level == "bwrap" else str(work)
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}
        cgroup = _make_cgroup(limits.processes)
        # The cgroup caps processes when there is one; RLIMIT_NPROC counts every process of the
        # user, so /proc is scanned only when it is the cap.
        nproc = None if cgroup else _user_processes(os.getuid()) + limits.processes
        start = time.monotonic()
        try:
            with (
                (out / "stdin").open("rb") as fin,
                (out / "stdout").open("wb") as fout,
                (out / "stderr").open("wb") as ferr,
            ):
                proc = subprocess.Popen(
                    _limited(argv, limits, nproc, cgroup),
                    stdin=fin,
                    stdout=fout,
                    stderr=ferr,
                    cwd=str(work),
                    env=env,
                    start_new_session=True,
                    pass_fds=(write_end,),
                )
                os.close(write_end)
                open_fds.discard(write_end)
                status, timed_out = _wait(proc, limits.timeout_s)
            open_fds.discard(read_end)
            with os.fdopen(read_end, "rb") as pipe:
                raw = pipe.read(4096)
        finally:
            if cgroup is not None:
                _remove_cgroup(cgroup)
            for fd in open_fds:  # only those not closed above: fd numbers are reused at once
                os.close(fd)
        wall_s = time.monotonic() - start
        stdout, out_cut = _read_capped(out / "stdout", limits.output_bytes)
        stderr, err_cut = _read_capped(out / "stderr", limits.output_bytes)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 125 and not raw:
        raise SandboxError(f"could not start the sandbox (cgroup or prlimit failed): {stderr}")
    report = _parse_report(raw)
    code, sig = _decode(int(report["status"]) if "status" in report else status)  # type: ignore[call-overload]
    cpu_s = round(float(report["cpu_s"]), 4) if "cpu_s" in report else None  # type: ignore[arg-type]
    state, limit = _classify(code, sig, stderr, timed_out, report)
    return Verdict(
        status=state,
        exit_code=code,
        signal=sig,
        limit=limit,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=out_cut,
        stderr_truncated=err_cut,
        wall_s=round(wall_s, 4),
        cpu_s=cpu_s,
        isolation=level,
    )


def _parse_report(raw: bytes) -> dict[str, object]:
    """The launcher's report; empty when the run was killed before the launcher could write."""
    try:
        report = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return report if isinstance(report, dict) else {}


def _own_cgroup_dirs() -> list[Path]:
    """Where this process's pids cgroup lives: the v2 hierarchy, then the v1 pids hierarchy."""
    dirs = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            dirs.append(Path("/sys/fs/cgroup") / path.lstrip("/"))
        elif "pids" in controllers.split(","):
            dirs.append(Path("/sys/fs/cgroup/pids") / path.lstrip("/"))
    return dirs


@functools.cache
def _cgroup_parent() -> Path | None:
    """A cgroup directory under which we can create pids-limited child cgroups, or None."""
    for parent in _own_cgroup_dirs():
        probe = parent / f"rlanything-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            if (probe / "pids.max").exists():
                return parent
        finally:
            probe.rmdir()
    return None


def process_limiter() -> Literal["cgroup", "rlimit", "none"]:
    """What caps a run's process count: a pids cgroup, RLIMIT_NPROC (not binding on root), or
    nothing (root without a writable pids cgroup: a fork bomb runs until the wall-clock kill)."""
    if _cgroup_parent() is not None:
        return "cgroup"
    return "rlimit" if os.getuid() != 0 else "none"


_RUN_IDS = itertools.count()


def _make_cgroup(processes: int) -> Path | None:
    parent = _cgroup_parent()
    if parent is None:
        return None
    group = parent / f"rlanything-sandbox-{os.getpid()}-{next(_RUN_IDS)}"
    group.mkdir()
    (group / "pids.max").write_text(str(processes))
    return group


def _remove_cgroup(group: Path) -> None:
    """Kill every process still in `group`, then remove it."""
    for _ in range(200):
        try:
            pids = [int(x) for x in (group / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.01)


@functools.cache
def available_levels() -> tuple[Isolation, ...]:
    """The isolation levels that work on this machine, strongest first (probed once)."""
    levels: list[Isolation] = []
    if shutil.which("bwrap"):
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            if _probe([*_bwrap_args(Path(tmp), Limits()), "true"]):
                levels.append("bwrap")
    if shutil.which("unshare") and _probe([*_unshare_args(), "true"]):
        levels.append("unshare")
    levels.append("rlimits")
    return tuple(levels)


def _probe(argv: list[str]) -> bool:
    """Whether `argv` runs and exits 0."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=20,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def isolation_level() -> Isolation:
    """The strongest isolation level this machine offers."""
    return available_levels()[0]
