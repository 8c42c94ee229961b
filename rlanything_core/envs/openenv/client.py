"""Talking to an OpenEnv environment server: its HTTP endpoints (`/health`, `/metadata`,
`/schema`) and one WebSocket session (`/ws`) per episode, which holds that episode's state on
the server. A server named by a command is started here on a free loopback port and stopped
with the session that started it.

The protocol is OpenEnv's (openenv-core 0.3): a session sends `{"type": "reset", "data": {...}}`
or `{"type": "step", "data": <action>}` and receives `{"type": "observation", "data":
{"observation": {...}, "reward": r, "done": d}}`, or `{"type": "error", "data": {"message",
"code"}}`. Only the standard library, httpx and websockets are needed: a client does not install
openenv-core."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect


class OpenEnvError(RuntimeError):
    """The server is unreachable, refused a session, or answered outside the protocol."""


@dataclass(frozen=True)
class StepResult:
    """One observation as the server sent it."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


class ActionRejected(Exception):
    """The server refused an action (it does not fit the action schema): an invalid move."""


def ws_url(base: str) -> str:
    """The WebSocket session endpoint of the server at `base` (http[s]://host:port[/prefix])."""
    scheme, rest = base.rstrip("/").split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"


def get_json(base: str, path: str, timeout: float) -> dict[str, Any]:
    """GET `base + path` as a JSON object, or OpenEnvError naming the URL."""
    url = base.rstrip("/") + path
    try:
        response = httpx.get(url, timeout=timeout)
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise OpenEnvError(f"OpenEnv server {url}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict):
        raise OpenEnvError(f"OpenEnv server {url} answered {type(data).__name__}, not an object")
    return data


class Session:
    """One episode's session on the server (its own environment instance there)."""

    def __init__(self, base: str, timeout: float) -> None:
        self.base, self.timeout = base, timeout
        try:
            self._ws: ClientConnection = connect(
                ws_url(base), open_timeout=timeout, max_size=None, proxy=None
            )
        except (OSError, WebSocketException, TimeoutError) as exc:
            raise OpenEnvError(
                f"cannot open a session on the OpenEnv server {base}: {type(exc).__name__}: "
                f"{exc}. Check that it runs (GET {base.rstrip('/')}/health)."
            ) from exc

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        # A server that refuses the session sends its error and closes at once: the send may
        # find the connection closed while the error still waits to be read.
        with contextlib.suppress(ConnectionClosed):
            self._ws.send(json.dumps(message))
        try:
            reply = json.loads(self._ws.recv(timeout=self.timeout))
        except (OSError, WebSocketException, TimeoutError, ValueError) as exc:
            raise OpenEnvError(
                f"OpenEnv server {self.base}: the session's {message['type']} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(reply, dict):
            raise OpenEnvError(f"OpenEnv server {self.base} answered {reply!r}")
        return reply

    def _observation(self, reply: dict[str, Any], what: str) -> StepResult:
        data = reply.get("data")
        if reply.get("type") != "observation" or not isinstance(data, dict):
            raise OpenEnvError(f"OpenEnv server {self.base}: {what} answered {reply!r}")
        observation = data.get("observation")
        reward = data.get("reward")
        return StepResult(
            observation if isinstance(observation, dict) else {"observation": observation},
            float(reward) if isinstance(reward, int | float) else None,
            bool(data.get("done", False)),
        )

    def reset(self, params: dict[str, Any]) -> StepResult:
        """A new episode with the reset's keyword arguments `params` (seed included)."""
        reply = self._call({"type": "reset", "data": params})
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            if data.get("code") == "CAPACITY_REACHED":
                raise OpenEnvError(
                    f"OpenEnv server {self.base} allows {data.get('max_sessions')} sessions at "
                    "once, and a round plays every episode at once (tasks x rollouts_per_task); "
                    "raise max_concurrent_envs in the server's create_app(...)."
                )
            raise OpenEnvError(f"OpenEnv server {self.base}: reset failed: {data.get('message')}")
        return self._observation(reply, "reset")

    def step(self, action: dict[str, Any]) -> StepResult:
        """Send `action`; ActionRejected when the server finds it invalid."""
        reply = self._call({"type": "step", "data": action})
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            raise ActionRejected(str(data.get("message") or data))
        return self._observation(reply, "step")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.send(json.dumps({"type": "close"}))
        with contextlib.suppress(Exception):
            self._ws.close()


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the server's process, before exec: receive SIGTERM when the thread that started it
    ends (Linux), so that a run killed with -9 leaves no server behind."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LocalServer:
    """An OpenEnv server started from `command` (a shell-like string; `{port}` becomes a free
    loopback port; a leading `python` is the interpreter running rlanything) and stopped by
    `stop`. Its last output lines are quoted when it fails to start."""

    def __init__(self, command: str, start_timeout: float) -> None:
        self.command, self.start_timeout = command, start_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fd, log = tempfile.mkstemp(prefix="openenv-server-", suffix=".log")
        self.log = Path(log)
        argv = [part.replace("{port}", str(self.port)) for part in shlex.split(command)]
        if argv and argv[0] in ("python", "python3"):  # the interpreter (and venv) running us
            argv[0] = sys.executable
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                preexec_fn=_die_with_parent,  # only a prctl call: safe beside threads
            )
        except OSError as exc:
            raise OpenEnvError(
                f"environment.options.command {command!r} could not start: {exc}. Give a "
                "command that starts an OpenEnv server on port {port}."
            ) from exc
        finally:
            os.close(fd)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self._tail()
                self.stop()
                raise OpenEnvError(
                    f"the OpenEnv server of environment.options.command {self.command!r} exited "
                    f"with status {self.process.returncode} before answering; its output: {tail}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.2)
        tail = self._tail()
        self.stop()
        raise OpenEnvError(
            f"the OpenEnv server of environment.options.command {self.command!r} did not answer "
            f"{self.url}/health within {self.start_timeout:.0f} s (environment.options."
            f"start_timeout); its output: {tail}"
        )

    def _tail(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        return " | ".join(lines) or "(none)"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; the log file is removed."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.unlink(missing_ok=True)
