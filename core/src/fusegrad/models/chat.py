"""``fusegrad chat MODEL.gguf``: talk to a GGUF language model in the terminal.

The reply streams as it is generated: after each token the text decoded so far is compared with
what was printed and the new part is printed (a character split across tokens waits for its
last byte). At the end come the prompt's and the generation's tokens per second. Each turn
renders the whole conversation with the model's chat template and feeds it again from position 0
(the prompt is processed in padded chunks, so this costs little next to generating).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from fusegrad.errors import FusegradError
from fusegrad.models.llama import Llama, Sampler, smollm2_path
from fusegrad.models.tokenizer import GGUFTokenizer

#: what ``decode`` gives for an incomplete UTF-8 sequence at the end of the ids
_PARTIAL = "\ufffd"


@dataclass
class Timing:
    """Token counts and seconds of one reply: prompt processing, then generation."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    generation_seconds: float = 0.0

    def summary(self) -> str:
        """``prompt: 42 tokens, 310.2 tokens/s; generation: 30 tokens, 25.1 tokens/s``."""
        p = self.prompt_tokens / max(self.prompt_seconds, 1e-9)
        g = max(self.generated_tokens - 1, 0) / max(self.generation_seconds, 1e-9)
        return (
            f"prompt: {self.prompt_tokens} tokens, {p:.1f} tokens/s; "
            f"generation: {self.generated_tokens} tokens, {g:.1f} tokens/s"
        )


def stream_reply(model, tokenizer, ids: list[int], max_tokens: int, sampler, out: TextIO):
    """Generate after ``ids`` (model reset first), printing text as it comes; the new token ids
    (stop token left out) and the ``Timing``."""
    model.reset()
    timing = Timing(prompt_tokens=len(ids))
    start = time.perf_counter()
    new: list[int] = []
    printed = ""
    stops = tokenizer.stop_ids()
    for token in model.generate(ids, max_tokens, sampler, stop=stops):
        now = time.perf_counter()
        if not new:  # the first token comes right after the prompt's forward pass
            timing.prompt_seconds, start = now - start, now
        else:
            timing.generation_seconds = now - start
        timing.generated_tokens += 1
        if token in stops:
            break
        new.append(token)
        text = tokenizer.decode(new, skip_special=True)
        if not text.endswith(_PARTIAL):
            out.write(text[len(printed) :])
            out.flush()
            printed = text
    return new, timing


def add_chat_command(commands: argparse._SubParsersAction) -> None:
    """Register ``fusegrad chat`` on the ``fusegrad`` command's subparsers."""
    chat = commands.add_parser(
        "chat",
        help="chat with a GGUF language model (Llama family), streaming tokens",
        description="Chat with a Llama-family model from a GGUF file: type a message per line "
        "(or give --prompt), the reply streams as it is generated, then tokens/s.",
    )
    chat.add_argument("model", nargs="?", help="the .gguf file (default: SmolLM2-135M-Instruct)")
    chat.add_argument("--prompt", help="one message to answer, then exit")
    chat.add_argument("--system", help="a system message (default: the template's own)")
    chat.add_argument("--raw", action="store_true", help="feed the prompt as is, no template")
    chat.add_argument("--device", default=None, help="the device, e.g. CPU (default: DEV)")
    chat.add_argument("--max-tokens", type=int, default=256, help="tokens per reply at most")
    chat.add_argument("--max-context", type=int, default=1024, help="KV cache length")
    chat.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    chat.add_argument("--top-k", type=int, default=0, help="sample from the k likeliest")
    chat.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold")
    chat.add_argument("--repetition-penalty", type=float, default=1.0)
    chat.add_argument("--seed", type=int, default=None, help="seed of the sampler")
    chat.set_defaults(run=chat_command)


def chat_command(args: argparse.Namespace) -> int:
    """``fusegrad chat [MODEL.gguf] [--prompt TEXT] ...``; a bad file or a conversation too
    long for the context is an error message and exit code 1, not a traceback."""
    try:
        return _chat(args)
    except (FusegradError, FileNotFoundError) as e:
        print(f"fusegrad chat: {e}", file=sys.stderr)
        return 1


def _chat(args: argparse.Namespace) -> int:
    path = args.model or smollm2_path()
    model = Llama(path, device=args.device, max_context=args.max_context)
    tokenizer = GGUFTokenizer(model.metadata)
    sampler = Sampler(
        args.temperature, args.top_k, args.top_p, args.repetition_penalty, seed=args.seed
    )
    messages = [{"role": "system", "content": args.system}] if args.system else []
    turns = [args.prompt] if args.prompt is not None else _lines(sys.stdin)
    for text in turns:
        messages.append({"role": "user", "content": text})
        prompt = text if args.raw else tokenizer.apply_chat_template(messages)
        ids, timing = stream_reply(
            model, tokenizer, tokenizer.encode(prompt), args.max_tokens, sampler, sys.stdout
        )
        messages.append({"role": "assistant", "content": tokenizer.decode(ids, skip_special=True)})
        print(f"\n[{timing.summary()}]", file=sys.stderr, flush=True)
    return 0


def _lines(stream: TextIO):
    """The user's messages: one per line, with a ``> `` prompt when typing at a terminal."""
    while True:
        if stream.isatty():
            print("> ", end="", file=sys.stderr, flush=True)
        line = stream.readline()
        if not line:
            return
        if line.strip():
            yield line.rstrip("\n")
