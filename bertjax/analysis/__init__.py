"""Looking inside trained models: contextual word vectors across layers (polysemy.py),
attention weights per layer and head (attention.py), heat maps of both (plotting.py); frozen
features of any family (features.py) and the small classifier that reads them (probe.py);
held-out scores against the unigram baseline (heldout.py)."""

from bertjax.analysis.attention import (
    AttentionMaps,
    bert_attention,
    collect_attention,
    gpt_attention,
    plot_attention,
)
from bertjax.analysis.plotting import heatmap_grid
from bertjax.analysis.polysemy import (
    SENSES,
    SENTENCES,
    SenseVerdict,
    WordVectors,
    bert_word_vectors,
    elmo_word_vectors,
    gpt_word_vectors,
    plot_similarities,
    sense_separation,
    similarity_matrices,
    third_sense,
)

__all__ = [
    "SENSES",
    "SENTENCES",
    "AttentionMaps",
    "SenseVerdict",
    "WordVectors",
    "bert_attention",
    "bert_word_vectors",
    "collect_attention",
    "elmo_word_vectors",
    "gpt_attention",
    "gpt_word_vectors",
    "heatmap_grid",
    "plot_attention",
    "plot_similarities",
    "sense_separation",
    "similarity_matrices",
    "third_sense",
]
