"""The sandbox against hostile programs: each must fail, and leave the test process, its files, its
secrets and the machine alone. Runs at the strongest isolation level this machine offers; cases
that need namespaces say so when skipped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rlanything_core import sandbox
from rlanything_core.sandbox import Limits, SandboxError, run_python
from rlanything_flows.cli import main

LEVEL = sandbox.isolation_level()
FAST = Limits(timeout_s=6, cpu_s=2, memory_mb=512, processes=16, file_size_mb=4)
needs_namespaces = pytest.mark.skipif(
    LEVEL == "rlimits", reason="needs bubblewrap or unshare (user namespaces)"
)
needs_bwrap = pytest.mark.skipif(LEVEL != "bwrap", reason="needs bubblewrap (apt install it)")


def run(source: str, **kwargs: object) -> sandbox.Verdict:
    return run_python({"main.py": source}, "main.py", limits=FAST, **kwargs)  # type: ignore[arg-type]


def _running(marker: str) -> list[int]:
    """PIDs whose command line mentions `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_ok_program_reads_stdin_and_reports_everything() -> None:
    v = run("import sys\nprint(sys.stdin.read().upper())", stdin="hello")
    assert (v.status, v.exit_code, v.signal, v.limit) == ("ok", 0, None, None)
    assert v.stdout == "HELLO\n" and v.stderr == ""
    assert v.isolation == LEVEL and v.wall_s > 0 and v.cpu_s is not None and v.cpu_s > 0


def test_error_exit_code_and_stderr() -> None:
    v = run("raise ValueError('boom')")
    assert v.status == "error" and v.exit_code == 1 and "ValueError: boom" in v.stderr


def test_infinite_loop_is_stopped_by_the_cpu_limit() -> None:
    v = run("while True:\n    pass")
    assert (v.status, v.limit) == ("limit", "cpu")
    # The kernel enforces RLIMIT_CPU on tick-sampled CPU time while wait4 reports the scheduler's
    # exact run time; on a loaded VM the two differed by 16 % (1.68 s reported at a 2 s limit).
    assert v.cpu_s > FAST.cpu_s / 2 and v.wall_s < FAST.timeout_s


def test_sleeping_program_is_killed_at_the_wall_clock_timeout() -> None:
    v = run_python(
        {"main.py": "import time\ntime.sleep(60)"}, "main.py", limits=Limits(timeout_s=1)
    )
    assert v.status == "timeout" and 1.0 <= v.wall_s < 5
    assert v.cpu_s is None  # killed before the launcher could report


def test_fork_bomb_is_contained_and_leaves_no_process() -> None:
    marker = f"bomb_{uuid.uuid4().hex}.py"
    source = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        ..."
    v = run_python({marker: source}, marker, limits=FAST)
    assert v.status in ("limit", "timeout") and v.wall_s < FAST.timeout_s + 5
    time.sleep(0.2)
    assert _running(marker) == []
    if sandbox.process_limiter() != "none":
        raising = run_python({marker: "import os\nwhile True:\n    os.fork()"}, marker, limits=FAST)
        assert (raising.status, raising.limit) == ("limit", "processes")


def test_memory_bomb_hits_the_address_space_limit() -> None:
    v = run("chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))")
    assert (v.status, v.limit) == ("limit", "memory")


def test_a_gigabyte_of_output_is_capped_and_truncated() -> None:
    v = run("import sys\nblock = 'x' * (1 << 20)\nfor _ in range(1024):\n    print(block)")
    assert (v.status, v.limit) == ("limit", "file_size")
    assert v.stdout_truncated and len(v.stdout) == FAST.output_bytes
    assert v.wall_s < FAST.timeout_s


@needs_bwrap
def test_writing_outside_its_directory_fails(tmp_path: Path) -> None:
    target = tmp_path / "owned.txt"
    home = Path.home() / f"rlanything-owned-{uuid.uuid4().hex}"
    v = run(
        f"for p in ({str(target)!r}, {str(home)!r}, '/etc/owned', '/usr/owned'):\n"
        "    try:\n        open(p, 'w').write('x')\n        print('wrote', p)\n"
        "    except OSError as exc:\n        print('refused', p, type(exc).__name__)"
    )
    assert "wrote" not in v.stdout and v.stdout.count("refused") == 4
    assert not target.exists() and not home.exists()


@needs_namespaces
def test_parent_environment_secrets_are_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLANYTHING_TEST_SECRET", secret)
    v = run(
        "import os\nprint(dict(os.environ))\n"
        "for pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try:\n            print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "        except OSError:\n            pass"
    )
    assert v.status == "ok" and secret not in v.stdout
    assert "RLANYTHING_TEST_SECRET" not in v.stdout


@needs_namespaces
def test_no_network_even_to_loopback() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        v = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        with pytest.raises(TimeoutError):
            server.accept()
    assert v.status == "error" and ("ConnectionRefused" in v.stderr or "unreachable" in v.stderr)


@needs_namespaces
def test_killing_the_parent_or_other_processes_fails() -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        v = run(
            "import os, signal\n"
            f"for pid in (os.getppid(), {os.getpid()}, {victim.pid}, 1):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n"
            "    except OSError:\n        pass\n"
            "print('still here')"
        )
        time.sleep(0.2)
        assert victim.poll() is None  # the unrelated process survived
        assert v.status in ("ok", "error", "killed")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    # and this test process is evidently still running


def test_deleting_its_working_directory_and_files_harms_nothing() -> None:
    v = run(
        "import os, shutil\nopen('scratch', 'w').write('x')\n"
        "for d in ('.', os.path.dirname(os.path.abspath(__file__))):\n"
        "    for name in os.listdir(d):\n"
        "        try:\n            os.remove(os.path.join(d, name))\n"
        "        except OSError as exc:\n            print('kept', name, type(exc).__name__)\n"
        "print(sorted(os.listdir('.')))"
    )
    assert v.status == "ok" and "kept main.py" in v.stdout
    assert run("print('next run unaffected')").stdout == "next run unaffected\n"


def test_unknown_level_and_bad_files_are_clear_errors() -> None:
    with pytest.raises(SandboxError, match=r"main\.py"):
        run_python({"other.py": ""}, "main.py")
    with pytest.raises(SandboxError, match=r"_rlanything_launcher\.py"):
        run_python({"main.py": "", sandbox.LAUNCHER: ""}, "main.py")


def test_cli_prints_a_json_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "prog.py"
    program.write_text("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))")
    data = tmp_path / "in.txt"
    data.write_text("2 3 4")
    assert main(["sandbox", "run", str(program), "--stdin", str(data), "--timeout", "5"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "ok" and verdict["stdout"] == "9\n"
    assert verdict["isolation"] == LEVEL and "process_limiter" in verdict
    assert {"exit_code", "stderr", "wall_s", "cpu_s", "stdout_truncated"} <= set(verdict)
