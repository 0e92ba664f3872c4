"""GPT's pretraining examples: packed windows of byte-level BPE tokens."""
