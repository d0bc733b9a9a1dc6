"""Split-K GEMMs (numcheck.ops.splitk): the honest alternatives of the rounding envelope."""

from __future__ import annotations

import pytest
import torch

from numcheck.ops.splitk import split_k_matmul


def _ints(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-4, 5, shape, generator=g).float()


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
@pytest.mark.parametrize("tree", [False, True])
def test_exact_operands_give_the_plain_product(parts: int, tree: bool) -> None:
    # Small integers: every partial sum is exact in fp32, so any split gives a @ b exactly.
    a, b = _ints(3, 6, 10, seed=0), _ints(3, 10, 7, seed=1)
    assert torch.equal(split_k_matmul(a, b, parts, tree=tree), a @ b)
    assert torch.equal(split_k_matmul(a[0], b[0], parts, tree=tree), a[0] @ b[0])


def test_bf16_partials_are_rounded_then_added_in_fp32() -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.randn(8, 64, generator=g).bfloat16()
    b = torch.randn(64, 5, generator=g).bfloat16()
    got = split_k_matmul(a, b, 2, tree=False)
    assert got.dtype == torch.float32
    want = (a[:, :32] @ b[:32]).float() + (a[:, 32:] @ b[32:]).float()
    assert torch.equal(got, want)
    # Two roundings are not one: the split result is not the single bf16 GEMM's.
    assert not torch.equal(got, (a @ b).float())


def test_tree_pairs_neighbours() -> None:
    # Four one-column slices with partials 1e8, 1, -1e8, 1 (fp32 spacing at 1e8 is 8).
    # Left to right: ((1e8 + 1) + -1e8) + 1 = (1e8 + -1e8) + 1 = 1.
    # Tree: (1e8 + 1) + (-1e8 + 1) = 1e8 + -1e8 = 0.
    a = torch.tensor([[1e8, 1.0, -1e8, 1.0]])
    b = torch.ones(4, 1)
    assert float(split_k_matmul(a, b, 4, tree=False)) == 1.0
    assert float(split_k_matmul(a, b, 4, tree=True)) == 0.0


@pytest.mark.parametrize("parts", [0, 11])
def test_parts_out_of_range(parts: int) -> None:
    with pytest.raises(ValueError, match=f"{parts} parts for K = 10"):
        split_k_matmul(torch.ones(2, 10), torch.ones(10, 3), parts, tree=False)
