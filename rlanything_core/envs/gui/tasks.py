"""GUI tasks: a verifier template of one app with its parameters, hints, a step limit and a seed.

The instruction the agent reads is the template's sentence followed by the hints. Hints are what
the environment model edits to make a task easier (more, or more precise, hints) or harder (fewer);
it may also switch the template to another one of the same app. A spec is valid when its template
exists for its app, the parameters fit the app's data, the goal is not already met, every hint
quotes ('like this') at least one real element of the app, and the step limit covers the expert's
plan.

Seed tasks: 16 in-domain ones on the settings and mail apps, and 6 out-of-domain ones on the file
manager, an app (tree navigation, a selectable list, a toolbar) that training never sees.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.envs.common import SpecError, check_step_limit, validate_spec
from rlanything_core.envs.gui.apps import (
    APPS,
    FIELDS_BY_NAME,
    MAIL_ACTIONS,
    SETTINGS_FIELDS,
    TEMPLATES,
    Action,
    State,
    mail_matches,
    settings_errors,
)

AppName = Literal["settings", "mail", "files"]
MAX_STEPS = 40
MAX_HINTS = 8
MAX_HINT_CHARS = 200
_QUOTED = re.compile(r"'([^']+)'")
EXAMPLE_HINT = {"settings": "Click 'Save'.", "mail": "Click 'Archive'.", "files": "Click 'Delete'."}


class GuiSpec(BaseModel):
    """A GUI task. Difficulty knobs: hints (fewer is harder), max_steps, template."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    app: AppName
    """The web app: settings | mail | files."""
    template: str
    """Verifier template of that app (settings: set_values, all_switches; mail: archive, delete,
    mark_read, star; files: rename_file, move_file, delete_file)."""
    params: dict[str, Any]
    """The template's parameters, e.g. {"query": "newsletter"} for mail's archive."""
    hints: tuple[str, ...] = ()
    """Hint sentences appended to the instruction; each quotes an element, e.g. "Click 'Save'."."""
    max_steps: int = Field(ge=1, le=MAX_STEPS)
    """Step limit of an episode; at least the expert's plan length."""
    seed: int = Field(0, ge=0, lt=2**31)
    """Seed of the app's starting state (the order of messages and files)."""

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)

    @property
    def task_text(self) -> str:
        """The template's sentence."""
        p = self.params
        if self.template == "set_values":
            parts = []
            for name, value in p["values"].items():
                field = FIELDS_BY_NAME[name]
                if field.kind == "switch":
                    parts.append(f"turn {'on' if value else 'off'} {field.label}")
                else:
                    parts.append(f"set {field.label} to {value}")
            return f"In the account settings, {', '.join(parts)}, and save"
        if self.template == "all_switches":
            return (
                f"Turn {'on' if p['on'] else 'off'} every switch on the {p['tab']} tab of the "
                "account settings, and save"
            )
        if self.app == "mail":
            verb = {**MAIL_ACTIONS, "mark_read": "Mark as read"}[self.template]
            return f'{verb} every inbox message whose sender or subject contains "{p["query"]}"'
        if self.template == "rename_file":
            return f"Rename the file {p['file']} to {p['new_name']}"
        if self.template == "move_file":
            return f"Move the file {p['file']} to the {p['folder']} folder"
        return f"Delete the file {p['file']}"

    @property
    def goal_text(self) -> str:
        hints = " ".join(self.hints).rstrip(".")  # prompts add the final period
        return f"{self.task_text}. Hints: {hints}" if hints else self.task_text

    def initial_state(self) -> State:
        return APPS[self.app].initial(self.seed)

    def plan(self, state: State | None = None) -> list[Action] | None:
        """The expert's plan from `state` (default: the starting state)."""
        initial = self.initial_state()
        return TEMPLATES[self.template].plan(state or initial, initial, self.params)


def _label_of_key(spec: GuiSpec, key: str) -> str:
    """The visible name of the element with this data-key (for hint sentences)."""
    if key.startswith("tab-"):
        return key.removeprefix("tab-")
    if key.startswith("field-"):
        return FIELDS_BY_NAME[key.removeprefix("field-")].label
    if key.startswith("folder-") or key.startswith("file-"):
        return key.partition("-")[2]
    if key.startswith("action-"):
        return MAIL_ACTIONS[key.removeprefix("action-")]
    if key.startswith("pick-") and key != "pick-all":
        message = next(
            m for m in spec.initial_state()["messages"] if m["id"] == int(key.removeprefix("pick-"))
        )
        return f"{message['sender']}: {message['subject']}"
    return {
        "pick-all": "Select all",
        "search": "Search mail",
        "filter": "Show",
        "save": "Save",
        "discard": "Discard changes",
        "new-name": "New name",
        "rename": "Rename",
        "move-to": "Move to",
        "move": "Move",
        "delete": "Delete",
    }[key]


def hint_sentence(spec: GuiSpec, action: Action) -> str:
    """One expert action as a hint, e.g. "Open the 'Privacy' tab."."""
    label = _label_of_key(spec, action[1])
    if action[0] == "type":
        return f"Type '{action[2]}' in '{label}'." if action[2] else f"Clear '{label}'."
    if action[0] == "select":
        return f"Choose '{action[2]}' in '{label}'."
    if action[1].startswith("tab-"):
        return f"Open the '{label}' tab."
    if action[1].startswith("folder-"):
        return f"Open the '{label}' folder."
    return f"Click '{label}'."


def expert_hints(spec: GuiSpec) -> list[str]:
    """Every step of the expert's plan from the starting state, as hint sentences."""
    plan = spec.plan()
    assert plan is not None
    return [hint_sentence(spec, a) for a in plan if a[0] != "done"]


def _labels(spec: GuiSpec) -> set[str]:
    labels = set(APPS[spec.app].labels)
    if spec.app == "mail":
        labels |= {f"{m['sender']}: {m['subject']}" for m in spec.initial_state()["messages"]}
    return labels


def _check_params(spec: GuiSpec) -> None:
    p, start = spec.params, spec.initial_state()
    if spec.template == "set_values":
        values = p["values"]
        if not isinstance(values, dict) or not values:
            raise SpecError("params.values must be a non-empty object of field: value.")
        for name, value in values.items():
            field = FIELDS_BY_NAME.get(name)
            if field is None:
                raise SpecError(
                    f"params.values has no settings field {name!r}; use one of "
                    f"{sorted(FIELDS_BY_NAME)}."
                )
            if field.kind == "switch" and not isinstance(value, bool):
                raise SpecError(f"params.values.{name} is a switch: use true or false.")
            if field.kind == "select" and value not in field.options:
                raise SpecError(f"params.values.{name} must be one of {list(field.options)}.")
            if field.kind == "text" and not isinstance(value, str):
                raise SpecError(f"params.values.{name} must be a string.")
        errors = settings_errors({**start["saved"], **values})
        if errors:
            raise SpecError(f"params.values cannot be saved: {' '.join(errors)}")
    elif spec.template == "all_switches":
        tabs = sorted({f.tab for f in SETTINGS_FIELDS if f.kind == "switch"})
        if p["tab"] not in tabs or not isinstance(p["on"], bool):
            raise SpecError(f"params: tab must be one of {tabs} and on true or false.")
    elif spec.app == "mail":
        query = p["query"]
        inbox = start["messages"]
        hits = [m for m in inbox if isinstance(query, str) and mail_matches(m, query)]
        if not isinstance(query, str) or not query.strip() or not hits or len(hits) == len(inbox):
            raise SpecError(
                "params.query must be a word that some, but not all, inbox messages contain "
                "(sender or subject), e.g. 'invoice'."
            )
    else:
        files = {n for names in start["folders"].values() for n in names}
        if p["file"] not in files:
            raise SpecError(
                f"params.file {p['file']!r} does not exist; use one of {sorted(files)}."
            )
        if spec.template == "rename_file":
            new = p["new_name"]
            if not isinstance(new, str) or not new.strip() or "/" in new or new in files:
                raise SpecError("params.new_name must be a new file name without '/'.")
        if spec.template == "move_file":
            home = next(f for f, names in start["folders"].items() if p["file"] in names)
            if p["folder"] not in start["folders"] or p["folder"] == home:
                others = sorted(f for f in start["folders"] if f != home)
                raise SpecError(f"params.folder must be another folder: one of {others}.")


def parse_gui_spec(data: str | dict[str, object]) -> GuiSpec:
    """Validate a GUI spec completely; raises SpecError naming the field and the fix."""
    spec = validate_spec(GuiSpec, data, "gui")
    template = TEMPLATES.get(spec.template)
    if template is None or template.app != spec.app:
        own = sorted(t for t, v in TEMPLATES.items() if v.app == spec.app)
        raise SpecError(
            f"template={spec.template!r} is no verifier of the {spec.app} app; use one of {own}."
        )
    if set(spec.params) != set(template.params):
        raise SpecError(
            f"params of {spec.template} must be exactly {list(template.params)}; got "
            f"{sorted(spec.params)}."
        )
    _check_params(spec)
    plan = spec.plan()
    if plan is None or len(plan) <= 1:
        raise SpecError("the goal already holds in the starting state; choose other params.")
    if len(spec.hints) > MAX_HINTS:
        raise SpecError(f"at most {MAX_HINTS} hints; got {len(spec.hints)}.")
    labels = _labels(spec)
    for hint in spec.hints:
        named = [q for q in _QUOTED.findall(hint) if q in labels]
        if not named or len(hint) > MAX_HINT_CHARS:
            raise SpecError(
                f"hint {hint!r} must quote a real element of the {spec.app} app, like "
                f'"{EXAMPLE_HINT[spec.app]}", in at most {MAX_HINT_CHARS} characters.'
            )
    check_step_limit(spec.max_steps, len(plan), "the expert's plan")
    return spec


# The seed tasks: (split, app, template, params).
SEED_TASKS: tuple[tuple[str, AppName, str, dict[str, Any]], ...] = (
    ("id", "settings", "set_values", {"values": {"theme": "Dark"}}),
    ("id", "settings", "set_values", {"values": {"language": "French"}}),
    ("id", "settings", "set_values", {"values": {"email_alerts": False}}),
    ("id", "settings", "set_values", {"values": {"display_name": "Sam Lee"}}),
    ("id", "settings", "set_values", {"values": {"digest": "Never", "push_alerts": True}}),
    (
        "id",
        "settings",
        "set_values",
        {"values": {"two_factor": True, "recovery_email": "sam@backup.org"}},
    ),
    ("id", "settings", "set_values", {"values": {"timeout": "30"}}),
    ("id", "settings", "all_switches", {"tab": "Notifications", "on": False}),
    ("id", "mail", "archive", {"query": "newsletter"}),
    ("id", "mail", "delete", {"query": "promo"}),
    ("id", "mail", "star", {"query": "Alice"}),
    ("id", "mail", "mark_read", {"query": "GitHub"}),
    ("id", "mail", "archive", {"query": "Bob Chen"}),
    ("id", "mail", "delete", {"query": "lottery"}),
    ("id", "mail", "star", {"query": "invoice"}),
    ("id", "mail", "mark_read", {"query": "Carol"}),
    ("ood", "files", "rename_file", {"file": "draft.txt", "new_name": "final.txt"}),
    ("ood", "files", "move_file", {"file": "photo.png", "folder": "Pictures"}),
    ("ood", "files", "delete_file", {"file": "old-notes.md"}),
    ("ood", "files", "rename_file", {"file": "budget.xlsx", "new_name": "budget-2026.xlsx"}),
    ("ood", "files", "move_file", {"file": "report.pdf", "folder": "Archive"}),
    ("ood", "files", "delete_file", {"file": "tmp.log"}),
)


def generate_gui_specs(
    split: Literal["id", "ood"], n: int, seed: int, step_slack: int = 6
) -> list[GuiSpec]:
    """`n` tasks of `split`: the seed tasks in a shuffled order (repeated when n exceeds them),
    each with its own starting-state seed and the first k of the expert's hints, k drawn from
    0..all. max_steps is the expert's plan length plus `step_slack`."""
    rng = random.Random(f"gui-{split}-{seed}")
    base = [t for t in SEED_TASKS if t[0] == split]
    specs: list[GuiSpec] = []
    while len(specs) < n:
        order = list(base)
        rng.shuffle(order)
        for _, app, template, params in order[: n - len(specs)]:
            draft = GuiSpec(
                app=app,
                template=template,
                params=params,
                max_steps=MAX_STEPS,
                seed=rng.randrange(2**31),
            )
            hints = expert_hints(draft)
            plan = draft.plan()
            assert plan is not None
            specs.append(
                parse_gui_spec(
                    {
                        **draft.model_dump(),
                        "hints": hints[: rng.randint(0, len(hints))],
                        "max_steps": min(MAX_STEPS, len(plan) + step_slack),
                    }
                )
            )
    return specs
