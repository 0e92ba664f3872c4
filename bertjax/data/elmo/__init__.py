"""ELMo's pretraining examples: padded sentences, or windows of a token stream."""
