"""`--init` of a transformers `openai-gpt` directory (GPT-1): its tokenizer is character-level
BPE with an end-of-word mark, not GPT-2's byte-level one. On a directory transformers itself
saves (a small random OpenAIGPTLMHeadModel and an OpenAIGPTTokenizer, whose BPE the
`tokenizers` library learned from AG News), bertjax's ids equal transformers' on real and
awkward text, a fine-tuning run trains from it, and its export tokenizes as transformers does."""

import json
import pathlib

import jax
import pytest

import bertjax.finetune
from bertjax.convert.export import export
from bertjax.finetune.examples import TextExample
from bertjax.finetune.pretrained import load_pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.tokenizers.openai_bpe import OpenAIGptBPE
from bertjax.training.mesh import make_mesh

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
AWKWARD = ["Café Ångström NAÏVE don't", "中文abc字 x\u00a0y", "Qqqzzz!!? ... ¿qué?", "", "   "]


def agnews_sentences(agnews_dir, split, n):
    lines = (agnews_dir / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    return [line.split("\t")[0] for line in lines]


@pytest.fixture(scope="module")
def openai_gpt_dir(agnews_dir, tmp_path_factory) -> pathlib.Path:
    """What transformers saves for a GPT-1 model and tokenizer (tokenizer.json, no
    vocab.json): a 2-layer random OpenAIGPTLMHeadModel and a 400-token BPE."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    learner = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    learner.normalizer = normalizers.BertNormalizer(lowercase=True)
    learner.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    learner.train_from_iterator(agnews_sentences(agnews_dir, "train", 2000), trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>"], end_of_word_suffix="</w>"))
    model = json.loads(learner.to_str())["model"]
    tokenizer = transformers.OpenAIGPTTokenizer(
        vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]])
    out = tmp_path_factory.mktemp("openai_gpt") / "model"
    config = transformers.OpenAIGPTConfig(vocab_size=len(model["vocab"]), n_positions=64,
                                          n_embd=32, n_layer=2, n_head=2)
    transformers.OpenAIGPTLMHeadModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    assert not (out / "vocab.json").exists()  # transformers 5 writes tokenizer.json only
    return out


def test_ids_equal_transformers_openai_gpt_tokenizer(openai_gpt_dir, agnews_dir):
    theirs = transformers.AutoTokenizer.from_pretrained(openai_gpt_dir)
    ours = load_pretrained(str(openai_gpt_dir), "gpt").tokenizer
    assert isinstance(ours, OpenAIGptBPE)
    texts = agnews_sentences(agnews_dir, "test", 300) + AWKWARD
    for text in texts:
        assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"], text
    assert any(ours.unk_id in ours.encode(t) for t in AWKWARD)  # unseen characters


def test_fine_tuning_from_it_and_the_export_tokenize_alike(openai_gpt_dir, agnews_dir, tmp_path):
    sentences = agnews_sentences(agnews_dir, "train", 32)
    examples = [TextExample(str(i), (s,), str(i % 2)) for i, s in enumerate(sentences)]
    recipe = Recipe("gpt", "classification", max_seq_length=48, batch_size=8, epochs=1.0)
    outcome = bertjax.finetune.run(recipe, str(openai_gpt_dir), examples, examples[:8],
                                   tmp_path / "run", mesh=make_mesh(devices=jax.devices()[:1]))
    assert outcome.result.step == 4 and "accuracy" in outcome.results["final"]
    record = json.loads((tmp_path / "run" / "task.json").read_text())
    assert record["tokenizer"]["kind"] == "openai_bpe"
    out = export(tmp_path / "run", tmp_path / "export", encoder_only=True).out
    exported = transformers.AutoTokenizer.from_pretrained(out)
    assert type(exported).__name__ == "OpenAIGPTTokenizer"
    ours = load_pretrained(str(openai_gpt_dir), "gpt").tokenizer
    for text in sentences[:50] + AWKWARD:
        assert exported(text, add_special_tokens=False)["input_ids"] == ours.encode(text)
