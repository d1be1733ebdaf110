"""``headprint.sweep`` against a loopback Hub imitation (hub_imitation.py): its table is the
CLI's ``headprint sweep`` files' rows, a repeated checkpoint is fetched and computed once and
marked ``same_weights_as``, ``out=`` writes the CLI's files byte for byte, a rerun fetches no
weight byte, and the units run the same on a process pool and on a Dask cluster."""

import os
import subprocess
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import headprint
from headprint import _headprint

from conftest import FIXTURES, cli_environment, cli_path
from hub_imitation import HubImitation, with_zeroed_tensor

REPO = "test-org/sweep"
REVISIONS = ["step1", "step2", "step3", "step999"]


def gpt2_files(zeroed=None) -> dict:
    folder = FIXTURES / "gpt2"
    files = {name: (folder / name).read_bytes() for name in ("config.json", "tokenizer.json", "model.safetensors")}
    if zeroed:
        files["model.safetensors"] = with_zeroed_tensor(files["model.safetensors"], zeroed)
    return files


@pytest.fixture(scope="module")
def hub():
    """step1 and step2 serve the same bytes under two commits (as Pythia's later branches do),
    step3 other weights; step999 is no branch."""
    imitation = HubImitation()
    commits = {
        "step1": imitation.add_commit(REPO, "step1", gpt2_files()),
        "step2": imitation.add_commit(REPO, "step2", gpt2_files()),
        "step3": imitation.add_commit(REPO, "step3", gpt2_files("transformer.h.0.attn.c_attn.bias")),
    }
    assert commits["step1"] != commits["step2"]
    imitation.commits = commits
    yield imitation
    imitation.close()


def use(monkeypatch, hub, cache: Path) -> None:
    """This process (and the processes it starts from now on) opens links at the imitation,
    with `cache` as headprint's cache and no Hugging Face cache."""
    for name, value in {"HF_ENDPOINT": hub.url, "HEADPRINT_CACHE": str(cache), "HF_HUB_CACHE": str(cache / "hf")}.items():
        monkeypatch.setenv(name, value)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def cli_sweep(hub, home: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"HF_ENDPOINT": hub.url, "HEADPRINT_CACHE": str(home / "cache"), "HF_HUB_CACHE": str(home / "hf"),
           "HF_TOKEN": None, "HUGGING_FACE_HUB_TOKEN": None, "HF_HUB_OFFLINE": None,
           "SLURM_ARRAY_TASK_ID": None, "SLURM_ARRAY_TASK_COUNT": None, "SLURM_ARRAY_TASK_MIN": None}
    command = [str(cli_path()), "sweep", f"hf:{REPO}", "--revisions", ",".join(REVISIONS), "--out", str(out),
               "--backend", "cpu", *args]
    return subprocess.run(command, capture_output=True, text=True, env=cli_environment(env))


@pytest.fixture(scope="module")
def cli_files(hub, tmp_path_factory):
    """The CLI's sweep of the four revisions, with and without the probe: {probe: folder}."""
    home = tmp_path_factory.mktemp("cli-sweep")
    folders = {}
    for probe, args in ((False, ()), (True, ("--probe", "--len", "10", "--sequences", "2"))):
        out = home / f"out-{probe}"
        done = cli_sweep(hub, home, out, *args)
        assert done.returncode == 1 and "1 of 4 units failed" in done.stderr, done.stdout + done.stderr
        folders[probe] = out
    return folders


def cli_frame(folder: Path) -> pd.DataFrame:
    """The CLI's files in unit order (their names sort as the revisions do here)."""
    names = sorted(os.listdir(folder))
    assert names == [f"test-org--sweep@{r}.parquet" for r in REVISIONS], names
    return headprint.read_sweep(folder)


@pytest.mark.parametrize("probe", [False, True])
def test_the_table_is_the_cli_sweeps_rows_and_a_repeated_checkpoint_is_computed_once(
    hub, cli_files, tmp_path, monkeypatch, probe
):
    use(monkeypatch, hub, tmp_path / "cache")
    options = dict(length=10, sequences=2) if probe else {}
    hub.clear_log()
    frame = headprint.sweep(f"hf:{REPO}", revisions=REVISIONS, probe=probe, backend="cpu", **options)
    expected = cli_frame(cli_files[probe])
    assert list(frame.columns) == [name for name, _ in _headprint.sweep_columns_of(probe)]
    pd.testing.assert_frame_equal(frame, expected)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        # And as pandas reads the CLI's files itself.
        read = pd.read_parquet(cli_files[probe])
        pd.testing.assert_frame_equal(frame, read[list(frame.columns)], check_dtype=False)

    commits = hub.commits
    assert hub.weight_requests(commits["step2"]) == 0, "the repeated checkpoint is never fetched"
    assert hub.weight_bytes(commits["step1"]) > 0 and hub.weight_bytes(commits["step3"]) > 0
    step2 = frame[frame.revision == "step2"]
    assert (step2.same_weights_as == "step1").all() and (step2.commit == commits["step2"]).all()
    step1 = frame[frame.revision == "step1"]
    np.testing.assert_array_equal(step1.qk_imaginary_fraction.to_numpy(), step2.qk_imaginary_fraction.to_numpy())
    assert frame[frame.revision != "step2"].same_weights_as.isna().all()
    failed = frame[frame.revision == "step999"]
    assert len(failed) == 1 and f"hf:{REPO}@step999" in failed.error.iloc[0]
    assert frame.attrs["outcomes"] == {
        f"hf:{REPO}@step1": "computed",
        f"hf:{REPO}@step2": "same weights",
        f"hf:{REPO}@step3": "computed",
        f"hf:{REPO}@step999": "failed",
    }


def test_out_writes_the_cli_files_and_a_rerun_fetches_no_weight_byte(hub, cli_files, tmp_path, monkeypatch):
    use(monkeypatch, hub, tmp_path / "cache")
    out = tmp_path / "out"
    first = headprint.sweep(f"hf:{REPO}", revisions=REVISIONS, out=out, backend="cpu")
    assert sorted(os.listdir(out)) == sorted(os.listdir(cli_files[False])), "one file per unit, no temporary left"
    for name in os.listdir(out):
        assert (out / name).read_bytes() == (cli_files[False] / name).read_bytes(), f"{name}: the CLI's file"

    # A rerun with an empty cache, as on another node: only the API is asked.
    use(monkeypatch, hub, tmp_path / "cache-2")
    hub.clear_log()
    again = headprint.sweep(f"hf:{REPO}", revisions=REVISIONS, out=out, backend="cpu")
    assert hub.weight_bytes() == 0 and all(e.path.startswith("/api/models/") for e in hub.log()), hub.log()
    assert again.attrs["outcomes"] == {**{f"hf:{REPO}@{r}": "skipped" for r in REVISIONS[:3]},
                                       f"hf:{REPO}@step999": "failed"}
    pd.testing.assert_frame_equal(again, first)

    # And the CLI, rerun on Python's files, finds them all written.
    done = cli_sweep(hub, tmp_path / "cli-home", out)
    assert "3 already written" in done.stdout, done.stdout + done.stderr


def test_a_process_pool_gives_the_same_table(hub, cli_files, tmp_path, monkeypatch):
    use(monkeypatch, hub, tmp_path / "cache")
    hub.clear_log()
    # Spawned, not forked: a forked child of a process whose threads (rayon's, the imitation's)
    # are running would inherit their locks but not the threads.
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        frame = headprint.sweep(f"hf:{REPO}", revisions=REVISIONS, backend="cpu", executor=pool, out=tmp_path / "out")
    pd.testing.assert_frame_equal(frame, cli_frame(cli_files[False]))
    assert hub.weight_requests(hub.commits["step2"]) == 0
    for name in os.listdir(tmp_path / "out"):
        assert (tmp_path / "out" / name).read_bytes() == (cli_files[False] / name).read_bytes(), name


def test_a_dask_cluster_gives_the_same_table(hub, cli_files, tmp_path, monkeypatch):
    distributed = pytest.importorskip(
        "distributed", reason="the Dask test needs the `distributed` package (scripts/python_tests.sh installs it)"
    )
    use(monkeypatch, hub, tmp_path / "cache")
    hub.clear_log()
    # The workers are processes of their own, started now: they inherit the variables above.
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            frame = headprint.sweep(
                f"hf:{REPO}", revisions=REVISIONS, probe=True, length=10, sequences=2, backend="cpu",
                executor=client.get_executor(), out=tmp_path / "out",
            )
            workers = client.run(os.getpid)
    assert len(set(workers.values()) - {os.getpid()}) == 2, "two worker processes"
    pd.testing.assert_frame_equal(frame, cli_frame(cli_files[True]))
    assert hub.weight_requests(hub.commits["step2"]) == 0, "the repeated checkpoint is never fetched"
    for name in os.listdir(tmp_path / "out"):
        assert (tmp_path / "out" / name).read_bytes() == (cli_files[True] / name).read_bytes(), name


def test_bad_arguments_raise_value_error_in_one_line(tmp_path):
    cases = [
        (dict(backend="tpu"), "backend"),
        (dict(revisions=["a"], steps=[1]), "not both"),
        (dict(steps=["x"]), "whole numbers"),
        (dict(probe=True, sequences=0), "sequences"),
    ]
    for kwargs, said in cases:
        with pytest.raises(ValueError, match=said) as raised:
            headprint.sweep(f"hf:{REPO}", **kwargs)
        assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="without @REVISION"):
        headprint.sweep(f"hf:{REPO}@main", steps=[1])
    with pytest.raises(ValueError, match="named twice"):
        headprint.sweep([f"hf:{REPO}@main", f"hf:{REPO}"])
    with pytest.raises(ValueError, match="at least one model"):
        headprint.sweep([])
