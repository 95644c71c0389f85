"""GPU tier, attention (marker ``gpu``: skipped without CUDA; benchmarks/gpu_suite.sh runs it): every attention path
(SDPA's flash, memory-efficient, cuDNN and math kernels, and the written-out ``plain_attention``) against an fp64
reference, for the calls our models make: GPT's causal (``is_causal``), GPT's packed rows (a bool mask) and T5's
learned float bias (scale 1). Then T5 logits on CUDA against the CPU, FlexAttention's gradients on CUDA, and GPT's
and T5's cached generation on CUDA against the CPU.

Issue #23: GPT A5 diverges in bf16 with the fused kernels and dropout 0.1 (math backend, fp32, or dropout 0 train).
Hypotheses, and the test that tells each apart (those that fail point at PyTorch's kernels, not at our calls):
- H1 a fused kernel's backward does not use the dropout mask its forward applied (or its softmax-gradient term ``D``
  is inconsistent with it): ``test_dropout_backward_uses_the_forward_mask`` (the kernel's own mask, read back, in an
  fp64 reference) and ``test_dropout_keeps_key_shift_invariance`` (adding one vector to every key changes no score
  difference, so the keys' gradients sum to 0 for any mask forward and backward share).
- H2 each call is self-consistent but biased on average (keep rate or 1/(1-p) off, e.g. rounded to bf16):
  ``test_dropout_gradients_are_unbiased`` (for a loss linear in the output the mean gradient over draws is exactly
  the gradient without dropout).
- H3 successive calls reuse random numbers (the generator's Philox offset advances too little), correlating the masks
  of layers and steps: ``test_successive_dropout_calls_draw_fresh_masks``.
- H4 none of these: the kernels are right per call and the divergence is an optimisation effect of bf16 rounding
  with dropout noise; then only test_gpu_training.py's curves (per backend) show it.

Found on an H200 (torch 2.11+cu130): every path passes H1-H3 here, and H1 held for the memory-efficient kernel at
training's layouts too (batch 128, heads as views of one projection, a non-contiguous output gradient: errors 0.7-1.2x
the written-out bf16 rounding). Yet in training only that kernel diverges with dropout in bf16 (test_gpu_training.py),
so c4prep writes attention out there (``plain_attention.writes_attention_out``).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from c4prep.training.models.gpt import GPT, gpt_config
from c4prep.training.models.plain_attention import additive_mask, plain_attention
from c4prep.training.models.t5 import T5, t5_config

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda")
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
PATHS = [*BACKENDS, "written"]
LAYOUTS = ["causal", "packed", "t5"]
DROPOUT = 0.1


@pytest.fixture(autouse=True)
def full_fp32():
    """No TF32: the fp32 comparisons are against fp64."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


@dataclasses.dataclass
class Call:
    """One attention call as a model makes it: heads [B, H, T, 32] and the mask or bias it passes."""

    layout: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    allowed: torch.Tensor  # bool "may attend", [B or 1, 1, T, T]
    bias: torch.Tensor | None = None  # T5: learned float bias [B, H, T, T], masked with -1e9

    @property
    def scale(self) -> float:
        return 1.0 if self.layout == "t5" else self.q.shape[-1] ** -0.5

    @property
    def leaves(self) -> list[torch.Tensor]:
        return [t for t in (self.q, self.k, self.v, self.bias) if t is not None]

    def to(self, dtype: torch.dtype) -> Call:
        fields = {n: (t.detach().to(dtype).requires_grad_() if t is not None and t.is_floating_point() else t)
                  for n, t in ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)) if n != "layout"}
        return Call(self.layout, **fields)

    def additive(self) -> torch.Tensor:
        return self.bias if self.bias is not None else additive_mask(self.allowed, self.q.dtype)


def make_call(layout: str, dtype: torch.dtype, length: int = 127, seed: int = 0) -> Call:
    """A5's shapes (8 heads of 32, 127 positions): causal, packed (two segments a row) or T5 (a bias, padding)."""
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    q, k, v = (torch.randn(8, 8, length, 32, device=DEVICE, generator=generator) for _ in range(3))
    causal = torch.ones(length, length, dtype=torch.bool, device=DEVICE).tril()[None, None]
    call = Call(layout, q, k, v, causal)
    if layout == "packed":
        cut = torch.randint(8, length - 8, (8, 1), device=DEVICE, generator=generator)
        segments = (torch.arange(length, device=DEVICE)[None] >= cut).long()
        call.allowed = causal & (segments[:, None, :, None] == segments[:, None, None, :])
    elif layout == "t5":
        call.allowed = torch.ones(8, 1, length, length, dtype=torch.bool, device=DEVICE)
        call.allowed[0, ..., length - 10:] = False  # one row's encoder padding
        bias = torch.randn(8, 8, length, length, device=DEVICE, generator=generator)
        call.bias = torch.where(call.allowed, bias, -1e9)
    return call.to(dtype)


def attend(path: str, call: Call, dropout: float = 0.0) -> torch.Tensor:
    """The attention output of ``path`` (a skip where that SDPA kernel does not take the call)."""
    if path == "written":
        return plain_attention(call.q * call.scale, call.k, call.v, call.additive(), dropout)
    causal = call.layout == "causal"
    mask = None if causal else call.bias if call.bias is not None else call.allowed
    try:
        with sdpa_kernel([BACKENDS[path]]):
            return F.scaled_dot_product_attention(call.q, call.k, call.v, attn_mask=mask, is_causal=causal,
                                                  dropout_p=dropout, scale=call.scale)
    except RuntimeError as error:
        if "No available kernel" in str(error) or "No viable backend" in str(error):
            pytest.skip(f"{path} does not take a {call.layout} {call.q.dtype} call")
        raise


def reference(call: Call, keep: torch.Tensor | None = None, p: float = 0.0) -> torch.Tensor:
    """Attention in fp64, dropping where ``keep`` is False (and scaling the rest by 1 / (1 - p))."""
    weights = torch.softmax(call.q @ call.k.transpose(-1, -2) * call.scale + call.additive(), dim=-1)
    return (weights if keep is None else weights * keep / (1 - p)) @ call.v


def gradients(out: torch.Tensor, call: Call) -> list[torch.Tensor]:
    """Gradients of the leaves for ``sum(out * W)``, a loss linear in the output (fixed W)."""
    weight = torch.randn(out.shape, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(7))
    return list(torch.autograd.grad((out.double() * weight.double()).sum(), call.leaves))


def error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
def test_paths_agree_without_dropout(path, layout, dtype):
    """Each path within 3x the written-out attention's own rounding error in ``dtype`` of the fp64 reference."""
    call, exact = make_call(layout, dtype), make_call(layout, torch.float64)
    written = make_call(layout, dtype)
    out, ref, yardstick = attend(path, call), reference(exact), attend("written", written)
    tensors = zip(["output", *"qkv", "bias"], [out, *gradients(out, call)], [ref, *gradients(ref, exact)],
                  [yardstick, *gradients(yardstick, written)])
    for name, ours, expected, rounded in tensors:
        assert error(ours, expected) <= 3 * error(rounded, expected) + 1e-5, name


# The kernels' own dropout masks, read back with test-only PyTorch internals as PyTorch's SDPA tests read them.
def efficient_with_its_mask(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, keep mask) of the memory-efficient kernel: the mask redrawn from the Philox seed and offset that
    its backward node saved."""
    out = attend("efficient", call, DROPOUT)
    node, queue = out.grad_fn, []
    while node is not None and not hasattr(node, "_saved_philox_seed"):
        queue += [n for n, _ in node.next_functions if n is not None]
        node = queue.pop(0) if queue else None
    assert node is not None, "no memory-efficient attention node in the graph"
    uniform = torch.empty(*call.q.shape[:3], call.k.shape[2], device=DEVICE)
    torch.ops.aten._fill_mem_eff_dropout_mask_(uniform, DROPOUT, int(node._saved_philox_seed.item()),
                                               int(node._saved_philox_offset.item()))
    return out, uniform > DROPOUT


def flash_with_its_mask(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, keep mask) of the flash kernel on a causal call: the mask from its debug output (dropped entries
    negative), then the same draw through F.scaled_dot_product_attention (generator state reset), identical."""
    state = torch.cuda.get_rng_state()
    debug = torch.ops.aten._scaled_dot_product_flash_attention(
        call.q.detach(), call.k.detach(), call.v.detach(), DROPOUT, True, True, scale=call.scale)
    T, S = call.q.shape[2], call.k.shape[2]
    keep = debug[-1][..., :T, :S] >= 0
    torch.cuda.set_rng_state(state)
    out = attend("flash", call, DROPOUT)
    assert torch.equal(out, debug[0]), "flash did not redraw the same mask from the same generator state"
    return out, keep


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", ["flash", "efficient"])
def test_dropout_backward_uses_the_forward_mask(path, layout, dtype, record_property):
    """H1, directly: output and gradients with dropout equal the fp64 reference with the kernel's own mask."""
    if path == "flash" and (layout != "causal" or dtype != torch.bfloat16):
        pytest.skip("flash takes unmasked bf16/fp16 calls only")
    call, exact = make_call(layout, dtype), make_call(layout, torch.float64)
    out, keep = flash_with_its_mask(call) if path == "flash" else efficient_with_its_mask(call)
    visible = keep[call.allowed.expand_as(keep)]
    record_property("dropped_fraction", round(1 - visible.float().mean().item(), 4))
    assert abs(1 - visible.float().mean().item() - DROPOUT) < 0.01, "the read-back mask does not drop p"
    ref, written = reference(exact, keep, DROPOUT), call.to(dtype)
    rounded = reference(written, keep, DROPOUT)  # the same math in ``dtype``: the rounding to allow for
    names, expected = ["output", *"qkv", "bias"], [ref, *gradients(ref, exact)]
    errors = [error(ours, want) for ours, want in zip([out, *gradients(out, call)], expected)]
    bounds = [3 * error(bound, want) + 1e-5 for bound, want in zip([rounded, *gradients(rounded, written)], expected)]
    record_property("errors_and_bounds", {n: [e, b] for n, e, b in zip(names, errors, bounds)})
    assert errors[0] <= bounds[0], \
        "forward differs from the reference with the read-back mask (the test's mask reading, or the forward)"
    for name, found, bound in zip(names[1:], errors[1:], bounds[1:]):
        assert found <= bound, f"d{name}: the backward's mask differs ({found:.3g} > {bound:.3g})"


def key_shift_error(path: str, layout: str, dropout: float) -> float:
    """|sum over keys of dL/dk| relative to |dL/dk|: 0 up to rounding when forward and backward share a mask."""
    call = make_call(layout, torch.bfloat16)
    dk = gradients(attend(path, call, dropout), call)[1].float()
    return (dk.sum(dim=2).abs().max() / dk.abs().max()).item()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
def test_dropout_keeps_key_shift_invariance(path, layout, record_property):
    """H1 for every path (flash and cuDNN included), bf16: dropout may not break what rounding alone keeps."""
    without, with_dropout = key_shift_error(path, layout, 0.0), key_shift_error(path, layout, DROPOUT)
    record_property("without_with_dropout", [without, with_dropout])
    assert with_dropout <= 4 * without + 1e-3, f"without dropout: {without:.2e}, with: {with_dropout:.2e}"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
def test_dropout_gradients_are_unbiased(path, layout, record_property, draws: int = 200):
    """H2, bf16: the mean gradient over ``draws`` masks is the no-dropout gradient, within its standard error and
    the path's own bf16 error."""
    exact = make_call(layout, torch.float64)
    expected = gradients(reference(exact), exact)
    call = make_call(layout, torch.bfloat16)
    rounding = [g - e for g, e in zip(gradients(attend(path, call), call), expected)]
    sums = [torch.zeros_like(e) for e in expected]
    squares = [torch.zeros_like(e) for e in expected]
    for _ in range(draws):
        for total, square, grad in zip(sums, squares, gradients(attend(path, call, DROPOUT), call)):
            total += grad
            square += grad.double() ** 2
    for name, total, square, want, bias in zip([*"qkv", "bias"], sums, squares, expected, rounding):
        norm, mean = want.norm(), total / draws
        deviation = ((mean - want).norm() / norm).item()
        variance = (square - draws * mean ** 2).clamp(min=0) / (draws - 1)
        standard_error = (variance.sum().sqrt() / draws ** 0.5 / norm).item()
        floor = (bias.norm() / norm).item()
        record_property(f"d{name}", [deviation, standard_error, floor])
        assert deviation <= 2 * (standard_error ** 2 + floor ** 2) ** 0.5 + 1e-3, \
            f"d{name}: mean off by {deviation:.3g}, standard error {standard_error:.3g}, bf16 error {floor:.3g}"


@pytest.mark.parametrize("path", PATHS)
def test_successive_dropout_calls_draw_fresh_masks(path):
    """H3: two calls in a row (no reseeding) advance the generator and their dropout noise is uncorrelated.

    Correlated over the queries that see at least 32 keys: an early causal query's noise comes from one or a few mask
    bits, and those rows made the correlation of independent masks reach 0.062 in 60 pairs (the written-out path on
    the CPU; 0.051 on an H200's math path). Over the later rows it stayed below 0.02; reused masks give about 1."""
    call = make_call("causal", torch.bfloat16)
    with torch.no_grad():
        mean = attend(path, call).float()
        offset = torch.cuda.default_generators[DEVICE.index or 0].get_offset()
        first = attend(path, call, DROPOUT).float() - mean
        assert torch.cuda.default_generators[DEVICE.index or 0].get_offset() > offset
        second = attend(path, call, DROPOUT).float() - mean
    later = slice(31, None)  # queries 31.. see 32 keys or more
    correlation = torch.corrcoef(torch.stack([first[..., later, :].flatten(),
                                              second[..., later, :].flatten()]))[0, 1].item()
    assert abs(correlation) < 0.05


def t5_inputs(device: torch.device) -> tuple[tuple, torch.Tensor]:
    """Packed rows (3 segments, padding) for a 128-wide T5 and the decoder positions that carry a loss."""
    segments = torch.tensor([[1] * 40 + [2] * 50 + [3] * 30 + [0] * 8, [1] * 128])
    dec_segments = torch.tensor([[1] * 10 + [2] * 12 + [3] * 6 + [0] * 4, [1] * 32])
    generator = torch.Generator().manual_seed(0)
    tokens = [torch.randint(2, 1000, (2, n), generator=generator) for n in (128, 32)]

    def positions(ids):
        index = torch.arange(ids.shape[1]).expand_as(ids)
        starts = torch.cat([torch.ones_like(ids[:, :1], dtype=torch.bool), ids[:, 1:] != ids[:, :-1]], 1)
        return index - torch.where(starts, index, 0).cummax(1).values

    args = (*tokens, segments, dec_segments, positions(segments), positions(dec_segments))
    return tuple(a.to(device) for a in args), (dec_segments > 0).to(device)


def widened_t5(attention_impl: str = "dense") -> T5:
    torch.manual_seed(0)
    return T5(t5_config("t5_tiny", 1000, d_model=128, d_kv=32, num_heads=4, d_ff=256,
                        attention_impl=attention_impl)).eval()


@pytest.mark.parametrize("attention_impl", ["dense", "flex"])
def test_t5_logits_on_cuda_equal_cpu(attention_impl):
    """fp32 without TF32: SDPA (dense) or compiled FlexAttention on CUDA against the written-out CPU path."""
    cpu_args, scored = t5_inputs(torch.device("cpu"))
    with torch.no_grad():
        expected = widened_t5()(*cpu_args)[scored]
        cuda_args, _ = t5_inputs(DEVICE)
        logits = widened_t5(attention_impl).to(DEVICE)(*cuda_args)[scored.to(DEVICE)].cpu()
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())


def test_t5_cached_generation_on_cuda_equals_cpu():
    """fp32 without TF32: greedy decoding with the decoder's key/value caches (SDPA over the cache with the position
    bias for each new token, cross-attention over padded encoder rows) continues as on the CPU."""
    encoder_tokens = torch.randint(2, 1000, (4, 96), generator=torch.Generator().manual_seed(1))
    encoder_tokens[1, 50:] = 0
    expected = widened_t5().generate(encoder_tokens, 24)
    decoded = widened_t5().to(DEVICE).generate(encoder_tokens.to(DEVICE), 24)
    assert torch.equal(decoded.cpu(), expected)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_t5_flex_gradients_on_cuda_equal_dense(precision):
    args, scored = t5_inputs(DEVICE)
    grads = {}
    for impl in ("dense", "flex"):
        model = widened_t5(impl).train().to(DEVICE)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = (model(*args)[scored].float() ** 2).mean()
        loss.backward()
        grads[impl] = {n: p.grad.float() for n, p in model.named_parameters()}
    tolerance = 1e-4 if precision == "fp32" else 5e-2  # the dense path rounds its bias to bf16
    for name, dense in grads["dense"].items():
        assert error(grads["flex"][name], dense.double()) <= tolerance, name


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_t5_attention_takes_the_memory_efficient_kernel(precision):
    """Without dropout, SDPA's memory-efficient kernel takes every attention call of T5 on packed rows (the learned
    position bias with segment masks, cross-attention's mask), forward and backward: under
    ``sdpa_kernel([EFFICIENT_ATTENTION])`` a call it could not take raises "No available kernel" (it did while the
    bias's keys had stride num_heads). Logits and gradients as the math path's, within its rounding."""
    args, scored = t5_inputs(DEVICE)
    results = {}
    for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        model = widened_t5().to(DEVICE)  # eval(): dropout off; gradients still flow
        with sdpa_kernel([backend]), torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(*args)[scored].float()
            (logits ** 2).mean().backward()
        results[backend] = [logits.detach()] + [p.grad.float() for p in model.parameters()]
    tolerance = 1e-4 if precision == "fp32" else 5e-2
    for efficient, math in zip(results[SDPBackend.EFFICIENT_ATTENTION], results[SDPBackend.MATH], strict=True):
        assert error(efficient, math.double()) <= tolerance


@pytest.mark.parametrize("attention", ["causal", "synthesizer"])
def test_gpt_cached_generation_on_cuda_equals_cpu(attention):
    """fp32 without TF32: A5's model answering ragged prompts with its key/value cache (SDPA with a bool mask over
    the cache for each new token) continues them as on the CPU, where the cache equals the whole context
    (tests/test_gpt_model.py)."""
    torch.manual_seed(0)
    model = GPT(gpt_config("gpt_a5", 256, attention=attention)).eval()
    prompts = [torch.randint(2, 256, (length,)) for length in (9, 40, 75)]
    expected = model.generate(prompts, 32)
    answers = model.to(DEVICE).generate([prompt.to(DEVICE) for prompt in prompts], 32)
    for answer, reference in zip(answers, expected):
        assert torch.equal(answer.cpu(), reference)
