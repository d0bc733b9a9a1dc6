"""A low-precision check's two references as HTML: the golden, the simulated reference, the
GEMM bound and the operands.

Built from the record alone (its ``quant`` section and its metrics and budget; docs/report.md),
so a saved JSON report draws the same. Plain HTML: nothing to fetch, no script.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numcheck.report.htmltext import escape as _e

#: Each output's metric against each reference, as the section's rows show them.
REFERENCES = (("FP32 golden", "rel_fro"), ("FP32 golden", "calc_diff"),
              ("simulated", "sim_rel_fro"), ("simulated", "sim_calc_diff"))


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:.4g}"


def quant_html(quant: Mapping[str, Any] | None, metrics: Mapping[str, Mapping[str, Any]],
               budget: Mapping[str, Any]) -> str:
    """The ``two references`` section of one check ("" for a variant without a declared
    quantization)."""
    if not quant:
        return ""
    rows = []
    for output, ms in metrics.items():
        limits = budget.get(output) if isinstance(budget.get(output), Mapping) else {}
        for reference, metric in REFERENCES:
            if metric in ms:
                rows.append(f"<tr><td><code>{_e(output)}</code></td><td>{_e(reference)}</td>"
                            f"<td><code>{_e(metric)}</code></td><td>{_num(ms[metric])}</td>"
                            f"<td>{_num(limits.get(metric))}</td></tr>")
    operands = ("the operands the variant's own quantizer produced (recorded)"
                if quant.get("operands") == "recorded" else
                "numcheck's quantization of the op's operands (the variant records none)")
    parts = ["<h4>two references</h4>",
             f"<p>declared: <code>{_e(quant.get('scheme', '-'))}</code>; simulated reference: "
             f"the op recomputed on {_e(operands)}, dequantized, in float64</p>",
             "<table><thead><tr><th>output</th><th>reference</th><th>metric</th><th>value</th>"
             "<th>budget</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"]
    if quant.get("sim_ratio") is not None:
        parts.append(f"<p>GEMM results against the exact product of their own operands: "
                     f"{_num(quant['sim_ratio'])} of the bound an honest kernel of the declared "
                     f"accumulation stays within (at most 1; worst at "
                     f"{_e(quant.get('sim_ratio_at', ''))})</p>")
    findings = list(quant.get("findings") or [])
    n = quant.get("n_findings") or 0
    if n:
        items = "".join(f"<li><code>{_e(f)}</code></li>" for f in findings)
        parts.append(f"<p>operands against the declared scheme: {_e(n)} finding(s)</p>"
                     f"<ul>{items}</ul>")
    elif quant.get("operands") == "recorded":
        parts.append("<p>operands against the declared scheme: they follow it</p>")
    return "".join(parts)
