"""Real inputs: an op's inputs recorded from a running model (numcheck.record_inputs, a small
torch model built here), kept in a case's input file, the case run on them with its golden
made from them (the file's content hash pins it); the file's limits and every way a file can
be wrong, each with the fix."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
import torch

import numcheck
from numcheck.cases import CaseFileError, load_case_file
from numcheck.ops import mhc
from numcheck.recorded.files import MAX_CALLS, RecordedError, read_recorded, save_recorded
from tests.caseproject import case_project

HIDDEN, STREAMS, TOKENS = 64, 4, 6


class HcPre(torch.nn.Module):
    """mHC pre as a model holds it: the projection and its scales as parameters."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        mixes, k = (2 + STREAMS) * STREAMS, STREAMS * HIDDEN
        self.hc_fn = torch.nn.Parameter(torch.randn(mixes, k, generator=g) * k**-0.5)
        self.hc_scale = torch.nn.Parameter(torch.rand(3, generator=g) + 0.5)
        self.hc_base = torch.nn.Parameter(torch.randn(mixes, generator=g) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = {"hc_mult": STREAMS, "sinkhorn_iters": 20, "eps": 1e-6}
        inputs = {"x": x, "hc_fn": self.hc_fn.detach(), "hc_scale": self.hc_scale.detach(),
                  "hc_base": self.hc_base.detach()}
        return mhc.fp32(inputs, params)["y"]


class TinyModel(torch.nn.Module):
    """Embeddings widened to the n streams, mHC pre, an output projection."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(32, STREAMS * HIDDEN)
        self.hc_pre = HcPre(seed)
        self.out = torch.nn.Linear(HIDDEN, 32)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens).view(-1, STREAMS, HIDDEN)
        x = (x * torch.linspace(0.5, 3.0, HIDDEN)).to(torch.bfloat16)  # a few wide channels
        return self.out(self.hc_pre(x).float())


def hooked(model: TinyModel) -> dict[str, object]:
    """record_inputs' arguments for the model's mHC module: its call as the op's inputs."""
    return {"module": model.hc_pre,
            "inputs": lambda m, args, kwargs: {"x": args[0], "hc_fn": m.hc_fn,
                                               "hc_scale": m.hc_scale, "hc_base": m.hc_base}}


def record(path: Path, *, seed: int = 0, calls: int = 2) -> numcheck.recorded.record.Recorder:
    model = TinyModel(seed)
    with numcheck.record_inputs("mhc_pre", path, calls=calls, **hooked(model)) as rec:
        for step in range(3):
            model(torch.arange(TOKENS) + step)
    return rec


def test_a_hooked_module_records_its_first_calls(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    rec = record(path)
    assert rec.seen == 3 and len(rec.calls) == 2 and rec.bytes_written > 0
    read = read_recorded(path)
    assert read.op == "mhc_pre" and len(read.calls) == 2
    assert read.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    x = read.calls[1]["x"]
    assert x.dtype == torch.bfloat16 and list(x.shape) == [TOKENS, STREAMS, HIDDEN]
    assert read.calls[0]["hc_fn"].dtype == torch.float32
    assert not torch.equal(read.calls[0]["x"], x)  # two calls, two token batches
    assert "first 2 of 3 calls" in read.meta["source"]
    # The hook is gone after the block: the model runs unobserved.
    assert not model_hooks(TinyModel())


def model_hooks(model: TinyModel) -> list[object]:
    return list(model.hc_pre._forward_pre_hooks.values())


def test_capture_records_calls_of_a_plain_function(tmp_path: Path) -> None:
    def my_mhc_pre(x: torch.Tensor, hc_fn: torch.Tensor) -> None:
        numcheck.capture("mhc_pre", x=x, hc_fn=hc_fn)

    my_mhc_pre(torch.ones(2), torch.ones(3))  # no recorder listening: nothing kept
    with numcheck.record_inputs("mhc_pre", tmp_path / "f.safetensors"):
        my_mhc_pre(torch.ones(2), torch.zeros(3))
        numcheck.capture("indexer", q=torch.ones(1))  # another op's: not this recorder's
    read = read_recorded(tmp_path / "f.safetensors")
    assert set(read.calls[0]) == {"hc_fn", "x"}
    assert torch.equal(read.calls[0]["hc_fn"], torch.zeros(3))


def test_nothing_is_written_when_the_block_raises_or_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f.safetensors"
    with pytest.raises(ZeroDivisionError), numcheck.record_inputs("mhc_pre", path):
        numcheck.capture("mhc_pre", x=torch.ones(2))
        1 / 0  # noqa: B018
    assert not path.exists()
    nothing = pytest.raises(RecordedError, match="no call of op 'mhc_pre' was recorded")
    with nothing, numcheck.record_inputs("mhc_pre", path):
        pass
    assert not path.exists()


def test_the_size_limits_are_enforced_with_what_to_record_instead(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    with (pytest.raises(RecordedError) as err,
          numcheck.record_inputs("mhc_pre", path, max_bytes=1024)):
        numcheck.capture("mhc_pre", x=torch.zeros(1024))
    assert "over the limit of" in str(err.value) and "fewer tokens" in err.value.fix
    assert not path.exists()
    too_many = pytest.raises(RecordedError, match=f"record 1 to {MAX_CALLS} calls")
    with too_many, numcheck.record_inputs("mhc_pre", path, calls=MAX_CALLS + 1):
        pass
    save_recorded(path, "mhc_pre", [{"x": torch.zeros(512)}])
    with pytest.raises(RecordedError, match="over the limit"):
        read_recorded(path, max_bytes=1024)


@pytest.mark.parametrize(("content", "fragment"), [
    (b"not safetensors", "not a readable safetensors file"),
    (None, "no recorded-inputs file at"),
])
def test_an_unreadable_file_says_so(tmp_path: Path, content: bytes | None,
                                    fragment: str) -> None:
    path = tmp_path / "f.safetensors"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RecordedError, match=fragment):
        read_recorded(path)


def test_a_safetensors_file_not_recorded_by_numcheck_is_refused(tmp_path: Path) -> None:
    import safetensors.torch

    path = tmp_path / "f.safetensors"
    safetensors.torch.save_file({"x": torch.zeros(2)}, str(path))
    with pytest.raises(RecordedError, match="not a numcheck recorded-inputs file"):
        read_recorded(path)


# -- a case on recorded inputs -----------------------------------------------------------------

CASE = """
[model-t{tokens}]
op = "mhc_pre"
shape = {{ tokens = {tokens}, hidden = {hidden} }}
inputs.file = "{file}"
seeds = {seeds}
variants = ["bf16"]
"""


def case_file(folder: Path, *, tokens: int = TOKENS, hidden: int = HIDDEN,
              file: str = "inputs/model.safetensors", seeds: str = "[0, 1]",
              extra: str = "") -> Path:
    path = folder / "mhc.toml"
    path.write_text(CASE.format(tokens=tokens, hidden=hidden, file=file, seeds=seeds) + extra)
    return path


def load_error(path: Path) -> CaseFileError:
    with pytest.raises(CaseFileError) as info:
        load_case_file(path, measuring=True)
    return info.value


def test_a_case_reads_its_file_and_its_params_pin_the_content(tmp_path: Path) -> None:
    record(tmp_path / "inputs" / "model.safetensors")
    (case,) = load_case_file(case_file(tmp_path), measuring=True)
    digest = hashlib.sha256((tmp_path / "inputs" / "model.safetensors").read_bytes()).hexdigest()
    assert case.inputs.file == (tmp_path / "inputs" / "model.safetensors").resolve()
    assert case.params["inputs"] == {"file_sha256": digest, "calls": 2}
    from numcheck.check.run import CaseInputs

    made, _ = CaseInputs(mhc.OP, case).get(1)
    assert torch.equal(made["x"], read_recorded(case.inputs.file).calls[1]["x"])


@pytest.mark.parametrize(("kwargs", "key", "fragment"), [
    ({"seeds": "[0, 2]"}, "seeds", ("seed 2 names call 2, but model.safetensors holds 2 "
     "recorded calls (seeds 0..1)")),
    ({"tokens": 8}, "shape.tokens", "x is [6, 4, 64]: 6 for tokens, the case says 8"),
    ({"file": "inputs/none.safetensors"}, "inputs.file", "no recorded-inputs file at"),
    ({"file": "https://example.com/x.safetensors"}, "inputs.file", ("recorded inputs are "
     "never fetched")),
])
def test_a_file_that_does_not_fit_the_case_names_the_key_and_the_fix(
        tmp_path: Path, kwargs: dict[str, object], key: str, fragment: str) -> None:
    record(tmp_path / "inputs" / "model.safetensors")
    err = load_error(case_file(tmp_path, **kwargs))  # type: ignore[arg-type]
    assert (err.case, err.key) == (f"model-t{kwargs.get('tokens', TOKENS)}", key)
    assert fragment in str(err) and ". Fix: " in str(err), str(err)


def test_a_file_of_another_op_or_dtype_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "inputs" / "model.safetensors"
    save_recorded(path, "indexer", [{"q": torch.zeros(1)}])
    err = load_error(case_file(tmp_path))
    assert "holds inputs of op 'indexer', not 'mhc_pre'" in str(err)
    model = TinyModel()
    with numcheck.record_inputs("mhc_pre", path, module=model.hc_pre, inputs=lambda m, a, k: {
            "x": a[0].float(), "hc_fn": m.hc_fn, "hc_scale": m.hc_scale, "hc_base": m.hc_base}):
        model(torch.arange(TOKENS))
    err = load_error(case_file(tmp_path, seeds="[0]"))
    assert "input 'x' is float32 with 3 dimensions; op 'mhc_pre' takes bfloat16" in str(err)
    assert "(e.g. .to(torch.bfloat16))" in err.fix


def test_a_file_case_neither_sweeps_nor_names_a_distribution(tmp_path: Path) -> None:
    record(tmp_path / "inputs" / "model.safetensors")
    err = load_error(case_file(tmp_path, extra='sweep.sinkhorn_iters = [10, 20]\n'))
    assert err.key == "sweep" and "recorded tensors are its shape" in str(err)
    err = load_error(case_file(tmp_path, extra='inputs.distribution = "llm"\n'))
    assert err.key == "inputs" and "both a distribution and a file" in str(err)


def test_a_file_case_without_its_own_budgets_does_not_gate(tmp_path: Path) -> None:
    record(tmp_path / "inputs" / "model.safetensors")
    with pytest.raises(CaseFileError) as info:
        load_case_file(case_file(tmp_path))
    assert "runs on inputs recorded in model.safetensors" in str(info.value)


CONFTEST = """
from tests import planted
planted.register_all()
"""


@pytest.mark.skipif(importlib.util.find_spec("tomlkit") is None,
                    reason="tomlkit (the calibrate extra) writes case files: "
                    "pip install 'numcheck[calibrate]'")
def test_record_calibrate_regenerate_gate_from_a_running_model(
        pytester: pytest.Pytester) -> None:
    """The whole workflow on a model built here: record two calls of its mHC module,
    calibrate the case's budgets on them, make the golden from them, gate a variant (and
    catch a planted bug); recording again from other weights makes the golden stale."""
    cases = case_project(pytester, conftest=CONFTEST)
    inputs = cases / "inputs" / "model.safetensors"
    record(inputs)
    case_file(cases, extra='expect.y_seed_dependent = { outputs = ["y"], reason = "planted" }\n'
              '[model-t6.budget.y_seed_dependent]\nbudget_like = "bf16"\n')
    text = (cases / "mhc.toml").read_text().replace('["bf16"]', '["bf16", "y_seed_dependent"]')
    (cases / "mhc.toml").write_text(text)

    result = pytester.runpytest("--numcheck", "--numcheck-calibrate",
                                "--numcheck-calibrate-write")
    assert result.ret == 0, result.stdout.str()
    written = (cases / "mhc.toml").read_text()
    assert "[model-t6.budget.bf16.y]" in written and "fresh_seeds = 0" in written

    result = pytester.runpytest("--numcheck", "--numcheck-regen")
    result.assert_outcomes(passed=2, xfailed=1)
    golden = pytester.path / "goldens" / "mhc_pre" / "model-t6.safetensors"
    meta = json.loads(golden.read_bytes()[8:8 + int.from_bytes(golden.read_bytes()[:8],
                                                                 "little")])["__metadata__"]
    digest = hashlib.sha256(inputs.read_bytes()).hexdigest()
    assert json.loads(meta["params"])["inputs"] == {"file_sha256": digest, "calls": 2}

    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=2, xfailed=1)

    record(inputs, seed=1)  # other weights, other activations: another file
    result = pytester.runpytest("--numcheck", "-k", "bf16")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GoldenStale*", "*parameter inputs*"])
