"""The package's face: its version is the crate's, and its namespace shows the public names
only, not the modules and typing names its code imports."""

import importlib.metadata
import re
import types

import headprint
from conftest import ROOT


def test_the_version_is_the_crates():
    cargo = (ROOT / "crates" / "python" / "Cargo.toml").read_text()
    crate = re.search(r'^version = "([^"]+)"', cargo, re.MULTILINE).group(1)
    assert headprint.__version__ == crate
    assert headprint.__version__ == importlib.metadata.version("headprint")
    # pyproject.toml leaves the version to the crate rather than writing a second copy.
    pyproject = (ROOT / "python" / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^dynamic = \[.*"version".*\]', project, re.MULTILINE)
    assert not re.search(r"^version\s*=", project, re.MULTILINE)


def test_all_names_the_public_names_and_nothing_else():
    public = {name for name in dir(headprint) if not name.startswith("_")}
    assert public == set(headprint.__all__)
    for name in headprint.__all__:
        assert not isinstance(getattr(headprint, name), types.ModuleType), name
    for helper in ("np", "pd", "json", "warnings", "Any", "Optional", "Union", "Sequence", "as_model"):
        assert helper not in public
    star: dict = {}
    exec("from headprint import *", star)
    assert set(star) - {"__builtins__"} == set(headprint.__all__)


def test_the_public_names_are_named_as_headprints():
    for name in ("fingerprint", "load", "NetworkNote", "FingerprintFrame"):
        assert getattr(headprint, name).__module__ == "headprint"
    assert headprint.Error.__module__ == "headprint" and headprint.Model.__module__ == "headprint"
