"""Every gin name bertjax's configs use, registered in one place, at the edge (model and
training code never import gin). A new family adds its lines here: its config builder, its
objective and its data source; every `<family>_..._pretraining` objective here is one its family
declares in workdir.RECORD_NAMES (tests/training/test_families.py checks both ways).
"""

import gin

from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.elmo.source import ElmoSource
from bertjax.data.gpt.source import LmPretrainingSource
from bertjax.finetune.recipe import finetune, setting_types
from bertjax.models.bert import bert_config
from bertjax.models.elmo import elmo_config
from bertjax.models.gpt import gpt_config
from bertjax.objectives.bilm import elmo_pretraining
from bertjax.objectives.lm import gpt_pretraining
from bertjax.objectives.pretraining import bert_ltr_pretraining, bert_pretraining
from bertjax.training.aot import CompileTarget
from bertjax.training.elmo_optim import adagrad_optimizer
from bertjax.training.experiment import Experiment
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

MODULE = "bertjax"
# the types of settings a configurable takes as **kwargs, which its signature cannot show:
# gin values are checked against them as against the other configurables' type hints
# (bertjax.cli.gin_utils.check_types)
KEYWORD_SETTINGS = {"finetune": setting_types()}

# shared: the run, the mesh, the optimizers, the TPU slice bertjax-compile targets
gin.external_configurable(Experiment, "train", module=MODULE)
gin.external_configurable(make_mesh, module=MODULE)
gin.external_configurable(make_optimizer, module=MODULE)
gin.external_configurable(adagrad_optimizer, module=MODULE)
gin.external_configurable(CompileTarget, "aot_compile", module=MODULE)
gin.external_configurable(finetune, module=MODULE)  # bertjax-finetune's recipes, by family

# BERT
gin.external_configurable(bert_config, module=MODULE)
gin.external_configurable(bert_pretraining, module=MODULE)
gin.external_configurable(bert_ltr_pretraining, module=MODULE)  # Table 5's LTR ablation
gin.external_configurable(BertPretrainingSource, "bert_pretraining_source", module=MODULE)

# GPT
gin.external_configurable(gpt_config, module=MODULE)
gin.external_configurable(gpt_pretraining, module=MODULE)
gin.external_configurable(LmPretrainingSource, "lm_pretraining_source", module=MODULE)

# ELMo
gin.external_configurable(elmo_config, module=MODULE)
gin.external_configurable(elmo_pretraining, module=MODULE)
gin.external_configurable(ElmoSource, "elmo_source", module=MODULE)
