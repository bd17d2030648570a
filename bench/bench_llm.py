"""SmolLM2-135M (4-bit GGUF): prompt and generation tokens/s and peak RSS, fusegrad against a
float32 torch model built from the same file, and llama.cpp when llama-cpp-python is installed.

    python bench/bench_llm.py                       # 128-token prompt, 64 tokens, 1 and 2 threads
    python bench/bench_llm.py --quick               # 2 threads, 32-token prompt, 16 tokens
    python bench/bench_llm.py --prompt-tokens 8 --tokens 4 --threads 2     # a smoke run

Each (engine, thread count) runs in a fresh process, so that OpenMP reads ``OMP_NUM_THREADS``
once and the peak RSS (``ru_maxrss``) is that engine's alone. Every engine runs the prompt
and the generation once first (compiling, capturing), then is timed on a second run: prompt
tokens/s is the prompt's forward pass, generation tokens/s the greedy decode steps after it.
torch keeps a KV cache too, and runs under ``torch.inference_mode`` with the same threads.

llama.cpp, built from source for this processor (about 30 minutes on 2 cores; not part of the
project's set-up, and not in the README's commands):

    CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-deps llama-cpp-python diskcache
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np

ENGINES = ("fusegrad", "torch", "llama.cpp")


def prompt_ids(count: int) -> list[int]:
    """``count`` deterministic token ids of ordinary text (no special tokens)."""
    rng = np.random.default_rng(0)
    return rng.integers(100, 40000, count).tolist()


class TorchLlama:
    """The float32 reference: gguf's numpy dequantization of every weight, torch ops, a KV
    cache. Rotary embeddings rotate the pairs (2i, 2i+1), as in the GGUF file's Q/K rows."""

    def __init__(self, path: str):
        import gguf
        import torch

        reader = gguf.GGUFReader(path)
        meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("llama.")}
        self.heads = meta["llama.attention.head_count"]
        self.kv_heads = meta["llama.attention.head_count_kv"]
        self.eps = meta["llama.attention.layer_norm_rms_epsilon"]
        self.theta, self.layers = meta["llama.rope.freq_base"], meta["llama.block_count"]
        self.w = {}
        for t in reader.tensors:
            shape = [int(n) for n in reversed(t.shape.tolist())]
            values = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
            self.w[t.name] = torch.from_numpy(values.reshape(shape).copy())
        self.torch = torch
        self.reset()

    def reset(self) -> None:
        self.cache: list[tuple] = [(None, None)] * self.layers
        self.position = 0

    def _norm(self, x, w):
        return x * self.torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def _rope(self, x, start):
        torch = self.torch
        t, h, d = x.shape
        inv = self.theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.arange(start, start + t, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = angles.cos().float()[:, None], angles.sin().float()[:, None]
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).reshape(t, h, d)

    def logits(self, ids: list[int]) -> np.ndarray:
        torch, w, t, start = self.torch, self.w, len(ids), self.position
        with torch.inference_mode():
            x = w["token_embd.weight"][torch.tensor(ids)]
            mask = torch.full((t, start + t), -math.inf).triu(start + 1)
            for i in range(self.layers):
                p = f"blk.{i}."
                h = self._norm(x, w[p + "attn_norm.weight"])
                q = self._rope((h @ w[p + "attn_q.weight"].T).reshape(t, self.heads, -1), start)
                k = self._rope((h @ w[p + "attn_k.weight"].T).reshape(t, self.kv_heads, -1), start)
                v = (h @ w[p + "attn_v.weight"].T).reshape(t, self.kv_heads, -1)
                old_k, old_v = self.cache[i]
                if old_k is not None:
                    k, v = torch.cat([old_k, k]), torch.cat([old_v, v])
                self.cache[i] = (k, v)
                group = self.heads // self.kv_heads
                kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
                scores = torch.einsum("thd,shd->hts", q, kk) / math.sqrt(q.shape[-1]) + mask
                out = torch.einsum("hts,shd->thd", scores.softmax(-1), vv).reshape(t, -1)
                x = x + out @ w[p + "attn_output.weight"].T
                h = self._norm(x, w[p + "ffn_norm.weight"])
                gate = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
                x = x + (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
            head = w.get("output.weight", w["token_embd.weight"])
            self.position += t
            return (self._norm(x[-1], w["output_norm.weight"]) @ head.T).numpy()


class LlamaCpp:
    """llama.cpp through llama-cpp-python, driven token by token like the others."""

    def __init__(self, path: str, threads: int, n_ctx: int = 1024):
        from llama_cpp import Llama

        self.llm = Llama(  # (the prompt runs on n_threads_batch: all cores unless told)
            path,
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=False,
            verbose=False,
        )

    def reset(self) -> None:
        self.llm.reset()

    def logits(self, ids: list[int]) -> np.ndarray:
        self.llm.eval(ids)
        return np.array(self.llm.scores[self.llm.n_tokens - 1])


def open_engine(engine: str, path: str, threads: int, max_context: int = 1024):
    if engine == "fusegrad":
        from fusegrad.models.llama import Llama

        return Llama(path, max_context=max_context)
    if engine == "torch":
        import torch

        torch.set_num_threads(threads)
        return TorchLlama(path)
    return LlamaCpp(path, threads, max_context)


def run_once(model, prompt: list[int], tokens: int) -> tuple[float, float, list[int]]:
    """Seconds of the prompt, seconds of the ``tokens - 1`` decode steps, the greedy ids."""
    model.reset()
    start = time.perf_counter()
    ids = [int(np.argmax(model.logits(prompt)))]
    prompt_s = time.perf_counter() - start
    start = time.perf_counter()
    while len(ids) < tokens:
        ids.append(int(np.argmax(model.logits(ids[-1:]))))
    return prompt_s, time.perf_counter() - start, ids


def measure(
    engine: str, path: str, threads: int, prompt_tokens: int, tokens: int, max_context: int
) -> dict:
    """One engine at one thread count, in this process; the figures as a dict."""
    model = open_engine(engine, path, threads, max_context)
    prompt = prompt_ids(prompt_tokens)
    for _ in range(2):  # compile, then capture (TinyJit replays from the third call)
        run_once(model, prompt, tokens)
    prompt_s, decode_s, ids = run_once(model, prompt, tokens)
    return {
        "engine": engine,
        "threads": threads,
        "prompt_tok_s": prompt_tokens / prompt_s,
        "gen_tok_s": (tokens - 1) / decode_s if tokens > 1 else float("nan"),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ids": ids,
    }


def available(engine: str) -> bool:
    import importlib.util

    module = {"fusegrad": "fusegrad", "torch": "torch", "llama.cpp": "llama_cpp"}[engine]
    return importlib.util.find_spec(module) is not None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="a .gguf file (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--quick", action="store_true", help="2 threads, short runs")
    parser.add_argument("--prompt-tokens", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=None, help="tokens generated")
    parser.add_argument("--threads", type=int, action="append", help="thread counts to run")
    parser.add_argument(
        "--max-context", type=int, default=1024, help="KV cache length (fusegrad, llama.cpp)"
    )
    parser.add_argument("--engine", help=argparse.SUPPRESS)  # the child's engine
    args = parser.parse_args()
    prompt_tokens = args.prompt_tokens or (32 if args.quick else 128)
    tokens = args.tokens or (16 if args.quick else 64)
    if args.engine:
        threads = args.threads[0]
        figures = measure(args.engine, args.model, threads, prompt_tokens, tokens, args.max_context)
        print(json.dumps(figures))
        return
    from fusegrad.models.llama import smollm2_path

    path = args.model or str(smollm2_path())
    size = os.path.getsize(path) / 2**20
    print(
        f"{os.path.basename(path)} ({size:.0f} MiB); prompt {prompt_tokens}, generate {tokens}, "
        f"max context {args.max_context}\n"
    )
    for threads in args.threads or ((2,) if args.quick else (1, 2)):
        results = []
        for engine in (e for e in ENGINES if available(e)):
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            command = [sys.executable, __file__, "--engine", engine, "--model", path]
            command += ["--threads", str(threads), "--prompt-tokens", str(prompt_tokens)]
            command += ["--max-context", str(args.max_context)]
            done = subprocess.run(
                command + ["--tokens", str(tokens)], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                print(f"{engine}: failed\n{done.stderr[-2000:]}")
                continue
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        report(results)


def report(results: list[dict]) -> None:
    """One line per engine; ratios against torch (> 1: faster than torch), and fusegrad's
    against llama.cpp too when it ran. llama.cpp's greedy ids may differ from torch's: it
    multiplies 8-bit activations."""
    base = next((r for r in results if r["engine"] == "torch"), None)
    llama = next((r for r in results if r["engine"] == "llama.cpp"), None)
    for r in results:
        ratio = ""
        if base is not None and r is not base:
            ratio = (
                f"   vs torch: prompt {r['prompt_tok_s'] / base['prompt_tok_s']:.2f}x,"
                f" gen {r['gen_tok_s'] / base['gen_tok_s']:.2f}x"
            )
        if llama is not None and r["engine"] == "fusegrad":
            ratio += (
                f"   vs llama.cpp: prompt {r['prompt_tok_s'] / llama['prompt_tok_s']:.2f}x,"
                f" gen {r['gen_tok_s'] / llama['gen_tok_s']:.2f}x"
            )
        same = "" if base is None or r["ids"] == base["ids"] else "   (greedy ids differ!)"
        print(
            f"{r['threads']} thread(s) {r['engine']:<9} prompt {r['prompt_tok_s']:7.1f} tok/s"
            f"   generation {r['gen_tok_s']:6.1f} tok/s   peak RSS {r['peak_rss_mib']:6.0f} MiB"
            + ratio
            + same
        )
    print()


if __name__ == "__main__":
    main()
