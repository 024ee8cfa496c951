"""``trainop.__version__`` is the installed distribution's version, read from the package
metadata (so it follows pyproject.toml, with no second copy to forget)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import tomllib

import trainop

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_package_metadata_and_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert trainop.__version__ == importlib.metadata.version("trainop") == project["version"]


def test_version_follows_the_metadata(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "7.8.9" if name == "trainop" else "0")
    assert trainop._version() == "7.8.9"


def test_version_of_a_tree_never_installed(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert trainop._version() == "0+unknown"
