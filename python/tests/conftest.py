"""Shared by the Python tests: the repository's fixtures and the CLI whose JSON they match."""

import json
import os
import subprocess
from pathlib import Path
from typing import Mapping, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: needs torch, transformers and transformer_lens (scripts/check_python_torch.sh)")


def cli_path() -> Path:
    path = Path(os.environ.get("HEADPRINT_CLI", ROOT / "target" / "release" / "headprint"))
    if not path.exists():
        raise RuntimeError(f"the CLI is not built at {path}: run `cargo build --release` (or set HEADPRINT_CLI)")
    return path


def cli_environment(env: Optional[Mapping[str, Optional[str]]]) -> dict:
    """This process's environment with `env` laid over it: a name given a string is set, a
    name given None is removed (as a Rust `Command`'s env and env_remove)."""
    merged = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


@pytest.fixture(scope="session")
def cli():
    """Runs `headprint ARGS --json` and returns its JSON; `env` as for `cli_environment`, so a
    test needs no subprocess call of its own. A failing run fails the test with its stderr."""
    path = cli_path()

    def run(*args, env: Optional[Mapping[str, Optional[str]]] = None):
        command = [str(path), *map(str, args), "--json"]
        done = subprocess.run(command, capture_output=True, text=True, env=cli_environment(env))
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} exited with {done.returncode}: {done.stderr.strip()}")
        return json.loads(done.stdout)

    return run
