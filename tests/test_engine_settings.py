"""Sampling settings are part of the law (issue 38, item 1): the spec, its parser, and the processed law.

transformers' own logits processors (the ones ``generate`` builds) are the independent computation that
``exactness.settings.processed_law(..., "transformers")`` must match in float64, setting by setting.
"""

import numpy as np
import pytest

from exactness.settings import (ORDERS, STEPS, History, SamplingSettings, parse_settings, processed_law,
                                register_order)

SETTINGS = ["T=1", "temperature=0.7", "temperature=2.5", "top_k=1", "top_k=3", "top_p=0.5", "top_p=0.8",
            "min_p=0.05", "min_p=0.3", "repetition_penalty=1.5", "repetition_penalty=0.8", "logit_bias=3:2;5:-1",
            "bad_words=4;6 7", "bad_words=2 3", "temperature=0.5,top_k=5,top_p=0.9,min_p=0.1,repetition_penalty=1.3,"
            "logit_bias=2:1;9:-3,bad_words=4"]


def _hf_law(logits, ctx, s: SamplingSettings):
    """transformers' own processors, in float64, on the same logits (the independent computation)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from exactness.engines.transformers_engine import generation_options

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=logits.shape[1], hidden_size=8, intermediate_size=8,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    gc = GenerationConfig(do_sample=True, eos_token_id=[], pad_token_id=0, **generation_options(s))
    model._prepare_special_tokens(gc, device="cpu")
    ids = torch.as_tensor(ctx)
    procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=5, encoder_input_ids=ids,
                                        prefix_allowed_tokens_fn=None, logits_processor=None, device="cpu",
                                        model_kwargs={})
    scores = procs(ids, torch.as_tensor(logits, dtype=torch.float64))
    return torch.softmax(scores, dim=1).numpy()


@pytest.mark.parametrize("text", SETTINGS)
def test_transformers_order_matches_transformers_processors_in_float64(text):
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=2.0, size=(12, 16))
    ctx = np.concatenate([np.tile([2, 3, 4, 2, 3], (12, 1)), rng.integers(0, 16, (12, 3))], axis=1)
    ctx[0, -2:] = [6, 7]  # a bad word's prefix is present in some rows
    ctx[1, -1] = 6
    s = parse_settings(text)
    ours = processed_law(logits, ctx, 5, s, "transformers")
    np.testing.assert_allclose(ours, _hf_law(logits, ctx, s), atol=1e-12)


def test_the_settings_change_the_law():
    """Every setting of the grid moves the law (a test with a setting that is a no-op would prove nothing)."""
    rng = np.random.default_rng(2)
    logits = rng.normal(scale=2.0, size=(4, 16))
    ctx = np.tile([2, 3, 4, 2, 3, 6, 2], (4, 1))  # ends in a bad word's prefix
    plain = processed_law(logits, ctx, 5, SamplingSettings(), "transformers")
    for text in SETTINGS[1:]:
        law = processed_law(logits, ctx, 5, parse_settings(text), "transformers")
        assert 0.5 * np.abs(law - plain).sum(axis=1).max() > 1e-3, text


def test_label_round_trips_and_active_names_the_fields():
    from resispec.commands.audit import _settings

    for text in SETTINGS + ["min_new_tokens=2,eos=1", "bad_words=4|5 6,logit_bias=2:2 3:-2"]:
        s = parse_settings(text)
        assert parse_settings(s.label()) == s
        assert _settings(s.label()) == [s.label()]  # a label is one --settings item (no ';' inside)
    assert parse_settings("T=0.5") == SamplingSettings(temperature=0.5)
    s = parse_settings("presence_penalty=0.5,frequency_penalty=0.25,penalty_window=8")
    assert s.active() == ("presence_penalty", "frequency_penalty", "penalty_window")
    assert parse_settings("T=1").active() == ()


def test_presence_frequency_and_window():
    x = np.zeros(6)
    h = History(np.array([1, 1, 2]), np.array([2, 3, 3, 3]))
    s = SamplingSettings(presence_penalty=0.5, frequency_penalty=0.25)
    out = STEPS["presence_frequency:generated"](x, h, s)
    np.testing.assert_allclose(out, [0, 0, -0.75, -1.25, 0, 0])  # counts over generated tokens only
    out = STEPS["presence_frequency:all"](x, h, SamplingSettings(presence_penalty=1.0, penalty_window=2))
    np.testing.assert_allclose(out, [0, 0, 0, -1, 0, 0])  # the last two tokens of the history
    out = STEPS["repetition_penalty"](np.full(6, 2.0), h, SamplingSettings(repetition_penalty=2.0, penalty_window=0))
    np.testing.assert_allclose(out, 2.0)  # an empty window penalises nothing


def test_min_new_tokens_bans_eos_until_enough_tokens():
    s = SamplingSettings(min_new_tokens=2, eos=1)
    x = np.zeros(4)
    assert STEPS["min_new_tokens"](x, History(np.array([0]), np.array([3])), s)[1] == -np.inf
    assert STEPS["min_new_tokens"](x, History(np.array([0]), np.array([3, 2])), s)[1] == 0


@pytest.mark.parametrize("kw, name", [
    (dict(temperature=0), "temperature"), (dict(temperature=1e-300), "temperature must be >= 0.0001"), (dict(temperature=float("nan")), "temperature"), (dict(top_k=-1), "top_k"),
    (dict(top_p=0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(min_p=1), "min_p"),
    (dict(repetition_penalty=0), "repetition_penalty"), (dict(logit_bias=((1, float("inf")),)), "logit_bias"),
    (dict(logit_bias="x"), "logit_bias"), (dict(bad_words=((),)), "bad_words"), (dict(min_new_tokens=2), "eos"),
    (dict(top_k=True), "top_k"), (dict(penalty_window=-1), "penalty_window")])
def test_bad_settings_name_the_field(kw, name):
    with pytest.raises(ValueError, match=name):
        SamplingSettings(**kw)


@pytest.mark.parametrize("text, match", [("top_q=3", "top_q"), ("top_k", "NAME=VALUE"), ("top_k=x", "top_k"),
                                         ("seed=3", "seed"), ("logit_bias=3", "logit_bias"),
                                         ("temperature=0.5,temperature=2", "twice"), ("logit_bias=", "no value"),
                                         ("logit_bias=2:1 2:3", "one bias per token"),
                                         ("bad_words=|", "bad_words"), ("T=\u0661", "plain ASCII number"),
                                         ("top_k=1_0", "plain ASCII number")])
def test_parse_errors_name_the_part(text, match):
    with pytest.raises(ValueError, match=match):
        parse_settings(text)


def test_processed_law_errors():
    s = parse_settings("bad_words=0;1")
    with pytest.raises(ValueError, match="leave no token"):
        processed_law(np.zeros((1, 2)), np.zeros((1, 1), dtype=np.int64), 1, s, "transformers")
    with pytest.raises(ValueError, match="unknown order"):
        processed_law(np.zeros((1, 2)), np.zeros((1, 1), dtype=np.int64), 1, SamplingSettings(), "nope")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        processed_law(np.zeros((1, 4)), np.zeros((1, 1), dtype=np.int64), 1, parse_settings("logit_bias=9:1"),
                      "transformers")
    with pytest.raises(ValueError, match="unknown steps"):
        register_order("x", ("temperature", "nope"), "")
    assert "x" not in ORDERS
