"""The families study (scripts/families.py): BERT (masked LM and left-to-right), GPT and ELMo
pretrained on the same corpus for the same budget, then a learning curve over labelled-set
sizes against their random-init twins and bag-of-words baselines, with paired statistics
over draws, and a polysemy view (docs/families.md).

    config.py      the study's sizes, budgets and curve (gin: configs/studies/*.gin)
    data.py        the derived data: the pretraining corpus and its held-out lines
    draws.py       stratified labelled draws, each with its held-out tenth
    plan.py        every run of the study, as data: pretraining runs and curve points
    execute.py     runs them (pretraining as bertjax-train processes, points in workers)
    curve.py       one point: fine-tuned over a rate grid, a probe, or bag-of-words
    stats.py       paired differences and their 95% intervals
    flops.py       pretraining FLOPs from a model and batch
    senses.py      the polysemy view: one word's vectors across senses, layer by layer
    tables.py      the tables from the runs' files (markdown and CSV); plots.py the pictures
"""
