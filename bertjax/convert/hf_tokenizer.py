"""Tokenizer files transformers' AutoTokenizer reads, for bertjax's tokenizers.

    WordPiece (BERT):         vocab.txt, tokenizer_config.json (BertTokenizer, do_lower_case),
                              special_tokens_map.json
    byte-level BPE (GPT-2):   vocab.json, merges.txt, tokenizer_config.json (GPT2Tokenizer),
                              special_tokens_map.json
    GPT-1's BPE (openai_bpe): the same files, tokenizer_config.json naming OpenAIGPTTokenizer

bertjax's WordPiece follows google-research/bert's BasicTokenizer + WordPiece, as
transformers' BertTokenizer does (accents stripped exactly when lower-casing, Chinese
characters split); its byte-level BPE is GPT-2's, so the files are the ones it reads.
"""

import json
import os
import pathlib
import shutil
from typing import Any

BERT_SPECIALS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                 "cls_token": "[CLS]", "mask_token": "[MASK]"}
END_OF_TEXT = "<|endoftext|>"
OPENAI_UNKNOWN = "<unk>"  # GPT-1's unknown token


def _write_json(path: pathlib.Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_wordpiece(out: str | os.PathLike, vocab_file: str | os.PathLike, lower_case: bool,
                    max_length: int) -> list[str]:
    """Write a BertTokenizer's files for a WordPiece vocab.txt; the file names written."""
    out = pathlib.Path(out)
    tokens = pathlib.Path(vocab_file).read_text(encoding="utf-8").splitlines()
    missing = [t for t in BERT_SPECIALS.values() if t not in tokens]
    if missing:
        raise ValueError(f"{vocab_file} lacks {', '.join(missing)}: transformers' "
                         "BertTokenizer needs BERT's special tokens in vocab.txt")
    shutil.copyfile(vocab_file, out / "vocab.txt")
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer", "do_lower_case": bool(lower_case),
        "strip_accents": None, "tokenize_chinese_chars": True, "model_max_length": max_length,
        **BERT_SPECIALS})
    _write_json(out / "special_tokens_map.json", BERT_SPECIALS)
    return ["vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]


def write_bpe(out: str | os.PathLike, vocab_json: str | os.PathLike,
              merges_txt: str | os.PathLike, max_length: int,
              added_tokens: tuple[str, ...] = (), openai_gpt: bool = False) -> list[str]:
    """Write a GPT2Tokenizer's files for byte-level BPE files (with `openai_gpt`, an
    OpenAIGPTTokenizer's for GPT-1's character-level BPE); the file names written.
    `added_tokens` are appended after the vocabulary (GPT fine-tuning's special tokens)."""
    out = pathlib.Path(out)
    vocab = json.loads(pathlib.Path(vocab_json).read_text(encoding="utf-8"))
    shutil.copyfile(vocab_json, out / "vocab.json")
    shutil.copyfile(merges_txt, out / "merges.txt")
    if openai_gpt:
        specials = {"unk_token": OPENAI_UNKNOWN} if OPENAI_UNKNOWN in vocab else {}
        config: dict[str, Any] = {"tokenizer_class": "OpenAIGPTTokenizer",
                                  "model_max_length": max_length, **specials}
    else:
        specials = ({"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT,
                     "unk_token": END_OF_TEXT} if END_OF_TEXT in vocab else {})
        config = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False,
                  "model_max_length": max_length, **specials}
    if added_tokens:
        first = max(vocab.values()) + 1
        config["added_tokens_decoder"] = {
            str(first + i): {"content": token, "special": True, "lstrip": False,
                             "rstrip": False, "normalized": False, "single_word": False}
            for i, token in enumerate(added_tokens)}
        config["additional_special_tokens"] = list(added_tokens)
    _write_json(out / "tokenizer_config.json", config)
    _write_json(out / "special_tokens_map.json", specials)
    return ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]
