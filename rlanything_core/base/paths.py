"""Where rlanything keeps files that are not a run's: the cache of built and converted models and
generated games, and the user's data."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where converted models are cached: $RLANYTHING_CACHE, else ~/.cache/rlanything."""
    return Path(os.environ.get("RLANYTHING_CACHE", Path.home() / ".cache" / "rlanything"))


def data_root() -> Path:
    """Where rlanything keeps data of the user's that is not a run's (MLflow artifacts of a local
    store): $RLANYTHING_DATA, else $XDG_DATA_HOME/rlanything, else ~/.local/share/rlanything."""
    if "RLANYTHING_DATA" in os.environ:
        return Path(os.environ["RLANYTHING_DATA"])
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "rlanything"
