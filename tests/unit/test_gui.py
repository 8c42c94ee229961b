"""The GUI environment: apps, tasks and the expert without a browser; then episodes in headless
Chromium (Debian's, driven by Playwright; the test starts the apps and the browser and stops
both)."""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlanything_core.envs.common import SpecError
from rlanything_core.envs.gui.apps import (
    APPS,
    UNREACHABLE,
    Action,
    State,
    distance,
    reached,
    settings_errors,
)
from rlanything_core.envs.gui.browser import Browser, BrowserOptions, GuiEpisode, parse_gui_action
from rlanything_core.envs.gui.demos import (
    gui_judge_demonstrations,
    gui_policy_demonstrations,
    gui_rewrite_demonstrations,
    gui_trajectories,
)
from rlanything_core.envs.gui.tasks import (
    SEED_TASKS,
    GuiSpec,
    expert_hints,
    generate_gui_specs,
    parse_gui_spec,
)
from rlanything_core.envs.interface import make_environment

PNG = b"\x89PNG\r\n\x1a\n"
GUI = make_environment("gui", {}, "id")[0]


def _spec(app: str, template: str, params: dict[str, Any], **extra: Any) -> GuiSpec:
    return parse_gui_spec(
        {"app": app, "template": template, "params": params, "max_steps": 20, **extra}
    )


def _apply(spec: GuiSpec, state: State, action: Action) -> None:
    """Carry out an interface action on the app model the way the page would post it."""
    app = APPS[spec.app]
    page = app.render(state)
    found = re.search(
        rf'data-key="{re.escape(action[1])}" data-op="([^"]*)" data-arg="([^"]*)"', page
    )
    assert found is not None, action
    op, arg = found.groups()
    if action[0] in ("type", "select"):
        value: Any = action[2]
    elif op == "set":  # a switch: the click flips it
        value = not state["draft"][arg]
    else:
        value = None
    app.apply(state, op, arg, value)


# --------------------------------------------------------------------------------------------
# Without a browser


def test_seed_tasks_cover_three_apps_with_id_and_ood_splits() -> None:
    assert len(SEED_TASKS) >= 20
    by_split = {s: {t[1] for t in SEED_TASKS if t[0] == s} for s in ("id", "ood")}
    assert by_split == {"id": {"settings", "mail"}, "ood": {"files"}}
    for split in ("id", "ood"):
        n = sum(t[0] == split for t in SEED_TASKS)
        specs = generate_gui_specs(split, n, seed=0)
        assert {(s.template, json.dumps(s.params)) for s in specs} == {
            (t[2], json.dumps(t[3])) for t in SEED_TASKS if t[0] == split
        }


@pytest.mark.parametrize("index", range(len(SEED_TASKS)))
def test_expert_solves_every_seed_task_and_each_step_makes_progress(index: int) -> None:
    _, app, template, params = SEED_TASKS[index]
    spec = _spec(app, template, params, seed=index)
    initial = spec.initial_state()
    state = copy.deepcopy(initial)
    d = distance(template, state, initial, params)
    assert not reached(template, state, initial, params)
    while True:
        plan = spec.plan(state)
        assert plan is not None and len(plan) == d
        if plan[0] == ("done",):
            break
        _apply(spec, state, plan[0])
        new = distance(template, state, initial, params)
        assert new < d, plan[0]
        d = new
    assert reached(template, state, initial, params)


def test_wrong_irreversible_steps_lose_the_goal_and_settings_validate_on_save() -> None:
    mail = _spec("mail", "archive", {"query": "newsletter"})
    state, initial = mail.initial_state(), mail.initial_state()
    other = next(m["id"] for m in state["messages"] if "Newsletter" not in m["subject"])
    APPS["mail"].apply(state, "pick", str(other), None)
    assert distance("archive", state, initial, mail.params) < UNREACHABLE  # deselect is possible
    APPS["mail"].apply(state, "archive", "", None)
    assert distance("archive", state, initial, mail.params) == UNREACHABLE

    files = _spec("files", "delete_file", {"file": "tmp.log"})
    state = files.initial_state()
    APPS["files"].apply(state, "pick", "draft.txt", None)
    APPS["files"].apply(state, "delete", "", None)
    assert distance("delete_file", state, files.initial_state(), files.params) == UNREACHABLE

    settings = APPS["settings"]
    state = settings.initial(0)
    settings.apply(state, "set", "two_factor", True)
    settings.apply(state, "save", "", None)
    assert state["saved"]["two_factor"] is False
    assert "needs a recovery email" in state["message"]
    assert settings_errors({**state["draft"], "recovery_email": "a@b.org"}) == []


def test_spec_validation_names_the_problem() -> None:
    base = {"app": "mail", "template": "archive", "params": {"query": "invoice"}, "max_steps": 9}
    cases = [
        ({"template": "rename_file"}, "no verifier of the mail app"),
        ({"params": {"query": "zzz"}}, "some, but not all"),
        ({"params": {"q": "invoice"}}, "must be exactly ['query']"),
        ({"hints": ["Click the button."]}, "must quote a real element"),
        ({"hints": ["Click 'Launch rockets'."]}, "must quote a real element"),
        ({"max_steps": 2}, "steps of the expert's plan; raise max_steps"),
        (
            {"app": "files", "template": "rename_file", "params": {"file": "x", "new_name": "y"}},
            "does not exist",
        ),
        (
            {"app": "settings", "template": "set_values", "params": {"values": {"timeout": "3"}}},
            "cannot be saved",
        ),
        (
            {"app": "settings", "template": "set_values", "params": {"values": {"theme": "Light"}}},
            "already holds",
        ),
        ({"colour": "red"}, "Extra inputs"),
    ]
    for change, message in cases:
        with pytest.raises(SpecError, match=re.escape(message)):
            parse_gui_spec({**base, **change})
    spec = parse_gui_spec({**base, "hints": ["Type 'invoice' in 'Search mail'."]})
    assert spec.goal_text.endswith("Hints: Type 'invoice' in 'Search mail'")


def test_rewrites_change_hints_or_template_and_are_validated() -> None:
    spec = _spec("settings", "set_values", {"values": {"email_alerts": False}})
    hints = expert_hints(spec)
    assert hints == [
        "Open the 'Notifications' tab.",
        "Click 'Email alerts'.",
        "Click 'Save'.",
    ]
    easier, error = GUI.parse_proposal(json.dumps({"hints": hints[:1]}), spec)
    assert error is None and easier is not None and easier.hints == tuple(hints[:1])
    switched, error = GUI.parse_proposal(
        '{"template": "all_switches", "params": {"tab": "Privacy", "on": false}}', spec
    )
    assert error is None and switched is not None and switched.template == "all_switches"
    for answer, reason in [
        ('{"template": "archive"}', "no verifier of the settings app"),
        ('{"hints": ["Press the red button."]}', "must quote a real element"),
        ("no JSON here", "no JSON object"),
    ]:
        proposal, error = GUI.parse_proposal(answer, spec)
        assert proposal is None and error is not None and reason in error, (answer, error)


def test_action_parsing() -> None:
    ok = {
        "\\boxed{click(3)}": "click(3)",
        "I pick it \\boxed{click([12])}": "click(12)",
        '\\boxed{type(4, "Sam Lee")}': 'type(4, "Sam Lee")',
        "\\boxed{type(4, 'x')}": 'type(4, "x")',
        '\\boxed{select(2, "Dark")}': 'select(2, "Dark")',
        "\\boxed{scroll(down)}": "scroll(down)",
        "\\boxed{done()}": "done()",
    }
    for answer, canonical in ok.items():
        action, problem = parse_gui_action(answer)
        assert problem is None and str(action) == canonical, answer
    for answer in [
        "click(3)",
        "\\boxed{3}",
        "\\boxed{click(a)}",
        "\\boxed{type(4)}",
        "\\boxed{scroll(left)}",
        "\\boxed{done(1)}",
        "\\boxed{click(3, 4)}",
    ]:
        action, problem = parse_gui_action(answer)
        assert action is None and problem, answer


# --------------------------------------------------------------------------------------------
# In headless Chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(BrowserOptions(action_timeout_ms=3000)) as b:
        yield b


def _expert_answer(episode: GuiEpisode) -> str:
    step = episode.expert()
    assert step is not None
    return f"{step[1]} \\boxed{{{step[0]}}}"


@pytest.mark.parametrize(
    ("app", "template", "params"),
    [
        ("settings", "set_values", {"values": {"two_factor": True, "recovery_email": "a@b.org"}}),
        ("mail", "archive", {"query": "newsletter"}),
        ("files", "move_file", {"file": "photo.png", "folder": "Pictures"}),
    ],
)
def test_expert_episode_in_chromium(
    browser: Browser, tmp_path: Path, app: str, template: str, params: dict[str, Any]
) -> None:
    spec = _spec(app, template, params, seed=7)
    episode = GuiEpisode(spec, browser, 1, tmp_path / "shots", tmp_path)
    assert episode.observation.startswith(f"Page: {APPS[app].title}\n")
    assert re.search(r"- \[1\] \w+", episode.observation)
    shots = []
    while not episode.done:
        shots.append(episode.screenshot)
        move = episode.act(_expert_answer(episode))
        assert move.valid and move.progress, (move.action, move.observation)
    assert episode.success and episode.steps_taken == len(spec.plan() or [])
    assert len(shots) == episode.steps_taken and len(set(shots)) == len(shots)
    for shot in shots:
        assert shot is not None and not Path(shot).is_absolute()
        assert (tmp_path / shot).read_bytes().startswith(PNG)


def test_invalid_actions_are_counted_and_ids_stay_stable(browser: Browser) -> None:
    spec = _spec("settings", "set_values", {"values": {"theme": "Dark"}})
    episode = GuiEpisode(spec, browser, 2, None, None)
    save = re.search(r'\[(\d+)\] button "Save"', episode.observation)
    theme = re.search(r'\[(\d+)\] combobox "Theme"', episode.observation)
    assert save and theme
    problems = {
        "no box at all": "no \\boxed{} action",
        "\\boxed{click(99)}": "no element [99]",
        f"\\boxed{{type({save.group(1)}, 'x')}}": "is not a text box",
        f"\\boxed{{select({theme.group(1)}, 'Purple')}}": "has no option 'Purple'",
        f"\\boxed{{select({save.group(1)}, 'Dark')}}": "is not a drop-down",
    }
    for answer, problem in problems.items():
        move = episode.act(answer)
        assert not move.valid and not move.progress and not move.done
        assert problem in move.observation, (answer, move.observation)
    assert episode.steps_taken == len(problems)
    # a redraw keeps every id: open another tab and come back
    tabs = dict(re.findall(r'\[(\d+)\] tab "(\w+)"', episode.observation))
    by_name = {v: k for k, v in tabs.items()}
    episode.act(f"\\boxed{{click({by_name['Privacy']})}}")
    assert "Theme" not in episode.observation
    episode.act(f"\\boxed{{click({by_name['General']})}}")
    assert f'[{save.group(1)}] button "Save"' in episode.observation
    assert f'[{theme.group(1)}] combobox "Theme"' in episode.observation
    move = episode.act(f"\\boxed{{select({theme.group(1)}, 'Dark')}}")
    assert move.valid and move.progress
    # the verifier reads the JSON endpoint: the draft changed, the saved settings did not
    with urllib.request.urlopen(f"{episode.url}api/state") as response:
        state = json.loads(response.read())["state"]
    assert state["draft"]["theme"] == "Dark" and state["saved"]["theme"] == "Light"
    move = episode.act("\\boxed{done()}")  # too early: the episode ends and fails
    assert move.done and move.valid and not move.progress and not episode.success


def test_each_episode_gets_a_fresh_profile(browser: Browser) -> None:
    spec = _spec("files", "delete_file", {"file": "tmp.log"})
    first = GuiEpisode(spec, browser, 0, None, None)
    first.page.evaluate("localStorage.setItem('seen', '1'); document.cookie = 'c=1; path=/'")
    second = GuiEpisode(spec, browser, 0, None, None)
    assert second.page.evaluate("localStorage.getItem('seen')") is None
    assert second.page.evaluate("document.cookie") == ""
    assert first.page.context is not second.page.context
    first.close()
    second.close()


def test_noisy_expert_demonstrations_in_chromium(browser: Browser) -> None:
    """Warm-start data: the expert's answers on pages of noisy episodes (an episode whose random
    click lost the goal ends there), judge pairs labelled by progress, hint rewrites."""
    specs = generate_gui_specs("id", 4, seed=3)
    steps = gui_trajectories(specs, 0.6, 1, seed=0, options=BrowserOptions(), browser=browser)
    assert steps and {s.task_id for s in steps} <= {f"demo-{n:03d}" for n in range(4)}
    policy = gui_policy_demonstrations(steps, explain=False)
    assert all(re.fullmatch(r"\\boxed\{\w+\(.*\)\}", d.answer) for d in policy)
    assert all("Page: " in d.prompt[-1]["content"] for d in policy)
    judge = gui_judge_demonstrations(steps, label_noise=0.0, seed=0)
    verdicts = [d.answer.endswith("\\boxed{1}") for d in judge]
    assert verdicts == [s.progress for s in steps] and not all(verdicts)
    rewrites = gui_rewrite_demonstrations(
        generate_gui_specs("id", 16, seed=0), GUI.rewrite_messages, seed=0
    )
    assert rewrites
    for demo in rewrites:
        assert set(json.loads(demo.answer)) == {"hints"}
