"""Zero-shot prompting as in GPT-2 (Radford et al. 2019, section 3).

Summarization: the article followed by "TL;DR:", 100 tokens sampled with top-k (k = 2), the
first 3 sentences kept. Reading comprehension (CoQA): the document, the conversation so far
as "Q: ... A: ..." lines, then "Q: question" and "A:", decoded greedily to the end of line.
Translation (section 3.7): example pairs "english sentence = french sentence", one per line,
then "english sentence =", decoded greedily; the first generated sentence (here: the rest of
the line) is the translation. Multiple choice / cloze: compare the log-likelihood of each
candidate continuation.
"""

import re
from collections.abc import Sequence

import numpy as np

from bertjax.generation.generator import Generator

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# English -> French example pairs for translation_prompt (GPT-2 conditions on a few such pairs;
# the paper does not list its own).
TRANSLATION_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("The cat is sleeping on the chair.", "Le chat dort sur la chaise."),
    ("I would like a cup of coffee, please.", "Je voudrais une tasse de café, s'il vous plaît."),
    ("Where is the train station?", "Où est la gare ?"),
    ("We are going to the beach tomorrow.", "Nous allons à la plage demain."),
)


def tldr_prompt(article: str) -> str:
    """The summarization prompt: the article, a newline and "TL;DR:"."""
    return f"{article.strip()}\nTL;DR:"


def qa_prompt(document: str, question: str, history: Sequence[tuple[str, str]] = ()) -> str:
    """The reading-comprehension prompt: document, past "Q:/A:" turns, then "Q: ...\\nA:"."""
    turns = "".join(f"Q: {q.strip()}\nA: {a.strip()}\n" for q, a in history)
    return f"{document.strip()}\n{turns}Q: {question.strip()}\nA:"


def translation_prompt(sentence: str,
                       examples: Sequence[tuple[str, str]] = TRANSLATION_EXAMPLES) -> str:
    """The translation prompt: "english = french" example lines, then "english =" (section 3.7)."""
    pairs = "".join(f"{source.strip()} = {target.strip()}\n" for source, target in examples)
    return f"{pairs}{sentence.strip()} ="


def first_sentences(text: str, count: int = 3) -> str:
    """The first `count` sentences of text (GPT-2 keeps 3 of the 100 generated tokens)."""
    return " ".join(_SENTENCE_END.split(text.strip())[:count])


def summarize(generator: Generator, articles: str | Sequence[str], max_new_tokens: int = 100,
              top_k: int = 2, seed: int = 0) -> list[str]:
    """TL;DR summaries: top-k sampling, first 3 sentences of the continuation."""
    articles = [articles] if isinstance(articles, str) else list(articles)
    outputs = generator.generate([tldr_prompt(a) for a in articles], max_new_tokens,
                                 temperature=1.0, top_k=top_k, seed=seed)
    return [first_sentences(o) for o in outputs]


def answer(generator: Generator, document: str, question: str,
           history: Sequence[tuple[str, str]] = (), max_new_tokens: int = 32) -> str:
    """A greedy answer to `question` about `document`, up to the end of the line."""
    prompt = qa_prompt(document, question, history)
    out = generator.generate(prompt, max_new_tokens, temperature=0.0,
                             stop=("\n", "<|endoftext|>"))
    return out[0].strip()


def choose(generator: Generator, context: str, candidates: Sequence[str],
           normalize: bool = False) -> tuple[int, np.ndarray]:
    """Index of the most likely continuation and every candidate's log-likelihood
    (divided by its token count when `normalize`)."""
    scores = generator.score(context, candidates)
    if normalize:
        lengths = np.array([len(generator.tokenizer.encode(c)) for c in candidates])
        scores = scores / lengths
    return int(np.argmax(scores)), scores


def translate(generator: Generator, sentences: str | Sequence[str],
              examples: Sequence[tuple[str, str]] = TRANSLATION_EXAMPLES,
              max_new_tokens: int = 64) -> list[str]:
    """Greedy zero-shot translations: each prompt's continuation up to the end of its line."""
    sentences = [sentences] if isinstance(sentences, str) else list(sentences)
    prompts = [translation_prompt(s, examples) for s in sentences]
    outputs = generator.generate(prompts, max_new_tokens, temperature=0.0,
                                 stop=("\n", "<|endoftext|>"))
    return [o.strip() for o in outputs]
