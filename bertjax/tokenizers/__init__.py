"""Tokenizers: BERT's WordPiece, GPT's byte-level BPE and ELMo's words and characters; each
learns its vocabulary from a corpus, loads it from files and encodes text."""
