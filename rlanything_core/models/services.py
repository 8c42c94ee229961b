"""Model servers that rlanything starts itself and stops on exit: `vllm serve` from its own
environment (vLLM cannot share one with Prefect: fastapi pins), or `rlanything serve`.

`Service.start()` launches the command in its own process group, polls `GET /health` until it
answers 200 (a server still loading refuses connections), and registers a stop at interpreter
exit; `stop()` terminates the whole group, then kills it after a grace period. A URL given
instead (`url=`) is used as it is: nothing is started or stopped.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


class ServiceError(RuntimeError):
    """A model server did not come up; the message says what it printed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_command(
    vllm: str,
    model: str,
    port: int,
    *,
    served_name: str,
    lora_rank: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """`vllm serve` from the vLLM environment (`vllm` is its executable, e.g.
    .venv-vllm/bin/vllm), loopback only, runtime LoRA loading on when the policy trains adapters
    (VLLM_ALLOW_RUNTIME_LORA_UPDATING is set by `Service`)."""
    cmd = [vllm, "serve", model]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", served_name]
    if lora_rank > 0:
        cmd += ["--enable-lora", "--max-lora-rank", str(lora_rank), "--max-loras", "1"]
    return [*cmd, *extra]


def serve_command(model: str, port: int, *, name: str, device: str = "auto") -> list[str]:
    """`rlanything serve` with this interpreter."""
    return [
        sys.executable, "-m", "rlanything_flows.cli", "serve", "--model", model,
        "--port", str(port), "--name", name, "--device", device,
    ]  # fmt: skip


class Service:
    """One model server process (or an external URL)."""

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        port: int | None = None,
        url: str | None = None,
        startup_timeout_s: float = 600.0,
        log_path: str | Path | None = None,
        env: dict[str, str] | None = None,
        health_path: str = "/health",
    ) -> None:
        """`health_path`: the path under the server's URL that answers 200 once it is ready."""
        if (command is None) == (url is None):
            raise ValueError("give either a command to start or the URL of a running server")
        self.command = list(command) if command is not None else None
        self.url = url or f"http://127.0.0.1:{port}"
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(log_path) if log_path else None
        self.env = env or {}
        self.health_path = health_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        if self.command is None:
            self._wait_healthy(None)
            return self
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", **self.env}
        log = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        atexit.register(self.stop)
        try:
            self._wait_healthy(self.process)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self, process: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise ServiceError(
                    f"{' '.join(self.command or [])} exited with code {process.returncode} before "
                    f"it was ready; its output is in {self.log_path or '(not kept)'}."
                )
            try:
                if httpx.get(f"{self.url}{self.health_path}", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise ServiceError(
            f"no healthy server at {self.url} after {self.startup_timeout_s:.0f} s; check the URL "
            f"(or the log {self.log_path})."
        )

    def stop(self, grace_s: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
