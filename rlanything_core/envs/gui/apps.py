"""The three web apps of the GUI environment: state, operations, HTML and the expert's plans.

Every app keeps its whole state, the interface's included (open tab, search text, selection), in
one JSON-able dict on the server. The page renders that state; every click, keystroke or choice in
the browser is posted to the server as an operation (`apply`), and the page redraws from the
answer. So what a verifier reads from the JSON endpoint is exactly what the user did.

Each app has verifier *templates* (a task is a template with parameters). For a template, the
expert's `plan` is a shortest list of interface actions from any state to the goal followed by
`done`; its length is the distance d(s), and a step *makes progress* when d(s') < d(s).

A state from which the goal cannot be reached has no plan (None) and distance UNREACHABLE.
Interface actions are ("click", key), ("type", key, text), ("select", key, option) and ("done",),
where `key` is the `data-key` attribute of the element; the browser episode turns keys into the
stable element ids the policy sees.
"""

from __future__ import annotations

import copy
import html
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

State = dict[str, Any]
Action = tuple[str, ...]
UNREACHABLE = 10**6


class OperationError(ValueError):
    """An operation the interface cannot send (a bug in a page, never the agent's fault)."""


def _attr(value: object) -> str:
    return html.escape(str(value), quote=True)


def _button(key: str, label: str, op: str, arg: str = "", extra: str = "") -> str:
    return (
        f'<button data-key="{_attr(key)}" data-op="{op}" data-arg="{_attr(arg)}"{extra}>'
        f"{html.escape(label)}</button>"
    )


def _select(key: str, label: str, op: str, arg: str, options: list[str], current: str) -> str:
    opts = "".join(
        f"<option{' selected' if o == current else ''}>{html.escape(o)}</option>" for o in options
    )
    return (
        f'<label>{html.escape(label)} <select data-key="{_attr(key)}" data-op="{op}" '
        f'data-arg="{_attr(arg)}">{opts}</select></label>'
    )


def _textbox(key: str, label: str, op: str, arg: str, value: str) -> str:
    return (
        f'<label>{html.escape(label)} <input type="text" data-key="{_attr(key)}" data-op="{op}" '
        f'data-arg="{_attr(arg)}" value="{_attr(value)}"></label>'
    )


def _switch(key: str, label: str, op: str, arg: str, on: bool) -> str:
    return (
        f'<label><input type="checkbox" role="switch" data-key="{_attr(key)}" data-op="{op}" '
        f'data-arg="{_attr(arg)}"{" checked" if on else ""}> {html.escape(label)}</label>'
    )


def _status(message: str) -> str:
    return f'<p role="status">{html.escape(message)}</p>' if message else ""


# --------------------------------------------------------------------------------------------
# Settings: tabs, switches, selects, text fields, validation on save


@dataclass(frozen=True)
class Field:
    name: str
    tab: str
    label: str
    kind: str  # "switch" | "select" | "text"
    options: tuple[str, ...] = ()


SETTINGS_TABS = ("General", "Notifications", "Privacy")
SETTINGS_FIELDS: tuple[Field, ...] = (
    Field("display_name", "General", "Display name", "text"),
    Field("language", "General", "Language", "select", ("English", "French", "German", "Spanish")),
    Field("theme", "General", "Theme", "select", ("Light", "Dark", "System")),
    Field("email_alerts", "Notifications", "Email alerts", "switch"),
    Field("push_alerts", "Notifications", "Push notifications", "switch"),
    Field("digest", "Notifications", "Digest frequency", "select", ("Daily", "Weekly", "Never")),
    Field("public_profile", "Privacy", "Public profile", "switch"),
    Field("two_factor", "Privacy", "Two-factor authentication", "switch"),
    Field("recovery_email", "Privacy", "Recovery email", "text"),
    Field("timeout", "Privacy", "Session timeout (minutes)", "text"),
)
FIELDS_BY_NAME = {f.name: f for f in SETTINGS_FIELDS}
SETTINGS_DEFAULTS: State = {
    "display_name": "Sam",
    "language": "English",
    "theme": "Light",
    "email_alerts": True,
    "push_alerts": False,
    "digest": "Weekly",
    "public_profile": True,
    "two_factor": False,
    "recovery_email": "",
    "timeout": "60",
}


def settings_errors(values: State) -> list[str]:
    """Why these values cannot be saved (the form's validation), in field order."""
    errors = []
    if not 1 <= len(values["display_name"].strip()) <= 30:
        errors.append("Display name must have 1 to 30 characters.")
    email = values["recovery_email"]
    if email and ("@" not in email or "." not in email.partition("@")[2]):
        errors.append("Recovery email must look like name@example.org.")
    if values["two_factor"] and not email:
        errors.append("Two-factor authentication needs a recovery email.")
    if not (values["timeout"].isdigit() and 5 <= int(values["timeout"]) <= 120):
        errors.append("Session timeout must be a whole number from 5 to 120.")
    return errors


def settings_state(seed: int) -> State:
    del seed  # one fixed starting profile
    return {
        "tab": "General",
        "draft": dict(SETTINGS_DEFAULTS),
        "saved": dict(SETTINGS_DEFAULTS),
        "message": "",
    }


def settings_apply(state: State, op: str, arg: str, value: Any) -> None:
    if op == "tab" and arg in SETTINGS_TABS:
        state["tab"] = arg
    elif op == "set" and arg in FIELDS_BY_NAME:
        field = FIELDS_BY_NAME[arg]
        if field.kind == "switch":
            state["draft"][arg] = bool(value)
        elif field.kind == "select" and value not in field.options:
            raise OperationError(f"{value!r} is not an option of {arg}")
        else:
            state["draft"][arg] = str(value)
    elif op == "save":
        errors = settings_errors(state["draft"])
        if errors:
            state["message"] = "Not saved. " + " ".join(errors)
        else:
            state["saved"] = dict(state["draft"])
            state["message"] = "Settings saved."
    elif op == "discard":
        state["draft"] = dict(state["saved"])
        state["message"] = "Changes discarded."
    else:
        raise OperationError(f"settings has no operation {op}({arg!r})")


def settings_render(state: State) -> str:
    tabs = "".join(
        f'<button role="tab" aria-selected="{str(t == state["tab"]).lower()}" '
        f'data-key="tab-{t}" data-op="tab" data-arg="{t}">{t}</button>'
        for t in SETTINGS_TABS
    )
    rows = []
    for f in SETTINGS_FIELDS:
        if f.tab != state["tab"]:
            continue
        key, value = f"field-{f.name}", state["draft"][f.name]
        if f.kind == "switch":
            rows.append(_switch(key, f.label, "set", f.name, value))
        elif f.kind == "select":
            rows.append(_select(key, f.label, "set", f.name, list(f.options), value))
        else:
            rows.append(_textbox(key, f.label, "set", f.name, value))
    return (
        "<h1>Account settings</h1>"
        f'<div role="tablist">{tabs}</div>'
        f'<div role="tabpanel" aria-label="{state["tab"]}">{"".join(f"<p>{r}</p>" for r in rows)}'
        "</div>"
        f"<p>{_button('save', 'Save', 'save')} {_button('discard', 'Discard changes', 'discard')}"
        f"</p>{_status(state['message'])}"
    )


def _settings_plan(state: State, desired: State) -> list[Action]:
    pending = [f for f in SETTINGS_FIELDS if state["draft"][f.name] != desired[f.name]]
    tabs = [state["tab"], *(t for t in SETTINGS_TABS if t != state["tab"])]
    actions: list[Action] = []
    for tab in tabs:
        here = [f for f in pending if f.tab == tab]
        if here and tab != state["tab"]:
            actions.append(("click", f"tab-{tab}"))
        for f in here:
            key, value = f"field-{f.name}", desired[f.name]
            if f.kind == "switch":
                actions.append(("click", key))
            elif f.kind == "select":
                actions.append(("select", key, value))
            else:
                actions.append(("type", key, value))
    if state["saved"] != desired:
        actions.append(("click", "save"))
    return [*actions, ("done",)]


def _settings_set_values(initial: State, params: dict[str, Any]) -> State:
    return {**initial["saved"], **params["values"]}


def _settings_all_switches(initial: State, params: dict[str, Any]) -> State:
    switches = [f.name for f in SETTINGS_FIELDS if f.tab == params["tab"] and f.kind == "switch"]
    return {**initial["saved"], **dict.fromkeys(switches, params["on"])}


# --------------------------------------------------------------------------------------------
# Mail: a message list with search, a filter, row selection and bulk actions

MAIL_MESSAGES: tuple[tuple[str, str], ...] = (
    ("Alice Martin", "Lunch on Friday?"),
    ("Alice Martin", "Slides for the review"),
    ("Bob Chen", "Invoice 2041"),
    ("Bob Chen", "Re: project timeline"),
    ("Carol Diaz", "Team offsite photos"),
    ("Carol Diaz", "Invoice 2077"),
    ("GitHub", "New sign-in to your account"),
    ("GitHub", "Weekly digest"),
    ("Daily News", "Newsletter: markets today"),
    ("Daily News", "Newsletter: weekend edition"),
    ("Shop Deals", "Promo: 50% off shoes"),
    ("Shop Deals", "Promo: last chance"),
    ("Prize Center", "You won the lottery"),
    ("Dan Okafor", "Dinner plans"),
)
MAIL_FILTERS = ("All", "Unread", "Starred")
MAIL_ACTIONS = {"archive": "Archive", "delete": "Delete", "mark_read": "Mark read", "star": "Star"}


def mail_state(seed: int) -> State:
    rng = random.Random(f"mail-{seed}")
    order = list(range(len(MAIL_MESSAGES)))
    rng.shuffle(order)
    messages = [
        {
            "id": i,
            "sender": MAIL_MESSAGES[i][0],
            "subject": MAIL_MESSAGES[i][1],
            "folder": "inbox",
            "read": i % 3 == 0,
            "starred": i % 5 == 0,
        }
        for i in order
    ]
    return {"messages": messages, "query": "", "filter": "All", "selected": [], "message": ""}


def mail_matches(message: State, query: str) -> bool:
    q = query.strip().lower()
    return q in message["sender"].lower() or q in message["subject"].lower()


def mail_visible(state: State) -> list[State]:
    return [
        m
        for m in state["messages"]
        if m["folder"] == "inbox"
        and mail_matches(m, state["query"])
        and (state["filter"] != "Unread" or not m["read"])
        and (state["filter"] != "Starred" or m["starred"])
    ]


def mail_apply(state: State, op: str, arg: str, value: Any) -> None:
    visible = [m["id"] for m in mail_visible(state)]
    if op == "search":
        state["query"], state["selected"] = str(value), []
    elif op == "filter" and value in MAIL_FILTERS:
        state["filter"], state["selected"] = value, []
    elif op == "pick" and int(arg) in visible:
        picked = set(state["selected"]) ^ {int(arg)}
        state["selected"] = [i for i in visible if i in picked]
    elif op == "pick_all":
        state["selected"] = [] if set(visible) <= set(state["selected"]) else visible
    elif op in MAIL_ACTIONS:
        chosen = set(state["selected"])
        for m in state["messages"]:
            if m["id"] in chosen:
                if op == "archive":
                    m["folder"] = "archive"
                elif op == "delete":
                    m["folder"] = "trash"
                elif op == "mark_read":
                    m["read"] = True
                else:
                    m["starred"] = True
        state["message"] = f"{MAIL_ACTIONS[op]}: {len(chosen)} message(s)."
        still = {m["id"] for m in mail_visible(state)}
        state["selected"] = [i for i in state["selected"] if i in still]
    else:
        raise OperationError(f"mail has no operation {op}({arg!r})")


def mail_render(state: State) -> str:
    visible = mail_visible(state)
    selected = set(state["selected"])
    rows = []
    for m in visible:
        flags = ("" if m["read"] else "unread, ") + ("starred, " if m["starred"] else "")
        name = f"{m['sender']}: {m['subject']}"
        rows.append(
            f'<li><label><input type="checkbox" data-key="pick-{m["id"]}" data-op="pick" '
            f'data-arg="{m["id"]}"{" checked" if m["id"] in selected else ""}> '
            f"{html.escape(name)}</label> <small>{flags.rstrip(', ')}</small></li>"
        )
    all_on = bool(visible) and {m["id"] for m in visible} <= selected
    buttons = " ".join(_button(f"action-{op}", label, op) for op, label in MAIL_ACTIONS.items())
    return (
        "<h1>Mail</h1><p>"
        + _textbox("search", "Search mail", "search", "", state["query"])
        + " "
        + _select("filter", "Show", "filter", "", list(MAIL_FILTERS), state["filter"])
        + "</p><p>"
        + _select_all("pick-all", "Select all", all_on)
        + f" {buttons}</p>"
        + f'<ul aria-label="Inbox">{"".join(rows)}</ul>'
        + ("" if rows else "<p>No messages.</p>")
        + _status(state["message"])
    )


def _select_all(key: str, label: str, on: bool) -> str:
    return (
        f'<label><input type="checkbox" data-key="{key}" data-op="pick_all" data-arg=""'
        f"{' checked' if on else ''}> {html.escape(label)}</label>"
    )


_MAIL_FIELD = {"archive": "folder", "delete": "folder", "mark_read": "read", "star": "starred"}
_MAIL_EFFECT: dict[str, Callable[[State], bool]] = {
    "archive": lambda m: m["folder"] == "archive",
    "delete": lambda m: m["folder"] == "trash",
    "mark_read": lambda m: m["read"],
    "star": lambda m: m["starred"],
}


def _mail_plan(
    state: State, initial: State, params: dict[str, Any], op: str
) -> list[Action] | None:
    targets = {m["id"] for m in initial["messages"] if mail_matches(m, params["query"])}
    done = _MAIL_EFFECT[op]
    before = {m["id"]: m for m in initial["messages"]}
    for m in state["messages"]:
        changed = {k for k in m if m[k] != before[m["id"]][k]}
        if changed and (m["id"] not in targets or changed != {_MAIL_FIELD[op]} or not done(m)):
            return None  # a message the task does not touch was changed, or changed wrongly
    pending = {m["id"] for m in state["messages"] if m["id"] in targets and not done(m)}
    if not pending:
        return [("done",)]
    act: Action = ("click", f"action-{op}")
    plans: list[list[Action]] = []
    visible = {m["id"] for m in mail_visible(state)}
    selected = set(state["selected"])
    if pending <= visible:  # pick rows in the current view
        fix = [("click", f"pick-{i}") for i in sorted(selected - targets)]
        fix += [("click", f"pick-{i}") for i in sorted(pending - selected)]
        plans.append([*fix, act])
    reset: list[Action] = []  # show every inbox message, then pick rows
    if state["query"]:
        reset.append(("type", "search", ""))
    if state["filter"] != "All":
        reset.append(("select", "filter", "All"))
    if reset:
        plans.append([*reset, *(("click", f"pick-{i}") for i in sorted(pending)), act])
    search: list[Action] = []  # search for the task's words, select all
    if state["query"] != params["query"]:
        search.append(("type", "search", params["query"]))
    if state["filter"] != "All":
        search.append(("select", "filter", "All"))
    shown = {m["id"] for m in state["messages"] if m["folder"] == "inbox"} & targets
    if search or not shown <= selected or not selected <= targets:
        search.append(("click", "pick-all"))
    plans.append([*search, act])
    return [*min(plans, key=len), ("done",)]


# --------------------------------------------------------------------------------------------
# Files: folders in a tree, a file list with single selection, rename / move / delete


FILE_TREE: dict[str, tuple[str, ...]] = {
    "Documents": ("draft.txt", "budget.xlsx", "old-notes.md", "report.pdf"),
    "Pictures": ("beach.jpg", "cat.png"),
    "Downloads": ("photo.png", "installer.deb", "tmp.log"),
    "Archive": ("2024-taxes.pdf",),
}


def files_state(seed: int) -> State:
    rng = random.Random(f"files-{seed}")
    folders = {name: rng.sample(list(files), len(files)) for name, files in FILE_TREE.items()}
    return {
        "folders": folders,
        "cwd": "Documents",
        "selected": None,
        "new_name": "",
        "move_to": "Documents",
        "message": "",
    }


def _folder_of(state: State, name: str) -> str | None:
    return next((f for f, files in state["folders"].items() if name in files), None)


def files_apply(state: State, op: str, arg: str, value: Any) -> None:
    files = state["folders"][state["cwd"]]
    chosen = state["selected"]
    if op == "open" and arg in state["folders"]:
        state["cwd"], state["selected"] = arg, None
    elif op == "pick" and arg in files:
        state["selected"] = None if chosen == arg else arg
    elif op == "new_name":
        state["new_name"] = str(value)
    elif op == "move_to" and value in state["folders"]:
        state["move_to"] = value
    elif op in ("rename", "move", "delete"):
        if chosen is None:
            state["message"] = "Select a file first."
            return
        if op == "rename":
            new = state["new_name"].strip()
            if not new or "/" in new or _folder_of(state, new) is not None:
                state["message"] = "Enter a new name that no file has."
                return
            files[files.index(chosen)] = new
            state["message"], state["selected"] = f"Renamed {chosen} to {new}.", new
        elif op == "move":
            if state["move_to"] == state["cwd"]:
                state["message"] = "The file is already in that folder."
                return
            files.remove(chosen)
            state["folders"][state["move_to"]].append(chosen)
            state["message"], state["selected"] = f"Moved {chosen}.", None
        else:
            files.remove(chosen)
            state["message"], state["selected"] = f"Deleted {chosen}.", None
    else:
        raise OperationError(f"files has no operation {op}({arg!r})")


def files_render(state: State) -> str:
    tree = "".join(
        f'<li role="treeitem" aria-selected="{str(f == state["cwd"]).lower()}" '
        f'data-key="folder-{_attr(f)}" data-op="open" data-arg="{_attr(f)}" tabindex="0">'
        f"{html.escape(f)}</li>"
        for f in state["folders"]
    )
    items = "".join(
        f'<li role="option" aria-selected="{str(n == state["selected"]).lower()}" '
        f'data-key="file-{_attr(n)}" data-op="pick" data-arg="{_attr(n)}" tabindex="0">'
        f"{html.escape(n)}</li>"
        for n in state["folders"][state["cwd"]]
    )
    return (
        "<h1>Files</h1>"
        f'<ul role="tree" aria-label="Folders">{tree}</ul>'
        f'<ul role="listbox" aria-label="Files in {_attr(state["cwd"])}">{items}</ul>'
        "<p>"
        + _textbox("new-name", "New name", "new_name", "", state["new_name"])
        + " "
        + _button("rename", "Rename", "rename")
        + "</p><p>"
        + _select("move-to", "Move to", "move_to", "", list(state["folders"]), state["move_to"])
        + " "
        + _button("move", "Move", "move")
        + " "
        + _button("delete", "Delete", "delete")
        + "</p>"
        + _status(state["message"])
    )


def _files_plan(
    state: State, initial: State, params: dict[str, Any], op: str
) -> list[Action] | None:
    name = params["file"]
    home = _folder_of(initial, name)
    goal = copy.deepcopy(initial["folders"])
    if home is None:
        return None
    if op == "rename":
        goal[home][goal[home].index(name)] = params["new_name"]
    elif op == "move":
        goal[home].remove(name)
        goal[params["folder"]].append(name)
    else:
        goal[home].remove(name)
    current = {f: sorted(files) for f, files in state["folders"].items()}
    if current == {f: sorted(files) for f, files in goal.items()}:
        return [("done",)]
    if current != {f: sorted(files) for f, files in initial["folders"].items()}:
        return None  # some other file was renamed, moved or deleted
    actions: list[Action] = []
    if state["cwd"] != home:
        actions.append(("click", f"folder-{home}"))
    if state["cwd"] != home or state["selected"] != name:
        actions.append(("click", f"file-{name}"))
    if op == "rename":
        if state["new_name"] != params["new_name"]:
            actions.append(("type", "new-name", params["new_name"]))
        actions.append(("click", "rename"))
    elif op == "move":
        if state["move_to"] != params["folder"]:
            actions.append(("select", "move-to", params["folder"]))
        actions.append(("click", "move"))
    else:
        actions.append(("click", "delete"))
    return [*actions, ("done",)]


# --------------------------------------------------------------------------------------------
# The registry


@dataclass(frozen=True)
class App:
    """One web app: its starting state, operations, page and vocabulary of element labels."""

    name: str
    title: str
    initial: Callable[[int], State]
    apply: Callable[[State, str, str, Any], None]
    render: Callable[[State], str]
    labels: frozenset[str]
    """Names of the app's interface elements (tabs, fields, buttons, folders, files, senders):
    what a hint may name."""


APPS: dict[str, App] = {
    "settings": App(
        "settings",
        "Account settings",
        settings_state,
        settings_apply,
        settings_render,
        frozenset(
            {*SETTINGS_TABS, *(f.label for f in SETTINGS_FIELDS), "Save", "Discard changes"}
            | {o for f in SETTINGS_FIELDS for o in f.options}
        ),
    ),
    "mail": App(
        "mail",
        "Mail",
        mail_state,
        mail_apply,
        mail_render,
        frozenset(
            {"Search mail", "Show", "Select all", "Inbox", *MAIL_ACTIONS.values(), *MAIL_FILTERS}
            | {s for s, _ in MAIL_MESSAGES}
        ),
    ),
    "files": App(
        "files",
        "Files",
        files_state,
        files_apply,
        files_render,
        frozenset(
            {"Folders", "New name", "Rename", "Move to", "Move", "Delete", *FILE_TREE}
            | {n for files in FILE_TREE.values() for n in files}
        ),
    ),
}


@dataclass(frozen=True)
class Template:
    """A verifier template: which app, the parameters it takes, and the expert's plan."""

    app: str
    params: tuple[str, ...]
    plan: Callable[[State, State, dict[str, Any]], list[Action] | None]
    """plan(state, initial, params): a shortest action list from `state` to the goal, ending in
    ("done",); None when the goal cannot be reached any more."""


def _settings_template(
    params: tuple[str, ...], desired: Callable[[State, dict[str, Any]], State]
) -> Template:
    return Template(
        "settings",
        params,
        lambda state, initial, p: _settings_plan(state, desired(initial, p)),
    )


def _mail_template(op: str) -> Template:
    return Template(
        "mail", ("query",), lambda state, initial, params: _mail_plan(state, initial, params, op)
    )


def _files_template(op: str, params: tuple[str, ...]) -> Template:
    return Template("files", params, lambda state, initial, p: _files_plan(state, initial, p, op))


TEMPLATES: dict[str, Template] = {
    "set_values": _settings_template(("values",), _settings_set_values),
    "all_switches": _settings_template(("tab", "on"), _settings_all_switches),
    "archive": _mail_template("archive"),
    "delete": _mail_template("delete"),
    "mark_read": _mail_template("mark_read"),
    "star": _mail_template("star"),
    "rename_file": _files_template("rename", ("file", "new_name")),
    "move_file": _files_template("move", ("file", "folder")),
    "delete_file": _files_template("delete", ("file",)),
}


def distance(template: str, state: State, initial: State, params: dict[str, Any]) -> int:
    """d(s): the expert's plan length from `state` (UNREACHABLE when the goal is lost)."""
    plan = TEMPLATES[template].plan(state, initial, params)
    return UNREACHABLE if plan is None else len(plan)


def reached(template: str, state: State, initial: State, params: dict[str, Any]) -> bool:
    """The verifier: does the app state satisfy the task (only `done` is left to do)?"""
    return distance(template, state, initial, params) == 1
