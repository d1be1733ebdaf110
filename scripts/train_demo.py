#!/usr/bin/env python3
"""Train headprint's demo model: a character-level GPT on nietzsche.txt.

The model has exactly the module layout of Karpathy's "Let's build GPT" gpt.py
(token_embedding_table, position_embedding_table, blocks.{l}.sa.heads.{h}.{key,query,value},
blocks.{l}.sa.proj, blocks.{l}.ffwd.net.{0,2}, blocks.{l}.ln1/ln2, ln_f, lm_head), pre-LN,
6 layers x 4 heads x head size 64, n_embd 256, context 128, ReLU MLP 4x, dropout 0.

Data: the vocabulary is sorted(set(text)) over the characters of data/nietzsche.txt; the
first 90 % of the characters are the training split, the last 10 % validation.

Lever used: synthetic repeated sequences.
    Trained on plain text alone, the same model learnt no induction head (the trial runs are
    in docs/teaching.md#the-demo-model): a 540 K-character corpus rarely repeats a long span
    inside a 128-character window, so there is little gradient towards an induction circuit
    within a CPU-sized budget. The demo model must show induction heads, so each
    training sequence is, with probability 0.25, a "repeat" sequence: a segment of length n
    ~ U[8, 48] that is (prob 1/2) n uniformly random characters from the whole vocabulary or
    (prob 1/2) a random n-character window of the TRAINING text, repeated until
    block_size + 1 characters are filled (the last copy truncated). The loss is the ordinary
    next-character cross-entropy over all positions. The other 75 % are ordinary random
    training windows. Validation and train loss are measured on plain text only.

Optimiser: AdamW lr 1e-3, default betas, weight decay 0.1 on every parameter with >= 2 dims
(linear weights and both embedding tables), no decay on biases and LayerNorm parameters;
linear warm-up over 100 steps, then cosine decay to 1e-4 at the last step; gradient
clipping at norm 1.0.

Everything is seeded (torch / numpy / random, seed 1337; evaluation draws from its own fixed
seed so it never perturbs training). Checkpoints (model, optimiser, RNG states, step) are
written at every evaluation and a run resumes from the latest one, so it can continue
across sessions.

Each evaluation logs one JSON line: val/train loss (40 random plain-text batches each) and
induction diagnostics on 16 sequences of a 50-token first copy repeated once, with
(a) uniform random characters from the whole vocabulary and (b) random windows of the
validation text: per head, induction score = mean attention A[t, t-n+1] and previous-token
score = mean A[t, t-1] over t in n..2n-2; prefix-copy accuracy = fraction of t in n..2n-2
where argmax logits[t] == token[t+1].

The result is saved as float16 safetensors with the vocabulary and provenance in metadata.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

SEED = 1337
EVAL_SEED = 4242
N_LAYER = 6
N_HEAD = 4
HEAD_SIZE = 64
N_EMBD = 256
BLOCK_SIZE = 128
BATCH_SIZE = 32
DROPOUT = 0.0
LR = 1e-3
MIN_LR = 1e-4
WARMUP = 100
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
REPEAT_PROB = 0.25
REPEAT_MIN, REPEAT_MAX = 8, 48
EVAL_BATCHES = 40
IND_SEQS = 16
IND_N = 50

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "data", "nietzsche.txt")
CORPUS_SHA256 = "23cf69874ab69d3d256099ab530ea4be24d47d9675b673bcc67cbcd6298ec647"


# ----------------------------------------------------------------------------- model (gpt.py)

class Head(nn.Module):
    """One head of self-attention."""

    def __init__(self, head_size):
        super().__init__()
        self.key = nn.Linear(N_EMBD, head_size, bias=False)
        self.query = nn.Linear(N_EMBD, head_size, bias=False)
        self.value = nn.Linear(N_EMBD, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE)), persistent=False)
        self.dropout = nn.Dropout(DROPOUT)
        self.capture = False
        self.pattern = None

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        v = self.value(x)
        if not self.capture:
            # same maths as below (scale head_size**-0.5, causal mask, softmax), fused kernel
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        wei = F.softmax(wei, dim=-1)
        self.pattern = wei.detach()
        wei = self.dropout(wei)
        return wei @ v


class MultiHeadAttention(nn.Module):
    def __init__(self, num_heads, head_size):
        super().__init__()
        self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
        self.proj = nn.Linear(head_size * num_heads, N_EMBD)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x):
        if any(h.capture for h in self.heads):
            out = torch.cat([h(x) for h in self.heads], dim=-1)
            return self.dropout(self.proj(out))
        # Fast path, identical maths to the per-head loop above: the heads' query/key/value
        # weights are concatenated so all heads run as one matmul and one fused causal
        # attention, which is faster per step on CPU threads. Parameters stay per head.
        B, T, C = x.shape
        H = len(self.heads)
        hs = self.heads[0].key.weight.shape[0]
        w = torch.cat([h.query.weight for h in self.heads]
                      + [h.key.weight for h in self.heads]
                      + [h.value.weight for h in self.heads])
        q, k, v = (x @ w.t()).split(H * hs, dim=-1)
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale hs**-0.5
        out = out.transpose(1, 2).reshape(B, T, H * hs)
        return self.dropout(self.proj(out))


class FeedFoward(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.ReLU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(DROPOUT),
        )

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.sa = MultiHeadAttention(n_head, HEAD_SIZE)
        self.ffwd = FeedFoward(n_embd)
        self.ln1 = nn.LayerNorm(n_embd)
        self.ln2 = nn.LayerNorm(n_embd)

    def forward(self, x):
        x = x + self.sa(self.ln1(x))
        x = x + self.ffwd(self.ln2(x))
        return x


class GPTLanguageModel(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.token_embedding_table = nn.Embedding(vocab_size, N_EMBD)
        self.position_embedding_table = nn.Embedding(BLOCK_SIZE, N_EMBD)
        self.blocks = nn.Sequential(*[Block(N_EMBD, N_HEAD) for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, vocab_size)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        tok_emb = self.token_embedding_table(idx)
        pos_emb = self.position_embedding_table(torch.arange(T, device=idx.device))
        x = tok_emb + pos_emb
        x = self.blocks(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def set_capture(self, on):
        for blk in self.blocks:
            for h in blk.sa.heads:
                h.capture = on
                h.pattern = None

    def patterns(self):
        """[n_layer, n_head, B, T, T] attention patterns from the last captured forward."""
        return torch.stack([torch.stack([h.pattern for h in blk.sa.heads]) for blk in self.blocks])


# ----------------------------------------------------------------------------- data

def load_corpus():
    raw = open(CORPUS, "rb").read()
    sha = hashlib.sha256(raw).hexdigest()
    if sha != CORPUS_SHA256:
        sys.exit(f"corpus sha256 {sha} != expected {CORPUS_SHA256}")
    text = raw.decode("utf-8")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    n = int(0.9 * len(data))
    return chars, data[:n], data[n:]


def plain_batch(rng, split):
    ix = rng.randint(0, len(split) - BLOCK_SIZE - 1, size=BATCH_SIZE)
    seqs = np.stack([split[i:i + BLOCK_SIZE + 1] for i in ix])
    return seqs


def train_batch(rng, train, vocab_size):
    seqs = plain_batch(rng, train)
    for b in range(BATCH_SIZE):
        if rng.random_sample() < REPEAT_PROB:
            n = rng.randint(REPEAT_MIN, REPEAT_MAX + 1)
            if rng.random_sample() < 0.5:
                seg = rng.randint(0, vocab_size, size=n)
            else:
                i = rng.randint(0, len(train) - n + 1)
                seg = train[i:i + n]
            reps = (BLOCK_SIZE + 1 + n - 1) // n
            seqs[b] = np.tile(seg, reps)[:BLOCK_SIZE + 1]
    t = torch.from_numpy(seqs)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


# ----------------------------------------------------------------------------- evaluation

def head_name(l, h):
    return f"L{l}H{h}"


@torch.no_grad()
def evaluate(model, train, val, vocab_size):
    model.eval()
    out = {}
    rng = np.random.RandomState(EVAL_SEED)
    for name, split in (("val_loss", val), ("train_loss", train)):
        losses = []
        for _ in range(EVAL_BATCHES):
            t = torch.from_numpy(plain_batch(rng, split))
            _, loss = model(t[:, :-1], t[:, 1:])
            losses.append(loss.item())
        out[name] = float(np.mean(losses))

    n = IND_N
    kinds = {
        "rand": np.stack([rng.randint(0, vocab_size, size=n) for _ in range(IND_SEQS)]),
        "text": np.stack([val[i:i + n] for i in rng.randint(0, len(val) - n + 1, size=IND_SEQS)]),
    }
    ts = torch.arange(n, 2 * n - 1)  # query positions n .. 2n-2
    per_head = {}
    for kind, first in kinds.items():
        seq = torch.from_numpy(np.concatenate([first, first], axis=1))  # [16, 2n]
        model.set_capture(True)
        logits, _ = model(seq)
        pat = model.patterns()  # [L, H, B, T, T]
        model.set_capture(False)
        ind = pat[:, :, :, ts, ts - n + 1].mean(dim=(2, 3))  # [L, H]
        prev = pat[:, :, :, ts, ts - 1].mean(dim=(2, 3))
        acc = (logits[:, ts].argmax(-1) == seq[:, ts + 1]).float().mean().item()
        li, hi = divmod(int(ind.argmax()), N_HEAD)
        pl, ph = divmod(int(prev.argmax()), N_HEAD)
        out[f"induction_{kind}"] = round(float(ind[li, hi]), 4)
        out[f"induction_{kind}_head"] = head_name(li, hi)
        out[f"prev_token_{kind}"] = round(float(prev[pl, ph]), 4)
        out[f"prev_token_{kind}_head"] = head_name(pl, ph)
        out[f"prefix_copy_acc_{kind}"] = round(acc, 4)
        per_head[kind] = {
            "induction": {head_name(l, h): round(float(ind[l, h]), 4) for l in range(N_LAYER) for h in range(N_HEAD)},
            "prev_token": {head_name(l, h): round(float(prev[l, h]), 4) for l in range(N_LAYER) for h in range(N_HEAD)},
        }
    model.train()
    out["val_loss"] = round(out["val_loss"], 4)
    out["train_loss"] = round(out["train_loss"], 4)
    return out, per_head


# ----------------------------------------------------------------------------- schedule / optimiser

def lr_at(step, total):
    """lr used for optimiser step `step` (0-based) out of `total`."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    span = max(1, total - 1 - WARMUP)
    frac = min(1.0, (step - WARMUP) / span)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * frac))


def make_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR,
    )


# ----------------------------------------------------------------------------- checkpoints

def latest_checkpoint(d):
    files = glob.glob(os.path.join(d, "ckpt-*.pt"))
    if not files:
        return None
    return max(files, key=lambda f: int(os.path.basename(f)[5:-3]))


def save_checkpoint(d, step, model, opt, rng, tokens_seen, elapsed, total_steps):
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"ckpt-{step:06d}.pt")
    torch.save({
        "step": step,
        "total_steps": total_steps,
        "tokens_seen": tokens_seen,
        "elapsed": elapsed,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "np_rng": rng.get_state(),
        "torch_rng": torch.get_rng_state(),
        "py_rng": random.getstate(),
    }, path + ".tmp")
    os.replace(path + ".tmp", path)
    # keep the two newest
    files = sorted(glob.glob(os.path.join(d, "ckpt-*.pt")), key=lambda f: int(os.path.basename(f)[5:-3]))
    for f in files[:-2]:
        os.remove(f)


# ----------------------------------------------------------------------------- threads

class ThreadChooser:
    """--threads auto: 2 intra-op threads when the machine is otherwise idle, 1 when other
    processes (e.g. a Rust build) are using CPU. Measured on the 2-core box: with one core
    busy elsewhere a 2-thread step takes 4-5 s (threads wait on each other at every op's
    barrier) against ~2 s single-threaded; with both cores free 2 threads take ~1.2 s.
    Decided every 10 steps from /proc/stat (all CPUs) minus this process's own CPU time.
    The first 10 steps after a (re)start run with 2 threads.
    Changing the thread count only changes floating-point summation order."""

    def __init__(self, max_threads=2):
        self.max = max_threads
        self.tick = os.sysconf("SC_CLK_TCK")
        self.prev = self._sample()
        self.n = max_threads
        self.quiet = 0

    def _sample(self):
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        busy = sum(v) - v[3] - v[4]  # minus idle, iowait
        t = os.times()
        return time.time(), busy / self.tick, t.user + t.system

    def update(self):
        now = self._sample()
        wall = now[0] - self.prev[0]
        others = ((now[1] - self.prev[1]) - (now[2] - self.prev[2])) / max(wall, 1e-6)
        self.prev = now
        # hysteresis: drop to 1 thread as soon as others use > 0.15 core; go back to 2 only
        # after three quiet windows (30 steps) in a row, so intermittent builds do not flap it
        self.quiet = self.quiet + 1 if others < 0.1 else 0
        n = 1 if others > 0.15 else (self.max if self.quiet >= 3 or self.n == self.max else self.n)
        if n != self.n:
            self.n = n
            torch.set_num_threads(n)
        return others


# ----------------------------------------------------------------------------- main

def save_model(model, path, chars, meta):
    from safetensors.torch import save_file
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    metadata = {
        "vocab": json.dumps(chars, ensure_ascii=False),
        "steps": str(meta["steps"]),
        "tokens_seen": str(meta["tokens_seen"]),
        "val_loss": f"{meta['val_loss']:.4f}",
        "seed": str(SEED),
        "block_size": str(BLOCK_SIZE),
        "n_layer": str(N_LAYER),
        "n_head": str(N_HEAD),
        "head_size": str(HEAD_SIZE),
        "n_embd": str(N_EMBD),
        "corpus": f"nietzsche.txt sha256 {CORPUS_SHA256}",
        "trained_with": "scripts/train_demo.py",
        "format": "pt",
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_file(tensors, path, metadata=metadata)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, required=True, help="total optimiser steps")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--out", default="public/models/nietzsche-char.safetensors")
    ap.add_argument("--log", default="scripts/train_log.jsonl")
    ap.add_argument("--summary", default="scripts/train_summary.json")
    ap.add_argument("--checkpoint-dir", default="scripts/checkpoints")
    ap.add_argument("--threads", default="auto", help="'auto' (1 or 2, see ThreadChooser) or a number")
    args = ap.parse_args()

    torch.set_num_threads(2 if args.threads == "auto" else int(args.threads))
    chooser = ThreadChooser(2) if args.threads == "auto" else None
    others = 0.0
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    random.seed(SEED)

    chars, train, val = load_corpus()
    vocab_size = len(chars)
    model = GPTLanguageModel(vocab_size)
    opt = make_optimizer(model)
    rng = np.random.RandomState(SEED)
    step, tokens_seen, elapsed_before = 0, 0, 0.0

    ck = latest_checkpoint(args.checkpoint_dir)
    if ck:
        state = torch.load(ck, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        rng.set_state(state["np_rng"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["py_rng"])
        step, tokens_seen, elapsed_before = state["step"], state["tokens_seen"], state["elapsed"]
        if state["total_steps"] != args.steps:
            print(f"warning: checkpoint was for --steps {state['total_steps']}, now {args.steps}; "
                  "the lr schedule changes from here", flush=True)
        print(f"resumed from {ck} at step {step}", flush=True)
    else:
        nparams = sum(p.numel() for p in model.parameters())
        print(f"fresh run: vocab {vocab_size}, {nparams / 1e6:.2f} M parameters, "
              f"train {len(train)} / val {len(val)} chars", flush=True)

    os.makedirs(os.path.dirname(os.path.abspath(args.log)), exist_ok=True)
    t0 = time.time()
    step0 = step
    last_print = t0
    result = None
    model.train()
    while step < args.steps:
        lr = lr_at(step, args.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        xb, yb = train_batch(rng, train, vocab_size)
        _, loss = model(xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        step += 1
        tokens_seen += BATCH_SIZE * BLOCK_SIZE
        if chooser and step % 10 == 0:
            others = chooser.update()
        now = time.time()
        if step <= 5 or now - last_print > 30:
            el = elapsed_before + now - t0
            thr = f" threads {torch.get_num_threads()} (others {others:.2f} cpu)" if chooser else ""
            print(f"step {step}/{args.steps} loss {loss.item():.4f} lr {lr:.2e} "
                  f"elapsed {el:.0f}s ({(now - t0) / max(step - step0, 1):.2f} s/step avg){thr}", flush=True)
            last_print = now
        if step % args.eval_every == 0 or step == args.steps:
            te = time.time()
            ev, per_head = evaluate(model, train, val, vocab_size)
            elapsed = elapsed_before + time.time() - t0
            result = {"step": step, "elapsed_s": round(elapsed, 1), "tokens_seen": tokens_seen,
                      "lr": lr, **ev}
            with open(args.log, "a") as f:
                f.write(json.dumps(result) + "\n")
            print("EVAL " + json.dumps(result) + f" (eval took {time.time() - te:.1f}s)", flush=True)
            save_checkpoint(args.checkpoint_dir, step, model, opt, rng, tokens_seen, elapsed, args.steps)

    if result is None or result["step"] != step:
        ev, per_head = evaluate(model, train, val, vocab_size)
        result = {"step": step, "elapsed_s": round(elapsed_before + time.time() - t0, 1),
                  "tokens_seen": tokens_seen, "lr": lr_at(step - 1, args.steps), **ev}
    save_model(model, args.out, chars, {"steps": step, "tokens_seen": tokens_seen,
                                        "val_loss": result["val_loss"]})
    summary = dict(result)
    summary["per_head"] = per_head
    summary["out"] = args.out
    with open(args.summary, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"saved {args.out} ({os.path.getsize(args.out) / 1e6:.2f} MB); summary {args.summary}", flush=True)


if __name__ == "__main__":
    main()
