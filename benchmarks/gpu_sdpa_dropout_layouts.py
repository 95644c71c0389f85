"""SDPA's memory-efficient kernel with and without dropout at the A5 model's layouts, against fp64 (issue #23).

tests/test_gpu.py's H1 check (output and gradients against an fp64 reference that applies the kernel's own dropout
mask, read back) at batch 8 or 128, with q/k/v separate or views of one projection as the model makes them, and the
output gradient contiguous or arriving through the model's transpose. Each JSON line gives the errors and their ratio
to the same math's rounding error in that dtype (written out, no kernel): ~1 means the kernel is as exact as bf16 or
fp32 arithmetic allows. Needs CUDA; a step of benchmarks/gpu_suite.sh.

    python benchmarks/gpu_sdpa_dropout_layouts.py > sdpa_dropout_layouts.jsonl
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_gpu as t  # noqa: E402

DEV, T, H, D = torch.device("cuda"), 127, 8, 32


def calls(batch, views, dtype):
    """(call under test, fp64 call, call in dtype written separately): the same values."""
    qkv = torch.randn(batch, T, 3 * H * D, device=DEV, generator=torch.Generator(device=DEV).manual_seed(0))
    causal = torch.ones(T, T, dtype=torch.bool, device=DEV).tril()[None, None]

    def split(x):
        return [y.view(batch, T, H, D).transpose(1, 2) for y in x.split(H * D, dim=2)]

    def separate(dt):
        return t.Call("causal", *(y.detach().to(dt).contiguous().requires_grad_() for y in split(qkv)), causal)

    if views:
        leaf = qkv.to(dtype).requires_grad_()
        tested = t.Call("causal", *split(leaf), causal)
    else:
        tested = separate(dtype)
    return tested, separate(torch.float64), separate(dtype)


def grads(out, call, transposed):
    w = torch.randn(out.shape, device=DEV, generator=torch.Generator(device=DEV).manual_seed(7)).double()
    o = out.double()
    if transposed:  # the model's: y.transpose(1, 2).reshape(B, T, C) feeds the projection
        o, w = (x.transpose(1, 2).reshape(out.shape[0], T, H * D) for x in (o, w))
    return list(torch.autograd.grad((o * w).sum(), [call.q, call.k, call.v]))


for dtype in (torch.bfloat16, torch.float32):
    for batch in (8, 128):
        for views in (False, True):
            for transposed in (False, True):
                for p in (0.0, 0.1):
                    row = dict(dtype=str(dtype)[6:], batch=batch, views=views, transposed_grad=transposed, p=p)
                    try:
                        tested, exact, written = calls(batch, views, dtype)
                        if p:
                            t.DROPOUT = p
                            out, keep = t.efficient_with_its_mask(tested)
                        else:
                            out, keep = t.attend("efficient", tested), None
                        ref, rounded = t.reference(exact, keep, p), t.reference(written, keep, p)
                        expected = [ref, *grads(ref, exact, transposed)]
                        found = [t.error(a, b) for a, b in zip([out, *grads(out, tested, transposed)], expected)]
                        floor = [t.error(a, b) for a, b in zip([rounded, *grads(rounded, written, transposed)],
                                                               expected)]
                        row["error_over_rounding"] = {n: round(f / max(r, 1e-12), 2)
                                                      for n, f, r in zip(["out", "dq", "dk", "dv"], found, floor)}
                        row["error"] = [f"{f:.2e}" for f in found]
                    except Exception as error:  # noqa: BLE001 - recorded, the next case runs
                        row["exception"] = repr(error)[:300]
                    print(json.dumps(row), flush=True)
