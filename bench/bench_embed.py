"""all-MiniLM-L6-v2 sentence embeddings: fusegrad against torch (same weights, same batches).

    python bench/bench_embed.py                # batch 32, short sentences, 1 and 2 threads
    python bench/bench_embed.py --quick        # fewer repeats, 2 threads only
    python bench/bench_embed.py --batch 8 --words 40

Both sides tokenize with the same ``tokenizer.json`` and pad to the same length (a multiple of
16), so they run the same shapes; fusegrad replays its TinyJit capture, torch runs eagerly
under ``torch.inference_mode``. Each thread count runs in a fresh process (OpenMP reads
``OMP_NUM_THREADS`` once), torch limited to the same number with ``torch.set_num_threads``.
The embeddings of the two are compared, then sentences/s are printed as medians; ratio > 1
means fusegrad is faster. Compile time is excluded: each side runs twice first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable

import numpy as np
from bench_core import median_seconds  # (bench/ is on the path)

WORDS = (
    "the a model learns fast slow compiler kernel tensor river city music bright dark "
    "people write small programs that run on many machines every day while others sleep"
).split()


def sentences(count: int, words: int) -> list[str]:
    """``count`` deterministic sentences of about ``words`` words each (lengths vary by 30%)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(max(1, int(words * 0.7)), int(words * 1.3) + 2, count)
    return [" ".join(rng.choice(WORDS, n)) + "." for n in lengths]


def torch_encoder(folder: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """BertModel + mean pooling + normalisation in plain torch ops, from the same safetensors."""
    import json

    import torch
    from safetensors.torch import load_file

    w, config = load_file(f"{folder}/model.safetensors"), json.load(open(f"{folder}/config.json"))
    f, heads, eps = torch.nn.functional, config["num_attention_heads"], config["layer_norm_eps"]

    def ln(x, name):
        return f.layer_norm(x, x.shape[-1:], w[name + ".weight"], w[name + ".bias"], eps)

    def dense(x, name):
        return f.linear(x, w[name + ".weight"], w[name + ".bias"])

    @torch.inference_mode()
    def encode(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        ids_t, mask_t = torch.from_numpy(ids).long(), torch.from_numpy(mask).float()
        (batch, length), e = ids.shape, "embeddings."
        x = w[e + "word_embeddings.weight"][ids_t] + w[e + "position_embeddings.weight"][:length]
        x = ln(x + w[e + "token_type_embeddings.weight"][0], e + "LayerNorm")
        keep = mask_t.bool()[:, None, None, :]
        for i in range(config["num_hidden_layers"]):
            p, a = f"encoder.layer.{i}.", f"encoder.layer.{i}.attention."
            q, k, v = (
                dense(x, a + "self." + n).view(batch, length, heads, -1).transpose(1, 2)
                for n in ("query", "key", "value")
            )
            ctx = f.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            ctx = ctx.transpose(1, 2).reshape(batch, length, -1)
            x = ln(x + dense(ctx, a + "output.dense"), a + "output.LayerNorm")
            x = ln(
                x + dense(f.gelu(dense(x, p + "intermediate.dense")), p + "output.dense"),
                p + "output.LayerNorm",
            )
        pooled = (x * mask_t[..., None]).sum(1) / mask_t.sum(1, keepdim=True).clamp(min=1e-9)
        return f.normalize(pooled, dim=-1).numpy()

    return encode


def warm_median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """``bench_core.median_seconds`` after one more call: fusegrad's TinyJit compiles on the
    first call and captures on the second, replaying from the third."""
    fn()
    return median_seconds(fn, repeats)


def measure(threads: int, batch: int, words: int, repeats: int) -> None:
    """One thread count, in this process: check the embeddings agree, then time both."""
    import torch

    from fusegrad.models.bert import SentenceEncoder, minilm_path

    torch.set_num_threads(threads)
    folder = minilm_path()
    ours, theirs = SentenceEncoder(folder), torch_encoder(str(folder))
    batch_sentences = sentences(batch, words)

    def run_torch() -> np.ndarray:
        return theirs(*ours.tokenize(batch_sentences))

    diff = np.abs(ours(batch_sentences) - run_torch()).max()
    fusegrad_s = warm_median_seconds(lambda: ours(batch_sentences), repeats)
    torch_s = warm_median_seconds(run_torch, repeats)
    length = ours.tokenize(batch_sentences)[0].shape[1]
    print(
        f"{threads} thread(s), batch {batch} x {length} tokens   fusegrad {batch / fusegrad_s:8.1f}"
        f" sent/s   torch {batch / torch_s:8.1f} sent/s   ratio {torch_s / fusegrad_s:5.2f}x"
        f"   max |diff| {diff:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 2 threads only")
    parser.add_argument("--batch", type=int, default=32, help="sentences per call")
    parser.add_argument("--words", type=int, default=12, help="about this many words each")
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)  # the child's count
    args = parser.parse_args()
    repeats = 3 if args.quick else 10
    if args.threads:
        measure(args.threads, args.batch, args.words, repeats)
        return
    print(f"all-MiniLM-L6-v2; medians of {repeats} calls; ratio > 1: fusegrad faster\n")
    for threads in (2,) if args.quick else (1, 2):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        command = [sys.executable, __file__, "--threads", str(threads)]
        command += ["--batch", str(args.batch), "--words", str(args.words)]
        subprocess.run(command + (["--quick"] if args.quick else []), env=env, check=True)


if __name__ == "__main__":
    main()
