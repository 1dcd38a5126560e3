"""Package discovery that pyproject.toml cannot express alone.

The built-in plugin folders (algorithms/, envs/, rewards/) and the Hydra tree (conf/) keep short
folder names in the repository but install under prefixed import names (arena_algorithms, ...),
so no generic top-level module such as `envs` lands in site-packages.
"""

from setuptools import find_packages, setup

MAPPED = {
    "arena_algorithms": "algorithms",
    "arena_envs": "envs",
    "arena_rewards": "rewards",
    "arena_conf": "conf",
}


def _packages() -> list[str]:
    packages = find_packages(include=["arena_core", "arena_core.*", "arena", "arena.*"])
    for name, folder in MAPPED.items():
        packages.append(name)
        packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]
    return packages


setup(packages=_packages())
