"""GPT fine-tuning: the paper's input transformations, and each one learning a small task
through `bertjax.finetune.run` (a tiny GPT whose "words" are token ids)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bertjax.finetune
from bertjax.finetune.examples import ChoiceExample, TextExample
from bertjax.finetune.families.gpt import encode, sequences
from bertjax.finetune.heads.gpt import SpecialTokens, special_tokens, with_special_tokens
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.models.gpt import GptLM, gpt_config
from bertjax.training.mesh import make_mesh

CONFIG = gpt_config("gpt2_tiny", vocab_size=16, max_position_embeddings=32, num_layers=2,
                    hidden_size=32, num_heads=2, mlp_dim=64, dropout_rate=0.0,
                    attention_dropout_rate=0.0)
S = SpecialTokens(100, 101, 102)


class TokenIds:
    """A tokenizer whose words are token ids ("4 3 7" -> [4, 3, 7])."""

    @staticmethod
    def encode(text):
        return [int(word) for word in text.split()]


def test_input_transformations_follow_figure_1():
    assert sequences("classification", ([1, 2],), S, 16) == [[100, 1, 2, 102]]
    assert sequences("entailment", ([1, 2], [3]), S, 16) == [[100, 1, 2, 101, 3, 102]]
    assert sequences("similarity", ([1], [2, 3]), S, 16) == [
        [100, 1, 101, 2, 3, 102], [100, 2, 3, 101, 1, 102]]
    assert sequences("multiple_choice", ([1, 2], [[3], [4, 5]]), S, 16) == [
        [100, 1, 2, 101, 3, 102], [100, 1, 2, 101, 4, 5, 102]]
    assert sequences("entailment", ([1] * 10, [2] * 3), S, 8) == [[100, 1, 1, 101, 2, 2, 2, 102]]
    batch = encode("similarity", [([1], [2, 3]), ([4], [5])], S, 16)
    assert batch["input_ids"].shape == (2, 2, 6) and batch["input_mask"][1, 0].sum() == 5
    with pytest.raises(ValueError, match="choose one of"):
        sequences("translation", ([1],), S, 8)


def _task(kind, n, rng):
    """Small synthetic tasks: is the marker token 3 where it matters? Content tokens are 4..15,
    and 3 also occurs where it does not matter, so the model must use the structure."""

    def text(k, marked):
        t = rng.integers(4, 16, k).tolist()
        if marked:
            t[rng.integers(0, k)] = 3
        return " ".join(map(str, t))

    examples = []
    for i in range(n):
        if kind == "classification":  # is the marker in the text?
            y = int(rng.random() < 0.5)
            examples.append(TextExample(str(i), (text(6, y),), str(y)))
        elif kind == "entailment":  # is the marker in the hypothesis (not the premise)?
            y = int(rng.random() < 0.5)
            examples.append(TextExample(str(i), (text(5, rng.random() < 0.5), text(3, y)), str(y)))
        elif kind == "similarity":  # are both texts marked? (symmetric)
            a, b = rng.random() < 0.7, rng.random() < 0.7
            examples.append(TextExample(str(i), (text(3, a), text(3, b)), str(int(a and b))))
        else:  # multiple choice: which answer is marked? (the context may be marked too)
            y = int(rng.integers(0, 3))
            choices = tuple(text(2, k == y) for k in range(3))
            examples.append(ChoiceExample(str(i), text(4, rng.random() < 0.5), choices, y))
    return examples


def lm_params(seed=1):
    init = jax.jit(lambda k: GptLM(CONFIG).init(k, jnp.zeros((1, 4), jnp.int32)))
    return nn.unbox(init(jax.random.key(seed))["params"])


def _run(kind, lm_coef, workdir, pretrained=True):
    rng = np.random.default_rng(0)
    task = "multiple_choice" if kind == "multiple_choice" else (
        "classification" if kind == "classification" else "pair_classification")
    recipe = Recipe("gpt", task, learning_rate=3e-3, batch_size=32, epochs=6.0,
                    warmup_fraction=0.05, dropout=0.0, lm_coef=lm_coef, max_seq_length=16,
                    pretrained=pretrained, adam_epsilon=1e-8, eval_every=1000,
                    pair_transformation="similarity" if kind == "similarity" else "entailment")
    model = Pretrained("gpt", CONFIG, lm_params(), TokenIds(), "synthetic")
    outcome = bertjax.finetune.run(recipe, model, _task(kind, 512, rng), _task(kind, 256, rng),
                                   workdir, mesh=make_mesh(devices=jax.devices()[:1]))
    assert outcome.setup.objective.name == f"gpt_{kind}"
    return outcome


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["classification", "entailment", "similarity",
                                  "multiple_choice"])
def test_each_input_transformation_learns_a_small_task(kind, tmp_path):
    outcome = _run(kind, lm_coef=0.5, workdir=tmp_path, pretrained=False)
    accuracy = outcome.results["best"]["accuracy"]
    print(f"\n{kind}: held-out accuracy {accuracy:.3f}")
    assert accuracy > 0.85  # chance is 0.5 (0.33 for three choices)
    assert "lm_loss" in outcome.result.metrics


@pytest.mark.e2e
def test_without_the_auxiliary_lm_objective_and_from_pretrained_weights(tmp_path):
    outcome = _run("classification", lm_coef=0.0, workdir=tmp_path)
    accuracy = outcome.results["best"]["accuracy"]
    print(f"\nclassification, lambda 0, from a GptLM's weights: {accuracy:.3f}")
    assert accuracy > 0.85 and "lm_loss" not in outcome.result.metrics


def test_special_tokens_extend_the_embeddings_and_lambda_must_be_non_negative():
    table = {"token_embeddings": {"embedding": jnp.ones((16, 8))}, "other": 1}
    extended = with_special_tokens(table, jax.random.key(0))
    assert extended["token_embeddings"]["embedding"].shape == (19, 8) and extended["other"] == 1
    assert special_tokens(CONFIG) == SpecialTokens(16, 17, 18)
    from bertjax.finetune.heads.gpt import gpt_finetuning
    from bertjax.finetune.outputs import CLASSES

    with pytest.raises(ValueError, match="lm_coef"):
        gpt_finetuning(CONFIG, "classification", CLASSES, 2, lm_coef=-1.0)


@pytest.mark.parametrize("transformation, sequences", [("entailment", 1), ("similarity", 2),
                                                        ("multiple_choice", 3)])
def test_l3_is_l2_plus_lambda_l1(transformation, sequences):
    """The fine-tuning loss equals the task loss alone (lambda 0) plus 0.5 times the
    next-token loss of every real token of every sequence, computed here from the LM's
    logits with numpy."""
    from bertjax.finetune.heads.gpt import extended_config, gpt_finetuning
    from bertjax.finetune.outputs import CHOICE, CLASSES

    output = CHOICE if transformation == "multiple_choice" else CLASSES
    classes = 1 if transformation == "multiple_choice" else 3
    with_lm = gpt_finetuning(CONFIG, transformation, output, classes, lm_coef=0.5,
                             classifier_dropout=0.0, num_sequences=sequences)
    task_only = gpt_finetuning(CONFIG, transformation, output, classes, lm_coef=0.0,
                               classifier_dropout=0.0, num_sequences=sequences)
    rng = np.random.default_rng(3)
    B, L = 4, 10
    lengths = rng.integers(3, L + 1, (B, sequences))
    mask = (np.arange(L) < lengths[..., None]).astype(np.int32)
    ids = (rng.integers(0, 19, (B, sequences, L)) * mask).astype(np.int32)
    labels = rng.integers(0, sequences if transformation == "multiple_choice" else classes, B)
    batch = {"input_ids": ids, "input_mask": mask, "label": labels.astype(np.int32)}
    params = nn.unbox(with_lm.init_variables(jax.random.key(0), batch)["params"])

    l3, metrics = with_lm.loss_fn(params, batch, None)
    l2, _ = task_only.loss_fn(params, batch, None)
    logits = np.asarray(GptLM(extended_config(CONFIG)).apply(
        {"params": params["gpt"]}, ids.reshape(-1, L), mask.reshape(-1, L)), np.float64)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    targets, weights = ids.reshape(-1, L)[:, 1:], mask.reshape(-1, L)[:, 1:]
    nll = -np.take_along_axis(log_probs[:, :-1], targets[..., None], -1)[..., 0]
    l1 = (nll * weights).sum() / weights.sum()

    np.testing.assert_allclose(float(metrics["lm_loss"]), l1, rtol=1e-5)
    np.testing.assert_allclose(float(metrics["task_loss"]), float(l2), rtol=1e-6)
    np.testing.assert_allclose(float(l3), float(l2) + 0.5 * l1, rtol=1e-5)
    assert float(l2) > 0 and l1 > 0
