"""Training and evaluation data: tokenizers, text sources, packing into fixed-length sequences."""
