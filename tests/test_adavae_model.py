"""AdaVAE model: attention directions, adapters equal to the backbone at zero, frozen parameters, counts."""
import math

import pytest
import torch
from c4prep.training.experiments.adavae.adapters import BottleneckAdapter, Prefix
from c4prep.training.experiments.adavae.model import AdaVAE, AdaVAEConfig
from c4prep.training.experiments.adavae.latent import attention_entropy
from c4prep.training.models.gpt import GPT, gpt_config

VOCAB = 40


def backbone(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(gpt_config("gpt_tiny", VOCAB, n_layer=3)).eval()


def vae(**settings) -> AdaVAE:
    settings = {"latent_size": 6, "adapter_size": 5, "prefix_length": 3, **settings}
    torch.manual_seed(1)
    return AdaVAE(backbone(), AdaVAEConfig(**settings)).eval()


def tokens(batch: int = 2, length: int = 9, seed: int = 2) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _perturbed(x: torch.Tensor, position: int) -> torch.Tensor:
    y = x.clone()
    y[:, position] = (y[:, position] + 1 - 3) % (VOCAB - 3) + 3
    return y


@pytest.mark.parametrize("peft", ["adapters", "prefix", "full"])
def test_encoder_attends_both_ways_and_ignores_padding(peft):
    model, x = vae(peft=peft), tokens()
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[:, 7:] = False
    states = model.encoder_states(x, mask)
    later = model.encoder_states(_perturbed(x, 5), mask)
    assert not torch.allclose(states[:, 0], later[:, 0])  # position 0 sees position 5: bidirectional
    padded = model.encoder_states(_perturbed(x, 8), mask)
    torch.testing.assert_close(padded[:, :7], states[:, :7])  # a padded token reaches no real position
    torch.testing.assert_close(model.encode(_perturbed(x, 8), mask), model.encode(x, mask))


@pytest.mark.parametrize("injection", [("psa",), ("atm",), ("embedding",), ("psa", "atm", "embedding")])
@pytest.mark.parametrize("peft", ["adapters", "prefix"])
def test_decoder_is_causal_and_every_position_sees_z(injection, peft):
    model, x = vae(injection=injection, peft=peft), tokens()
    z = torch.randn(2, 6, generator=torch.Generator().manual_seed(3))
    logits = model.decode(x, z)
    future = model.decode(_perturbed(x, 6), z)
    torch.testing.assert_close(future[:, :6], logits[:, :6])
    assert not torch.allclose(future[:, 6], logits[:, 6])
    other = model.decode(x, z + 1.0)
    assert all(not torch.allclose(other[:, t], logits[:, t]) for t in range(x.shape[1]))


@pytest.mark.parametrize("placement", ["parallel_ffn", "sequential_ffn", "parallel_attn", "sequential_attn"])
def test_zero_adapters_and_zero_latent_reproduce_the_backbone(placement):
    """With the LoRA-style init (zero up-projection) and an embedding injection of 0, the re-wired blocks compute
    exactly the backbone's forward pass."""
    model = vae(adapter_init="lora", adapter_placement=placement, injection=("embedding",))
    x = tokens()
    torch.testing.assert_close(model.decode(x, torch.zeros(2, 6)), model.backbone(x))


def test_double_adapter_bug_applies_the_adapter_twice():
    x, z = tokens(), torch.zeros(2, 6)
    clean, buggy = vae(injection=("embedding",)), vae(injection=("embedding",), double_adapter_bug=True)
    buggy.load_state_dict(clean.state_dict())
    assert not torch.allclose(clean.decode(x, z), buggy.decode(x, z))
    for adapter in [*clean.decoder_adapters, *buggy.decoder_adapters]:
        torch.nn.init.zeros_(adapter.up.weight)
        torch.nn.init.zeros_(adapter.up.bias)
    torch.testing.assert_close(clean.decode(x, z), buggy.decode(x, z))
    with pytest.raises(ValueError, match="parallel_ffn"):
        AdaVAEConfig(double_adapter_bug=True, adapter_placement="sequential_ffn")


def test_padding_does_not_change_real_token_scores():
    model = vae(injection=("psa", "embedding"))
    x, z = tokens(1, 6), torch.randn(1, 6)
    padded = torch.cat([x, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model.decode(padded, z)[:, :6], model.decode(x, z))


def test_sentence_log_likelihood_sums_the_target_log_probabilities_of_the_full_logits():
    """It projects only the target positions to the vocabulary; the result is the full logits' masked sum."""
    model = vae(injection=("psa", "embedding"))
    x, z = tokens(3, 8), torch.randn(3, 6)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5], dtype=torch.bool)
    inputs, targets = x[:, :-1], x[:, 1:]
    log_probs = model.decode(inputs, z).log_softmax(-1).gather(-1, targets[..., None])[..., 0]
    expected = (log_probs * mask).sum(-1)
    torch.testing.assert_close(model.sentence_log_likelihood(inputs, targets, mask, z), expected)


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> set[str]:
    return {name for name, p in module.named_parameters() if not torch.equal(before[name], p)}


def _train_step(model: AdaVAE, optimizer: torch.optim.Optimizer) -> None:
    x = tokens()
    mask = torch.ones_like(x, dtype=torch.bool)
    mean, logvar = model.encode(x, mask)
    z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
    loss = -model.sentence_log_likelihood(x[:, :-1], x[:, 1:], mask[:, 1:], z).mean() + (mean ** 2).sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def test_frozen_parameters_receive_no_update_in_either_phase():
    model = vae().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    model.set_phase(1)
    before = _snapshot(model)
    _train_step(model, optimizer)
    changed = _changed(before, model)
    assert any(n.startswith("encoder_adapters") for n in changed)
    assert any(n.startswith("posterior") for n in changed) and any(n.startswith("injection") for n in changed)
    assert not any(n.startswith("decoder_adapters") for n in changed)
    backbone_changed = {n for n in changed if n.startswith("backbone")}
    assert backbone_changed and all(".ln" in n for n in backbone_changed)  # only the (shared) layer norms
    model.set_phase(2)
    before = _snapshot(model)
    _train_step(model, optimizer)
    changed = _changed(before, model)
    assert any(n.startswith("decoder_adapters") for n in changed)
    assert all(".ln" in n for n in changed if n.startswith("backbone"))
    assert "backbone.tok_emb.weight" not in changed and "backbone.blocks.0.attn.qkv.weight" not in changed


def test_full_fine_tuning_trains_the_backbone_in_phase_two_only():
    model = vae(peft="full").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.set_phase(1)
    before = _snapshot(model)
    _train_step(model, optimizer)
    assert not any(n.startswith("backbone") for n in _changed(before, model))
    model.set_phase(2)
    before = _snapshot(model)
    _train_step(model, optimizer)
    assert "backbone.blocks.0.attn.qkv.weight" in _changed(before, model)


def test_parameter_report_counts_adapters_and_psa_exactly():
    model = vae(train_layer_norms=False)  # gpt_tiny: d = 32, 3 layers; encoder = ceil(2 * 3 / 3) = 2 layers
    d, r, layers, latent = 32, 5, 3, 6
    adapters = (2 + layers) * (2 * d * r + r + d)
    posterior = d + 2 * (d * latent + latent)  # latent-attention key (no bias), mean, logvar
    psa = latent * d + layers * (2 * d * d + 2 * d)
    report = model.parameter_report()
    assert report["trainable"] == adapters + posterior + psa
    assert report["backbone"] == model.backbone.num_parameters()
    assert report["total"] == report["backbone"] + report["trainable"]
    assert report["trainable_per_backbone"] == pytest.approx(report["trainable"] / report["backbone"])
    assert report["trainable_per_frozen"] == pytest.approx(report["trainable"] / report["backbone"])  # all frozen
    assert vae(peft="full").parameter_report()["trainable_per_frozen"] is None  # nothing frozen: no ratio


def test_attention_entropy_is_zero_for_one_position_and_log_n_for_n_equal_ones():
    weights = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    torch.testing.assert_close(attention_entropy(weights), torch.tensor([0.0, math.log(2), math.log(4)]))
    model = vae()
    x = tokens(3)
    mask = torch.arange(9)[None, :] < torch.tensor([[9], [4], [1]])  # 9, 4 and 1 real tokens
    model.encode(x, mask)
    assert model.pooling_entropy() == pytest.approx(float(attention_entropy(model.posterior.pool.weights).mean()))
    assert model.posterior.pool.weights[2, 0] == 1.0  # one real token takes all the weight
    assert vae(pooling="lg").pooling_entropy() is None


def test_latent_attention_temperature_is_fixed_not_batch_dependent():
    model = vae()
    x = tokens(4)
    mask = torch.ones_like(x, dtype=torch.bool)
    mean_all, _ = model.encode(x, mask)
    mean_one, _ = model.encode(x[:1], mask[:1])
    torch.testing.assert_close(mean_one, mean_all[:1])


def test_generation_stops_at_eos_and_is_deterministic_when_greedy():
    model = vae()
    z = torch.randn(3, 6, generator=torch.Generator().manual_seed(4))
    first = model.generate(z, bos_id=1, eos_id=2, max_new_tokens=8)
    assert first == model.generate(z, bos_id=1, eos_id=2, max_new_tokens=8)
    assert all(len(row) <= 8 and 2 not in row for row in first)
    model.backbone.head = torch.nn.Linear(32, VOCAB)
    torch.nn.init.zeros_(model.backbone.head.weight)
    model.backbone.head.bias.data[2] = 1.0  # EOS wins at once
    assert model.generate(z, bos_id=1, eos_id=2, max_new_tokens=8) == [[], [], []]


@pytest.mark.parametrize("peft", ["adapters", "prefix", "full"])
@pytest.mark.parametrize("injection", [("psa",), ("atm", "embedding")])
def test_generation_runs_each_new_token_alone_and_equals_the_whole_prefix(peft, injection):
    model = vae(peft=peft, injection=injection)
    z = torch.randn(3, 6, generator=torch.Generator().manual_seed(4))
    widths, built = [], []
    model.backbone.blocks[0].register_forward_hook(lambda module, args, output: widths.append(args[0].shape[1]))
    decoder_slots = model.decoder_slots
    model.decoder_slots = lambda *args: built.append(args) or decoder_slots(*args)
    generated = model.generate(z, bos_id=1, eos_id=2, max_new_tokens=8)
    assert widths == [1] * 8  # the new token alone at every step (no row drew EOS here)
    assert len(built) == 1  # z's slots once for all the steps
    prefix = torch.ones(3, 1, dtype=torch.long)
    with torch.no_grad():  # the reference: the decoder rerun on the whole prefix for every token
        for _ in range(8):
            prefix = torch.cat([prefix, model.decode(prefix, z)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert generated == prefix[:, 1:].tolist()


def test_module_settings_are_validated():
    with pytest.raises(ValueError, match="peft must be one of"):
        AdaVAEConfig(peft="lora")
    with pytest.raises(ValueError, match="injection must be"):
        vae(injection=("softmax",))
    with pytest.raises(ValueError, match="pooling must be one of"):
        vae(pooling="cls")
    with pytest.raises(ValueError, match="encoder_layers must be in"):
        vae(encoder_layers=7)
    with pytest.raises(ValueError, match="adapter_init"):
        BottleneckAdapter(8, 2, init="xavier")
    assert [k.shape for k, _ in Prefix(2, 8, 2, length=3, hidden=4)(5)] == [torch.Size([5, 2, 3, 4])] * 2
