"""A GGUF file's tokenizer and chat template, built offline from its metadata.

GGUF stores a byte-level BPE tokenizer (``tokenizer.ggml.model == "gpt2"``) as its vocabulary
(``tokenizer.ggml.tokens``, in id order), its merges (``"Ġ t"``: two symbols joined by a space)
and each token's type (3: a control token such as ``<|im_start|>``). The ``tokenizers`` library
builds the same tokenizer from those lists, with no download. The pre-tokenizer splits digits
one by one before GPT-2's byte-level split, as SmolLM's (``tokenizer.ggml.pre == "smollm"``) and
Llama 3's do; the chat template (``tokenizer.chat_template``) is a Jinja2 template.
"""

from __future__ import annotations

from typing import Any

from fusegrad.errors import FileFormatError

#: GGUF token types (llama.cpp's ``llama_token_type``)
CONTROL, USER_DEFINED = 3, 4


class GGUFTokenizer:
    """Text <-> token ids for a GGUF model, and its chat template.

    ``encode`` never adds a BOS token unless the file asks for one
    (``tokenizer.ggml.add_bos_token``); control tokens written in the text (``<|im_end|>``)
    become their ids, so a rendered chat template encodes as the model was trained.
    """

    def __init__(self, metadata: dict[str, Any]):
        model = metadata.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise FileFormatError(
                f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') GGUF "
                "tokenizers are supported (Llama 3, SmolLM, Qwen...)"
            )
        self.tokens: list[str] = metadata["tokenizer.ggml.tokens"]
        types = metadata.get("tokenizer.ggml.token_type", [1] * len(self.tokens))
        self.special = [t for t, k in zip(self.tokens, types) if k in (CONTROL, USER_DEFINED)]
        self.bos_id: int | None = metadata.get("tokenizer.ggml.bos_token_id")
        self.eos_id: int | None = metadata.get("tokenizer.ggml.eos_token_id")
        self.add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", False))
        self.chat_template: str | None = metadata.get("tokenizer.chat_template")
        self._bpe = _build_bpe(self.tokens, metadata["tokenizer.ggml.merges"], self.special)

    @property
    def vocab_size(self) -> int:
        """The number of tokens (the model's logits have this length)."""
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text`` (control tokens written in it included)."""
        ids = self._bpe.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if self.add_bos and self.bos_id is not None else ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        """The text of ``ids``; ``skip_special`` leaves out control tokens."""
        return self._bpe.decode(list(ids), skip_special_tokens=skip_special)

    def stop_ids(self) -> set[int]:
        """Ids that end a reply: EOS, and the end-of-turn marker of ChatML templates."""
        stops = {self.eos_id} if self.eos_id is not None else set()
        for name in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
            if name in self.special:
                stops.add(self.tokens.index(name))
        return stops

    def apply_chat_template(
        self, messages: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The prompt text for ``messages`` (``[{"role": "user", "content": ...}]``), rendered
        with the file's Jinja2 chat template (ChatML if the file has none)."""
        import jinja2  # only chat needs it

        source = self.chat_template or _CHATML
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _template_error
        bos = self.tokens[self.bos_id] if self.bos_id is not None else ""
        eos = self.tokens[self.eos_id] if self.eos_id is not None else ""
        return env.from_string(source).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
        )


#: the template used when a file has none
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _template_error(message: str) -> None:
    raise FileFormatError(f"the chat template refused the messages: {message}")


def _build_bpe(tokens: list[str], merges: list[str], special: list[str]) -> Any:
    """A ``tokenizers.Tokenizer`` for a byte-level BPE vocabulary and merge list."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise ImportError(
            "GGUF tokenizers need the tokenizers package: pip install tokenizers"
        ) from None
    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [(a, b) for a, _, b in (m.partition(" ") for m in merges)]
    tok = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    return tok
