"""Loading a local Hugging Face GPT-2 directory into our GPT: logits and hidden states equal HF's, same parameter count,
one-line errors for missing, foreign or unsupported checkpoints; the default exact GELU is unchanged."""
import json
import sys
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from c4prep.training.models.gpt import GPT, MLP, GPTConfig
from c4prep.training.models.gpt_hf import TRANSFORMERS_MISSING, gpt_from_hf_directory

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

SMALL = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=40)


def saved_gpt2(directory, **overrides) -> "transformers.GPT2LMHeadModel":
    """A random small GPT-2 written to ``directory``; every tensor perturbed so that biases and layer norms are not
    at their (0, 1) init and a missed transpose or swapped name shows in the logits."""
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**SMALL, **overrides}))
    with torch.no_grad():
        for parameter in hf.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    hf.save_pretrained(directory)
    return hf.eval()


@pytest.mark.parametrize("overrides", [
    {},  # GPT-2 as released: gelu_new, tied head, eps 1e-5
    {"tie_word_embeddings": False, "activation_function": "gelu", "layer_norm_epsilon": 1e-3},
], ids=["gpt2", "untied-exact-gelu-eps1e-3"])
def test_logits_and_hidden_states_equal_hugging_face(tmp_path, overrides):
    hf = saved_gpt2(tmp_path, **overrides)
    model = gpt_from_hf_directory(tmp_path).eval()
    assert model.num_parameters() == hf.num_parameters()
    assert (model.head.weight is model.tok_emb.weight) == hf.config.tie_word_embeddings
    generator = torch.Generator().manual_seed(1)
    for shape in [(3, 40), (2, 7), (1, 1)]:
        tokens = torch.randint(0, 97, shape, generator=generator)
        with torch.no_grad():
            expected = hf(tokens, output_hidden_states=True)
            torch.testing.assert_close(model(tokens), expected.logits, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(model.hidden_states(tokens), expected.hidden_states[-1], atol=1e-5, rtol=1e-5)


def test_config_mirrors_gpt2_and_the_tanh_gelu_matters(tmp_path):
    hf = saved_gpt2(tmp_path)
    model = gpt_from_hf_directory(tmp_path).eval()
    assert model.config == GPTConfig(vocab_size=97, block_size=40, n_layer=2, n_head=2, n_embd=32, dropout=0.1,
                                     norm="pre", tie_embeddings=True, activation="gelu_tanh", layer_norm_eps=1e-5)
    assert model.num_parameters() == hf.num_parameters() == 29_856
    assert gpt_from_hf_directory(str(tmp_path), dropout=0.0).config.dropout == 0.0
    exact_gelu = GPT(replace(model.config, activation="gelu")).eval()
    exact_gelu.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (exact_gelu(tokens) - hf(tokens).logits).abs().max() > 1e-4


def test_default_mlp_keeps_the_exact_gelu():
    config = GPTConfig(vocab_size=11, n_embd=16, n_head=2)
    assert (config.activation, config.layer_norm_eps) == ("gelu", 1e-5)
    torch.manual_seed(0)
    mlp, x = MLP(config).eval(), torch.randn(4, 16)
    assert torch.equal(mlp(x), mlp.proj(F.gelu(mlp.fc(x))))
    assert not torch.allclose(mlp(x), mlp.proj(F.gelu(mlp.fc(x), approximate="tanh")), atol=1e-7, rtol=0)
    assert GPT(config).ln_f.eps == 1e-5
    with pytest.raises(ValueError, match="activation must be one of gelu, gelu_tanh, got 'relu'"):
        GPTConfig(vocab_size=11, activation="relu")
    with pytest.raises(ValueError, match="layer_norm_eps must be > 0"):
        GPTConfig(vocab_size=11, layer_norm_eps=0.0)


def test_missing_or_foreign_directories_fail_with_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GPT-2 checkpoint directory at .*missing"):
        gpt_from_hf_directory(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        gpt_from_hf_directory(tmp_path)
    bert = tmp_path / "bert"
    transformers.BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64).save_pretrained(bert)
    with pytest.raises(ValueError, match="not a GPT-2 checkpoint: config.json has model_type 'bert', expected 'gpt2'"):
        gpt_from_hf_directory(bert)
    hand_written = tmp_path / "hand_written"
    hand_written.mkdir()
    (hand_written / "config.json").write_text(json.dumps({"vocab_size": 97, "n_layer": 2}))
    with pytest.raises(ValueError, match="model_type None, expected 'gpt2'"):
        gpt_from_hf_directory(hand_written)
    config_only = tmp_path / "config_only"
    transformers.GPT2Config(**SMALL).save_pretrained(config_only)
    with pytest.raises(ValueError, match="cannot load GPT-2 weights from .*config_only"):
        gpt_from_hf_directory(config_only)


def test_unsupported_gpt2_settings_are_named(tmp_path):
    transformers.GPT2Config(**SMALL, scale_attn_by_inverse_layer_idx=True, activation_function="relu",
                            n_inner=48).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="unsupported GPT-2 settings: scale_attn_by_inverse_layer_idx=True .*"
                                         "activation_function='relu' .*n_inner=48") as error:
        gpt_from_hf_directory(tmp_path)
    assert "\n" not in str(error.value)
    transformers.GPT2Config(**SMALL, resid_pdrop=0.1, embd_pdrop=0.0).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="one dropout rate .*pass dropout= explicitly"):
        gpt_from_hf_directory(tmp_path)


def test_missing_transformers_is_reported(tmp_path, monkeypatch):
    transformers.GPT2Config(**SMALL).save_pretrained(tmp_path)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="install transformers to load Hugging Face GPT-2") as error:
        gpt_from_hf_directory(tmp_path)
    assert str(error.value) == TRANSFORMERS_MISSING
