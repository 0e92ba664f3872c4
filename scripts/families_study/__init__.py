"""The families study (scripts/families.py): ELMo, GPT and BERT pretrained on the same corpus
for the same budget, evaluated fine-tuned and feature-based against their random-init twins,
over seeds, with the papers' ablations re-based on the same regime (docs/families.md).

    config.py      the study's sizes and budgets (gin: configs/studies/*.gin)
    data.py        the derived data: the pretraining corpus and its held-out lines, QNLI-5
    plan.py        every run of the study, as data: pretraining runs and downstream cells
    execute.py     runs them (pretraining as bertjax-train processes, downstream in workers)
    downstream.py  one downstream run: bertjax.finetune.run, or frozen features + a probe
    language.py    held-out language-model scores against the unigram baseline
    senses.py      the polysemy view: one word's vectors across senses, layer by layer
    tables.py      mean +- std over seeds from the runs' files: markdown, CSV and plots
"""
