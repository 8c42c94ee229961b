"""The GUI environment's machinery: the app server, headless Chromium, and one episode in it.

- `AppServer` serves the apps on 127.0.0.1 (a free port), one independent app state per episode
  (a session): `GET /s/<sid>/` is the page, `POST /s/<sid>/api/act` an operation from the page,
  `GET /s/<sid>/api/state` the state as JSON, which is all the verifier reads.
- `Browser` is Playwright driving Debian's Chromium (`/usr/bin/chromium` by default), headless,
  with background networking, sync and component updates off. Every episode gets a fresh browser
  context: its own profile, with no cookies, storage or cache shared with any other episode.
- `GuiEpisode` is what the policy plays. The observation is the page's accessibility tree
  (Playwright's ARIA snapshot) as text, where every interactive element carries an id like [4];
  an element keeps its id for the whole episode, however the page redraws. Each step saves a
  screenshot. The answer's last `\\boxed{}` holds click(id), type(id, "text"),
  select(id, "option"), scroll(up|down) or done(); a malformed or impossible action is counted as
  invalid, changes nothing and the episode goes on.
"""

from __future__ import annotations

import contextlib
import copy
import html
import json
import re
import secrets
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlanything_core.base.atomic import atomic_path
from rlanything_core.envs.common import Move
from rlanything_core.envs.gui.apps import APPS, App, OperationError, State, distance
from rlanything_core.envs.gui.tasks import GuiSpec, hint_sentence
from rlanything_core.method.parsing import last_boxed

INVALID_ACTION = "(invalid)"
CHROMIUM_FLAGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--disable-gpu",
    "--disable-quic",
)
INTERACTIVE_ROLES = frozenset(
    {"button", "tab", "switch", "checkbox", "textbox", "combobox", "option", "treeitem", "link"}
)
_PAGE_STYLE = (
    "body{font:15px system-ui,sans-serif;margin:16px;color:#222}main{max-width:600px}"
    "[role=tab]{padding:4px 12px;border:1px solid #999;background:#eee}"
    "[role=tab][aria-selected=true]{background:#fff;border-bottom-color:#fff;font-weight:600}"
    "[role=tabpanel]{border:1px solid #999;padding:4px 12px;margin-bottom:8px}"
    "[role=status]{background:#ffd;padding:4px}"
    "[role=tree],[role=listbox]{display:inline-block;vertical-align:top;min-width:180px;"
    "border:1px solid #999;margin:0 8px 8px 0;padding:4px;list-style:none}"
    "[aria-selected=true]{background:#cde}"
    "ul{padding-left:16px}li{margin:2px 0}"
)
# The page's whole script: send each interaction to the server, redraw from its answer.
_PAGE_SCRIPT = """
window.__pending = 0;
async function act(op, arg, value) {
  window.__pending++;
  try {
    const r = await fetch("api/act", {method: "POST", headers: {"Content-Type":
      "application/json"}, body: JSON.stringify({op: op, arg: arg, value: value})});
    document.getElementById("app").innerHTML = await r.text();
  } finally { window.__pending--; }
}
document.addEventListener("click", (e) => {
  const t = e.target.closest("[data-op]");
  if (t && t.tagName !== "INPUT" && t.tagName !== "SELECT") act(t.dataset.op, t.dataset.arg, null);
});
document.addEventListener("change", (e) => {
  const t = e.target;
  if (t.type === "checkbox") act(t.dataset.op, t.dataset.arg, t.checked);
  else if (t.tagName === "SELECT") act(t.dataset.op, t.dataset.arg, t.value);
});
document.addEventListener("input", (e) => {
  const t = e.target;
  if (t.tagName === "INPUT" && t.type === "text") act(t.dataset.op, t.dataset.arg, t.value);
});
"""


class BrowserError(RuntimeError):
    """Chromium or Playwright is missing or failed to start; the message says how to fix it."""


# --------------------------------------------------------------------------------------------
# The app server


class AppServer:
    """The apps on http://127.0.0.1:<free port>/; one session (app + state) per episode."""

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[App, State]] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def open(self, app: str, state: State) -> str:
        """A new session of `app` starting in `state`; returns its page's URL."""
        sid = secrets.token_hex(8)
        with self._lock:
            self._sessions[sid] = (APPS[app], copy.deepcopy(state))
        return f"{self.url}/s/{sid}/"

    def close(self, url: str) -> None:
        with self._lock:
            self._sessions.pop(url.rstrip("/").rsplit("/", 1)[-1], None)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def page(self, app: App, state: State) -> str:
        return (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(app.title)}</title><style>{_PAGE_STYLE}</style></head>"
            f'<body><main id="app">{app.render(state)}</main>'
            f"<script>{_PAGE_SCRIPT}</script></body></html>"
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the rollout's progress bar is the output

            def _session(self) -> tuple[str, App, State] | None:
                match = re.fullmatch(r"/s/([0-9a-f]+)/(.*)", self.path)
                if match is None or match.group(1) not in server._sessions:
                    self._send(404, "text/plain", "no such session")
                    return None
                app, state = server._sessions[match.group(1)]
                return match.group(2), app, state

            def _send(self, code: int, kind: str, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                found = self._session()
                if found is None:
                    return
                route, app, state = found
                with server._lock:
                    if route == "":
                        self._send(200, "text/html", server.page(app, state))
                    elif route == "api/state":
                        body = json.dumps({"app": app.name, "state": state})
                        self._send(200, "application/json", body)
                    else:
                        self._send(404, "text/plain", f"no route {route!r}")

            def do_POST(self) -> None:
                found = self._session()
                if found is None:
                    return
                route, app, state = found
                if route != "api/act":
                    self._send(404, "text/plain", f"no route {route!r}")
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)))
                    with server._lock:
                        app.apply(state, str(body["op"]), str(body["arg"]), body.get("value"))
                except (OperationError, ValueError, KeyError, TypeError) as exc:
                    with server._lock:
                        state["message"] = f"Error: {exc}"
                with server._lock:
                    self._send(200, "text/html", app.render(state))

        return Handler


def read_state(url: str, timeout: float) -> State:
    """The app state of the session at `url`, from its JSON endpoint (what verifiers read)."""
    with urllib.request.urlopen(f"{url}api/state", timeout=timeout) as response:
        state: State = json.loads(response.read())["state"]
    return state


# --------------------------------------------------------------------------------------------
# The browser


@dataclass(frozen=True)
class BrowserOptions:
    """How Chromium runs (from `environment.options.browser` in the config)."""

    executable: str = "/usr/bin/chromium"
    viewport: tuple[int, int] = (900, 700)
    action_timeout_ms: int = 3000
    screenshots: bool = True


class Browser:
    """Headless Chromium under Playwright, and the app server; a context manager. Playwright's
    sync API allows one running Browser per thread, used from that thread only."""

    def __init__(self, options: BrowserOptions) -> None:
        self.options = options
        executable = shutil.which(options.executable) or options.executable
        if not Path(executable).is_file():
            raise BrowserError(
                f"Chromium not found at {options.executable!r}. Install Debian's package "
                "(`apt-get install chromium`; `make setup` does it when run as root) or set "
                "environment.options.browser.executable to a Chromium binary."
            )
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise BrowserError("the playwright package is missing: pip install -e .") from exc
        self.server = AppServer()
        self._playwright = sync_playwright().start()
        try:
            self._browser = self._playwright.chromium.launch(
                executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS)
            )
        except Exception as exc:
            self._playwright.stop()
            self.server.stop()
            raise BrowserError(f"Chromium at {executable} did not start: {exc}") from exc

    def new_page(self) -> Any:
        """A page in a fresh context (a profile of its own)."""
        width, height = self.options.viewport
        context = self._browser.new_context(viewport={"width": width, "height": height})
        context.set_default_timeout(self.options.action_timeout_ms)
        return context.new_page()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._browser.close()
        with contextlib.suppress(Exception):
            self._playwright.stop()
        self.server.stop()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def open_browser(options: BrowserOptions) -> Iterator[Browser]:
    browser = Browser(options)
    try:
        yield browser
    finally:
        browser.close()


# --------------------------------------------------------------------------------------------
# Observations and actions

_REF = re.compile(r" \[ref=(e\d+)\]")
_ROLE = re.compile(r"^(\s*)- (\w+)")
_YAML_QUOTED = re.compile(r"^(\s*)- '(.*)'(:?)$")
_NAME = re.compile(r'^\s*- (?:\[\d+\] )?\w+ "(.*?)"')
_TEXT = re.compile(r"^\s*- text: (.*)$")
_ACTION = re.compile(r"^\s*(click|type|select|scroll|done)\s*\((.*)\)\s*$", re.S)
_ID_ARG = re.compile(r"^\s*\[?(\d+)\]?\s*(?:,\s*(.*?))?\s*$", re.S)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


@dataclass(frozen=True)
class GuiAction:
    """A parsed action: verb, element id, and the text or option or direction."""

    verb: str
    element: int | None = None
    text: str | None = None

    def __str__(self) -> str:
        if self.verb == "done":
            return "done()"
        if self.verb == "scroll":
            return f"scroll({self.text})"
        if self.verb == "click":
            return f"click({self.element})"
        return f"{self.verb}({self.element}, {json.dumps(self.text)})"


def parse_gui_action(answer: str) -> tuple[GuiAction | None, str | None]:
    """The action in the answer's last \\boxed{}, or None and why it is malformed."""
    box = last_boxed(answer)
    if box is None:
        return None, "no \\boxed{} action in the answer"
    match = _ACTION.match(box)
    if match is None:
        return None, (
            f"{box.strip()[:60]!r} is not click(id), type(id, text), select(id, option), "
            "scroll(up|down) or done()"
        )
    verb, args = match.group(1), match.group(2)
    if verb == "done":
        return (GuiAction("done"), None) if not args.strip() else (None, "done() takes nothing")
    if verb == "scroll":
        direction = _unquote(args).lower()
        if direction not in ("up", "down"):
            return None, "scroll takes up or down"
        return GuiAction("scroll", text=direction), None
    parsed = _ID_ARG.match(args)
    if parsed is None:
        return None, f"{verb} needs an element id first"
    element, rest = int(parsed.group(1)), parsed.group(2)
    if verb == "click":
        return (GuiAction("click", element), None) if rest is None else (None, "click takes an id")
    if rest is None:
        return None, f"{verb} needs an id and a text"
    return GuiAction(verb, element, _unquote(rest)), None


def _tidy(lines: list[str]) -> list[str]:
    """Drop unnamed wrapper nodes (generic, paragraph) and lift their children; drop text that
    repeats the name of the element beside it (a label around its control)."""
    out: list[str] = []
    dropped: list[int] = []  # indents of dropped wrappers enclosing the current line
    for line in lines:
        indent = len(line) - len(line.lstrip())
        while dropped and dropped[-1] >= indent:
            dropped.pop()
        body = line.strip().replace(" [active]", "")
        if re.fullmatch(r"- (generic|paragraph|main)( \[[^\]]*\])*:?", body):
            dropped.append(indent)
            continue
        out.append(" " * max(0, indent - 2 * len(dropped)) + body)
    names = [m.group(1) if (m := _NAME.match(line)) else None for line in out]
    kept = []
    for i, line in enumerate(out):
        text = _TEXT.match(line)
        beside = {names[j] for j in (i - 1, i + 1) if 0 <= j < len(out)}
        if text is None or text.group(1).strip('"') not in beside:
            kept.append(line)
    return kept


class GuiEpisode:
    """One episode of a GUI task in the browser: reset on construction, then `act` until done.

    Args:
        spec: the task.
        browser: the running browser and app server.
        history_steps: previous actions shown in the prompt.
        shots: the directory for this episode's screenshots (None: no screenshots).
        root: screenshot paths are recorded relative to this directory.
    """

    def __init__(
        self,
        spec: GuiSpec,
        browser: Browser,
        history_steps: int,
        shots: Path | None,
        root: Path | None,
    ) -> None:
        self.spec = spec
        self.browser = browser
        self.history_steps = history_steps
        self.shots, self.root = shots, root
        self.goal_text = spec.goal_text
        self.initial = spec.initial_state()
        self.url = browser.server.open(spec.app, self.initial)
        self.page = browser.new_page()
        self.page.goto(self.url)
        self.ids: dict[str, int] = {}
        self.keys: dict[int, str] = {}
        self.history: list[tuple[str, str]] = []
        self.steps_taken = 0
        self.done = False
        self.success = False
        self.screenshot: str | None = None
        self._distance = self._measure(self.state())
        self.observation = self._observe("")

    # -- reading the page and the app ---------------------------------------------------------

    def state(self) -> State:
        return read_state(self.url, self.browser.options.action_timeout_ms / 1000)

    def _measure(self, state: State) -> int:
        return distance(self.spec.template, state, self.initial, self.spec.params)

    def tree(self) -> str:
        """The accessibility tree, interactive elements numbered with the episode's stable ids."""
        raw = self.page.locator("#app").aria_snapshot(mode="ai")
        lines = []
        for line in raw.splitlines():
            ref = _REF.search(line)
            line = _REF.sub("", line)
            quoted = _YAML_QUOTED.match(line)
            if quoted:  # YAML quoting of a name with ": " in it
                name = quoted.group(2).replace("''", "'")
                line = f"{quoted.group(1)}- {name}{quoted.group(3)}"
            role = _ROLE.match(line)
            if ref and role and role.group(2) in INTERACTIVE_ROLES:
                key = self.page.locator(f"aria-ref={ref.group(1)}").get_attribute("data-key")
                if key is not None:
                    number = self.ids.setdefault(key, len(self.ids) + 1)
                    self.keys[number] = key
                    line = f"{role.group(1)}- [{number}] {line[role.end() - len(role.group(2)) :]}"
            lines.append(line)
        return "\n".join(_tidy(lines))

    def _observe(self, note: str) -> str:
        if self.shots is not None and self.browser.options.screenshots:
            path = self.shots / f"step_{self.steps_taken:03d}.png"
            with atomic_path(path) as tmp:
                tmp.write_bytes(self.page.screenshot())
            self.screenshot = str(path.relative_to(self.root) if self.root else path)
        title = APPS[self.spec.app].title
        text = f"Page: {title}\n{self.tree()}"
        return f"{note}\n{text}" if note else text

    def key_of(self, element: int) -> str | None:
        """The data-key of the element with this id, if it is on the page now."""
        key = self.keys.get(element)
        if key is None or self.page.locator(f'[data-key="{key}"]').count() == 0:
            return None
        return key

    def id_of(self, key: str) -> int | None:
        """The id the policy sees for the element with this data-key (None: not seen yet)."""
        return self.ids.get(key)

    def expert(self) -> tuple[GuiAction, str] | None:
        """The expert's next action, in the policy's terms, and its hint sentence; None when the
        goal cannot be reached any more (a wrong irreversible step was taken)."""
        plan = self.spec.plan(self.state())
        if plan is None:
            return None
        step = plan[0]
        if step[0] == "done":
            return GuiAction("done"), "The task is complete."
        element = self.id_of(step[1])
        assert element is not None, f"the expert's element {step[1]} is not on the page"
        text = step[2] if len(step) > 2 else None
        return GuiAction(step[0], element, text), hint_sentence(self.spec, step)

    # -- acting ---------------------------------------------------------------------------------

    def _perform(self, action: GuiAction) -> str | None:
        """Carry out a parsed action in the page; None, or why it is impossible."""
        if action.verb == "scroll":
            self.page.mouse.wheel(0, 400 if action.text == "down" else -400)
            return None
        assert action.element is not None
        key = self.key_of(action.element)
        if key is None:
            return f"there is no element [{action.element}] on this page"
        element = self.page.locator(f'[data-key="{key}"]')
        tag = element.evaluate("e => e.tagName.toLowerCase() + ':' + (e.type || '')")
        if action.verb == "type" and tag != "input:text":
            return f"[{action.element}] is not a text box"
        if action.verb == "select":
            if not tag.startswith("select"):
                return f"[{action.element}] is not a drop-down"
            options = element.evaluate("e => Array.from(e.options).map(o => o.text)")
            if action.text not in options:
                return f"[{action.element}] has no option {action.text!r}; it has {options}"
        try:
            if action.verb == "click":
                element.click()
            elif action.verb == "type":
                element.fill(action.text or "")
            else:
                element.select_option(label=action.text)
            self.page.wait_for_function("() => window.__pending === 0")
        except Exception as exc:  # Playwright's TimeoutError and kin: the page refused
            return f"the page did not accept it ({type(exc).__name__})"
        return None

    def act(self, answer: str) -> Move:
        """Apply the policy's whole answer; malformed or impossible actions are invalid moves."""
        if self.done:
            raise RuntimeError("episode is over; start a new GuiEpisode")
        action, problem = parse_gui_action(answer)
        if action is not None and action.verb != "done":
            problem = self._perform(action)
        valid = problem is None
        self.steps_taken += 1
        state = self.state()
        dist = self._measure(state)
        finished = valid and action is not None and action.verb == "done"
        progress = (dist < self._distance) or (finished and self._distance == 1)
        self._distance = dist
        self.done = finished or self.steps_taken >= self.spec.max_steps
        self.success = self.done and dist == 1
        label = str(action) if valid and action is not None else INVALID_ACTION
        note = f"Invalid action: {problem}." if problem else f"Did {label}."
        self.history.append((label, note))
        self.observation = self._observe(note) if not self.done else note
        if self.done:
            self.close()
        return Move(label if valid else None, valid, self.observation, progress, self.done)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.page.context.close()
        self.browser.server.close(self.url)

    def messages(self) -> list[dict[str, str]]:
        recent = self.history[-self.history_steps :] if self.history_steps else []
        return gui_policy_messages(self.goal_text, [a for a, _ in recent], self.observation)


GUI_POLICY_SYSTEM = (
    "You operate a web app in a browser. You see the page's accessibility tree; interactive "
    "elements have ids in brackets, like [3]. Reach the goal in as few steps as possible. Think "
    'briefly, then answer with one action in \\boxed{}: click(id), type(id, "text"), '
    'select(id, "option"), scroll(down) or scroll(up), or done() once the task is complete. '
    "For example \\boxed{click(3)}."
)


def gui_policy_messages(goal: str, recent: list[str], observation: str) -> list[dict[str, str]]:
    """The policy's prompt for one GUI step: the task, the last actions and the page now."""
    lines = [f"Your task is to: {goal}."]
    if recent:
        lines.append("Your last actions: " + "; ".join(recent))
    lines.append(observation)
    return [
        {"role": "system", "content": GUI_POLICY_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
