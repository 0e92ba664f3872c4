"""KV-cache decoding: equals recomputing the prefix, ignores the rest of the batch (greedy, and
sampled with per-prompt keys), matches transformers' greedy generate, stops at stop tokens;
prompts that do not fit fail clearly."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.generation.decode import check_fits, generate_ids, left_pad
from bertjax.generation.generator import Generator
from bertjax.generation.prompts import qa_prompt, tldr_prompt
from bertjax.generation.sampling import GREEDY, GenerationError, Sampling
from bertjax.models.gpt import GptLM, gpt_config
from bertjax.tokenizers.bpe import learn_bpe

# A large init std makes the random model's logits decisive: greedy choices are not near-ties.
CONFIG = gpt_config("gpt2_tiny", vocab_size=300, max_position_embeddings=32, num_layers=2,
                    hidden_size=32, num_heads=4, mlp_dim=64, initializer_range=0.3)
MODEL = GptLM(CONFIG)
NEW = 10
PROMPTS = [[5, 9, 2], [7, 1, 1, 3, 8, 30, 12, 4, 9], [11]]


@pytest.fixture(scope="module")
def params():
    init = jax.jit(lambda key: MODEL.init(key, jnp.zeros((1, 4), jnp.int32))["params"])
    return nn.unbox(init(jax.random.key(0)))


def _recompute_greedy(params, prompt, new=NEW):
    """Reference: the full model on the whole prefix at every step (no cache, no padding; the
    buffer's right tail is ignored under the causal mask)."""
    apply = jax.jit(lambda p, ids: MODEL.apply({"params": p}, ids))
    ids = np.zeros((1, len(prompt) + new), np.int32)
    ids[0, :len(prompt)] = prompt
    for t in range(len(prompt), len(prompt) + new):
        ids[0, t] = int(np.argmax(np.asarray(apply(params, ids))[0, t - 1]))
    return ids[0, len(prompt):].tolist()


def _cached_greedy(params, prompts, length=None):
    ids, mask = left_pad(prompts, pad_id=0, length=length)
    out = generate_ids(params, ids, mask, jax.random.key(0), model=MODEL, max_new_tokens=NEW,
                       sampling=GREEDY)
    return np.asarray(out).tolist()


def test_cached_greedy_equals_recomputing_and_ignores_the_batch(params):
    reference = [_recompute_greedy(params, p) for p in PROMPTS]
    alone = _cached_greedy(params, [PROMPTS[0]])[0]  # [1, 3]: no padding at all
    batch = _cached_greedy(params, PROMPTS)  # [3, 9]: rows 0 and 2 left-padded
    assert alone == reference[0]
    assert batch == reference
    assert len({tuple(r) for r in reference}) == 3  # the prompts do lead somewhere different


@pytest.mark.torch
def test_greedy_matches_transformers_generate_with_left_padding():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bertjax.convert import hf_gpt

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4, initializer_range=0.3,
        bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    config = hf_gpt.config_from_hf(hf.config.to_dict())
    params = hf_gpt.hf_to_bertjax(hf.state_dict(), config)
    ids, mask = left_pad(PROMPTS, pad_id=0)
    with torch.no_grad():
        expected = hf.generate(torch.from_numpy(ids).long(),
                               attention_mask=torch.from_numpy(mask).long(), do_sample=False,
                               max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    got = generate_ids(params, ids, mask, jax.random.key(0), model=GptLM(config),
                       max_new_tokens=NEW, sampling=GREEDY)
    np.testing.assert_array_equal(np.asarray(got), expected[:, ids.shape[1]:].numpy())


def test_rows_stop_at_stop_tokens_then_pad(params):
    free = _cached_greedy(params, PROMPTS)
    stop = free[1][3]  # row 1's fourth token
    ids, mask = left_pad(PROMPTS, pad_id=0)
    out = np.asarray(generate_ids(params, ids, mask, jax.random.key(0), model=MODEL,
                                  max_new_tokens=NEW, sampling=GREEDY, stop_ids=(stop,),
                                  pad_id=63)).tolist()
    for row, expected in zip(out, free, strict=True):
        cut = expected.index(stop) + 1 if stop in expected else NEW
        assert row[:cut] == expected[:cut] and row[cut:] == [63] * (NEW - cut)


def test_sampling_is_seeded(params):
    ids, mask = left_pad(PROMPTS, pad_id=0)

    def sample(seed):
        return np.asarray(generate_ids(params, ids, mask, jax.random.key(seed), model=MODEL,
                                       max_new_tokens=NEW, sampling=Sampling(top_k=5)))
    first, again, other = sample(1), sample(1), sample(2)
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()


def _sampled(params, prompts, seed=1, length=None, row_ids=None):
    """Plain sampling at temperature 1 (the random model's draws there are far from greedy)."""
    ids, mask = left_pad(prompts, pad_id=0, length=length)
    rows = {} if row_ids is None else {"row_ids_B": np.asarray(row_ids, np.int32)}
    out = generate_ids(params, ids, mask, jax.random.key(seed), model=MODEL, max_new_tokens=NEW,
                       sampling=Sampling(temperature=1.0), **rows)
    return np.asarray(out).tolist()


@pytest.mark.parametrize("partitionable", [True, False])
def test_a_sampled_continuation_depends_only_on_seed_index_and_prompt(params, partitionable):
    # Per-row keys make this hold under either threefry mode; one [B, V] draw per step held it
    # only where row b's bits do not depend on B (jax_threefry_partitionable=True).
    with jax.threefry_partitionable(partitionable):
        _check_batch_independence(params)


def _check_batch_independence(params):
    together = _sampled(params, PROMPTS)
    assert _sampled(params, PROMPTS[:1])[0] == together[0]  # later prompts change nothing
    assert _sampled(params, PROMPTS[:2])[1] == together[1]
    # the same list split into batches, each passing its prompts' indices
    split = _sampled(params, PROMPTS[:1]) + _sampled(params, PROMPTS[1:], row_ids=[1, 2])
    assert split == together
    # longer padding: a longer prompt appended, or the batch padded to twice its width
    longer = _sampled(params, PROMPTS + [list(range(1, 16))])
    assert longer[:3] == together
    assert _sampled(params, PROMPTS, length=2 * len(PROMPTS[1])) == together


def test_sampled_continuations_change_with_the_seed_and_the_row(params):
    together = _sampled(params, PROMPTS)
    other_seed = _sampled(params, PROMPTS, seed=2)
    assert all(a != b for a, b in zip(together, other_seed, strict=True))
    same_prompt = _sampled(params, [PROMPTS[0]] * 4)  # four independent draws
    assert len({tuple(row) for row in same_prompt}) == 4
    assert same_prompt[0] == together[0]  # row 0 is row 0, whatever the other prompts
    later = _sampled(params, PROMPTS, row_ids=[3, 4, 5])
    compiled = generate_ids._cache_size()
    assert _sampled(params, PROMPTS, row_ids=[6, 7, 8]) != later  # other indices, other draws
    assert generate_ids._cache_size() == compiled  # row indices are traced, not compiled in


def test_generator_samples_per_prompt_index_without_recompiling(params):
    tokenizer = learn_bpe(["the cat sat on the mat. the dog sat on the log."] * 10, 270)
    generator = Generator(CONFIG, params, tokenizer)
    prompts = [[5, 9, 2], [7, 1, 1, 3], [11, 4]]

    def tokens(batch, seed=3):
        return generator.generate_tokens(batch, NEW, Sampling(temperature=1.0), seed)

    together = tokens(prompts)
    assert tokens(prompts[:1]) == together[:1]
    assert tokens(prompts[:2]) == together[:2]
    assert tokens(prompts, seed=4) != together
    compiled = generate_ids._cache_size()
    assert tokens([[8, 8, 8], [6], [2, 2]]) != together  # new prompts, same shapes
    assert generate_ids._cache_size() == compiled  # a new request reuses the compiled loop


def test_prompts_that_do_not_fit_fail_with_the_allowed_length():
    check_fits([20], 12, 32)
    with pytest.raises(GenerationError, match="at most 20 fit the model's 32-token context"):
        check_fits([5, 21], 12, 32)
    with pytest.raises(GenerationError, match="max_new_tokens"):
        check_fits([1], 40, 32)


def test_generator_api_decodes_text_and_cuts_at_stop_strings(params):
    texts = ["the cat sat on the mat. the dog sat on the log."] * 10
    tokenizer = learn_bpe(texts, 270)  # < the model's 300 ids: the rest are never emitted
    generator = Generator(CONFIG, params, tokenizer)
    outputs = generator.generate(["the cat", "the dog sat on"], max_new_tokens=8, temperature=0)
    assert len(outputs) == 2 and all(isinstance(o, str) for o in outputs)
    assert generator.generate("the cat", 8, temperature=0)[0] == outputs[0]
    for out in generator.generate(["the cat", "a"], 8, temperature=1.0, seed=3, stop=["t"]):
        assert "t" not in out
    assert all(max(generator.tokenizer.encode(o) or [0]) < 270 for o in outputs)

    # scores are the summed log-probabilities of the candidates' tokens given the context,
    # among the tokenizer's 270 ids (the distribution generation samples from)
    context, candidates = tokenizer.encode("the cat"), [" sat on", " dog"]
    scores = generator.score("the cat", candidates)
    for candidate, score in zip(candidates, scores, strict=True):
        ids = context + tokenizer.encode(candidate)
        logits = np.asarray(MODEL.apply({"params": params}, jnp.asarray([ids])))[0, :, :270]
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        expected = sum(logp[t - 1, ids[t]] for t in range(len(context), len(ids)))
        assert score == pytest.approx(expected, abs=1e-4)
    with pytest.raises(GenerationError, match="the vocab.json and merges.txt the model"):
        Generator(dataclasses.replace(CONFIG, vocab_size=100), params, tokenizer)


def test_zero_shot_prompts_have_gpt2s_format():
    assert tldr_prompt("An article.\n") == "An article.\nTL;DR:"
    prompt = qa_prompt("Doc.", "Who?", [("What?", "A cat.")])
    assert prompt == "Doc.\nQ: What?\nA: A cat.\nQ: Who?\nA:"


def test_a_stop_string_inside_a_token_keeps_the_text_before_it(params):
    """A stop string that begins inside a token (stop "." in a token " etc.") cuts the text
    there: what the token holds before the stop string stays in the continuation."""
    texts = ["the cat sat on the mat. the dog sat on the log."] * 10
    tokenizer = learn_bpe(texts, 270)
    generator = Generator(CONFIG, params, tokenizer)
    prompt = "the cat"
    (full,) = generator.generate_tokens([tokenizer.encode(prompt)], NEW, GREEDY)
    pieces = [tokenizer.decode_bytes([t]) for t in full]  # a random model: not all UTF-8
    data = b"".join(pieces)
    assert tokenizer.decode(full) == generator.generate(prompt, NEW, temperature=0, stop=())[0]
    # an ASCII letter whose first occurrence is inside a token, after k >= 1 of its bytes
    starts = np.cumsum([0] + [len(p) for p in pieces])
    inside = [(chr(p[k]), int(starts[j]) + k) for j, p in enumerate(pieces)
              for k in range(1, len(p)) if chr(p[k]).isalpha() and p[k] < 128
              and data.find(p[k:k + 1]) == starts[j] + k]
    assert inside, pieces
    stop, cut = inside[0]
    want = data[:cut].decode("utf-8", errors="replace")
    assert generator.generate(prompt, NEW, temperature=0, stop=[stop])[0] == want
