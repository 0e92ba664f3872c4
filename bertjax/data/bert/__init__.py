"""BERT's pretraining examples: sentence pairs with masked tokens (and the NSP label)."""
