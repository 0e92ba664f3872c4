"""bertjax-fill-mask: the end of `make demo`. It fills in blanks of held-out text with the
model a run just trained, next to the true words, and measures masked-LM accuracy there."""

import pathlib
import re

import numpy as np
import pytest

from bertjax.data import corpora
from bertjax.inference.fill_mask import MaskFiller
from tests.in_process import run_tool

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo's own config on the stdlib corpus, shortened to a few steps."""
    workdir = tmp_path_factory.mktemp("demo")
    result = run_tool("bertjax.cli.train", "--gin_file=configs/experiments/bert_tiny_demo.gin",
                      f"--workdir={workdir}", "--noprogress", "--gin.NUM_STEPS=3",
                      "--gin.BATCH_SIZE=8", cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def test_held_out_documents_are_never_trained_on():
    train, held_out = corpora.stdlib_documents(), corpora.stdlib_documents("held_out")
    everything = corpora.stdlib_documents("all")
    assert len(held_out) == len(everything) // corpora.HELD_OUT_EVERY
    assert len(train) + len(held_out) == len(everything)
    trained_text = {" ".join(d) for d in train}
    assert not any(" ".join(d) in trained_text for d in held_out)


def test_demo_ends_with_blanks_filled_next_to_the_true_words(demo_run):
    result = run_tool("bertjax.cli.fill_mask", f"--checkpoint={demo_run}", "--examples=3")
    assert result.returncode == 0, result.stderr[-3000:]
    blanks = re.findall(r"blank \d: true: (\S+) +model: (.+)", result.stdout)
    assert len(blanks) >= 3, result.stdout
    for _, guesses in blanks:
        assert len(re.findall(r"\(\d\.\d\d\)", guesses)) == 3  # top-3 with probabilities
    accuracy = re.search(r"masked-LM accuracy on held-out text: (\d\.\d+) \(([\d,]+)",
                         result.stdout)
    assert accuracy and 0.0 <= float(accuracy[1]) <= 1.0 and int(accuracy[2].replace(",", "")) > 0


def test_fill_returns_a_distribution_per_blank(demo_run):
    filler = MaskFiller.from_workdir(demo_run)
    guesses = filler.fill("The [MASK] module provides [MASK] for regular expressions .", top_k=5)
    assert len(guesses) == 2 and all(len(g) == 5 for g in guesses)
    for g in guesses:
        probabilities = [p for _, p in g]
        assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1


def test_text_past_the_models_positions_is_refused_and_never_shown(demo_run):
    filler = MaskFiller.from_workdir(demo_run)
    positions = filler.config.max_position_embeddings  # 32 in the demo's config
    longest = " ".join(["module"] * (positions - 2))  # one piece per word, with [CLS] and [SEP]
    assert filler.fits(longest) and not filler.fits(longest + " module")
    assert filler.fits(longest.replace("module", "[MASK]", 1))  # [MASK] is one position
    assert len(filler.fill(longest.replace("module", "[MASK]", 1))) == 1
    with pytest.raises(ValueError, match=f"33 tokens exceed the model's {positions} positions"):
        filler.fill("[MASK] " + longest)


def test_sentence_without_a_blank_is_one_line(demo_run):
    result = run_tool("bertjax.cli.fill_mask", f"--checkpoint={demo_run}",
                      "--sentence=no blank here")
    assert result.returncode == 2
    errors = [x for x in result.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and "[MASK]" in errors[0], result.stderr[-2000:]



def test_demo_prints_the_unigram_baseline_beside_the_accuracy(demo_run):
    result = run_tool("bertjax.cli.fill_mask", f"--checkpoint={demo_run}", "--examples=1")
    assert result.returncode == 0, result.stderr[-3000:]
    baseline = re.search(r"unigram baseline on the same blanks: (\d\.\d+) \(always '(.+)', the "
                         r"most frequent of ([\d,]+) training tokens of stdlib\)", result.stdout)
    assert baseline, result.stdout
    assert 0.0 < float(baseline[1]) < 0.2 and int(baseline[3].replace(",", "")) > 100_000
    masked = re.search(r"at the ([\d,]+) blanks shown as \[MASK\]: model (\d\.\d+), unigram "
                       r"baseline (\d\.\d+)", result.stdout)
    assert masked and 0.0 <= float(masked[2]) <= 1.0 and 0.0 < float(masked[3]) < 0.2


def test_the_baseline_token_is_the_most_frequent_of_the_training_text(demo_run, tmp_path):
    filler = MaskFiller.from_workdir(demo_run)
    assert filler.train_corpus == "stdlib"  # as the run recorded it
    words = ["return", "value", "module", "file"]
    assert all(len(filler.vocab.encode(w)) == 1 for w in words)
    corpus = tmp_path / "corpus.txt"
    # "module" leads the first document, "return" the whole text.
    corpus.write_text("module module module file value .\nmodule value file .\n\n"
                      + "return return value file .\n" * 4, encoding="utf-8")
    baseline = filler.unigram_baseline(str(corpus))
    assert (baseline.token, baseline.counted) == ("return", 6 + 4 + 4 * 5)
    assert baseline.token_id == filler.vocab.encode("return")[0]
    first_document = filler.unigram_baseline(str(corpus), limit=5)
    assert (first_document.token, first_document.counted) == ("module", 6 + 4)


def test_score_weighs_blanks_and_separates_those_shown_as_mask(demo_run):
    filler = MaskFiller.from_workdir(demo_run)
    vocab = filler.vocab
    words = [vocab.encode(w)[0] for w in ("return", "value", "module", "file", "the", "a")]
    ids = np.array([[vocab.cls_id, *words, vocab.sep_id]] * 2, np.int32)  # [2, 8]
    positions = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    batch = {"input_ids": ids.copy(), "segment_ids": np.zeros_like(ids),
             "input_mask": np.ones_like(ids), "masked_lm_positions": positions}
    batch["input_ids"][0, [1, 2]] = vocab.mask_id  # row 0: two [MASK], one kept token
    batch["input_ids"][1, [4, 5, 6]] = vocab.mask_id  # row 1: three [MASK]
    probs = filler._probs(filler.params, batch["input_ids"], batch["segment_ids"],
                          batch["input_mask"], positions)
    guesses = np.asarray(probs).argmax(-1)  # [2, 3], through the fill-in path
    other = (guesses + 1) % filler.config.vocab_size
    # right at (0,0) (0,2) (1,0) (1,2); wrong at (0,1) (1,1); (1,2) does not count
    targets = np.where([[1, 0, 1], [1, 0, 1]], guesses, other).astype(np.int32)
    baseline_id = int(targets[0, 1])  # the baseline guesses (0,1), and wherever it recurs
    batch.update(masked_lm_ids=targets,
                 masked_lm_weights=np.array([[1, 1, 1], [1, 1, 0]], np.float32))
    score = filler.score([batch], baseline_id)
    counted = np.array([[1, 1, 1], [1, 1, 0]], bool)
    shown = np.array([[1, 1, 0], [1, 1, 1]], bool) & counted
    right = np.array([[1, 0, 1], [1, 0, 1]], bool)
    hits = targets == baseline_id
    assert (score.count, score.mask_count) == (5, 4)
    assert score.accuracy == pytest.approx((right & counted).sum() / 5)
    assert score.mask_accuracy == pytest.approx((right & shown).sum() / 4)
    assert score.baseline == pytest.approx((hits & counted).sum() / 5)
    assert score.mask_baseline == pytest.approx((hits & shown).sum() / 4)
    assert filler.score([batch]).baseline is None


def test_held_out_accuracy_is_the_training_objectives_mlm_accuracy(demo_run):
    import jax

    from bertjax.objectives.pretraining import bert_pretraining

    filler = MaskFiller.from_workdir(demo_run)
    batches = list(filler.held_out_batches("stdlib:held_out", batches=3, batch_size=8))
    loss = jax.jit(bert_pretraining(filler.config, use_nsp=False).loss_fn)
    correct = total = 0.0
    for batch in batches:
        _, metrics = loss(filler.params, batch, None)
        weight = float(batch["masked_lm_weights"].sum())
        correct, total = correct + float(metrics["mlm_accuracy"]) * weight, total + weight
    assert filler.score(batches).accuracy == pytest.approx(correct / total, abs=1e-6)


def test_a_workdir_without_its_training_corpus_asks_for_it(demo_run, tmp_path):
    import json
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(demo_run, copy)
    record = json.loads((copy / "model.json").read_text())
    record.pop("data")
    (copy / "model.json").write_text(json.dumps(record))
    result = run_tool("bertjax.cli.fill_mask", f"--checkpoint={copy}", "--examples=1")
    assert result.returncode == 2
    errors = [x for x in result.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and "--train_corpus" in errors[0], result.stderr[-2000:]
    result = run_tool("bertjax.cli.fill_mask", f"--checkpoint={copy}", "--examples=1",
                      "--train_corpus=stdlib")
    assert result.returncode == 0 and "unigram baseline" in result.stdout, result.stderr[-2000:]


def test_a_table_larger_than_the_vocabulary_predicts_only_its_tokens(tmp_path):
    """A run with VOCAB_SIZE above what its vocabulary learned (8,192 rows over a vocab.txt of
    7,297 tokens) has rows no text reaches: fill-in guesses, their probabilities and the
    held-out guesses come from the vocabulary alone (a top-k id past vocab.txt was an
    IndexError), even where those rows would score highest."""
    import flax.linen as nn
    import jax

    from bertjax.convert.hf_bert import param_template
    from bertjax.models.bert import bert_config
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "module", "file", "value"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    vocab = WordPieceVocabulary(tmp_path / "vocab.txt", lower_case=True)
    config = bert_config("tiny", vocab_size=24, hidden_size=16, num_layers=1, num_heads=2,
                         mlp_dim=32, max_position_embeddings=16)
    shapes = nn.unbox(param_template(config, heads=True))
    params = jax.tree.map(lambda x: np.full(x.shape, 0.01, np.float32), shapes)
    params["mlm_bias"] = np.where(np.arange(24) < len(words), 0.0, 50.0).astype(np.float32)
    filler = MaskFiller(config, params, vocab)
    guesses = filler.fill("the [MASK] file", top_k=24)[0]
    assert len(guesses) == len(words) and {w for w, _ in guesses} == set(words)
    assert sum(p for _, p in guesses) == pytest.approx(1.0, abs=1e-5)
    ids = np.array([[vocab.cls_id, 5, vocab.mask_id, 7, vocab.sep_id]], np.int32)
    batch = {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": np.ones_like(ids),
             "masked_lm_positions": np.array([[2]], np.int32),
             "masked_lm_ids": np.array([[6]], np.int32),
             "masked_lm_weights": np.ones((1, 1), np.float32)}
    guess = int(np.asarray(filler._guesses(filler.params, batch))[0, 0])
    assert guess < len(words)
