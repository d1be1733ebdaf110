"""``headprint.sweep``: many models and checkpoints as one table, the CLI's ``headprint sweep``
from Python. The units are planned here, each unit's commit and weights hash asked of the Hub
before any weight byte; one task per distinct weights runs wherever ``executor`` puts it (a
Dask cluster, submitit, a process pool), and a unit whose weights another unit has gets that
unit's rows with ``same_weights_as`` set. With ``out``, every unit's Parquet file is the CLI's."""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd

from . import _headprint

def _task(spec: dict) -> dict:
    """One unit opened, measured and (with ``out``) written, in whatever process runs it:
    {"outcome", "note", "rows"}, the rows a dict of column name to list. Module-level, so that
    every executor can pickle it by name."""
    return _headprint.sweep_task(**spec)


def _names(value: Union[None, str, Iterable[Any]], what: str) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",")]
    try:
        return list(value)
    except TypeError:
        raise ValueError(f"{what} must be a list (or a comma-separated string), not {type(value).__name__}") from None


def _steps(value: Any) -> list:
    steps = []
    for step in _names(value, "steps"):
        if isinstance(step, bool) or not isinstance(step, (int, np.integer, str)):
            raise ValueError(f"steps must be whole numbers, not {step!r}")
        try:
            number = int(step)
        except ValueError:
            raise ValueError(f"steps must be whole numbers, not {step!r}") from None
        if number < 0:
            raise ValueError(f"steps must be whole numbers from 0, not {step!r}")
        steps.append(number)
    return steps


def _column(values: list, kind: str):
    """A column as pandas reads the CLI's Parquet file with pyarrow: numbers as float64 (NaN
    for null), whole numbers as int64 unless one is null, flags as bool unless one is null
    (else objects: True, False, None), text as pandas' default string dtype."""
    if kind == "number":
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if kind == "count":
        if any(v is None for v in values):
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        return np.array(values, dtype=np.int64)
    if kind == "flag" and values and not any(v is None for v in values):
        return np.array(values, dtype=bool)
    if kind == "text" and _strings():
        # pandas 3 reads text as its string dtype (null as NaN); earlier ones as objects.
        return pd.array(values, dtype="str")
    return np.array(values, dtype=object)


def _strings() -> bool:
    """Whether pandas infers its string dtype for text: always from pandas 3, by option before."""
    if int(pd.__version__.split(".")[0]) >= 3:
        return True
    try:
        return bool(pd.get_option("future.infer_string"))
    except (KeyError, pd.errors.OptionError):
        return False


def _frame(columns: Sequence[tuple], parts: Sequence[dict]) -> pd.DataFrame:
    data = {}
    for name, kind in columns:
        values: list = []
        for rows in parts:
            values.extend(rows[name])
        data[name] = _column(values, kind)
    return pd.DataFrame(data)


def read_sweep(path: Union[str, os.PathLike]) -> pd.DataFrame:
    """A sweep's file, or every ``*.parquet`` file of a sweep's folder (in name order), as one
    table with the columns and types ``sweep`` returns; needs no pyarrow."""
    path = os.fspath(path)
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, name) for name in os.listdir(path) if name.endswith(".parquet") and not name.startswith(".")
    )
    if not files:
        raise ValueError(f"{path}: no sweep files (*.parquet) there")
    parts = [_headprint.read_sweep_file(file) for file in files]
    return _frame(_headprint.sweep_columns_of("induction_score" in parts[0]), parts)


def sweep(
    links: Union[str, Iterable[str]],
    *,
    revisions: Union[None, str, Iterable[str]] = None,
    steps: Union[None, str, Iterable[int]] = None,
    probe: bool = False,
    out: Optional[Union[str, os.PathLike]] = None,
    executor: Optional[Executor] = None,
    raw: bool = False,
    backend: str = "auto",
    length: int = _headprint.DEFAULT_LENGTH,
    sequences: int = _headprint.DEFAULT_SEQUENCES,
    seed: int = _headprint.DEFAULT_SEED,
    bos: bool = True,
) -> pd.DataFrame:
    """Many models and checkpoints, one unit each, as one table: the rows and columns of the
    CLI's ``headprint sweep`` (docs/sweeps.md), one row per head of every unit, in unit order.

    ``links``: Hub links (``hf:ORG/NAME[@REV]``), http(s) folders and local checkpoints.
    ``revisions`` (``["step0", "main"]``) or ``steps`` (``[0, 1000]``, the branches
    ``step0``, ``step1000``) expand every Hub link without ``@REV`` into one unit per revision.
    ``probe``: the induction probe's scores too, on ``sequences`` random sequences of
    ``length`` tokens from ``seed`` (with the model's BOS unless ``bos=False``), as
    ``headprint.induction``. ``raw`` and ``backend`` as for ``headprint.fingerprint``.

    Before any weight byte, the Hub's API says each unit's commit and weights hash: a unit whose
    weights equal an earlier unit's is not measured again; its rows are that unit's, with
    ``same_weights_as`` naming it. ``executor``: any ``concurrent.futures.Executor`` (a Dask
    ``client.get_executor()``, submitit's, a ``ProcessPoolExecutor``) gets one task per distinct
    weights, which opens its own model; without one, the units run here one after another.
    ``out``: a folder where every unit's Parquet file is written as the CLI writes it (by the
    task that measured it); units already written there for the same commit and settings are
    skipped without fetching a weight byte, so a rerun finishes what is missing.

    A unit that fails (a missing branch, a bad file) has one row with its reason in ``error``;
    ``df.attrs["outcomes"]`` says how each unit ended (computed, skipped, same weights, failed).
    Bad arguments raise ``ValueError``."""
    links = [links] if isinstance(links, (str, os.PathLike)) else _names(links, "links")
    links = [os.fspath(link) for link in links]
    if executor is not None and not isinstance(executor, Executor) and not hasattr(executor, "submit"):
        raise ValueError(f"executor must be a concurrent.futures.Executor, not {type(executor).__name__}")
    revisions = [str(r) for r in _names(revisions, "revisions")]
    steps = _steps(steps)
    if revisions and steps:
        raise ValueError("give revisions or steps, not both")
    probe_args = None
    if probe:
        for name, value, least in (("length", length, 1), ("sequences", sequences, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{name} must be a whole number from {least}, not {value!r}")
        probe_args = (int(length), int(sequences), int(seed), bool(bos))
    folder = None if out is None else os.path.abspath(os.fspath(out))
    plan = _headprint.sweep_plan(links, revisions, steps, folder, bool(raw), probe_args, backend)
    units = plan.units()

    done: list = [None] * len(units)
    specs: dict = {}
    # Units waiting for the unit that measures their weights, by weights hash, in order.
    waiting: dict = {}
    queue: list = []
    for index, (model, revision, link) in enumerate(units):
        prepared = plan.prepare(index)
        if "outcome" in prepared:
            done[index] = prepared
            continue
        weights = prepared["weights_sha256"]
        specs[index] = dict(
            model=model, revision=revision, unit_link=link, link=prepared["link"], commit=prepared["commit"],
            weights_sha256=weights, out=folder, raw=bool(raw), probe=probe_args, backend=backend,
        )
        if weights is not None and weights in waiting:
            waiting[weights].append(index)
            continue
        if weights is not None:
            waiting[weights] = []
        queue.append(index)

    def settle(index: int, result: dict) -> list:
        """A measured unit's result in place; the units now done or to run because of it."""
        done[index] = result
        spec = specs[index]
        followers = waiting.get(spec["weights_sha256"], []) if spec["weights_sha256"] is not None else []
        if result["outcome"] != "computed":
            # As the CLI: when the unit measuring some weights fails, the next unit with those
            # weights is measured itself.
            return [followers.pop(0)] if followers else []
        plan.remember(index, spec["commit"], spec["weights_sha256"], result["rows"])
        for follower in followers:
            done[follower] = plan.prepare(follower)
        followers.clear()
        return []

    if executor is None:
        while queue:
            index = queue.pop(0)
            queue[:0] = settle(index, _task(specs[index]))
    else:
        running = {executor.submit(_task, specs[index]): index for index in queue}
        while running:
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                index = running.pop(future)
                for again in settle(index, future.result()):
                    running[executor.submit(_task, specs[again])] = again

    frame = _frame(_headprint.sweep_columns_of(probe_args is not None), [unit["rows"] for unit in done])
    frame.attrs["outcomes"] = {link: unit["outcome"] for (_, _, link), unit in zip(units, done)}
    return frame
