"""GPT-2's translation prompt (Radford et al. 2019, section 3.7) end to end: a real byte-level
BPE and a GPT trained until it has memorized a parallel text laid out as that prompt lays it
out, so the greedy continuation of "english sentence =" is known: its French sentence, cut at
the end of the line."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest

from bertjax.generation.generator import Generator
from bertjax.generation.prompts import TRANSLATION_EXAMPLES, translate, translation_prompt
from bertjax.models.gpt import GptLM, gpt_config
from bertjax.tokenizers.bpe import learn_bpe

QUERY = ("The book is on the table.", "Le livre est sur la table.")
# The parallel text: every example pair, then the query's pair, one "english = french" a line.
TEXT = translation_prompt(QUERY[0], TRANSLATION_EXAMPLES) + f" {QUERY[1]}\nThe cat = Le chat\n"


@pytest.fixture(scope="module")
def generator():
    tokenizer = learn_bpe([TEXT] * 5, 300)
    config = gpt_config("gpt2_tiny", vocab_size=300, max_position_embeddings=256, num_layers=1,
                        hidden_size=64, num_heads=4, mlp_dim=128)
    model = GptLM(config)
    ids_1xL = jnp.asarray([tokenizer.encode(TEXT)])
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), ids_1xL[:, :4])["params"])
    optimizer = optax.adam(1e-2)

    def loss(p):
        logits_1xLxV = model.apply({"params": p}, ids_1xL[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits_1xLxV, ids_1xL[:, 1:]).mean()

    @jax.jit
    def step(p, opt_state):
        value, grads = jax.value_and_grad(loss)(p)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, value

    opt_state = optimizer.init(params)
    for _ in range(100):
        params, opt_state, value = step(params, opt_state)
    assert float(value) < 0.05  # the text is memorized
    return Generator(config, params, tokenizer)


def test_the_prompt_is_example_lines_then_the_sentence_and_equals():
    prompt = translation_prompt(" Good night. ", [("Hello.", "Bonjour."), ("Yes", " Oui ")])
    assert prompt == "Hello. = Bonjour.\nYes = Oui\nGood night. ="
    assert translation_prompt("Hi.").startswith(f"{TRANSLATION_EXAMPLES[0][0]} = ")
    assert translation_prompt("Hi.").count("\n") == len(TRANSLATION_EXAMPLES)


def test_translate_greedily_continues_to_the_end_of_the_line(generator):
    prompt = translation_prompt(QUERY[0])
    unstopped = generator.generate(prompt, 24, temperature=0.0, stop=())[0]
    assert unstopped.startswith(f" {QUERY[1]}\nThe cat")  # the model goes on past the line
    assert translate(generator, QUERY[0], max_new_tokens=24) == [QUERY[1]]


def test_translations_do_not_depend_on_the_batch(generator):
    alone = translate(generator, "The cat is sleeping on the chair.", max_new_tokens=24)
    batch = translate(generator, [QUERY[0], "The cat is sleeping on the chair."],
                      max_new_tokens=24)
    assert batch == [QUERY[1], alone[0]] and "\n" not in alone[0]
