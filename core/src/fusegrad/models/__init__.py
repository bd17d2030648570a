"""Pretrained models built from their files: a BERT sentence encoder, a Llama-family LM."""
