"""The one thing pyproject.toml cannot say: the top-level flows/ folder installs as the package
`dreamshard_flows` (a name that cannot clash with another project's `flows` in site-packages).
Everything else about the package is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["dreamshard", "dreamshard.*"]), "dreamshard_flows"],
    package_dir={"dreamshard_flows": "flows"},
)
