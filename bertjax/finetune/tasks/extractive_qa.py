"""Extractive question answering (SQuAD 1.1 and 2.0, BERT sections 4.2 and 4.3): the answer
is a span of the context. The family's encoding reads each question in windows of its
context and labels each training window with the answer's first and last tokens; decoding
takes each question's best span over all its windows (bertjax.finetune.qa).

SQuAD 2.0 (dev data with unanswerable questions): a question answers "" when its null score
([CLS]) beats its best span by more than a threshold, tuned on the dev set to maximise F1 as
the paper does; eval_results.json records it as `null_threshold`. The best evaluation's
answers are also written for the official evaluation scripts: predictions.json, and
null_odds.json for 2.0 (`squad_files`). Metrics: exact match, F1 (and HasAns / NoAns
for 2.0), as the official scripts compute them.
"""

import json
from collections.abc import Mapping, Sequence

import numpy as np

from bertjax import metrics
from bertjax.finetune import qa
from bertjax.finetune.examples import QaExample, Reading
from bertjax.finetune.outputs import SPANS
from bertjax.finetune.task import QUESTIONS, EvalData, Task, register
from bertjax.metrics.squad import best_null_threshold

SQUAD_PREDICTIONS, SQUAD_NULL_ODDS = "predictions.json", "null_odds.json"


@register
class ExtractiveQa(Task):
    """A question on a context, the span of the context that answers it (or none)."""

    name = "qa"
    reading = Reading("squad", name)
    inputs, output = QUESTIONS, SPANS
    metrics = metrics.SQUAD

    def targets(self, examples: Sequence[QaExample], labels: None) -> list:
        """The answers (text, character start): the family labels each window from them."""
        return [ex.answers for ex in examples]

    def golds(self, examples: Sequence[QaExample]) -> list[list[str]]:
        return [list(ex.gold_texts) or [""] for ex in examples]

    def decode(self, outputs: np.ndarray, data: EvalData) -> tuple[list, dict]:
        """`outputs`: start and end logits [windows, L, 2]; `data.layout`: the QaWindows."""
        ids = data.ids
        best = qa.best_answers(outputs[..., 0], outputs[..., 1], data.layout,
                               data.recipe.max_answer_length)
        with_null = any(ex.impossible for ex in data.examples)  # SQuAD 2.0
        if not with_null:
            texts = [best[i].text for i in ids]
            return texts, {"files": squad_files(dict(zip(ids, texts, strict=True)))}
        spans, null_odds = {i: best[i].text for i in ids}, qa.null_score_diffs(best)
        golds = dict(zip(ids, data.golds, strict=True))
        threshold, _, _ = best_null_threshold(null_odds, spans, golds)
        chosen = qa.predictions_with_threshold(best, threshold)
        files = squad_files({i: chosen[i] for i in ids}, {i: null_odds[i] for i in ids})
        return [chosen[i] for i in ids], {"null_threshold": float(threshold), "files": files}

    def measure(self, predictions: list, data: EvalData) -> dict[str, float]:
        return metrics.compute(self.metrics, dict(zip(data.ids, data.golds, strict=True)),
                               dict(zip(data.ids, predictions, strict=True)))


def squad_files(predictions: Mapping[str, str],
                null_odds: Mapping[str, float] | None = None) -> dict[str, str]:
    """{file name: text} of predictions.json ({question id: answer text}, "" for no answer:
    what evaluate-v1.1.py and evaluate-v2.0.py read) and, for SQuAD 2.0, null_odds.json
    ({question id: null score - best span score}: evaluate-v2.0.py's --na-prob-file, as
    google-research/bert's run_squad.py writes it)."""
    files = {SQUAD_PREDICTIONS: json.dumps(dict(predictions), indent=2, ensure_ascii=False)
             + "\n"}
    if null_odds is not None:
        odds = {qid: float(value) for qid, value in null_odds.items()}
        files[SQUAD_NULL_ODDS] = json.dumps(odds, indent=2) + "\n"
    return files
