"""Package layout (the rest of the metadata is in pyproject.toml).

The repository keeps its folders `flows/` and `tasks/`; they install as `rlanything_flows` and
`rlanything_tasks`, so installing rlanything adds only top-level modules named `rlanything…`.
Every package under `rlanything_core/` is found, so a new environment package needs no line here.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rlanything_core*"]), "rlanything_flows", "rlanything_tasks"],
    package_dir={"rlanything_flows": "flows", "rlanything_tasks": "tasks"},
)
