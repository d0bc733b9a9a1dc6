"""The HTML report: plot data in records, the page, the CLI, and a render in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck import __main__ as cli
from numcheck.check import plotdata
from numcheck.report import htmlpage as htmlreport
from numcheck.report import svgplots
from numcheck.report.records import Record, Report, load_report, record_from_dict, record_to_dict
from tests.caseproject import make_project, write_goldens
from tests.fleet import quiet_history

# -- plot data ---------------------------------------------------------------------------


def test_error_histogram_bins_every_element_once() -> None:
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0, float("-inf"), 5.0])
    actual = torch.tensor([1.0, 2.001, 3.1, 4.0, float("-inf"), 5.0 + 2e-6])
    h = plotdata.error_histogram(actual, expected, roundoff=2.0**-8)
    assert h.n == 6 and h.zeros == 2 and h.nonfinite == 1
    assert sum(h.counts) == 3
    # |error| 1e-3 lands in bin floor(log10(1e-3) * 4) = -12 (float32 rounding aside: +-1).
    bins = {h.k0 + i for i, c in enumerate(h.counts) for _ in range(c)}
    assert any(abs(k - (-12)) <= 1 for k in bins)
    assert min(bins) == h.k0 and h.counts[0] > 0


def test_golden_percentiles_are_the_same_from_the_cache_and_per_variant() -> None:
    """|golden|'s percentiles are kept by the stored output's digest: the second variant
    gets the same numbers a fresh sort gives, and a variant with a non-finite output (a
    different mask) gets its own, never the cached ones."""
    expected = torch.linspace(-3.0, 5.0, 1001)
    first = plotdata.error_histogram(expected * 1.001, expected, roundoff=1e-7)
    again = plotdata.error_histogram(expected * 0.999, expected, roundoff=1e-7)
    fresh = plotdata._quantiles(expected.double().abs())
    assert first.golden_abs == again.golden_abs == fresh
    masked = (expected * 1.001).clone()
    masked[-300:] = float("nan")  # the largest |golden| values no longer count
    nan = plotdata.error_histogram(masked, expected, roundoff=1e-7)
    assert nan.golden_abs == plotdata._quantiles(expected[:-300].double().abs())
    assert nan.golden_abs != fresh and nan.nonfinite == 300


def test_histograms_of_seeds_add_up_on_one_grid() -> None:
    a = plotdata.error_histogram(torch.tensor([1.0001]), torch.tensor([1.0]), roundoff=1e-7)
    b = plotdata.error_histogram(torch.tensor([1.1]), torch.tensor([1.0]), roundoff=1e-7)
    m = plotdata.merge_histograms([a, b])
    assert m is not None and m.n == 2 and sum(m.counts) == 2
    assert m.k0 == min(a.k0, b.k0)
    assert len(m.counts) == max(a.k0 + 1, b.k0 + 1) - m.k0


def test_flip_histogram_measures_margins_in_tie_bands() -> None:
    scores = torch.tensor([[10.0, 9.0, 8.0, 7.0, 1.0]])
    golden = torch.tensor([[0, 1]])  # k-th golden score 9
    variant = torch.tensor([[0, 4]])  # 1 dropped (at the k-th score), 4 added (margin -8)
    f = plotdata.flip_histogram(golden, variant, scores, band=0.5, band_kind="abs")
    assert f.n_flips == 2
    assert f.counts["out"][0] == 1  # exactly at the k-th score
    # margin -8 = 16 tie bands below: the bin starting at 16.
    assert f.counts["in_neg"][plotdata.FLIP_EDGES.index(16.0)] == 1
    assert sum(sum(c) for c in f.counts.values()) + f.masked == 2


def test_unit_roundoff_is_the_coarser_of_precision_and_dtype() -> None:
    assert plotdata.unit_roundoff("bf16", torch.float32) == 2.0**-8
    assert plotdata.unit_roundoff("fp32", torch.bfloat16) == 2.0**-8
    assert plotdata.unit_roundoff("fp32", torch.float32) == 2.0**-24
    assert plotdata.unit_roundoff("unknown", torch.float16) == 2.0**-11


HINT = html.escape(htmlreport.EXTRA_HINT)

# -- the page ----------------------------------------------------------------------------


def _record(id_: str, status: str = "pass", **extra: object) -> Record:
    hist = plotdata.error_histogram(torch.tensor([1.0, 2.0, 3.0]) * 1.001,
                                    torch.tensor([1.0, 2.0, 3.0]), roundoff=2.0**-8)
    base: dict = {
        "id": id_, "nodeid": f"cases/x.toml::{id_}", "op": "indexer", "case": "c",
        "variant": "bf16", "device": "cpu", "status": status, "precision": "bf16",
        "source": "cases/x.toml", "seeds": [0],
        "budget": {"logits": {"rel_fro": 4e-3, "atol": 1e-2, "rtol": 1.6e-2,
                              "allow_nan": False},
                   "topk": {"recall_min": 0.99, "tie_band": 0.004, "tie_band_kind": "rel"}},
        "metrics": {"logits": {"rel_fro": 1.0e-3}},
        "topk": {"recall_min": 0.995, "tie_recall_min": 1.0},
        "closest": {"output": "logits", "metric": "rel_fro", "value": 1.0e-3, "limit": 4e-3},
        "plots": plotdata.Plots({"logits": hist}, {"topk": plotdata.flip_histogram(
            torch.tensor([[0, 1]]), torch.tensor([[0, 2]]), torch.tensor([[3.0, 2.0, 1.9]]),
            band=0.1, band_kind="rel")}).as_dict(),
    }
    base.update(extra)
    return Record(**base)  # type: ignore[arg-type]


def _report() -> Report:
    timed = _record("indexer::c::tf32[cpu]", timing={
        "speedup": 1.21, "ci_low": 1.15, "ci_high": 1.3, "speedup_min": 1.1, "timer": "cuda events"})
    failed = _record("indexer::c::bad[cpu]", status="fail",
                     reason="logits.rel_fro = 0.02 > budget 0.004 (seed 0)",
                     closest={"output": "logits", "metric": "rel_fro", "value": 0.02, "limit": 4e-3})
    skipped = Record(id="indexer::c::bf16_fp32out[cpu]", nodeid="n", op="indexer", case="c",
                     variant="bf16_fp32out", device="cpu", status="skip",
                     reason="variant 'bf16_fp32out' runs on cuda only")
    env = {"device": "cpu", "torch": "2.13", "git_commit": "abc123",
           "noise": {"aa_speedup": 0.995, "ci": [0.94, 1.06]}}
    return Report(records=[_record("indexer::c::bf16[cpu]"), timed, failed, skipped],
                  environment=env, created="2026-12-01T00:00:00+00:00", exitstatus=1)


class _Refs(HTMLParser):
    """Every URL-bearing attribute and every <script>/<link> element of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "action", "data", "poster") and value:
                self.urls.append(value)


def external_references(page: str) -> list[str]:
    """URLs a browser would fetch from elsewhere (anything but data: and in-page anchors)."""
    refs = _Refs()
    refs.feed(page)
    found = [u for u in refs.urls if not u.startswith(("data:", "#"))]
    found += [t for t in refs.tags if t in ("script", "link", "iframe", "object", "embed")]
    found += re.findall(r"url\((?!\s*['\"]?data:)[^)]*\)", page)
    found += re.findall(r"@import", page)
    return found


def test_external_reference_check_catches_fetches() -> None:
    bad = '<img src="https://cdn.example/x.png"><script src="a.js"></script>' \
          '<style>body{background:url(http://x/y.png)}</style>'
    assert len(external_references(bad)) >= 3


@pytest.mark.parametrize("plots", [False, True])
def test_page_holds_every_check_and_nothing_external(plots: bool) -> None:
    if plots and not svgplots.available():
        pytest.skip("matplotlib (the html extra) is not installed")
    report = _report()
    page = htmlreport.render_html(report, plots=plots)
    assert external_references(page) == []
    assert "Content-Security-Policy" in page
    for r in report.records:
        assert r.id in page
    assert "logits.rel_fro = 0.02 &gt; budget 0.004" in page  # the failure's reason
    assert "variant &#x27;bf16_fp32out&#x27; runs on cuda only" in page  # skip reason, whole
    assert "aa_speedup" in page and "0.995" in page  # environment extras shown as they are
    assert "abc123" in page
    images = page.count("<img ")
    if plots:
        # 3 checks ran: an error histogram and a flip plot each, plus one speedup interval.
        assert images == 7 and HINT not in page
    else:
        assert images == 0 and HINT in page


def test_bars_put_the_budget_at_the_mark() -> None:
    assert htmlreport.budget_ratio("rel_fro", 2e-3, 4e-3) == 0.5
    assert htmlreport.budget_ratio("recall_min", 0.995, 0.99) == pytest.approx(0.5)
    assert htmlreport.budget_ratio("tie_recall_min", 0.99, 1.0) == float("inf")
    assert htmlreport.budget_ratio("tie_recall_min", 1.0, 1.0) == 0.0
    assert 'class="over"' in htmlreport.bar(1.2) and 'class="ok"' in htmlreport.bar(0.3)


def test_plot_data_survives_the_json_record() -> None:
    r = _record("indexer::c::bf16[cpu]")
    again = record_from_dict(json.loads(json.dumps(record_to_dict(r))))
    assert again.plots == r.plots


def test_cli_writes_the_page_from_a_saved_report(tmp_path: Path) -> None:
    from numcheck.report.records import write_json

    write_json(tmp_path / "r.json", _report())
    code = cli.main(["html", str(tmp_path / "r.json"), str(tmp_path / "r.html"), "--no-plots"])
    assert code == 1  # the report's gate failed
    page = (tmp_path / "r.html").read_text()
    assert "indexer::c::bad[cpu]" in page and HINT in page


# -- through pytest ----------------------------------------------------------------------


def test_html_option_writes_the_page_with_plot_data(pytester: pytest.Pytester) -> None:
    band = "[tiny.budget.far_flips.topk]\ntie_band_rel = 0.05\nrecall_min = 0.9\n"
    make_project(pytester, variants='"far_flips", "no_kv_scale"', extra=band, planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-html", "out/run.html",
                                "--numcheck-report", "out/run.json")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["numcheck html written: *out/run.html"])
    page = (pytester.path / "out" / "run.html").read_text()
    report = load_report(pytester.path / "out" / "run.json")
    for r in report.records:
        assert r.id in page
    bad = next(r for r in report.records if r.variant == "no_kv_scale")
    assert bad.plots is not None and sum(bad.plots["errors"]["logits"]["counts"]) > 0
    flips = next(r for r in report.records if r.variant == "far_flips").plots["flips"]["topk"]
    # far_flips swaps each row's k-th token for its lowest one: far outside the tie band.
    assert flips["n_flips"] > 0 and sum(flips["in_neg"][4:]) > 0


def test_html_shows_drift_against_a_baseline(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    pytester.runpytest("--numcheck", "--numcheck-regen", "--numcheck-report", "base.json")
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "base.json",
                                "--numcheck-html", "run.html")
    result.assert_outcomes(passed=2)
    page = (pytester.path / "run.html").read_text()
    assert "Drift vs baseline base.json" in page and "no regression" in page
    assert "drift vs baseline</h4>" in page  # per check


# -- rendered in a browser ---------------------------------------------------------------

#: Debian's package is chromium; GitHub's Ubuntu runners ship Google Chrome (same flags).
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install chromium)")


def _chromium(tmp: Path) -> list[str]:
    assert CHROMIUM is not None
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr",
            "--v=0", "--window-size=1200,1600"]


def render(page: Path, tmp: Path) -> tuple[Path, str, list[str]]:
    """Open ``page`` in headless Chromium: its screenshot, its DOM, its console messages."""
    shot = tmp / "shot.png"
    proc = subprocess.run(
        [*_chromium(tmp), f"--screenshot={shot}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return shot, proc.stdout, console


def png_colours(path: Path, limit: int = 64) -> int:
    """Distinct pixel values in an 8-bit RGB/RGBA PNG (up to ``limit``), sampled on every
    8th row and every 4th pixel. Decoded by Pillow where it is installed (it comes with
    matplotlib, the test extra), else in pure Python (about a second per screenshot)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    try:
        from PIL import Image
    except ImportError:
        return _png_colours_python(data, limit)
    with Image.open(path) as img:
        assert img.mode in ("RGB", "RGBA"), img.mode
        width, height, bpp, raw = img.width, img.height, len(img.mode), img.tobytes()
    stride, seen = width * bpp, set()
    for y in range(0, height, 8):
        line = raw[y * stride:(y + 1) * stride]
        seen.update(bytes(line[x:x + bpp]) for x in range(0, stride, bpp * 4))
        if len(seen) >= limit:
            return len(seen)
    return len(seen)


def _png_colours_python(data: bytes, limit: int) -> int:
    """:func:`png_colours` without Pillow: the PNG's rows unfiltered here."""
    pos, idat, ihdr = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        ihdr = body if kind == b"IHDR" else ihdr
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", ihdr[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, seen = bytearray(stride), set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 8 == 0:
            seen.update(bytes(line[x:x + bpp]) for x in range(0, stride, bpp * 4))
            if len(seen) >= limit:
                return len(seen)
        prev = line
    return len(seen)


def test_png_colours_reads_the_same_with_and_without_pillow(tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    g = torch.Generator().manual_seed(0)
    for mode, bpp in (("RGB", 3), ("RGBA", 4)):
        pixels = torch.randint(0, 4, (40, 33, bpp), generator=g, dtype=torch.uint8) * 60
        path = tmp_path / f"{mode}.png"
        image.frombytes(mode, (33, 40), bytes(pixels.flatten().tolist())).save(path)
        for limit in (3, 64):
            assert png_colours(path, limit) == _png_colours_python(path.read_bytes(), limit)


@pytest.mark.slow  # a browser's start: about 4 s of CPU over its processes
@needs_chromium
def test_browser_check_sees_console_errors_and_blocked_fetches(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    # The report's own policy, and one request it forbids.
    page.write_text(
        f'<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
        f'content="{htmlreport.CSP}"></head><body><p>x</p>'
        '<img src="http://127.0.0.1:9/x.png"></body></html>')
    shot, _, console = render(page, tmp_path)
    assert any("127.0.0.1:9" in line for line in console), console
    assert png_colours(shot) >= 1


@pytest.mark.slow  # a browser's start: about 4 s of CPU over its processes
@needs_chromium
def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    report = _report()
    page = tmp_path / "report.html"
    htmlreport.write_html(page, report)
    shot, dom, console = render(page, tmp_path)
    assert console == [], console
    assert png_colours(shot) >= 8, "the screenshot is blank (one colour)"
    for r in report.records:
        assert r.id in dom
    if svgplots.available():
        assert dom.count('src="data:image/svg+xml;base64,') == 7


#: Measures the page as laid out, once loaded: the content width (a section's), each
#: figure's width, the height of each check's element (its section, or its table row) by
#: id, the page's height; written into the DOM that --dump-dom prints.
MEASURE = """<script>addEventListener("load", () => {
  const box = e => e.getBoundingClientRect();
  const out = {width: box(document.querySelector("section.check")).width,
               height: document.documentElement.scrollHeight,
               figures: [...document.querySelectorAll(".plots img")].map(i => box(i).width),
               checks: Object.fromEntries([...document.querySelectorAll("[id^=check-]")]
                                          .map(e => [e.id, box(e).height]))};
  const pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def layout(page: Path, tmp: Path) -> dict[str, Any]:
    """:data:`MEASURE` of ``page`` in headless Chromium. It runs in a copy of the page
    without its content security policy, which forbids every script (the tests above and
    tests/test_history_e2e.py render the pages with it)."""
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    probe = tmp / "probe.html"
    probe.write_text(text.replace("</body>", MEASURE + "</body>"))
    proc = subprocess.run(
        [*_chromium(tmp), "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    found = re.search(r'<pre id="layout">(.*?)</pre>', proc.stdout, re.DOTALL)
    assert found, proc.stderr[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured


@pytest.mark.slow  # a browser's start: about 4 s of CPU over its processes
@needs_chromium
def test_history_page_figures_span_the_page_and_still_checks_are_rows(tmp_path: Path) -> None:
    """Issue 33, measured in the browser: the history page's figures took a quarter of its
    width, and each check whose figures held still took a full panel (14 checks: 5,000 px).
    A figure spans the content width; a check that held still is a table row."""
    pytest.importorskip("matplotlib", reason="the html extra (matplotlib) is not installed")
    from numcheck.history.page import write_history
    from numcheck.history.runs import load_runs
    from numcheck.history.series import build_history

    h = build_history(load_runs([quiet_history(tmp_path, 14)], jobs=1).runs)
    page = tmp_path / "history.html"
    write_history(page, h, plots=True, jobs=1)
    measured = layout(page, tmp_path)
    assert measured["figures"], measured
    for width in measured["figures"]:
        assert width >= 0.97 * measured["width"], measured
    heights = sorted(measured["checks"].values())
    assert len(heights) == 15, measured
    assert heights[-1] > 200  # the one that moved: its tables and figure
    assert heights[-2] <= 40, measured  # the 14 that held still: a row each
    assert measured["height"] < 2200, measured


def test_failed_check_shows_where_the_error_sits() -> None:
    where = [{"output": "logits", "measure": "error in band units",
              "lines": ["logits: only MTP row 1 of each request is wrong"],
              "groupings": [{"grouping": "mtp row", "labels": [0, 1],
                             "error_shares": [0.0, 1.0], "element_shares": [0.5, 0.5]}]}]
    failed = _record("indexer::c::bad[cpu]", status="fail", reason="bad", localization=where)
    page = htmlreport.render_html(Report(records=[failed]), plots=False)
    assert "where the error sits" in page
    assert "only MTP row 1 of each request is wrong" in page
    assert "mtp row" in page  # the grouping's heatmap
    assert "where the error sits" not in htmlreport.render_html(
        Report(records=[_record("indexer::c::bf16[cpu]")]), plots=False)


def test_a_repeated_cast_and_a_round_trip_are_shown_each_with_both_sites() -> None:
    casts = {"casts": 2, "copies": 0, "cast_bytes_ratio": 1.9, "round_trips": [
        "bf16 -> fp32 -> bf16 of [8, 256] at a.py:2 (back; there at a.py:1), ..."],
        "repeated_casts": ["fp32 -> bf16 of [24, 2048] at glue.py:7 casts again the fp32 "
                           "tensor already cast to bf16 at mylib/mhc_pre.py:6: a repeated cast"]}
    report = Report(records=[_record("indexer::c::glue[cpu]", status="fail", casts=casts)],
                    environment={"device": "cpu"}, created="2026-12-06T00:00:00+00:00",
                    exitstatus=1)
    page = htmlreport.render_html(report, plots=False)
    assert "round trips 1, repeated casts 1" in page
    assert "repeated cast: fp32 -&gt; bf16 of [24, 2048] at glue.py:7" in page
    assert "already cast to bf16 at mylib/mhc_pre.py:6" in page
    assert "round trip: bf16 -&gt; fp32 -&gt; bf16 of [8, 256] at a.py:2" in page
