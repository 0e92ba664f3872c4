"""BERT WordPiece's reserved tokens and limits, shared by the python tokenizer (wordpiece.py)
and its TensorFlow twin (wordpiece_tf.py), which import this module and not each other."""

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
RESERVED_TOKENS = (PAD, UNK, CLS, SEP, MASK)
PAD_ID = 0  # seqio pads with 0
SUFFIX = "##"
# The longest word WordPiece splits into pieces, by the rules a vocabulary follows; a longer
# word becomes [UNK]: transformers' BertTokenizerFast's max_input_chars_per_word (100), and
# google-research/bert's WordpieceTokenizer's (200).
MAX_CHARS_PER_WORD = {"transformers": 100, "google": 200}

# CJK Unified Ideographs blocks BERT splits character by character.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
