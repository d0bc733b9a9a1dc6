"""The docs where they are checkable: the README's size and commands, every option documented,
links and paths that resolve, evidence kept apart from the guides and each run described."""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
from pathlib import Path

import pytest

from numcheck.plugin import options
from tests.caseproject import NO_CACHE, PLANTED, case_project, write_goldens

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
EVIDENCE = DOCS / "evidence"
#: What every evidence folder's README states (its header table's rows).
EVIDENCE_FIELDS = ("date", "machine", "torch", "commit", "made by")


def _markdown_files() -> list[Path]:
    files = [README, ROOT / "benchmarks" / "README.md", *DOCS.rglob("*.md"),
             *(ROOT / "examples").glob("*/README.md")]
    return sorted(files)


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(README.read_bytes()) <= 12 * 1024


def test_the_quickstart_commands_are_the_ones_ci_runs() -> None:
    """The README's two commands, exactly as written, are what .ci/run runs (it adds only
    -q), so a clean clone is tested the way the README tells a reader to start."""
    block = re.search(r"```bash\n(.*?)```", _section(README.read_text(), "Quickstart"), re.DOTALL)
    assert block
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    commands = [c for c in commands if c]
    assert commands == ['pip install -e . && pytest --numcheck',
                        'pip install -e ".[test,fused]" && pytest -n 2 -m "not slow"']
    ci = {" ".join(t for t in shlex.split(line, posix=False) if t != "-q")
          for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    for command in commands:
        assert " ".join(shlex.split(command, posix=False)) in ci, command


def _option_names() -> set[str]:
    return {v for k, v in vars(options).items()
            if isinstance(v, str) and k.endswith(("OPTION", "_INI"))}


def _first_cells(table: str) -> set[str]:
    """The option names in the first cell of each row of a markdown table."""
    cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| ")]
    return {name for cell in cells
            for name in re.findall(r"`(--numcheck[a-z-]*|numcheck_[a-z_]+)", cell)}


def test_every_option_and_ini_key_is_in_the_usage_table() -> None:
    documented = _first_cells(_section((DOCS / "usage.md").read_text(), "Options"))
    assert _option_names() <= documented, sorted(_option_names() - documented)
    assert documented <= _option_names(), sorted(documented - _option_names())


def test_the_readmes_first_options_exist() -> None:
    named = _first_cells(_section(README.read_text(), "The options you need first"))
    assert named and named <= _option_names(), sorted(named - _option_names())


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target or target.startswith(("mailto:", "#")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve()
        if not resolved.exists() or (anchor and resolved.suffix == ".md"
                                     and anchor not in _anchors(resolved)):
            broken.append(target)
    assert not broken, broken


def _text_files() -> list[Path]:
    folders = ("numcheck", "benchmarks", "tests", "cases", "docs", "examples", ".github", ".ci")
    files = [README, ROOT / "pyproject.toml"]
    for folder in folders:
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in
                  (".py", ".md", ".toml", ".yml", ".sh", "") and "evidence" not in p.parts
                  and "data" not in p.parts and "__pycache__" not in p.parts]
    return files


def test_every_docs_path_named_in_the_repository_exists() -> None:
    """A path under docs/ named in code, case files or guides (not in the evidence folders'
    own raw files) exists: moving a file means following every mention."""
    missing = []
    for path in _text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        # Paths joined in Python (Path / "docs" / ...) count as mentions too.
        joined = ["/".join(re.findall(r'"([^"]+)"', m)) for m in
                  re.findall(r'"docs"(?:\s*/\s*(?:\(\s*)?"[^"]+")+', text.replace("\n", " "))]
        for mention in re.findall(r"(?<![\w/.])docs/[A-Za-z0-9_./*{}<>$-]*", text) + joined:
            mention = mention.rstrip(".,;:)")
            if any(c in mention for c in "*{}<>$") or not mention.strip("/"):
                continue
            if not (ROOT / mention).exists():
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
    assert not missing, missing


#: Where benchmarks/README.md maps the scripts' old paths to their groups: old names on purpose.
MOVED = "Where the scripts were"


def test_every_benchmark_named_in_the_repository_exists() -> None:
    """A benchmark named in code, guides or examples as a path (``benchmarks/speed/fidelity.py``)
    or a module (``python -m benchmarks.speed.fidelity``, ``-p benchmarks.honest_members``)
    exists. A path that does not is allowed only for a script since deleted (the lettered
    ``h200_run_*.sh``): one whose name no script has now, so a path from before the scripts
    were grouped (issue 47) is caught. The case files' headers and calibration records keep
    the commands as they were run (benchmarks/README.md maps them), as do the evidence folders."""
    import importlib.util

    scripts = {p.name for p in (ROOT / "benchmarks").rglob("*") if p.suffix in (".py", ".sh")}
    missing = []
    for path in _text_files():
        if path.is_relative_to(ROOT / "cases"):
            continue
        text = path.read_text()
        if path == ROOT / "benchmarks" / "README.md":
            text = text.replace(_section(text, MOVED), "")
        for mention in re.findall(r"(?<![\w/.])benchmarks/[\w/]+\.(?:py|sh)\b", text):
            if not (ROOT / mention).exists() and Path(mention).name in scripts:
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
        for mention in set(re.findall(r"(?<![\w/.])benchmarks(?:\.[a-z_]\w*)+", text)):
            if importlib.util.find_spec(mention) is None:
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
    assert not missing, missing


@functools.cache
def _bound_names(source: Path) -> frozenset[str]:
    """Names a module binds at its top level (defs, classes, assignments, imports), and a
    package's submodules; each module read once (the repository names some modules hundreds
    of times)."""
    tree = ast.parse(source.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if source.name == "__init__.py":
        names |= {p.stem for p in source.parent.iterdir() if p.suffix == ".py" or p.is_dir()}
    return frozenset(names)


def test_every_numcheck_module_named_in_the_repository_exists() -> None:
    """A module of numcheck named in its code, guides, benchmarks or examples, as a path
    (``numcheck/check/run.py``) or a dotted name (``numcheck.check.run.CaseInputs``), exists,
    and so does the name that follows it: moving a module means following every mention.
    (tests/ is left out: it names made-up modules on purpose.)"""
    missing = []
    for path in _text_files():
        if path.is_relative_to(ROOT / "tests") or path.suffix not in (".py", ".md", ".toml"):
            continue
        text = path.read_text()
        for mention in re.findall(r"(?<![\w/.])numcheck/[\w/]*\.py\b", text):
            if not (ROOT / mention).exists():
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
        for mention in set(re.findall(r"(?<![\w/.])numcheck(?:\.[A-Za-z_]\w*)+", text)):
            parts = mention.split(".")
            for i in range(len(parts), 0, -1):  # the longest prefix that is a module
                module = ROOT.joinpath(*parts[:i])
                source = module / "__init__.py" if module.is_dir() else module.with_suffix(".py")
                if source.exists():
                    break
            if parts[i:] and parts[i] not in _bound_names(source):
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
    assert not missing, missing


def test_docs_holds_guides_and_the_evidence_folder_only() -> None:
    # Folders without a file are left out: git keeps none, but a copy of the tree made over
    # an older one (the GPU machine's) can keep the empty folders of moved files.
    entries = {p.name for p in DOCS.iterdir()
               if p.is_file() or any(f.is_file() for f in p.rglob("*"))}
    assert {p for p in entries if not p.endswith(".md")} == {"evidence"}, entries


def test_every_guide_is_in_the_readmes_index() -> None:
    index = _section(README.read_text(), "Documentation") + _section(README.read_text(), "Layout")
    for guide in DOCS.glob("*.md"):
        assert f"docs/{guide.name}" in index, guide.name


def test_every_evidence_folder_says_when_where_and_how_it_was_made() -> None:
    index = (EVIDENCE / "README.md").read_text()
    folders = sorted(p for p in EVIDENCE.iterdir() if p.is_dir())
    assert folders
    for folder in folders:
        assert re.match(r"\d{4}-\d{2}-\d{2}-", folder.name), folder.name
        assert f"]({folder.name}/README.md)" in index, folder.name
        text = (folder / "README.md").read_text()
        rows = dict(re.findall(r"^\| (date|machine|torch|commit|made by) \| (.+) \|$", text,
                               re.MULTILINE))
        assert set(rows) == set(EVIDENCE_FIELDS), (folder.name, sorted(rows))
        assert rows["date"].startswith(folder.name[:10]), folder.name


def test_the_readmes_failure_is_what_the_gate_prints(pytester: pytest.Pytester) -> None:
    """The failure the README reads line by line, produced for real: the same case file and
    planted bug, the message compared line for line."""
    block = re.search(r"```\n(numcheck FAIL .*?)```",
                      _section(README.read_text(), "A failure, line by line"), re.DOTALL)
    assert block
    case_project(pytester, {"indexer.toml": (
        '[tiny]\nop = "indexer"\nshape = { batch = 2, heads = 4, head_dim = 32, '
        'max_context = 256, index_topk = 32, next_n = 1 }\nseeds = [0]\n'
        'variants = ["far_flips"]\n')}, conftest=PLANTED)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.lines
    first = out.index("numcheck FAIL indexer::tiny::far_flips[cpu]")
    last = next(i for i in range(first, len(out)) if out[i].startswith("  obtained:"))
    assert out[first:last + 1] == block.group(1).rstrip("\n").splitlines()


#: What docs/extending.md section 10 leaves to the user: their quantizer and FP8 GEMM
#: ("my_lib"), written as a user would with torch's float8 dtype: e4m3 elements and float32
#: scales (amax / 448 per 1x128 group and 128x128 block), and a block-scaled GEMM that
#: multiplies the dequantized operands in float32 (an honest kernel of any declared sums:
#: it stays within the promoted sums' bound) with a bf16 result.
MY_LIB = '''
import torch


def _quantize(t, rows, cols):
    m, k = t.shape
    x = t.float()
    grid = torch.zeros(-(-m // rows) * rows, -(-k // cols) * cols)
    grid[:m, :k] = x
    blocks = grid.view(grid.shape[0] // rows, rows, grid.shape[1] // cols, cols)
    scales = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0
    full = scales[:, None, :, None].expand(-1, rows, -1, cols).reshape(grid.shape)[:m, :k]
    return (x / full).clamp(-448, 448).to(torch.float8_e4m3fn), scales


def quantize_weight(w):
    return _quantize(w, 128, 128)


def quantize_act(x):
    return _quantize(x, 1, 128)


def _dequantized(q, s, rows, cols):
    m, k = q.shape
    full = s[:, None, :, None].expand(-1, rows, -1, cols).reshape(
        s.shape[0] * rows, s.shape[1] * cols)[:m, :k]
    return q.float() * full


def fp8_gemm(xq, xs, wq, ws):
    y = _dequantized(xq, xs, 1, 128) @ _dequantized(wq, ws, 128, 128).T
    return y.to(torch.bfloat16)
'''


#: A variant that converts the prepared weight once more than the docs' (its own line).
TWICE = """

def my_fp8_twice(inputs, params):
    inputs["wq"].float()
    return my_fp8_linear(inputs, params)


_docs_hook = pytest_numcheck_register


def pytest_numcheck_register(registry):
    _docs_hook(registry)
    registry.add_variant("linear", numcheck.Variant(
        "my_fp8_twice", my_fp8_twice, "e4m3", prepare=prepare_fp8, quant=MY_FP8))
"""


def test_the_fp8_recording_pattern_of_the_docs_passes_every_gate(
        pytester: pytest.Pytester) -> None:
    """Issue 44: docs/extending.md section 10's FP8 linear, copied verbatim (its one
    missing line, ``import my_lib``, added), with a quantizer and kernel of the user's own
    in float8: an honest variant passes every gate (the golden, the simulated reference,
    the operand checks, the GEMM bound, the cast ledger: recording its float8 operands
    with as_quantized costs it nothing) on fresh seeds and no tables of its own."""
    text = (DOCS / "extending.md").read_text()
    section = _section(text, "10. An FP8 or FP4 variant: declare how it quantizes")
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert snippet and "record_gemm(as_quantized(xq, xs, DEEPSEEK_ACT)" in snippet.group(1)
    assert "from numcheck.fp8 import" in snippet.group(1)  # the FP8 names' own namespace
    pytester.makepyfile(my_lib=MY_LIB)
    case_project(pytester, {"linear.toml": (
        '[small]\nop = "linear"\nshape = { tokens = 8, in_features = 384, out_features = 256 }\n'
        'seeds = [9411, 9412]\nvariants = ["my_fp8", "my_fp8_twice"]\n')},
        conftest="import my_lib\n" + snippet.group(1) + TWICE, addopts=NO_CACHE)
    pytester.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32")
    result = pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=2, failed=1)
    # A conversion of the user's own too many: the message names the case-file key that
    # sets the limit, and lists the user's lines only.
    result.stdout.fnmatch_lines([
        "numcheck FAIL linear::small::my_fp8_twice[[]cpu[]]",
        ("  worst: casts.input_copies = 2 > budget 1: input 'wq' was read 2.00 times over by "
        "casts/copies (e4m3 -> fp32 of [[]256, 384[]] at conftest.py:*; e4m3 -> fp32 of "
        "[[]256, 384[]] at my_lib.py:*"),
        ("  budget:      max_input_copies: default of the casts gate (set "
        "[[]small.overhead.my_fp8_twice[]] max_input_copies in cases/linear.toml to override)"),
    ])
    (record,) = [r for r in json.loads((pytester.path / "r.json").read_text())["records"]
                 if r["variant"] == "my_fp8"]
    assert record["quant"]["operands"] == "recorded" and record["quant"]["n_findings"] == 0
    assert record["quant"]["sim_ratio"] <= 1.0
    assert record["metrics"]["y"]["sim_rel_fro"] < 0.016
    # The cast ledger holds the user's own conversions only: numcheck's are not there.
    assert not [e for e in record["casts"]["entries"] if "numcheck/" in e["where"]]
    assert max(record["casts"]["input_passes"].values()) <= 1.0
