"""An ordinary test of one liger kernel on its own, with an ad-hoc golden (numcheck_golden).

liger's split-sigmoid + Sinkhorn kernel is given the FP32 reference's own mixes, so its
outputs can be held to fp32 budgets: every difference is the kernel's (the order of its
sums, its exp), none comes from the projection. ``pytest`` checks it; ``pytest
--numcheck-regen tests/`` (re)writes its golden under checks/goldens/_tests/. It skips, with
the reason, where liger-kernel or triton is missing or its kernels cannot run here.
"""

from __future__ import annotations

import pytest
import torch
from liger_mhc import numcheck_ops

import numcheck

DEVICES, WHY_NOT = numcheck_ops.where_it_runs()
DEVICE = next((d for d in DEVICES if d == "cpu" or torch.cuda.is_available()), None)
pytestmark = pytest.mark.skipif(DEVICE is None, reason=WHY_NOT or "no device to run on")

SHAPE = {"tokens": 8, "hidden": 512}


def test_sinkhorn_on_the_reference_mixes(numcheck_golden: numcheck.GoldenCheck) -> None:
    op = numcheck.get_op("mhc_pre")
    params = op.resolve_params(None, SHAPE)
    inputs = op.make_inputs(params, 0)
    with numcheck.matmul_precision(tf32=False):  # an fp32 reference must not use TF32
        reference = op.variants[op.reference].fn(inputs, params)
    scale = inputs["hc_scale"].to(DEVICE)
    pre, post, comb = numcheck_ops.kernels().mhc_split_sinkhorn_fwd(
        reference["mixes"].to(DEVICE), inputs["hc_base"].to(DEVICE),
        scale[0:1], scale[1:2], scale[2:3], tmax=params["sinkhorn_iters"],
        pre_eps=params["hc_eps"], sinkhorn_eps=params["hc_eps"], post_mult=2.0,
    )
    for name, ours in (("pre", pre), ("post", post), ("comb", comb)):
        numcheck_golden.check(ours.cpu(), reference_fn=lambda name=name: reference[name],
                              budget={"rel_fro": 1e-6, "calc_diff": 1e-12}, precision="fp32",
                              name=name, inputs=inputs)
