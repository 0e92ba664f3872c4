"""The models fine-tuning trains: each family's pretrained network with a task head, as an
Objective for the shared training loop (BERT's heads, BERT's feature-based tagger, GPT with
its linear output layer and auxiliary LM loss, ELMo's task BiLSTM)."""
