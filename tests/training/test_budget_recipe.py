"""configs/runs/pretrain_budget.gin, the small-budget BERT recipe: it builds what it says
(masked LM only, 40% masked, a one-cycle schedule over the budget) and trains."""

import json

import gin

from bertjax.cli import gin_utils
from tests.in_process import run_tool

FILES = ["configs/models/bert_tiny.gin", "configs/meshes/cpu.gin",
         "configs/runs/pretrain_budget.gin"]
BINDINGS = ["BATCH_SIZE = 8", "NUM_STEPS = 3", "bert_config.vocab_size = 512",
            "bert_config.max_position_embeddings = 128",
            "bert_pretraining_source.vocab_size = 512", "train.seq_phases = ((1.0, 64),)"]


def test_budget_recipe_builds_its_settings():
    gin.clear_config()
    try:
        gin_utils.parse(FILES, [*BINDINGS, "bert_pretraining_source.corpus = 'stdlib'"])
        experiment = gin_utils.configured("train")
        assert gin.query_parameter("make_optimizer.warmup_share") == 0.33
        assert gin.query_parameter("make_optimizer.learning_rate") == 1e-3  # not the paper's
        assert set(experiment.objective.loss_fn.terms) == {"mlm_loss"}  # no NSP
        config = experiment.objective.config.transformer
        assert (config.dropout_rate, config.attention_dropout_rate) == (0.0, 0.0)
        assert experiment.source.packed_sequences == 3
        assert experiment.source.options["masked_lm_prob"] == 0.4
    finally:
        gin.clear_config()


def test_budget_recipe_trains(tmp_path, bert_sample):
    args = [f"--gin_file={f}" for f in FILES] + [f"--gin.{b.replace(' ', '')}" for b in BINDINGS]
    result = run_tool("bertjax.cli.train", *args, f"--workdir={tmp_path}", "--noprogress",
                      f"--gin.bert_pretraining_source.corpus='{bert_sample}'")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "checkpoints" / "3").is_dir()
    model = json.loads((tmp_path / "model.json").read_text())
    assert model["config"]["transformer"]["dropout_rate"] == 0.0
    assert model["data"]["packed_sequences"] == 3
