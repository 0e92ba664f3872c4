"""Every recipe in configs/finetune/ holds the papers' values, and says in a comment where a
setting is not the paper's (or the paper gives none).

The table below is read off the papers: BERT (Devlin et al. 2018) sections 4.1-4.4, 5.3 and
appendix A.3; GPT (Radford et al. 2018) section 4.1 and its task list (Table 1); ELMo (Peters
et al. 2018) sections 3.3 and 5.1, and for its NER model AllenNLP's configuration of it
(training_config/ner_elmo.jsonnet, which the paper's code release points to).
"""

import pathlib
import re

import gin
import pytest

from bertjax.cli import gin_utils
from bertjax.finetune.adapter import check_supported
from bertjax.finetune.families import get_adapter
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.tasks import get_task

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs" / "finetune"
BERT_GLUE_LEARNING_RATES = (5e-5, 4e-5, 3e-5, 2e-5)  # section 4.1: chosen on dev
BERT_GLUE = dict(batch_size=32, epochs=3.0, dropout=0.1)  # 4.1; A.3: dropout always 0.1
GPT = dict(learning_rate=6.25e-5, batch_size=32, epochs=3.0, warmup_fraction=0.002,
           dropout=0.1, lm_coef=0.5, weight_decay=0.01)  # 4.1; L2 w = 0.01 from pretraining

# recipe: (family, task type, the papers' values)
PAPERS = {
    "bert_classification": ("bert", "classification", BERT_GLUE),
    "bert_pair_classification": ("bert", "pair_classification", BERT_GLUE),
    "bert_regression": ("bert", "regression", BERT_GLUE),
    "bert_tagging": ("bert", "tagging", BERT_GLUE),  # A.3's ranges; no NER-specific values
    "bert_squad": ("bert", "qa", dict(learning_rate=5e-5, batch_size=32, epochs=3.0,
                                      max_answer_length=30)),  # 4.2 (30: the span limit)
    "bert_squad2": ("bert", "qa", dict(learning_rate=5e-5, batch_size=48, epochs=2.0)),  # 4.3
    "bert_swag": ("bert", "multiple_choice", dict(learning_rate=2e-5, batch_size=16,
                                                  epochs=3.0)),  # 4.4
    "bert_features_ner": ("bert", "tagging", dict(approach="features", lstm_size=768,
                                                  features="concat_last_four")),  # Table 7
    "gpt_classification": ("gpt", "classification", GPT),  # CoLA, SST-2
    "gpt_entailment": ("gpt", "pair_classification",
                       dict(GPT, pair_transformation="entailment")),  # SNLI, MNLI, QNLI, RTE
    "gpt_paraphrase": ("gpt", "pair_classification",
                       dict(GPT, pair_transformation="similarity")),  # MRPC, QQP
    "gpt_similarity": ("gpt", "regression",
                       dict(GPT, pair_transformation="similarity")),  # STS-B
    "gpt_multiple_choice": ("gpt", "multiple_choice", GPT),  # RACE, Story Cloze
    "elmo_classification": ("elmo", "classification", dict(mix_l2=0.001)),  # 5.1
    "elmo_pair_classification": ("elmo", "pair_classification", dict(mix_l2=0.001)),
    "elmo_tagging": ("elmo", "tagging", dict(mix_l2=0.001, lstm_size=200, lstm_layers=2,
                                             dropout=0.5, batch_size=64, learning_rate=1e-3,
                                             word_embed_dim=50)),  # the NER model
}
# settings whose value is not the paper's, or that the paper does not give: the recipe names
# each in a comment that says so
NOT_FROM_THE_PAPER = {
    "bert_classification": ("warmup", "weight decay", "epsilon", "max_seq_length"),
    "bert_squad": ("384-token windows", "128-token stride", "64 tokens"),
    "bert_swag": ("max_seq_length",),
    "bert_tagging": ("document",),
    "bert_features_ner": ("finetune.learning_rate",),
    "gpt_classification": ("epsilon", "max_seq_length"),
    "elmo_classification": ("task-specific", "GloVe", "lr", "epochs", "dropout"),
    "elmo_tagging": ("Senna", "CRF", "epochs"),
}


def recipe_of(name):
    """The recipe a gin file (a name in configs/finetune, or a path without .gin) configures."""
    gin.clear_config()
    try:
        gin_utils.parse([str(CONFIGS / f"{name}.gin")], [])
        return gin_utils.configured("finetune")
    finally:
        gin.clear_config()


def comments(name):
    """The comment text of a recipe and the recipes it includes."""
    text = (CONFIGS / f"{name}.gin").read_text(encoding="utf-8")
    own = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    included = re.findall(r"include 'configs/finetune/(\w+)\.gin'", text)
    return " ".join([own, *(comments(other) for other in included)])


def test_every_recipe_is_in_the_table():
    assert sorted(p.stem for p in CONFIGS.glob("*.gin")) == sorted(PAPERS)


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_recipe_matches_the_papers(name):
    family, task, values = PAPERS[name]
    recipe = recipe_of(name)
    assert (recipe.family, recipe.task) == (family, task)
    for setting, value in values.items():
        assert getattr(recipe, setting) == value, (name, setting)
    if family == "bert" and recipe.approach == "fine_tune" and task not in ("qa",
                                                                           "multiple_choice"):
        assert recipe.learning_rate in BERT_GLUE_LEARNING_RATES
    if family == "bert" and recipe.approach == "fine_tune":
        assert recipe.warmup_fraction == 0.1 and recipe.adam_epsilon == 1e-6
        assert recipe.optimizer == "bert_adam"  # google-research/bert's AdamWeightDecay
    check_supported(get_adapter(recipe.family, recipe.approach), get_task(recipe.task), recipe)


# The Python API's recipe of a family and task type, and the gin recipe of that pair when it
# binds nothing else: one source, so the same values.
PYTHON = {"bert_classification": {}, "bert_pair_classification": {}, "bert_regression": {},
          "bert_tagging": {}, "bert_squad": {}, "bert_swag": {},
          "gpt_classification": {}, "gpt_entailment": {}, "gpt_multiple_choice": {},
          "gpt_similarity": dict(pair_transformation="similarity"),
          "elmo_classification": {}, "elmo_pair_classification": {}, "elmo_tagging": {}}


@pytest.mark.parametrize("name", sorted(PYTHON))
def test_the_python_api_starts_from_the_same_papers_values(name):
    """Recipe("gpt", ...) is GPT's recipe, not BERT's learning rate, warmup and epsilon with a
    GPT model; an ELMo recipe reads [x_k; ELMo_k], not ELMo alone."""
    family, task, values = PAPERS[name]
    recipe = Recipe(family, task, **PYTHON[name])
    assert recipe == recipe_of(name)
    for setting, value in values.items():
        assert getattr(recipe, setting) == value, (name, setting)
    if family == "elmo":
        assert recipe.word_embed_dim > 0 and recipe.approach == "features"


def own_bindings(name):
    return [line for line in (CONFIGS / f"{name}.gin").read_text().splitlines()
            if line.startswith("finetune.")]


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_a_recipe_file_binds_only_what_its_task_changes(name, tmp_path):
    """A binding that sets what the recipe would hold anyway repeats recipe.py's value: two
    sources that can drift apart."""
    recipe = recipe_of(name)
    for line in own_bindings(name):
        if line.startswith(("finetune.family", "finetune.task")):
            continue
        without = tmp_path / f"{name}.gin"
        without.write_text((CONFIGS / f"{name}.gin").read_text().replace(line + "\n", ""))
        assert recipe_of(without.with_suffix("")) != recipe, (name, line)


@pytest.mark.parametrize("name", sorted(NOT_FROM_THE_PAPER))
def test_departures_are_said(name):
    text = comments(name)
    assert "Not in the paper" in text or "Not as the paper" in text, name
    for words in NOT_FROM_THE_PAPER[name]:
        assert words in text, (name, words)


def test_a_recipe_is_its_familys_and_refuses_another_familys_setting():
    """Recipe(family, ...) is BertRecipe / GptRecipe / ElmoRecipe: each holds the shared
    settings and its own; another family's setting, or an unknown family, is one line."""
    from bertjax.finetune.recipe import BertRecipe, ElmoRecipe, GptRecipe

    assert type(Recipe("bert", "classification", packed_sequences=4)) is BertRecipe
    assert type(Recipe("gpt", "classification", lm_coef=0.0)) is GptRecipe
    assert type(Recipe("elmo", "classification", mix_l2=1.0)) is ElmoRecipe
    assert not hasattr(Recipe("gpt", "classification"), "packed_sequences")
    with pytest.raises(ValueError, match="finetune.lm_coef is a GPT setting; this recipe "
                                         "fine-tunes BERT"):
        Recipe("bert", "classification", lm_coef=0.0)
    with pytest.raises(ValueError, match="finetune.lstm_size is a BERT and ELMO setting; this "
                                         "recipe fine-tunes GPT"):
        Recipe("gpt", "classification", lstm_size=10)
    with pytest.raises(ValueError, match="finetune.family is 't5': choose one of bert, gpt"):
        Recipe("t5", "classification")
