"""Export SmolLM2-135M-Instruct (4-bit GGUF) as a web page that generates text on WebGPU.

    .venv/bin/python examples/llm_web.py --prompt "The capital of France is" --raw --out smollm2-web
    python -m http.server -d smollm2-web   # then open http://127.0.0.1:8000 in a WebGPU browser

The page runs the prompt's tokens through the exported decode step one at a time, then greedy
generation of ``--max-tokens`` tokens (ending early at an end-of-turn token), showing the text
as it comes. The prompt is tokenized here, in Python; the page decodes the generated ids with
the vocabulary written next to it. ``--model`` takes any Llama-family GGUF file.
"""

from __future__ import annotations

import argparse

from fusegrad.models.llama import Llama, smollm2_path
from fusegrad.models.tokenizer import GGUFTokenizer
from fusegrad.nn.gguf import gguf_metadata
from fusegrad_webgpu.llm import export_llm


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--model", help="a .gguf file (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--raw", action="store_true", help="no chat template")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", default="llm-web", help="the folder to write the page into")
    args = parser.parse_args()

    path = args.model or smollm2_path()
    tokenizer = GGUFTokenizer(gguf_metadata(path))
    text = args.prompt
    if not args.raw:
        text = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
    ids = tokenizer.encode(text)
    model = Llama(path, device="WEBGPU", max_context=len(ids) + args.max_tokens)
    folder = export_llm(
        model, args.out, ids, args.max_tokens, tokenizer.tokens, tokenizer.stop_ids()
    )
    print(f"wrote {folder}: serve it (python -m http.server -d {folder}) and open it")


if __name__ == "__main__":
    main()
