"""A strip of screenshots from one GUI episode, for people (`rlanything gui-strip`).

The scripted expert plays one seed task in headless Chromium; every step's screenshot, captioned
with the action taken on it, goes into one PNG, left to right.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np

from rlanything_core.base.atomic import atomic_path
from rlanything_core.envs.common import SpecError
from rlanything_core.envs.gui.browser import Browser, BrowserOptions, GuiEpisode
from rlanything_core.envs.gui.tasks import SEED_TASKS, parse_gui_spec


def episode_strip(
    task: int, out: Path, seed: int = 0, options: BrowserOptions | None = None
) -> Path:
    """Play seed task number `task` (0-based, SEED_TASKS order) with the expert and write the
    captioned screenshots of its steps to `out` (PNG). Returns `out`."""
    if not 0 <= task < len(SEED_TASKS):
        raise SpecError(f"--task must be 0..{len(SEED_TASKS) - 1}; got {task}.")
    _, app, template, params = SEED_TASKS[task]
    spec = parse_gui_spec(
        {"app": app, "template": template, "params": params, "max_steps": 40, "seed": seed}
    )
    frames: list[tuple[Path, str]] = []
    with tempfile.TemporaryDirectory() as tmp, Browser(options or BrowserOptions()) as browser:
        episode = GuiEpisode(spec, browser, 0, Path(tmp), Path(tmp))
        while not episode.done:
            step = episode.expert()
            assert step is not None, "the expert never loses the goal"
            action = step[0]
            assert episode.screenshot is not None
            frames.append((Path(tmp) / episode.screenshot, f"step {episode.steps_taken}: {action}"))
            episode.act(f"\\boxed{{{action}}}")
        images = [mpimg.imread(path) for path, _ in frames]
        # crop every frame to the region any of them draws on (pages are mostly white below)
        ink = np.any(np.stack([img[..., :3].min(axis=2) < 0.95 for img in images]), axis=0)
        rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
        box = (slice(0, rows[-1] + 12), slice(0, cols[-1] + 12))
        height, width = box[0].stop, box[1].stop  # shown at their own size: 100 px per inch
        figure, axes = plt.subplots(
            1, len(frames), figsize=(len(frames) * width / 100, height / 100 + 0.9)
        )
        for ax, img, (_, caption) in zip(axes, images, frames, strict=True):
            ax.imshow(img[box])
            ax.set_title(caption, fontsize=11)
            ax.axis("off")
        figure.suptitle(f"{spec.task_text} (expert, {app} app)", fontsize=13)
        figure.tight_layout()
        with atomic_path(out) as target:
            figure.savefig(target, format="png", dpi=100)
        plt.close(figure)
    return out
