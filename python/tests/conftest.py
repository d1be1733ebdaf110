"""Shared by the Python tests: the repository's fixtures and the CLI whose JSON they match."""

import json
import os
import subprocess
from pathlib import Path

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


@pytest.fixture(scope="session")
def cli():
    """Runs `headprint ARGS --json` and returns its JSON."""
    path = cli_path()

    def run(*args):
        done = subprocess.run([str(path), *map(str, args), "--json"], capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    return run
