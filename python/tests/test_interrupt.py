"""Ctrl-C stops a long computation at its next weight read and raises KeyboardInterrupt; the
model goes on working afterwards."""

import os
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import headprint

VOCAB, WIDTH, LAYERS, HEADS = 50_000, 512, 4, 8


@pytest.fixture(scope="module")
def slow_model():
    """Random weights in TransformerLens's names, large enough that the Grams take seconds."""
    rng = np.random.default_rng(0)
    d_head = WIDTH // HEADS
    matrix = lambda *shape: rng.standard_normal(shape, dtype=np.float32) * 0.05
    cfg = SimpleNamespace(
        n_layers=LAYERS, d_model=WIDTH, n_heads=HEADS, d_head=d_head, d_vocab=VOCAB, n_ctx=64, attn_only=True,
        normalization_type="LNPre", positional_embedding_type="standard", model_name="slow",
    )
    model = SimpleNamespace(
        cfg=cfg, W_E=matrix(VOCAB, WIDTH), W_pos=matrix(64, WIDTH),
        W_Q=matrix(LAYERS, HEADS, WIDTH, d_head), W_K=matrix(LAYERS, HEADS, WIDTH, d_head),
        W_V=matrix(LAYERS, HEADS, WIDTH, d_head), W_O=matrix(LAYERS, HEADS, d_head, WIDTH),
        b_Q=np.zeros((LAYERS, HEADS, d_head), np.float32), b_K=np.zeros((LAYERS, HEADS, d_head), np.float32),
        b_V=np.zeros((LAYERS, HEADS, d_head), np.float32), b_O=np.zeros((LAYERS, WIDTH), np.float32),
        blocks=[SimpleNamespace() for _ in range(LAYERS)], W_U=matrix(WIDTH, VOCAB),
        b_U=np.zeros(VOCAB, np.float32),
    )
    return headprint.load(model)


def test_an_interrupt_in_the_progress_callback_stops_the_work(slow_model):
    def interrupt(stage, done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        slow_model.fingerprint_json(False, "cpu", interrupt)
    # The model still reads its weights: its forward pass runs.
    patterns = headprint.attention(slow_model, [1, 2, 3], bos=False, backend="cpu")
    assert patterns.shape == (LAYERS, HEADS, 3, 3)


def test_ctrl_c_raises_keyboard_interrupt_soon(slow_model):
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        headprint.fingerprint(slow_model, backend="cpu")
    waited = time.monotonic() - started
    timer.join()
    patterns = headprint.attention(slow_model, [4, 5], bos=False, backend="cpu")
    assert patterns.shape == (LAYERS, HEADS, 2, 2)
    # Then the whole fingerprint, to show how long an uninterrupted run takes.
    started = time.monotonic()
    assert len(headprint.fingerprint(slow_model, backend="cpu")) == LAYERS * HEADS
    whole = time.monotonic() - started
    assert waited < whole
