"""The honest families as variants of a ``pytest --numcheck`` run, for calibrating there.

Loaded as a pytest plugin (``-p benchmarks.honest_members``, from the repository root),
never shipped: its registration hook adds tests/honest.py's honest variants and the GEMM
members numcheck derives from each op's GEMM site (``gemm_<label>``), so that
``--numcheck-calibrate-pool`` can pool a case's variant with its whole honest family, as
docs/budgets.md ("Honest families") calibrates the shipped cases. Run as a script, it prints
the pool options of each op::

    python -m benchmarks.honest_members            # --numcheck-calibrate-pool ... per class
"""

from __future__ import annotations

from typing import Any


def _honest() -> Any:
    from tests import honest

    return honest


def register_all() -> None:
    """Every honest family member (tests/honest.py, numcheck's bf16 and tf32 GEMM members)
    and the fp32 GEMM members (the family of a Triton kernel of the fp32 class)."""
    from numcheck.honest.gemm_family import add_gemm_members
    from numcheck.ops.registry import get_op

    _honest().register_all()
    for op in ("indexer", "mhc_pre"):
        if not any(v.startswith("gemm_fp32") for v in get_op(op).variants):
            add_gemm_members(op, ("fp32",))
    # The linear op's bf16 family is its GEMM members (its low-precision variants' families
    # are their schemes': benchmarks/numerics/fp8_families.py).
    if not any(v.startswith("gemm_bf16") for v in get_op("linear").variants):
        add_gemm_members("linear", ("bf16",))
    from benchmarks.numerics.fp8_families import register_members

    register_members("linear")  # the FP8 / FP4 schemes' members, for pools of quant variants


def pytest_numcheck_register(registry: Any) -> None:
    """Add every honest family member (register_all)."""
    register_all()


def pools(op: str, variants: dict[str, str] | None = None) -> list[str]:
    """``--numcheck-calibrate-pool <class>=<family>`` options of ``op``'s bf16 and tf32 classes
    (``variants``: extra pools, name -> comma-separated members)."""
    honest = _honest()
    register_all()
    out = [f"--numcheck-calibrate-pool {p}={','.join(honest.family(op, p))}"
           for p in ("bf16", "tf32")]
    return out + [f"--numcheck-calibrate-pool {k}={v}" for k, v in (variants or {}).items()]


if __name__ == "__main__":
    for name in ("indexer", "mhc_pre"):
        print(f"# {name}")
        for option in pools(name):
            print(option)
    from numcheck.honest.gemm_family import member_name, members
    from numcheck.ops.registry import get_op

    print("# linear")
    print("--numcheck-calibrate-pool bf16=bf16," + ",".join(
        member_name(g) for g in members(get_op("linear"), "bf16")))
    op = get_op("linear")
    quant = op.variants["fp8_block"].quant
    print("--numcheck-calibrate-pool fp8_block=fp8_block," + ",".join(
        member_name(g) for g in members(op, "e4m3", quant) if "cpu" in g.devices))
