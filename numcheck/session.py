"""The numcheck run: collection of case files into test items, and the end-of-run summary.

Registered as a plugin by :mod:`numcheck.plugin` only when ``--numcheck`` is given. It
holds the run's state (device, folders, loaded goldens, results) and turns the pure
modules' exceptions into pytest outcomes with one message layout.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck import plugin
from numcheck.cases import Case, CaseFileError, load_case_file
from numcheck.goldens import Golden, GoldenError, golden_path, load_golden
from numcheck.ops.registry import OpSpec, get_op
from numcheck.render import SUMMARY_HEADER, Commands, failure_message, summary_rows, table
from numcheck.runner import CaseInputs, CheckResult, VariantError, check, display_id, write_golden


class NumcheckFailure(Exception):
    """A check that ran and missed its budget; the message is the whole report."""


@dataclass
class Problem:
    """A check that could not produce a verdict (stale golden, variant error...)."""

    id: str
    status: str
    reason: str


def resolve_device(requested: str) -> str:
    """``auto`` -> cuda when torch sees a GPU, else cpu; ``cuda`` without one is an error."""
    has_cuda = torch.cuda.is_available()
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    if requested == "cuda" and not has_cuda:
        build = torch.version.cuda or "cpu-only"
        raise pytest.UsageError(
            f"{plugin.DEVICE_OPTION} cuda: torch {torch.__version__} (CUDA build: {build}) "
            f"sees no CUDA device. Fix: run on a GPU machine, or use "
            f"{plugin.DEVICE_OPTION} auto to fall back to the CPU"
        )
    return requested


class NumcheckSession:
    """Run-wide state and the hooks that need it."""

    KEY = pytest.StashKey["NumcheckSession"]()

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.device = resolve_device(config.getoption(plugin.DEVICE_OPTION))
        self.regen = bool(config.getoption(plugin.REGEN_OPTION))
        root = config.rootpath
        self.cases_dir = (root / config.getini(plugin.CASES_INI)).resolve()
        self.goldens_dir = (root / config.getini(plugin.GOLDENS_INI)).resolve()
        self.results: list[CheckResult] = []
        self.problems: list[Problem] = []
        self.regenerated: dict[Path, bool] = {}
        self._seen: dict[tuple[str, str], Path] = {}
        self._goldens: dict[Path, Golden | GoldenError] = {}
        self._inputs: tuple[Case, CaseInputs] | None = None
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            # `pytest --numcheck` with no paths: the cases folder is the suite.
            self._require_cases_dir()
            config.args[:] = [str(self.cases_dir)]

    def _require_cases_dir(self) -> None:
        if not self.cases_dir.is_dir():
            raise pytest.UsageError(
                f"numcheck: no cases folder at {self.cases_dir}. Fix: create it with a "
                f"case file (see README 'Writing a case'), or point the {plugin.CASES_INI} "
                "ini key at yours"
            )
        if not any(self.cases_dir.glob("*.toml")):
            raise pytest.UsageError(
                f"numcheck: the cases folder {self.cases_dir} holds no *.toml case file. "
                "Fix: add one (see README 'Writing a case'), or point the "
                f"{plugin.CASES_INI} ini key at the folder that has them"
            )

    # -- collection -------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        if file_path.suffix == ".toml" and file_path.resolve().is_relative_to(self.cases_dir):
            return CaseFile.from_parent(parent, path=file_path)
        return None

    def claim(self, case: Case) -> None:
        """Case ids are unique per op across all files: they name the golden."""
        key = (case.op, case.id)
        first = self._seen.setdefault(key, case.source)
        if first != case.source:
            raise CaseFileError(
                case.source,
                f"op {case.op!r} already has a case {case.id!r} in {first}",
                "rename one of the two cases (the id names the golden file)",
                case=case.id,
            )

    # -- running ----------------------------------------------------------------------

    def inputs_for(self, op: OpSpec, case: Case) -> CaseInputs:
        # Items of one case run back to back; keep only the current case's inputs.
        if self._inputs is None or self._inputs[0] is not case:
            self._inputs = (case, CaseInputs(op, case))
        return self._inputs[1]

    def golden_for(self, op: OpSpec, case: Case, commands: Commands) -> Golden:
        path = golden_path(self.goldens_dir, op.name, case.id)
        if self.regen and path not in self.regenerated:
            self.regenerated[path] = write_golden(
                path, op, case, self.device, self.inputs_for(op, case)
            )
            self._goldens.pop(path, None)
        if path not in self._goldens:
            try:
                self._goldens[path] = load_golden(path, case=case.id, regen_hint=commands.regenerate)
            except GoldenError as exc:
                self._goldens[path] = exc
        loaded = self._goldens[path]
        if isinstance(loaded, GoldenError):
            raise loaded
        return loaded

    # -- reporting --------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        if not (self.results or self.problems or self.regenerated):
            return
        tr.write_sep("=", f"numcheck summary ({self.device}, torch {torch.__version__})")
        rows = summary_rows(self.results)
        for p in self.problems:
            case, _, rest = p.id.partition("::")[2].partition("::")
            variant, _, device = rest.partition("[")
            rows.append([p.id.split("::")[0] + "::" + case, variant, device.rstrip("]"),
                         p.reason.splitlines()[0][:60], "-", "-", "-", "-", p.status])
        for line in table(SUMMARY_HEADER, rows):
            tr.write_line(line)
        for path, written in sorted(self.regenerated.items()):
            rel = path.relative_to(self.config.rootpath) if path.is_relative_to(
                self.config.rootpath) else path
            tr.write_line(f"golden {'rewritten' if written else 'unchanged'}: {rel}")


class CaseFile(pytest.File):
    """A ``cases/*.toml`` file: one collector per case in it."""

    def collect(self) -> Iterator[CaseNode]:
        state = self.config.stash[NumcheckSession.KEY]
        for case in load_case_file(self.path):
            state.claim(case)
            yield CaseNode.from_parent(self, name=case.id, case=case)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFileError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class CaseNode(pytest.Collector):
    """One case: an item for the reference (drift) and one per variant, on the run's device."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def collect(self) -> Iterator[CheckItem]:
        state = self.config.stash[NumcheckSession.KEY]
        op = get_op(self.case.op)
        for variant in (op.reference, *self.case.variants):
            yield CheckItem.from_parent(
                self, name=f"{variant}[{state.device}]", variant=variant, device=state.device
            )


class CheckItem(pytest.Item):
    """One (case, variant, device) check."""

    def __init__(self, *, variant: str, device: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant = variant
        self.device = device
        assert isinstance(self.parent, CaseNode)
        self.case: Case = self.parent.case
        self.add_marker(pytest.mark.numcheck)

    @property
    def display_id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    def commands(self) -> Commands:
        dev = f" {plugin.DEVICE_OPTION} {self.device}"
        return Commands(
            reproduce=f"pytest {plugin.OPTION}{dev} {shlex.quote(self.nodeid)}",
            regenerate=f"pytest {plugin.OPTION} {plugin.REGEN_OPTION} "
            f"{shlex.quote(self.parent.nodeid)}",  # type: ignore[union-attr]
        )

    def setup(self) -> None:
        op = get_op(self.case.op)
        variant = op.variants[self.variant]
        if self.device not in self.case.devices:
            pytest.skip(f"case {self.case.id!r} does not run on {self.device} "
                        f"(its devices: {', '.join(self.case.devices)})")
        if self.device not in variant.devices:
            if variant.unavailable:
                pytest.skip(f"variant {self.variant!r}: {variant.unavailable}")
            pytest.skip(f"variant {self.variant!r} runs on {', '.join(variant.devices)} only")

    def runtest(self) -> None:
        state = self.config.stash[NumcheckSession.KEY]
        op = get_op(self.case.op)
        commands = self.commands()
        try:
            golden = state.golden_for(op, self.case, commands)
            result = check(
                op, self.case, self.variant, self.device, golden,
                state.inputs_for(op, self.case), regen_hint=commands.regenerate,
            )
        except (GoldenError, VariantError) as exc:
            kind = "ERROR" if isinstance(exc, VariantError) else type(exc).__name__.upper()
            state.problems.append(Problem(self.display_id, kind, str(exc)))
            raise
        state.results.append(result)
        if not result.passed:
            raise NumcheckFailure(failure_message(result, commands, self._source()))

    def _source(self) -> str:
        try:
            return str(self.path.relative_to(self.config.rootpath))
        except ValueError:
            return str(self.path)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        exc = excinfo.value
        if isinstance(exc, NumcheckFailure):
            return str(exc)
        if isinstance(exc, (GoldenError, VariantError)):
            c = self.commands()
            return (f"numcheck {type(exc).__name__} {self.display_id}\n  {exc}\n\n"
                    f"  case:        {self._source()} [{self.case.id}]\n"
                    f"  reproduce:   {c.reproduce}\n  regenerate:  {c.regenerate}")
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.display_id
