"""Options of the calibration mode and what they mean together (no torch, no numpy).

``pytest --numcheck --numcheck-calibrate[=N]`` measures the selected checks over their
seeds plus N fresh ones and prints budget tables; ``--numcheck-calibrate-speed=K`` (with
``--numcheck-perf``) times them K times and prints ``speedup_min`` proposals;
``--numcheck-calibrate-write`` writes either into the case files. Read here at configure
time, so a bad combination is a usage error before anything runs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from numcheck.plugin.options import (
    CALIBRATE_ACCEPT_OPTION,
    CALIBRATE_FIRST_SEED_OPTION,
    CALIBRATE_JSON_OPTION,
    CALIBRATE_MARGIN_OPTION,
    CALIBRATE_OPTION,
    CALIBRATE_POOL_OPTION,
    CALIBRATE_RENEW_OPTION,
    CALIBRATE_SPEED_OPTION,
    CALIBRATE_WITH_OPTION,
    CALIBRATE_WRITE_OPTION,
    EXPLAIN_OPTION,
    PERF_OPTION,
    REGEN_OPTION,
)

if TYPE_CHECKING:
    from numcheck.calibrate.measuring import Measuring
    from numcheck.calibrate.payloads import Payload

#: The options that switch calibration on or change what it does (each needs --numcheck).
CALIBRATION_FLAGS = (CALIBRATE_OPTION, CALIBRATE_WRITE_OPTION, CALIBRATE_POOL_OPTION,
                     CALIBRATE_SPEED_OPTION, CALIBRATE_JSON_OPTION, CALIBRATE_WITH_OPTION,
                     CALIBRATE_ACCEPT_OPTION, CALIBRATE_RENEW_OPTION)
#: Fresh seeds when ``--numcheck-calibrate`` is given without ``=N``.
DEFAULT_FRESH_SEEDS = 20


def _count(option: str, what: str, minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected the number of {what}, got {text!r}. Fix: write {option}=N with '=' "
                "(or put paths before the option)"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {minimum} or more {what}, got {value}")
        return value

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.05, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {value}")
    return value


def add_options(group: Any) -> None:
    """Add the calibration options to numcheck's option group."""
    group.addoption(
        CALIBRATE_OPTION, nargs="?", const=DEFAULT_FRESH_SEEDS, default=None, metavar="N",
        type=_count(CALIBRATE_OPTION, "fresh seeds", 0),
        help="measure instead of gating: run the selected checks over their seeds plus N "
        f"fresh ones (default {DEFAULT_FRESH_SEEDS}) against the FP32 reference recomputed "
        "on the CPU (no golden needed) and print suggested budget tables (docs/budgets.md).",
    )
    group.addoption(
        CALIBRATE_WRITE_OPTION, action="store_true", default=False,
        help="write the suggested budgets (and speedup_min proposals) into the case files, "
        "changing only the values that differ; comments and layout stay (needs tomlkit).",
    )
    group.addoption(
        CALIBRATE_POOL_OPTION, action="append", default=[], metavar="NAME=V1,V2,...",
        help="budget several honest variants as one: variant NAME and every listed variant "
        "the case runs get one budget covering the worst of all of them; listed variants the "
        "case does not run are measured too; -V names a member of the table's recorded pool "
        "left out on purpose (repeatable).",
    )
    group.addoption(
        CALIBRATE_FIRST_SEED_OPTION, type=_count(CALIBRATE_FIRST_SEED_OPTION, "the first "
                                                 "fresh seed", 0),
        default=1000, metavar="S",
        help="the fresh seeds are S, S+1, ... (default 1000); another S gives held-out seeds.",
    )
    group.addoption(
        CALIBRATE_SPEED_OPTION, type=_count(CALIBRATE_SPEED_OPTION, "timing runs", 1),
        default=None, metavar="K",
        help="with --numcheck-perf: time each selected check K times and propose speedup_min "
        "per variant for this device class (not gated within 5%% of 1; known-bad variants "
        "keep failing).",
    )
    group.addoption(
        CALIBRATE_JSON_OPTION, metavar="PATH", default=None,
        help="also save what this calibration run measured (every check's worst values and "
        f"seeds, or its timing runs) as JSON, to pool it into a run on another device with "
        f"{CALIBRATE_WITH_OPTION}.",
    )
    group.addoption(
        CALIBRATE_WITH_OPTION, metavar="PATH", action="append", default=[],
        help="pool the measurements of an earlier run (a --numcheck-calibrate-json file, e.g. "
        "the same cases on a GPU) into this run's suggestions: a budget then covers every "
        "device measured (repeatable).",
    )
    group.addoption(
        CALIBRATE_ACCEPT_OPTION, metavar="V1,V2,...", action="append", default=[],
        help="write budgets although these variants' measurements look like a bug's (past "
        "their class's honest limits, or a borrower widening its lender): calibration refuses "
        "them otherwise; the case file records the override (repeatable).",
    )
    group.addoption(
        CALIBRATE_RENEW_OPTION, action="store_true", default=False,
        help="set the selected budget tables from this run alone: ignore the pool, seeds and "
        "devices their calibration records name, and tighten values nothing recorded.",
    )
    group.addoption(
        CALIBRATE_MARGIN_OPTION, type=_fraction, default=0.05, metavar="M",
        help="speed calibration: threshold = lower speedup of the K runs x (1 - M) "
        "(default 0.05).",
    )


@dataclass(frozen=True)
class Settings:
    """What a calibration run does: what each check measures (sent with it to the executor),
    and what the run does with the measurements."""

    measuring: Measuring
    write: bool = False
    margin: float = 0.05
    #: Where to save this run's measurements, and earlier runs' measurements to pool in.
    json_path: Path | None = None
    earlier: tuple[Payload, ...] = ()
    #: Variants whose bug-sized measurements may be written anyway.
    accepted: tuple[str, ...] = ()

    @property
    def on(self) -> bool:
        return self.measuring.fresh is not None or self.measuring.speed_runs is not None


def parse_pools(values: list[str]) -> dict[str, tuple[str, ...]]:
    """``["bf16=bf16,bf16_splitk"]`` -> ``{"bf16": ("bf16", "bf16_splitk")}``; the name is
    always a member. A variant in two pools is an error (its budget would be ambiguous). A
    member written ``-V`` is no member: it names V as removed from the table's recorded
    pool (:func:`removed_members`)."""
    pools: dict[str, tuple[str, ...]] = {}
    owner: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        listed = [m.strip() for m in rest.split(",") if m.strip()]
        members = [m for m in listed if not m.startswith("-")]
        name = name.strip()
        if not sep or not name or not members:
            raise ValueError(
                f"{CALIBRATE_POOL_OPTION} {value!r}: expected NAME=V1,V2,... Fix: e.g. "
                f"{CALIBRATE_POOL_OPTION} bf16=bf16,bf16_splitk,bf16_rev"
            )
        pool = tuple(dict.fromkeys([name, *members]))
        for member in pool:
            if member in owner and owner[member] != name:
                raise ValueError(
                    f"{CALIBRATE_POOL_OPTION}: variant {member!r} is in pools {owner[member]!r} "
                    f"and {name!r}. Fix: put each variant in one pool"
                )
            owner[member] = name
        pools[name] = tuple(dict.fromkeys([*pools.get(name, ()), *pool]))
    return pools


def removed_members(values: list[str]) -> dict[str, tuple[str, ...]]:
    """Per pool name, the members written ``-V`` (removed from its recorded pool on
    purpose): ``["bf16=bf16,-bf16_old"]`` -> ``{"bf16": ("bf16_old",)}``. A name both kept
    and removed is an error."""
    removed: dict[str, tuple[str, ...]] = {}
    for value in values:
        name, _, rest = value.partition("=")
        listed = [m.strip() for m in rest.split(",") if m.strip()]
        gone = [m[1:].strip() for m in listed if m.startswith("-")]
        both = [m for m in gone if m in listed or m == name.strip()]
        if both:
            raise ValueError(f"{CALIBRATE_POOL_OPTION} {value!r}: {both[0]!r} is both a member "
                             f"and removed (-{both[0]}). Fix: keep one of the two")
        if gone:
            removed[name.strip()] = tuple(dict.fromkeys([*removed.get(name.strip(), ()), *gone]))
    return removed


def settings_from_config(config: pytest.Config) -> Settings:
    """The run's calibration settings; a bad combination of options is a UsageError."""
    from numcheck.calibrate.measuring import Measuring

    get = config.getoption
    fresh, speed = get(CALIBRATE_OPTION), get(CALIBRATE_SPEED_OPTION)
    try:
        pools = parse_pools(list(get(CALIBRATE_POOL_OPTION)))
        removed = removed_members(list(get(CALIBRATE_POOL_OPTION)))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    here = config.invocation_params.dir
    json_path = here / get(CALIBRATE_JSON_OPTION) if get(CALIBRATE_JSON_OPTION) else None
    earlier: list[Payload] = []
    for name in get(CALIBRATE_WITH_OPTION):
        earlier += load_run(here / name)
    accepted = tuple(dict.fromkeys(v.strip() for value in get(CALIBRATE_ACCEPT_OPTION)
                                   for v in value.split(",") if v.strip()))
    args = [str(a) for a in config.invocation_params.args]
    measuring = Measuring(fresh, get(CALIBRATE_FIRST_SEED_OPTION), pools, removed, speed,
                          bool(get(CALIBRATE_RENEW_OPTION)),
                          fresh_given=any(a.startswith(CALIBRATE_OPTION + "=") for a in args),
                          first_seed_given=any(a.startswith(CALIBRATE_FIRST_SEED_OPTION)
                                               for a in args))
    settings = Settings(measuring, bool(get(CALIBRATE_WRITE_OPTION)),
                        get(CALIBRATE_MARGIN_OPTION), json_path, tuple(earlier), accepted)
    if not settings.on:
        for name in (CALIBRATE_WRITE_OPTION, CALIBRATE_POOL_OPTION, CALIBRATE_JSON_OPTION,
                     CALIBRATE_WITH_OPTION, CALIBRATE_ACCEPT_OPTION, CALIBRATE_RENEW_OPTION):
            if get(name):
                raise pytest.UsageError(f"{name} only works together with {CALIBRATE_OPTION} "
                                        f"(or {CALIBRATE_SPEED_OPTION}=K)")
        return settings
    if pools and fresh is None:
        raise pytest.UsageError(f"{CALIBRATE_POOL_OPTION} pools numerics budgets: add "
                                f"{CALIBRATE_OPTION}")
    if speed is not None and not get(PERF_OPTION):
        raise pytest.UsageError(f"{CALIBRATE_SPEED_OPTION} times the perf checks: add "
                                f"{PERF_OPTION}")
    for other in (REGEN_OPTION, EXPLAIN_OPTION):
        if get(other):
            raise pytest.UsageError(f"calibration measures and gates nothing: run {other} "
                                    "on its own, without the calibration options")
    if settings.write:
        from numcheck.calibrate.casewriter import INSTALL_HINT, have_tomlkit

        if not have_tomlkit():
            raise pytest.UsageError(f"{CALIBRATE_WRITE_OPTION} edits case files with tomlkit, "
                                    f"which is not installed. Fix: {INSTALL_HINT}")
    return settings


def load_run(path: Path) -> list[Payload]:
    """The measurements of a ``--numcheck-calibrate-json`` file; a UsageError naming the
    file and the fix when it is not one."""
    # Only a calibration run reads one: the payloads' module is not imported otherwise.
    from numcheck.calibrate.payloads import RUN_FORMAT, read_run

    fix = (f"pass a file written by {CALIBRATE_JSON_OPTION} (run pytest --numcheck "
           f"--numcheck-calibrate {CALIBRATE_JSON_OPTION} PATH where you measured)")
    try:
        return read_run(path)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise pytest.UsageError(f"{CALIBRATE_WITH_OPTION} {path}: cannot read it ({exc}). "
                                f"Fix: {fix}") from None
    except ValueError:
        raise pytest.UsageError(f"{CALIBRATE_WITH_OPTION} {path}: not a numcheck calibration "
                                f"file (format {RUN_FORMAT}). Fix: {fix}") from None
