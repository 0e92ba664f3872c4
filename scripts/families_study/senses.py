"""The polysemy view: "bank" in sixteen sentences, eight about money and eight about rivers,
its vector at every layer of each family's pretrained model and of its random twin; per layer
the sense separation (bertjax.analysis.polysemy.sense_separation: mean cosine within a sense
minus mean cosine across senses). The static-embedding baseline is each model's own token
layer, where "bank" has one vector in every sentence: separation 0.

In half the sentences of each sense the word that tells the sense comes before "bank" ("the
river bank"), in the other half only after it ("the bank of the river"): a left-to-right
model's vector of "bank" cannot see the second kind, so GPT's separation is also given over
the first half alone ("cue before"), where all three families can see the cue.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

WORD = "bank"
# (sentence, sense, the cue comes before the word)
SENTENCES: tuple[tuple[str, str, bool], ...] = (
    ("Shares of the bank fell after the merger was announced .", "money", True),
    ("She deposited the cheque at her bank this morning .", "money", True),
    ("The central bank cut interest rates again on Tuesday .", "money", True),
    ("Regulators fined the investment bank for hiding losses .", "money", True),
    ("The bank raised its interest rates on Tuesday .", "money", False),
    ("The bank lent millions to the struggling airline .", "money", False),
    ("The bank reported record profits from its loans .", "money", False),
    ("The bank hired new traders to manage its deposits .", "money", False),
    ("The boat drifted toward the muddy river bank .", "river", True),
    ("Reeds grew thickly along the river bank .", "river", True),
    ("Children played on the grassy bank beside the stream .", "river", True),
    ("After the flood the river burst its bank overnight .", "river", True),
    ("The bank was flooded when the river rose overnight .", "river", False),
    ("The bank of the lake was covered in reeds and mud .", "river", False),
    ("The bank eroded after weeks of heavy rain and floods .", "river", False),
    ("The bank sloped down to the water where the ducks swam .", "river", False),
)


def word_vectors(model: Any) -> Any:
    """The word's WordVectors at every layer of `model` (a Pretrained of any family)."""
    from bertjax.analysis.polysemy import bert_word_vectors, elmo_word_vectors, gpt_word_vectors
    from bertjax.inference.elmo import ElmoEmbedder

    sentences = [s for s, _, _ in SENTENCES]
    if model.family == "bert":
        return bert_word_vectors(model.config, model.params, model.tokenizer, sentences, WORD)
    if model.family == "gpt":
        return gpt_word_vectors(model.config, model.params, model.tokenizer, sentences, WORD)
    embedder = ElmoEmbedder(model.config, model.params, model.tokenizer, model.word_tokenizer)
    return elmo_word_vectors(embedder, sentences, WORD, model.word_tokenizer)


def separations(vectors: Any) -> dict[str, Any]:
    """{"layers", "separation" (all sentences), "separation_cue_before"} of WordVectors.
    BERT's "embeddings" layer (word + position: neither static nor contextual) is left out."""
    from bertjax.analysis.polysemy import sense_separation

    keep = [k for k, name in enumerate(vectors.layer_names) if name != "embeddings"]
    sims = vectors.similarities()[keep]
    senses = [sense for _, sense, _ in SENTENCES]
    before = [i for i, (_, _, cue_before) in enumerate(SENTENCES) if cue_before]
    return {
        "layers": [vectors.layer_names[k] for k in keep],
        "separation": sense_separation(sims, senses).tolist(),
        "separation_cue_before": sense_separation(
            sims[:, before][:, :, before], [senses[i] for i in before]).tolist(),
    }


def run_senses(family: str, init: str, seed: int, pretraining: pathlib.Path,
               out: pathlib.Path) -> dict[str, Any]:
    """The separations of one model (pretrained, or its random twin from `seed`) into
    out/senses.json; read back when it is there."""
    from bertjax.analysis.features import random_twin
    from bertjax.finetune.pretrained import load_pretrained

    path = out / "senses.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    model = load_pretrained(str(pretraining), family)
    if init == "random":
        model = random_twin(model, seed)
    vectors = word_vectors(model)
    result = {"family": family, "init": init, "seed": seed, "word": WORD,
              **separations(vectors)}
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "vectors.npy", vectors.vectors)
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    scratch.replace(path)
    return result
