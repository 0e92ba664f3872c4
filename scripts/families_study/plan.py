"""Every run of the study, as data: which pretraining runs, which downstream runs, which table
cell reads which run. Nothing here runs anything, so `--dry_run` and the tests read the plan.

Layout under the study's root:

    pretrain/<model>/seed=<s>/            bertjax-train workdirs (+ heldout.json)
    runs/<task>/<cell>/seed=<s>/          one downstream run: metrics.jsonl, eval_results.json
    senses/<family>-<init>/seed=<s>/      the polysemy view's vectors and separations

A cell is `<model>-<init>-<approach>[-<variant>]`: init "pretrained" or "random" (the same
architecture and tokenizer, no pretraining), approach "finetuned" (bertjax.finetune.run: BERT
and GPT fine-tuned whole, ELMo in its task model) or "features" (the frozen model's mean-pooled
layers into the same logistic regression for every family). Downstream seed s starts from
pretraining seed s mod (the model's pretraining seeds); a random twin reads that run's
config and tokenizer, not its weights. Runs that two tables share (the
families table's BERT is Table 5's "No NSP" and Table 6's middle size) run once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from families_study.config import Study

INITS = ("pretrained", "random")
APPROACHES = ("finetuned", "features")


@dataclasses.dataclass(frozen=True)
class Pretraining:
    """One bertjax-train run."""

    model: str
    family: str
    experiment: str
    bindings: tuple[str, ...]
    steps: int
    seed: int

    @property
    def workdir(self) -> str:
        return f"pretrain/{self.model}/seed={self.seed}"


@dataclasses.dataclass(frozen=True)
class Downstream:
    """One downstream run: a model (pretrained or its random twin), an approach, a task."""

    task: str
    model: str
    family: str
    init: str
    approach: str
    seed: int
    pretraining: Pretraining
    variant: str = ""  # what an ablation changes, as a name
    settings: tuple[tuple[str, Any], ...] = ()  # Recipe settings the variant overrides

    @property
    def cell(self) -> str:
        parts = [self.model, self.init, self.approach] + ([self.variant] if self.variant else [])
        return "-".join(parts)

    @property
    def workdir(self) -> str:
        return f"runs/{self.task}/{self.cell}/seed={self.seed}"


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of an ablation table: its label and the cell it reads."""

    label: str
    cell: str


@dataclasses.dataclass
class Plan:
    """The study's runs and tables."""

    pretraining: list[Pretraining]
    downstream: list[Downstream]
    tables: dict[str, list[Row]]  # ablation table: rows (on AG News)

    def cells(self, task: str) -> list[str]:
        return list(dict.fromkeys(d.cell for d in self.downstream if d.task == task))


def _pretraining(study: Study, model: str, seed: int) -> Pretraining:
    family, experiment, bindings = study.models[model]
    shared = tuple(study.bindings.get(family, ()))
    return Pretraining(model, family, experiment, shared + tuple(bindings), study.steps[model],
                       seed)


def _downstream(study: Study, task: str, model: str, init: str, approach: str, seed: int,
                variant: str = "", settings: tuple = ()) -> Downstream:
    source = _pretraining(study, model, seed % study.seeds_of(model))
    return Downstream(task, model, study.family(model), init, approach, seed, source, variant,
                      settings)


def _ablations(study: Study) -> dict[str, list[tuple[str, str, str, str, tuple]]]:
    """table: rows (label, model, init, variant, settings), fine-tuned on AG News."""
    return {
        "bert_table5": [
            ("MLM + NSP", "bert_nsp", "pretrained", "", ()),
            ("No NSP (MLM)", "bert", "pretrained", "", ()),
            ("LTR & No NSP", "bert_ltr", "pretrained", "", ()),
            ("LTR & No NSP + BiLSTM", "bert_ltr", "pretrained", "bilstm",
             (("bilstm", True), ("lstm_size", 128))),
        ],
        # labelled "L=.., H=.., A=.." from each run's model.json when the table is made
        "bert_table6": [(m, m, "pretrained", "", ()) for m in study.table6],
        "gpt_table5": [
            ("Transformer with aux LM (lambda 0.5)", "gpt", "pretrained", "", ()),
            ("Transformer w/o aux LM", "gpt", "pretrained", "no_aux", (("lm_coef", 0.0),)),
            ("Transformer w/o pre-training", "gpt", "random", "", ()),
        ],
        "elmo_table2": [
            ("Last layer only", "elmo", "pretrained", "last_only", (("top_layer_only", True),)),
            ("All layers, lambda = 1", "elmo", "pretrained", "lambda_1", (("mix_l2", 1.0),)),
            ("All layers, lambda = 0.001", "elmo", "pretrained", "", ()),
        ],
    }


def make_plan(study: Study) -> Plan:
    """The runs of `study`, each once, pretraining before the runs that read it."""
    downstream: list[Downstream] = []
    for seed in range(study.seeds):
        for task in study.tasks:
            for family in ("bert", "gpt", "elmo"):
                for init in INITS:
                    for approach in APPROACHES:
                        downstream.append(_downstream(study, task, family, init, approach, seed))
    tables: dict[str, list[Row]] = {}
    for name, rows in _ablations(study).items():
        if name not in study.tables:
            continue
        tables[name] = []
        for label, model, init, variant, settings in rows:
            if model not in study.models:
                raise ValueError(f"table {name} needs model {model!r}: add it to "
                                 "families_study.models (with its steps)")
            for seed in range(study.seeds):
                downstream.append(_downstream(study, "agnews", model, init, "finetuned", seed,
                                              variant, settings))
            tables[name].append(Row(label, downstream[-1].cell))
    unique = list({d.workdir: d for d in downstream}.values())
    # a random twin reads its pretraining run too: the architecture and the tokenizer
    pretraining = list({d.pretraining.workdir: d.pretraining for d in unique}.values())
    pretraining.sort(key=lambda p: (p.seed, list(study.models).index(p.model)))
    return Plan(pretraining, unique, tables)
