"""BERT for extractive QA as a fine-tuning task: SQuAD windows in, answer texts out.

Training windows carry the answer's start and end tokens ([CLS] when a window does not hold
it, or the question has none); evaluation decodes each question from all its windows
(finetune/qa.py) and, for SQuAD 2.0, predicts no answer when the null score beats the best
span by more than a threshold chosen on the dev set to maximise F1 (BERT paper, section 4.3).
The best evaluation's answers are also written for the official evaluation scripts
(predictions.json, and null_odds.json for 2.0: finetune/official.py).
"""

from typing import Any

import numpy as np

from bertjax.finetune import official, qa
from bertjax.finetune.bert import BertHead, bert_finetuning, with_pretrained_encoder
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import Arrays, TaskSetup
from bertjax.metrics.squad import best_null_threshold


def bert_qa_setup(recipe: Recipe, model: Pretrained, config: Any, train: list, dev: list
                  ) -> TaskSetup:
    """The TaskSetup of SQuAD 1.1 / 2.0 fine-tuning from `model` (a BERT encoder)."""
    options = dict(vocab=model.tokenizer, max_seq_length=recipe.max_seq_length,
                   doc_stride=recipe.doc_stride, max_query_length=recipe.max_query_length)
    train_arrays, _ = qa.qa_features(train, training=True, **options)
    dev_arrays, windows = qa.qa_features(dev, training=False, **options)
    ids = [ex.id for ex in dev]
    golds = [[text for text, _ in ex.answers] or [""] for ex in dev]
    with_null = any(ex.impossible for ex in dev)  # SQuAD 2.0
    head = BertHead(config, "span")

    def predict(params: Any, inputs: Arrays) -> Any:
        return head.apply({"params": params}, inputs["input_ids"], inputs["segment_ids"],
                          inputs["input_mask"])

    def decode(logits_NxLx2: np.ndarray) -> tuple[list, dict]:
        best = qa.best_answers(logits_NxLx2[..., 0], logits_NxLx2[..., 1], windows,
                               recipe.max_answer_length)
        if not with_null:
            texts = [best[i].text for i in ids]
            return texts, {"files": official.squad_files(dict(zip(ids, texts, strict=True)))}
        spans, null_odds = {i: best[i].text for i in ids}, qa.null_score_diffs(best)
        threshold, _, _ = best_null_threshold(null_odds, spans, dict(zip(ids, golds, strict=True)))
        chosen = qa.predictions_with_threshold(best, threshold)
        files = official.squad_files({i: chosen[i] for i in ids}, {i: null_odds[i] for i in ids})
        return [chosen[i] for i in ids], {"null_threshold": float(threshold), "files": files}

    return TaskSetup(bert_finetuning(config, "span"), train_arrays, dev_arrays, predict, decode,
                     golds, ids, lambda p: with_pretrained_encoder(p, model.params))
