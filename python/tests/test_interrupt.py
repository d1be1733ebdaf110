"""Ctrl-C stops a long computation at its next weight read and raises KeyboardInterrupt,
wherever in the work it lands, up to its last step; the model goes on working afterwards and
computes the same numbers.

Each interrupt is set off by the work's own progress (the callback sees how far it is), not by
a timer: a timer's SIGINT can land after a fast machine has finished, which is no test at all."""

import os
import signal
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import headprint

LAYERS, HEADS = 4, 8


def made_of_random_weights(vocab: int, width: int) -> SimpleNamespace:
    """Random weights in TransformerLens's names, attention only."""
    rng = np.random.default_rng(0)
    d_head = width // HEADS
    matrix = lambda *shape: rng.standard_normal(shape, dtype=np.float32) * 0.05
    cfg = SimpleNamespace(
        n_layers=LAYERS, d_model=width, n_heads=HEADS, d_head=d_head, d_vocab=vocab, n_ctx=64, attn_only=True,
        normalization_type="LNPre", positional_embedding_type="standard", model_name="random",
    )
    return SimpleNamespace(
        cfg=cfg, W_E=matrix(vocab, width), W_pos=matrix(64, width),
        W_Q=matrix(LAYERS, HEADS, width, d_head), W_K=matrix(LAYERS, HEADS, width, d_head),
        W_V=matrix(LAYERS, HEADS, width, d_head), W_O=matrix(LAYERS, HEADS, d_head, width),
        b_Q=np.zeros((LAYERS, HEADS, d_head), np.float32), b_K=np.zeros((LAYERS, HEADS, d_head), np.float32),
        b_V=np.zeros((LAYERS, HEADS, d_head), np.float32), b_O=np.zeros((LAYERS, width), np.float32),
        blocks=[SimpleNamespace() for _ in range(LAYERS)], W_U=matrix(width, vocab),
        b_U=np.zeros(vocab, np.float32),
    )


@pytest.fixture(scope="module")
def weights():
    """Large enough that the Grams take a while, small enough to fingerprint many times."""
    return made_of_random_weights(vocab=20_000, width=256)


def fresh(weights):
    """A model of `weights` that holds nothing computed before (a model is kept per object)."""
    return headprint.load(SimpleNamespace(**vars(weights)))


def said(report):
    """What a fingerprint report says, in a form `==` compares: every head's name and, for each
    circuit, its eigenvalues and copying score."""
    circuits = [[getattr(head, c) for c in headprint.CIRCUITS] for head in report.heads]
    return [
        (head.name, [(c.eigenvalues.tolist(), c.copying_score) for c in each])
        for head, each in zip(report.heads, circuits)
    ]


@pytest.fixture(scope="module")
def whole(weights):
    """The fingerprint of a model nobody interrupted."""
    return said(fresh(weights).fingerprint(False, "cpu"))


@pytest.fixture
def model(weights):
    return fresh(weights)


class Interrupting:
    """A progress callback that sends this process a real SIGINT at the first step that
    `chosen(stage, done, total)` picks."""

    def __init__(self, chosen):
        self.chosen = chosen
        self.sent_at = None

    def __call__(self, stage, done, total):
        if self.sent_at is None and self.chosen(stage, done, total):
            self.sent_at = (stage, done, total)
            signal.raise_signal(signal.SIGINT)


STEPS = {
    "first": lambda stage, done, total: True,
    "first of the heads": lambda stage, done, total: stage == "heads",
    # The work's last step: shown either while the report is still being assembled or, when
    # the work ended before the next look, together with its result.
    "last": lambda stage, done, total: stage == "heads" and done == total,
}


@pytest.mark.parametrize("step", list(STEPS))
def test_ctrl_c_at_a_progress_step_raises_keyboard_interrupt(model, whole, step):
    callback = Interrupting(STEPS[step])
    with pytest.raises(KeyboardInterrupt):
        model.fingerprint(False, "cpu", callback)
    assert callback.sent_at is not None
    # Nothing is left broken or half-held: the same model computes the same fingerprint.
    assert said(model.fingerprint(False, "cpu")) == whole


def test_an_interrupt_in_the_progress_callback_stops_the_work(model, whole):
    def interrupt(stage, done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model.fingerprint(False, "cpu", interrupt)
    # The model still reads its weights: its forward pass runs, and its fingerprint is whole.
    patterns = headprint.attention(model, [1, 2, 3], bos=False, backend="cpu")
    assert patterns.shape == (LAYERS, HEADS, 3, 3)
    assert said(model.fingerprint(False, "cpu")) == whole


@pytest.fixture(scope="module")
def slow_model():
    """A model whose Grams take seconds, so that a SIGINT sent at their first step lands while
    the caller waits in Rust, not in Python code."""
    return headprint.load(made_of_random_weights(vocab=50_000, width=512))


def test_ctrl_c_while_the_caller_waits_raises_keyboard_interrupt_soon(slow_model):
    # At the Grams' first step shown, a thread sends SIGINT once the callback has returned and
    # the caller is back in its wait without the GIL, which is where a real Ctrl-C lands.
    caller, here = threading.get_ident(), sys._getframe()
    sent = threading.Event()
    seen = []

    def send():
        while sys._current_frames()[caller] is not here:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    def progress(stage, done, total):
        seen.append((stage, done, total))
        if len(seen) == 1:
            assert stage == "Grams" and done < total, f"the work went past its Grams before the first look: {seen}"
            threading.Thread(target=send, daemon=True).start()

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        slow_model.fingerprint(False, "cpu", progress)
    waited = time.monotonic() - started
    assert sent.is_set()
    patterns = headprint.attention(slow_model, [4, 5], bos=False, backend="cpu")
    assert patterns.shape == (LAYERS, HEADS, 2, 2)
    # Then the whole fingerprint, to show how long an uninterrupted run takes.
    started = time.monotonic()
    assert len(headprint.fingerprint(slow_model, backend="cpu")) == LAYERS * HEADS
    assert waited < time.monotonic() - started
