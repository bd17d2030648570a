"""Train a small GPT (decoder-only transformer) on a synthetic token stream with AdamW.

    python examples/gpt.py                   # 2 layers, C=256, 4 heads, T=128, vocab 1024
    python examples/gpt.py --steps 50 --jit  # the step compiled once by TinyJit, then replayed
    DEV=OPENCL python examples/gpt.py --steps 3

No data set can be downloaded here, so the tokens come from a fixed random Markov chain: each
token's successor is one of a few, which the model learns (the loss falls from ln(vocab) towards
the chain's entropy). ``bench/bench_gpt.py`` times this step against PyTorch's twin.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from fusegrad import GlobalCounters, Tensor, TinyJit, nn
from fusegrad.nn.state import get_parameters


@dataclass(frozen=True)
class Config:
    layers: int = 2
    width: int = 256  # C
    heads: int = 4
    context: int = 128  # T
    vocab: int = 1024
    batch: int = 4  # B


def initial_weights(cfg: Config, seed: int = 0) -> dict[str, np.ndarray]:
    """GPT-2's initialisation as numpy arrays, by parameter name: both this model and a
    PyTorch twin load them, so their losses can be compared step by step."""
    rng = np.random.default_rng(seed)
    c = cfg.width

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    out = {"wte": normal(cfg.vocab, c), "wpe": normal(cfg.context, c, std=0.01)}
    project = 0.02 / math.sqrt(2 * cfg.layers)  # the residual projections, scaled down
    for i in range(cfg.layers):
        p = f"h{i}."
        out |= {
            p + "ln1.w": np.ones(c, np.float32),
            p + "ln1.b": np.zeros(c, np.float32),
            p + "attn.w": normal(c, 3 * c),
            p + "attn.b": np.zeros(3 * c, np.float32),
            p + "proj.w": normal(c, c, std=project),
            p + "proj.b": np.zeros(c, np.float32),
            p + "ln2.w": np.ones(c, np.float32),
            p + "ln2.b": np.zeros(c, np.float32),
            p + "fc.w": normal(c, 4 * c),
            p + "fc.b": np.zeros(4 * c, np.float32),
            p + "out.w": normal(4 * c, c, std=project),
            p + "out.b": np.zeros(c, np.float32),
        }
    return out | {"lnf.w": np.ones(c, np.float32), "lnf.b": np.zeros(c, np.float32)}


class GPT:
    """Token and position embeddings, ``layers`` pre-norm blocks (causal self-attention, a
    4x-wide GELU MLP), a final layernorm, and the token embedding reused as the output layer."""

    def __init__(self, cfg: Config, weights: dict[str, np.ndarray] | None = None):
        self.cfg = cfg
        arrays = initial_weights(cfg) if weights is None else weights
        self.w = {name: Tensor(a, requires_grad=True) for name, a in arrays.items()}

    def __call__(self, tokens: Tensor) -> Tensor:
        """Logits (B, T, vocab) for tokens (B, T)."""
        w, cfg = self.w, self.cfg
        b, t = tokens.shape
        x = w["wte"][tokens] + w["wpe"][:t]
        for i in range(cfg.layers):
            p = f"h{i}."
            x = x + self.attention(x.layernorm() * w[p + "ln1.w"] + w[p + "ln1.b"], p)
            h = x.layernorm() * w[p + "ln2.w"] + w[p + "ln2.b"]
            h = (h @ w[p + "fc.w"] + w[p + "fc.b"]).gelu()
            x = x + h @ w[p + "out.w"] + w[p + "out.b"]
        x = x.layernorm() * w["lnf.w"] + w["lnf.b"]
        return x @ w["wte"].T

    def attention(self, x: Tensor, p: str) -> Tensor:
        b, t, c = x.shape
        heads = self.cfg.heads
        qkv = x @ self.w[p + "attn.w"] + self.w[p + "attn.b"]
        q, k, v = (
            part.reshape(b, t, heads, c // heads).transpose(1, 2) for part in qkv.chunk(3, dim=2)
        )
        y = q.scaled_dot_product_attention(k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        return y @ self.w[p + "proj.w"] + self.w[p + "proj.b"]


def token_stream(cfg: Config, steps: int, seed: int = 1) -> np.ndarray:
    """``steps`` batches of ``context + 1`` tokens from a random Markov chain (four likely
    successors per token): (steps, batch, context + 1) int32."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, cfg.vocab, (cfg.vocab, 4))
    out = np.empty((steps, cfg.batch, cfg.context + 1), np.int32)
    token = rng.integers(0, cfg.vocab, (steps, cfg.batch))
    for i in range(cfg.context + 1):
        out[:, :, i] = token
        token = successors[token, rng.integers(0, 4, token.shape)]
    return out


def make_step(model: GPT, lr: float = 3e-4, jit: bool = False):
    """The training step ``step(tokens) -> loss``: forward, cross-entropy, backward, AdamW."""
    optimizer = nn.optim.AdamW(get_parameters(model), lr=lr, weight_decay=0.1)

    def step(batch: Tensor) -> Tensor:
        Tensor.training = True
        logits = model(batch[:, :-1])
        loss = logits.reshape(-1, model.cfg.vocab).cross_entropy(batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step(loss)  # the loss in the step's realize: alone, the forward would run again
        return loss

    return TinyJit(step) if jit else step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--jit", action="store_true", help="compile the step once with TinyJit")
    args = parser.parse_args()
    cfg = Config()
    model, data = GPT(cfg), token_stream(cfg, args.steps)
    step = make_step(model, jit=args.jit)
    print(f"GPT: {cfg}; {sum(a.numel() for a in get_parameters(model)):,} parameters")
    for i in range(args.steps):
        GlobalCounters.reset()
        start = time.perf_counter()
        loss = step(Tensor(data[i])).item()
        took = time.perf_counter() - start
        print(
            f"step {i:3d}  loss {loss:.4f}  {took * 1000:8.1f} ms  "
            f"{GlobalCounters.kernel_count} kernels"
        )


if __name__ == "__main__":
    main()
