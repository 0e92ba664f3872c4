"""Using trained models: ELMo embeddings (elmo.py)."""
