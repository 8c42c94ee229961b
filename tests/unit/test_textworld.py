"""The TextWorld adapter: games generated locally by `textworld`, cached by spec hash, validated by
playing their walkthrough, and played through our episode protocol."""

from __future__ import annotations

import fcntl
import itertools
import json
import multiprocessing
import time
from pathlib import Path

import pandas as pd
import pytest

from rlanything_core.envs import demos
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.interface import make_environment
from rlanything_core.envs.text import TextAgentEpisode
from rlanything_core.envs.textworld import game as tw

ENV = make_environment("textworld", {}, "id")[0]

SPEC = {"world_size": 2, "nb_objects": 4, "quest_length": 2, "max_steps": 10, "seed": 3}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One game cache for this module (games take about a second each to generate)."""
    root = tmp_path_factory.getbasetemp() / "textworld-games"
    monkeypatch.setenv(tw.CACHE_ENV, str(root))
    return root


def test_spec_generates_a_cached_game_won_by_its_walkthrough(_cache: Path) -> None:
    spec = tw.parse_textworld_spec(SPEC)
    assert ENV.parse_spec(spec.to_json()) == spec
    game = tw.game_of(spec)
    assert game.path.is_file() and game.path.parent == _cache / tw.spec_hash(spec)
    assert 1 <= len(game.walkthrough) <= spec.max_steps
    assert spec.goal_text == game.objective and game.objective
    meta = json.loads((game.path.parent / "meta.json").read_text())
    assert meta["spec"] == spec.generation and meta["walkthrough"] == list(game.walkthrough)
    # The step limit is not part of the game: same cache entry.
    longer = tw.parse_textworld_spec({**SPEC, "max_steps": 20})
    assert tw.spec_hash(longer) == tw.spec_hash(spec)
    assert tw.spec_hash(tw.parse_textworld_spec({**SPEC, "seed": 4})) != tw.spec_hash(spec)


def test_a_cached_game_is_not_generated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    tw.parse_textworld_spec(SPEC)
    calls: list[object] = []
    monkeypatch.setattr(tw, "_generate", lambda *a: calls.append(a))
    tw._load.cache_clear()
    assert tw.game_of(tw.parse_textworld_spec(SPEC)).walkthrough
    assert calls == []


def test_generation_is_deterministic_across_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two empty caches generate byte-identical game files from one spec (so every machine, and
    a resumed run, plays the same game)."""
    files = []
    for name in ("a", "b"):
        monkeypatch.setenv(tw.CACHE_ENV, str(tmp_path / name))
        files.append(tw.game_of(tw.parse_textworld_spec(SPEC)).path.read_bytes())
    assert files[0] == files[1]


def test_interrupted_generation_leaves_no_cache_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tw.CACHE_ENV, str(tmp_path))

    def crash(path: Path, walkthrough: list[str]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tw, "_verify", crash)
    with pytest.raises(KeyboardInterrupt):
        tw.game_of(tw.TextWorldSpec(**SPEC))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"world_size": 0}, "world_size"),
        ({"quest_length": 99}, "quest_length"),
        ({"colour": "red"}, "colour"),
        ({"max_steps": 1}, "raise max_steps to at least"),
    ],
)
def test_bad_specs_name_the_problem(change: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ENV.parse_spec({**SPEC, **change})


def test_generator_failure_is_a_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("no quest of that length")

    monkeypatch.setattr("textworld.generator.make_game", broken)
    with pytest.raises(SpecError, match=r"could not generate.*no quest of that length"):
        tw.game_of(tw.TextWorldSpec(**{**SPEC, "seed": 77}))


def test_walkthrough_wins_with_every_step_labelled_progress() -> None:
    for split in ("id", "ood"):
        for spec in tw.generate_textworld_specs(split, 2, seed=5, step_slack=2):
            assert spec.max_steps == len(tw.game_of(spec).walkthrough) + 2
            episode = tw.TextWorldEpisode(spec)
            labels = []
            while not episode.done:
                result = episode.step(episode.actions.index(episode.expert_action()))
                labels.append(result.progress)
            assert episode.success and all(labels), (split, spec)
            assert len(labels) == len(tw.game_of(spec).walkthrough)


def test_drafts_are_what_generation_tries_in_order_so_a_cache_can_be_filled_ahead() -> None:
    specs = tw.generate_textworld_specs("id", 3, seed=4)
    drafts = list(itertools.islice(tw.textworld_drafts("id", 4), 4 * 3 + 8))
    # each kept spec is a draft with its step limit cut to the walkthrough; kept in draft order
    positions = [drafts.index(s.model_copy(update={"max_steps": tw.MAX_STEPS})) for s in specs]
    assert positions == sorted(positions) and len(set(positions)) == 3
    # generation cached every draft it kept: a filler that walks the drafts meets the same games
    assert all((tw.cache_root() / tw.spec_hash(d) / "meta.json").is_file() for d in specs)
    assert list(itertools.islice(tw.textworld_drafts("id", 4), 5)) == drafts[:5]
    assert next(tw.textworld_drafts("id", 5)) != drafts[0]
    assert next(tw.textworld_drafts("ood", 4)).world_size >= 5


def test_processes_that_need_the_same_specs_split_their_games(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes generating the same specs at once make each game once between them, not
    once each, and get the same specs as one process alone."""
    monkeypatch.setenv(tw.CACHE_ENV, str(tmp_path / "cache"))
    made = tmp_path / "made.txt"
    generate = tw._generate

    def logged(spec: tw.TextWorldSpec, out: Path) -> tuple[str, list[str]]:
        start = time.monotonic()
        time.sleep(0.5)  # long enough for the other process to come to the same draft
        result = generate(spec, out)
        with open(made, "a") as log:
            log.write(f"{spec.seed} {start} {time.monotonic()}\n")
        return result

    monkeypatch.setattr(tw, "_generate", logged)
    fork = multiprocessing.get_context("fork")
    with fork.Pool(2) as pool:
        both = pool.starmap(tw.generate_textworld_specs, [("id", 6, 8), ("id", 6, 8)])
    rows = [line.split() for line in made.read_text().splitlines()]
    seeds = [row[0] for row in rows]
    spans = sorted((float(row[1]), float(row[2])) for row in rows)
    assert both[0] == both[1] and len(both[0]) == 6
    assert len(seeds) == len(set(seeds)) >= 6  # no game made twice
    # and not one after another: the second process made other games meanwhile
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))
    assert sorted(set(seeds)) == sorted(str(s.seed) for s in both[0])  # all drafts were valid
    monkeypatch.setenv(tw.CACHE_ENV, str(tmp_path / "alone"))
    monkeypatch.setattr(tw, "_generate", generate)
    assert tw.generate_textworld_specs("id", 6, 8) == both[0]
    assert not list((tmp_path / "cache").glob(".*"))  # no lock or temporary directory left


def test_a_game_another_process_is_making_is_not_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tw.CACHE_ENV, str(tmp_path))
    spec = tw.TextWorldSpec(**SPEC)
    with open(tmp_path / f".{tw.spec_hash(spec)}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert tw.claim_game(spec) is None
    assert tw.claim_game(spec) == tw.game_of(spec)


def test_splits_differ_in_size() -> None:
    ids = tw.generate_textworld_specs("id", 3, seed=1)
    oods = tw.generate_textworld_specs("ood", 2, seed=1)
    assert max(s.world_size for s in ids) < min(s.world_size for s in oods)
    assert max(s.quest_length for s in ids) < min(s.quest_length for s in oods)


def test_detours_and_invalid_answers_are_not_progress_and_the_episode_goes_on() -> None:
    spec = tw.parse_textworld_spec(SPEC)
    agent = TextAgentEpisode(ENV.game(spec), history_steps=1)
    assert "Admissible actions:" in agent.messages()[1]["content"]
    move = agent.act("I am not sure.")
    assert not move.valid and move.action is None and not move.progress and not agent.done
    look = agent.episode.actions.index("look") + 1
    move = agent.act(f"\\boxed{{{look}}}")
    assert move.valid and move.action == "look" and not move.progress
    assert agent.steps_taken == 2
    while not agent.done:
        expert = agent.episode.actions.index(agent.episode.expert_action()) + 1
        assert agent.act(f"\\boxed{{{expert}}}").progress
    assert agent.success


def test_step_limit_ends_a_lost_episode() -> None:
    spec = tw.parse_textworld_spec(
        {**SPEC, "max_steps": len(tw.game_of(tw.TextWorldSpec(**SPEC)).walkthrough)}
    )
    episode = tw.TextWorldEpisode(spec)
    while not episode.done:
        episode.step(None)
    assert not episode.success and episode.steps_taken == spec.max_steps


def test_rewrites_are_validated_by_generating_the_game() -> None:
    parent = tw.parse_textworld_spec(SPEC)
    prompt = ENV.rewrite_messages(parent, "harder", 0.9, "too easy")
    assert "quest_length" in prompt[1]["content"] and "TextWorld" in prompt[0]["content"]
    child, why = ENV.parse_proposal('{"nb_objects": 6}', parent)
    assert why is None and isinstance(child, tw.TextWorldSpec) and child.nb_objects == 6
    assert tw.game_of(child).path.is_file()
    bad, why = ENV.parse_proposal('{"quest_length": 8, "max_steps": 1}', parent)
    assert bad is None and why is not None and "max_steps" in why


def test_warm_start_demonstrations_follow_the_winning_policy() -> None:
    specs = tw.generate_textworld_specs("id", 2, seed=2, step_slack=2)
    policy = demos.policy_demonstrations(specs, ENV.game, noise=0.0, history_steps=1, seed=0)
    assert len(policy) == sum(len(tw.game_of(s).walkthrough) for s in specs)
    first = tw.TextWorldEpisode(specs[0])
    number = first.actions.index(first.expert_action()) + 1
    assert policy[0].answer.endswith(f"\\boxed{{{number}}}")
    judge = demos.judge_demonstrations(
        specs, ENV.game, noise=0.5, label_noise=0.0, history_steps=1, seed=0
    )
    answers = {d.answer for d in judge}
    assert answers == {"Progress. \\boxed{1}", "No progress. \\boxed{-1}"}
    rewrites = demos.rewrite_demonstrations(
        specs * 3,
        ENV.rewrite_knobs,
        critique=lambda spec, accuracy, judged: ENV.critique_messages(
            spec, accuracy, judged, pd.DataFrame(), "reward_model", len(judged)
        ),
        rewrite=ENV.rewrite_messages,
        parse=ENV.demo_spec,
        adjust=ENV.adjust_rewrite,
        seed=0,
    )
    assert rewrites
    rewritten = {d.task_id: json.loads(d.answer) for d in rewrites[1::2]}  # after each critique
    for n, fields in rewritten.items():
        assert set(fields) <= {"nb_objects", "world_size", "quest_length", "max_steps"}
        # checked without generating the game, yet a valid game in full
        ENV.parse_spec({**(specs * 3)[int(n.split("-")[1])].model_dump(), **fields})


def test_a_tiny_tokenizer_trained_on_textworld_spells_its_prompts_shorter() -> None:
    """ "tiny-<w>x<l>-textworld": the tokenizer also learns TextWorld's games, so a held-out
    game's opening (goal, room, commands) takes far fewer tokens than with household's."""
    from rlanything_core.models.default import ModelNotFoundError
    from rlanything_core.models.loading import resolve_source
    from rlanything_core.models.tiny import build_tiny_tokenizer

    household, textworld = build_tiny_tokenizer(512), build_tiny_tokenizer(1024, "textworld")
    for spec in tw.generate_textworld_specs("id", 3, seed=1000):
        episode = tw.TextWorldEpisode(spec)
        text = "\n".join([episode.goal_text, episode.observation, *episode.actions])
        short, long = len(textworld(text)["input_ids"]), len(household(text)["input_ids"])
        assert short < 0.7 * long, (short, long)
        assert textworld.decode(textworld(text)["input_ids"]) == text
    with pytest.raises(ModelNotFoundError, match="vocabulary in"):
        resolve_source("tiny-128x4-klingon:0")
