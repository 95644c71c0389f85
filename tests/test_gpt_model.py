"""The decoder-only GPT: CS224N A5 parameter counts, causality of both attentions, packing and prefix masks, the
block hooks (extra key/value slots, residual hooks), generation, vocabulary growth, and the GPT-1 classifier head with
its loss."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from c4prep.training.models import build_model
from c4prep.training.models.gpt import GPT, GPTConfig, gpt_config
from c4prep.training.models.gpt_attention import (CausalSelfAttention, SynthesizerAttention, attention_mask,
                                                  prepend_visible_keys)
from c4prep.training.experiments.gpt1.classifier import GPTClassifier
from c4prep.training.models.plain_attention import additive_mask, plain_attention, writes_attention_out
from c4prep.training.models.sampling import next_token
from c4prep.training.batch_losses import DecoderLoss, _decoder_inputs
from c4prep.training.experiments.gpt1.classification_loss import ClassificationLoss


def small(attention: str = "causal", norm: str = "pre", **overrides) -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16, attention=attention,
                          norm=norm, **overrides))
    return model.eval()


def test_cs224n_a5_parameter_counts_match_the_reference():
    assert GPT(gpt_config("gpt_a5", 256)).num_parameters() == 3_323_392
    assert GPT(gpt_config("gpt_a5", 256, attention="synthesizer")).num_parameters() == 3_076_988


def test_a5_layout_untied_head_zero_positions_and_normal_init():
    model = GPT(gpt_config("gpt_a5", 256))
    assert model.head.weight is not model.tok_emb.weight
    assert torch.count_nonzero(model.pos_emb.weight) == 0
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert all(torch.count_nonzero(m.bias) == 0 for m in model.modules() if isinstance(m, torch.nn.Linear)
               and m.bias is not None)
    tied = GPT(gpt_config("gpt_nano", 65))
    assert tied.head.weight is tied.tok_emb.weight


def test_scaled_residual_init_shrinks_only_the_projections_into_the_residual_stream():
    torch.manual_seed(0)
    model = GPT(gpt_config("gpt_nano", 65, n_embd=256))  # nanoGPT's size with wider layers for a tight std estimate
    scaled = 0.02 / (2 * model.config.n_layer) ** 0.5
    for block in model.blocks:
        assert block.attn.proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
        assert block.mlp.proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
        assert block.mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    plain = GPT(gpt_config("gpt_nano", 65, n_embd=256, residual_init="normal"))
    assert plain.blocks[0].mlp.proj.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_synthesizer_parameters_have_the_starter_shapes():
    attention = SynthesizerAttention(n_embd=256, n_head=8, max_length=127, dropout=0.1)
    assert attention.w2.shape == (32, 127) and attention.b2.shape == (127,)
    assert attention.w2.abs().max() <= 0.001 and torch.count_nonzero(attention.b2) == 0
    assert attention.w1.weight.shape == (256, 256)
    assert attention(torch.randn(3, 127, 256)).shape == (3, 127, 256)
    with pytest.raises(ValueError, match="at most 127"):
        attention(torch.randn(1, 128, 256))


@pytest.mark.parametrize("attention", ["causal", "synthesizer"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_no_information_flows_from_the_future(attention, norm):
    model = small(attention, norm)
    tokens = torch.randint(0, 40, (2, 15))
    changed = tokens.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % 40
    before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :9], after[:, :9])
    assert not torch.allclose(before[:, 9:], after[:, 9:])


def test_gradients_of_a_position_reach_only_earlier_inputs():
    model = small("synthesizer")
    embedded = torch.randn(1, 12, 16, requires_grad=True)
    out = model.blocks[0].attn(embedded)
    out[0, 5].sum().backward()
    influence = embedded.grad[0].abs().sum(-1)
    assert torch.all(influence[6:] == 0) and torch.all(influence[:6] > 0)


@pytest.mark.parametrize("attention", ["causal", "synthesizer"])
def test_packed_segments_equal_separate_sequences(attention):
    model = small(attention)
    first, second = torch.randint(0, 40, (1, 6)), torch.randint(0, 40, (1, 9))
    packed = torch.cat([first, second], dim=1)
    segment_ids = torch.tensor([[1] * 6 + [2] * 9])
    positions = torch.tensor([list(range(6)) + list(range(9))])
    logits = model(packed, segment_ids=segment_ids, positions=positions)
    torch.testing.assert_close(logits[:, :6], model(first), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[:, 6:], model(second), atol=1e-5, rtol=1e-5)


def test_plain_attention_equals_fused_sdpa_for_a_packed_prefix_mask():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 8) for _ in range(3))
    allowed = attention_mask(9, segment_ids=torch.tensor([[1] * 4 + [2] * 5] * 2),
                             prefix_mask=torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0, 0]] * 2))
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(plain_attention(q * 8 ** -0.5, k, v, additive_mask(allowed, q.dtype)), fused)


@pytest.mark.parametrize("device, dtype, dropout, written", [
    ("cpu", torch.bfloat16, 0.0, True), ("cpu", torch.float32, 0.1, False),  # speed: bf16 on CPU
    ("cuda", torch.bfloat16, 0.1, True), ("cuda", torch.float16, 0.1, True),  # issue #23: fused dropout in bf16
    ("cuda", torch.bfloat16, 0.0, False), ("cuda", torch.float32, 0.1, False)])
def test_attention_is_written_out_for_bf16_on_cpu_and_for_reduced_precision_dropout_on_cuda(device, dtype, dropout,
                                                                                            written):
    heads = SimpleNamespace(device=torch.device(device), dtype=dtype)  # what the rule reads of the query heads
    assert writes_attention_out(heads, dropout) is written


@pytest.mark.parametrize("packed", [False, True])
def test_bf16_autocast_on_cpu_follows_fp32_attention(packed):
    """Under bf16 autocast the CPU path writes attention out; it must compute what fp32 SDPA computes. Large
    weights make the attention peaked: a wrong scale or a missing causal mask is off by 16-68% in mean, bf16 rounding
    by under 1%."""
    torch.manual_seed(0)
    attention = CausalSelfAttention(n_embd=32, n_head=2, dropout=0.0).eval()
    torch.nn.init.normal_(attention.qkv.weight, std=0.5)
    x = torch.randn(2, 15, 32)
    mask = attention_mask(15, segment_ids=torch.tensor([[1] * 6 + [2] * 9] * 2)) if packed else None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attention(x, mask)
    assert low.dtype == torch.bfloat16
    reference = attention(x, mask).detach()
    assert (low.float() - reference).abs().mean() < 0.02 * reference.abs().mean()


def test_extra_kv_slots_attend_like_tokens_in_front():
    """Keys and values given as ``extra_kv`` (with a mask over them) act as the tokens they were computed from."""
    model = small()
    attention = model.blocks[0].attn
    x = torch.randn(2, 9, 16)
    heads = [t.view(2, 9, 2, 8).transpose(1, 2)[:, :, :3] for t in attention.qkv(x).split(16, dim=2)[1:]]
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    slotted = attention(x[:, 3:], prepend_visible_keys(causal, 3), None, (heads[0], heads[1]))
    torch.testing.assert_close(slotted, attention(x)[:, 3:])
    with pytest.raises(ValueError, match="needs a mask"):
        attention(x[:, 3:], None, None, (heads[0], heads[1]))
    with pytest.raises(ValueError, match="no extra_kv"):
        small("synthesizer").blocks[0].attn(x[:, 3:], causal, None, (heads[0], heads[1]))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_residual_hooks_replace_the_residual_sums(norm):
    block, x = small(norm=norm).blocks[0], torch.randn(2, 7, 16)
    added = block(x, None, None, attn_residual=lambda x, out: x + out, ffn_residual=lambda x, out: x + out)
    assert torch.equal(added, block(x, None, None))  # the plain sums, bit for bit
    dropped = block(x, None, None, attn_residual=lambda x, out: x, ffn_residual=lambda x, out: x)
    torch.testing.assert_close(dropped, x if norm == "pre" else block.ln2(block.ln1(x)))


def test_prefix_mask_makes_the_prefix_bidirectional_and_the_rest_causal():
    allowed = attention_mask(5, prefix_mask=torch.tensor([[1, 1, 1, 0, 0]]))[0, 0]
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert torch.equal(allowed, expected.bool())
    model = small()
    tokens = torch.randint(0, 40, (1, 10))
    prefix = torch.tensor([[1] * 4 + [0] * 6])
    changed = tokens.clone()
    changed[0, 3] = (changed[0, 3] + 1) % 40  # the last prefix token
    before, after = model(tokens, prefix_mask=prefix), model(changed, prefix_mask=prefix)
    assert not torch.allclose(before[:, 0], after[:, 0])  # an earlier prefix position sees it
    changed = tokens.clone()
    changed[0, 7] = (changed[0, 7] + 1) % 40  # a target token
    assert torch.equal(model(tokens, prefix_mask=prefix)[:, :7], model(changed, prefix_mask=prefix)[:, :7])


@pytest.mark.parametrize("attention", ["causal", "synthesizer"])
def test_batched_greedy_generation_equals_one_prompt_at_a_time(attention):
    model = small(attention)
    prompts = [torch.randint(0, 40, (n,)) for n in (3, 7, 12)]
    batched = model.generate(prompts, max_new_tokens=8)  # the 12-token prompt crosses the 15/16-token context
    for prompt, output in zip(prompts, batched):
        alone = model.generate([prompt], max_new_tokens=8)[0]
        assert torch.equal(output, alone) and len(output) == 8
        manual = prompt.clone()
        for _ in range(8):
            context = manual[-model.max_length:]
            manual = torch.cat([manual, model(context[None])[0, -1].argmax()[None]])
        assert torch.equal(output, manual[len(prompt):])


def manual_continuation(model: GPT, prompt: torch.Tensor, count: int, choose) -> torch.Tensor:
    """``count`` tokens after ``prompt``, each chosen from the model's whole-context logits (the reference)."""
    tokens = prompt.clone()
    for _ in range(count):
        tokens = torch.cat([tokens, choose(model(tokens[None])[0, -1:].float())])
    return tokens[len(prompt):]


@pytest.mark.parametrize("attention", ["causal", "synthesizer"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_generation_that_fits_runs_each_new_token_alone_and_equals_the_whole_context(attention, norm):
    model = small(attention, norm)
    prompts = [torch.randint(0, 40, (n,)) for n in (2, 5, 9)]
    widths = []
    model.blocks[0].register_forward_hook(lambda module, args, output: widths.append(args[0].shape[1]))
    batched = model.generate(prompts, max_new_tokens=6)  # 9 + 6 - 1 tokens run: within the 15/16-token context
    assert widths == [9] + [1] * 5  # the prompts once, then each new token alone
    for prompt, output in zip(prompts, batched):
        assert torch.equal(output, manual_continuation(model, prompt, 6, lambda logits: logits.argmax(-1)))
    for prompt in prompts:  # sampled: the same draws from the same seed
        drawn = model.generate([prompt], 6, temperature=3.0, greedy=False, generator=torch.Generator().manual_seed(5))
        seeded = torch.Generator().manual_seed(5)
        assert torch.equal(drawn[0], manual_continuation(
            model, prompt, 6, lambda logits: next_token(logits / 3.0, None, False, seeded)))


def test_sampling_with_top_k_one_is_greedy_and_sampling_is_seeded():
    model = small()
    prompt = [torch.randint(0, 40, (4,))]
    greedy = model.generate(prompt, 6)[0]
    assert torch.equal(model.generate(prompt, 6, greedy=False, top_k=1)[0], greedy)
    draws = [model.generate(prompt, 6, greedy=False, temperature=2.0, generator=torch.Generator().manual_seed(3))[0]
             for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 2, temperature=0.0)


def test_resized_keeps_the_trained_rows_and_adds_new_ones():
    model = small()
    grown = model.resized(43)
    assert grown.config.vocab_size == 43 and grown.tok_emb.weight.shape == (43, 16)
    assert torch.equal(grown.tok_emb.weight[:40], model.tok_emb.weight)
    assert grown.head.weight is grown.tok_emb.weight
    tokens = torch.randint(0, 40, (2, 8))
    torch.testing.assert_close(grown(tokens)[..., :40], model(tokens))
    with pytest.raises(ValueError, match="shrink"):
        model.resized(30)


def test_bad_configs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="attention"):
        GPTConfig(vocab_size=10, attention="additive")
    with pytest.raises(ValueError, match="residual_init"):
        GPTConfig(vocab_size=10, residual_init="xavier")
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(vocab_size=10, n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="exceeds block_size"):
        small()(torch.zeros(1, 17, dtype=torch.long))


def test_decoder_task_loss_is_the_weighted_next_token_cross_entropy():
    model = small()
    tokens = torch.randint(0, 40, (2, 10))
    weights = torch.ones(2, 10, dtype=torch.long)
    weights[1, 6:] = 0
    batch = {"input_tokens": tokens, "target_tokens": torch.roll(tokens, -1, 1), "loss_weights": weights}
    total, count = DecoderLoss().loss(model, batch)
    losses = torch.nn.functional.cross_entropy(model(tokens).transpose(1, 2), batch["target_tokens"],
                                               reduction="none")
    assert count.item() == 16
    torch.testing.assert_close(total, (losses * weights).sum())


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_packing_features_reach_the_model_when_used_and_unchecked_off_the_cpu(device):
    """On the CPU, single-segment rows without a prefix take the fused causal path (features left out); off it (here
    the meta device, whose tensors have no values to look at) the features go as they are, without a host wait."""
    single = {"input_tokens": torch.zeros(2, 4, dtype=torch.long, device=device),
              "segment_ids": torch.ones(2, 4, dtype=torch.int32, device=device),
              "positions": torch.arange(4, device=device).expand(2, 4),
              "prefix_mask": torch.zeros(2, 4, dtype=torch.bool, device=device)}
    passed = set(_decoder_inputs(single))
    assert passed == ({"input_tokens"} if device == "cpu" else set(single))


def classifier_batch(sequences: list[list[list[int]]], labels: list[int]) -> dict[str, torch.Tensor]:
    length = 8
    inputs = torch.zeros(len(sequences), len(sequences[0]), length, dtype=torch.long)
    targets, weights = torch.zeros_like(inputs), torch.zeros_like(inputs)
    extract = torch.zeros(len(sequences), len(sequences[0]), dtype=torch.long)
    for b, example in enumerate(sequences):
        for s, seq in enumerate(example):
            inputs[b, s, :len(seq)] = torch.tensor(seq)
            targets[b, s, :len(seq) - 1] = torch.tensor(seq[1:])
            weights[b, s, :len(seq) - 1] = 1
            extract[b, s] = len(seq) - 1
    return {"input_tokens": inputs, "target_tokens": targets, "lm_weights": weights,
            "extract_positions": extract, "label": torch.tensor(labels)}


def test_similarity_sums_both_orders_so_swapping_the_texts_changes_nothing():
    model = GPTClassifier(small(), num_classes=3).eval()
    a_then_b, b_then_a = [37, 1, 2, 38, 3, 39], [37, 3, 38, 1, 2, 39]
    batch = classifier_batch([[a_then_b, b_then_a], [b_then_a, a_then_b]], [0, 1])
    logits, lm_logits = model(batch["input_tokens"], batch["extract_positions"])
    torch.testing.assert_close(logits[0], logits[1])
    assert logits.shape == (2, 3) and lm_logits.shape == (2, 2, 8, 40)


def test_multiple_choice_scores_each_answer_and_reads_the_extract_token():
    model = GPTClassifier(small(), num_classes=3, reduce="choices").eval()
    batch = classifier_batch([[[37, 1, 38, 2, 39], [37, 1, 38, 3, 39], [37, 1, 38, 4, 5, 39]]], [2])
    logits, _ = model(batch["input_tokens"], batch["extract_positions"])
    hidden = model.backbone.hidden_states(batch["input_tokens"][0])
    expected = model.classifier(hidden[torch.arange(3), batch["extract_positions"][0]]).squeeze(-1)
    torch.testing.assert_close(logits[0], expected)


def test_classification_loss_adds_the_auxiliary_lm_loss_with_weight_lambda():
    model = GPTClassifier(small(), num_classes=2).eval()
    batch = classifier_batch([[[37, 5, 6, 7, 39]], [[37, 8, 9, 39]]], [1, 0])
    plain, count = ClassificationLoss(lm_weight=0.0).loss(model, batch)
    combined, _ = ClassificationLoss(lm_weight=0.5).loss(model, batch)
    logits, lm_logits = model(batch["input_tokens"], batch["extract_positions"])
    expected_plain = torch.nn.functional.cross_entropy(logits, batch["label"], reduction="sum")
    lm = sum(torch.nn.functional.cross_entropy(lm_logits[b, 0, :n], batch["target_tokens"][b, 0, :n])
             for b, n in ((0, 4), (1, 3)))
    assert count.item() == 2
    torch.testing.assert_close(plain, expected_plain)
    torch.testing.assert_close(combined, expected_plain + 0.5 * lm)
    sums = ClassificationLoss().eval_sums(model, batch)
    assert sums["accuracy"].item() == float(np.sum(logits.argmax(-1).numpy() == [1, 0]))


def test_models_build_by_name():
    assert isinstance(build_model("gpt", 50, size="gpt_tiny"), GPT)
    classifier = build_model("gpt_classifier", 53, num_classes=2, size="gpt_tiny")
    assert isinstance(classifier, GPTClassifier) and classifier.backbone.config.vocab_size == 53
