"""Models and engines: loading, generation, updates, checkpoints, serving, the embedded default
and the tiny test models."""
