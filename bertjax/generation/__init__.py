"""Text generation, zero-shot prompting and continuation scoring with GPT models."""
