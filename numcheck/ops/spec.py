"""What an op is: one FP32 reference, named variants, an input maker and named outputs.

Plain descriptions, no state: op modules (:mod:`numcheck.ops.indexer`,
:mod:`numcheck.ops.mhc`, a user's own) build an :class:`OpSpec` from these and import
nothing else from the registry; :mod:`numcheck.ops.registry` keeps the registered ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from numcheck.ops.batch import Batch
from numcheck.ops.structure import Structure
from numcheck.precision import PRECISIONS  # noqa: F401 - where op authors look for it

if TYPE_CHECKING:
    from numcheck.precision.quant_declare import GemmQuant

#: Inputs of one case instance, by name, on one device.
Inputs = dict[str, torch.Tensor]
#: Outputs of one op call, by name.
Outputs = dict[str, torch.Tensor]
#: Resolved shape parameters of a case (preset merged with explicit values).
Params = Mapping[str, Any]

DEVICES = ("cpu", "cuda")


def optional_library(module: str, devices: tuple[str, ...], install: str
                     ) -> tuple[tuple[str, ...], str]:
    """``(devices, unavailable)`` of a variant (or an honest member) that needs the optional
    library ``module``: its ``devices`` and "" where the library is installed; no device,
    and why not with the command that installs it, where it is not. The library is looked up
    without importing it (some take seconds); one hidden by ``sys.modules[module] = None``
    counts as missing. Every path that runs variants (the plugin in-process, its worker
    process, xdist workers, the benchmarks) then skips it with that reason::

        devices, why = optional_library("torchao", ("cuda",), "pip install torchao")
        Variant("mine", fn, "e4m3", devices=devices, unavailable=why)
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return devices, ""
    return (), (f"{module} is not installed (it runs on {', '.join(devices)}); fix: "
                f"{install}")

VariantFn = Callable[[Inputs, Params], Outputs]
#: A variant's one-time preparation: ``prepare(inputs, params)`` -> tensors by name.
PrepareFn = Callable[[Inputs, Params], Inputs]
InputMaker = Callable[[Params, int], Inputs]
#: A GEMM implementation: ``gemm(a, b)`` computes ``a @ b`` (matmul broadcasting) from
#: floating-point operands and returns float32 (the values it wrote, widened).
Gemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: An op with its GEMM left open: ``site(inputs, params, gemm)`` computes every output the
#: way the op does, with ``gemm`` for its matrix product (see :attr:`OpSpec.gemm_site`).
GemmSite = Callable[[Inputs, Params, Gemm], Outputs]


@dataclass(frozen=True)
class Variant:
    """One implementation of an op.

    ``fn(inputs, params)`` returns every output named by the op. ``precision`` picks the
    default budget row; ``devices`` lists where the variant can run at all, and
    ``unavailable`` says why not on the others when that depends on the install (an
    optional dependency missing...): it becomes the skip reason.

    ``prepare(inputs, params)``, when given, is the variant's one-time preparation: what a
    serving engine does once when it loads the weights (a layout, a dtype, a
    quantization). It returns tensors by name; ``fn`` then receives the op's inputs with
    those on top (a new name is added, an input's own name replaces that input). numcheck
    runs it once per (case, seed, device) before anything is timed, checks the outputs of
    ``fn`` on the prepared inputs against the golden, and records its casts and copies
    apart from the per-call ledger (:mod:`numcheck.prepare`, docs/extending.md).

    ``produces``, when given, names the outputs of the op the variant computes (a kernel
    that computes part of the op: ``produces=("post", "comb", "y")``); ``fn`` then returns
    exactly those. numcheck checks them, shows the others as not produced, and never times
    the variant against the whole reference (docs/extending.md, "A kernel that computes part
    of the op"). None: every output of the op.

    ``quant``, for a variant whose GEMM computes in FP8 or FP4: how it quantizes each operand
    and sums the products (:class:`numcheck.precision.quant_declare.GemmQuant`). numcheck
    then holds it to two references (:mod:`numcheck.check.against_sim`): the FP32 golden with
    the budgets of its scheme's honest family, and the simulated reference, the op
    recomputed through its ``gemm_site`` on the operands the variant's own quantizer produced
    (handed over with ``numcheck.fp8.record_gemm``; numcheck's quantization of the op's operands
    where the variant hands none), with every operand it hands checked against the declared
    scheme (docs/fp8.md).
    """

    name: str
    fn: VariantFn
    precision: str
    devices: tuple[str, ...] = DEVICES
    doc: str = ""
    unavailable: str = ""
    prepare: PrepareFn | None = None
    produces: tuple[str, ...] | None = None
    quant: GemmQuant | None = None

    def why_not(self, device: str) -> str:
        """"" when the variant runs on ``device`` in this process, else why not (a check's
        skip reason: an optional library missing, with its install command, or the devices
        it runs on)."""
        if device in self.devices:
            return ""
        return self.unavailable or f"runs on {', '.join(self.devices)} only"


class VariantError(Exception):
    """A variant that raised, or returned outputs of the wrong names, shape, dtype or device,
    or whose one-time preparation did (:mod:`numcheck.prepare`). Raised where variants run
    (:func:`numcheck.check.run.run_variant`) and by the numerics of a check."""

    @classmethod
    def raised(cls, what: str, exc: BaseException) -> VariantError:
        """``<what> raised ValueError at conftest.py:8 (helper): <message>``: the line that
        raised, or, where torch raised, the last line outside torch that called it."""
        return cls(f"{what} raised {type(exc).__name__}{raised_at(exc)}: {exc}")


def raised_at(exc: BaseException) -> str:
    """`` at file:line (function)`` of the line that raised ``exc`` (its innermost frame
    outside torch), the file relative to the working directory when under it; "" without a
    traceback."""
    import os
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    outside = [f for f in frames if not f.filename.startswith(torch_dir)]
    if not outside:
        return ""
    f = outside[-1]
    path = os.path.abspath(f.filename)
    shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else f.filename
    return f" at {shown}:{f.lineno} ({f.name})"


@dataclass(frozen=True)
class ParamSpec:
    """A shape parameter a case may set: its type, default, a one-line meaning, and what
    values are valid.

    ``min``/``max`` are inclusive bounds and ``gt`` an exclusive lower bound (``eps > 0``);
    ``choices`` lists the only values allowed (``("amax448", "ue8m0")``). A case file whose
    value breaks them fails when it is read, naming the key and the range
    (:mod:`numcheck.ops.param_checks`); constraints between parameters go in
    :attr:`OpSpec.check_params`. Every parameter also pins the golden: a case that changes
    one makes its golden stale.
    """

    type: type
    default: Any
    doc: str = ""
    min: float | None = None
    max: float | None = None
    gt: float | None = None
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class ParamProblem:
    """One broken parameter rule: the parameter (``shape.<key>`` in a case file), what is
    wrong, and the fix. What :attr:`OpSpec.check_params` returns, one per broken rule."""

    key: str
    problem: str
    fix: str


@dataclass(frozen=True)
class TopkSpec:
    """Which outputs carry a top-k selection: indices (-1 padded) and the scores they rank.

    ``select(scores, k)``: how the op selects from its scores, used for a variant that
    produces the scores but not the selection (numcheck selects it, to check it); None:
    :func:`numcheck.numerics.topk.select_topk` (the ``k`` largest, ``-1`` for ``-inf``).
    """

    indices: str
    scores: str
    select: Callable[[torch.Tensor, int], torch.Tensor] | None = field(default=None,
                                                                        compare=False)


@dataclass(frozen=True)
class OpSpec:
    """An op: one FP32 reference, named variants, an input maker and named outputs.

    ``version`` is bumped whenever the reference math or the input maker changes; goldens
    record it, and a golden of another version is stale.
    """

    name: str
    version: int
    reference: str
    variants: Mapping[str, Variant]
    make_inputs: InputMaker
    outputs: tuple[str, ...]
    params: Mapping[str, ParamSpec]
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    topk: TopkSpec | None = None
    #: Outputs whose dtype is coarser than some variants compute in (name -> precision
    #: class): their default budgets use the coarser row.
    output_precision: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""
    #: Roofline: FLOPs of one call and the fewest bytes one call must move
    #: (each input read once, each output written once), from the case's params.
    flops: Callable[[Params], float] | None = None
    min_bytes: Callable[[Params], float] | None = None
    #: Precision class -> the variant that is the op's honest implementation at that
    #: precision (its rounding reference). A variant of that class is held, element by
    #: element, to a multiple of this variant's worst error on the same inputs
    #: (``max_err_ratio``); classes without an entry are not measured that way.
    rounding_reference: Mapping[str, str] = field(default_factory=dict)
    #: Precision class -> other honest implementations at that precision (label -> function,
    #: plain functions, not variants: they are not checks of their own). ``max_err_ratio``
    #: is taken against the worst element error of the rounding reference and all of these
    #: on the same inputs: the op's honest rounding envelope. Name the choices a kernel may
    #: legitimately make that round more than the reference does (split-K with partials in
    #: the low precision); a budget then needs no headroom for them.
    rounding_alternatives: Mapping[str, Mapping[str, VariantFn]] = field(default_factory=dict)
    #: Parameters that take another's value unless given themselves (name -> the one it
    #: follows): an umbrella parameter split in two keeps its meaning (mHC's ``eps``).
    follows: Mapping[str, str] = field(default_factory=dict)
    #: Constraints between parameters (``min_context <= max_context``): called with the
    #: resolved params, returns a :class:`ParamProblem` per broken rule (empty when the
    #: params are valid). Single-parameter ranges go in ParamSpec.
    check_params: Callable[[Params], Any] | None = None
    #: Non-finite values the reference may legitimately produce, per output: any of
    #: ``"nan"``, ``"+inf"``, ``"-inf"`` (the indexer's mask: ``{"logits": ("-inf",)}``).
    #: Regeneration refuses to store any other NaN or Inf in a golden.
    nonfinite: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Per output, the axes and groupings a failure is localized along (numcheck.ops.structure);
    #: an output left out still gets its plain axes.
    structure: Mapping[str, Structure] = field(default_factory=dict)
    #: Where the op's GEMM sits: ``gemm_site(inputs, params, gemm)`` runs the op with its
    #: matrix product done by ``gemm`` (operands as the op holds them, e.g. e4m3 or bf16
    #: widened to fp32; the GEMM rounds them to its own precision class). numcheck derives
    #: from it the op's honest members of each precision class (numcheck.honest.gemm_impls: TF32
    #: with operands rounded to nearest or truncated, bf16 writing bf16 or fp32, one pass,
    #: K-blocks, split-K; on CUDA cuBLAS and a Triton ``tl.dot`` kernel) and its rounding
    #: envelope (``max_err_ratio``), next to :attr:`rounding_reference` and
    #: :attr:`rounding_alternatives`. None: the op declares no GEMM.
    gemm_site: GemmSite | None = None
    #: What a request is in the op's batch (numcheck.ops.batch): the batch axis of each
    #: input and output, for a case's ``batch_invariant`` key. None: the op declares none,
    #: and its cases cannot ask for batch invariance.
    batch: Batch | None = None

    def produced(self, variant: str) -> tuple[str, ...]:
        """The outputs variant ``variant`` computes, in the op's order."""
        declared = self.variants[variant].produces
        return self.outputs if declared is None else tuple(
            o for o in self.outputs if o in declared)

    def checked(self, variant: str) -> tuple[str, ...]:
        """The outputs a check of ``variant`` holds to the golden, in the op's order: those
        it produces, and the top-k selection wherever it produces the scores the selection
        ranks (numcheck selects from them when the variant does not)."""
        produced = set(self.produced(variant))
        if self.topk is not None and self.topk.scores in produced:
            produced.add(self.topk.indices)
        return tuple(o for o in self.outputs if o in produced)

    def not_produced(self, variant: str) -> tuple[str, ...]:
        """The op's outputs variant ``variant`` does not compute (empty for a whole variant)."""
        produced = self.produced(variant)
        return tuple(o for o in self.outputs if o not in produced)
    #: The input distributions ``make_inputs`` draws (numcheck.distributions: it reads the
    #: case's with ``input_distribution(params)``); a case naming another is refused.
    distributions: tuple[str, ...] = ("normal",)
    #: Recorded inputs against the case's parameters: ``check_inputs(inputs, params)``
    #: returns a :class:`ParamProblem` per parameter the tensors contradict (``tokens`` for
    #: an x of another length). Without it a recorded file is checked on its inputs'
    #: names, dtypes and dimensions only (docs/extending.md, "Real inputs").
    check_inputs: Callable[[Inputs, Params], Any] | None = None

    def resolve_params(self, preset: str | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults, then the preset, then explicit values, then :attr:`follows` for the
        parameters neither gave. Unknown names raise KeyError."""
        params = {name: spec.default for name, spec in self.params.items()}
        given: set[str] = set()
        if preset is not None:
            params.update(self.presets[preset])
            given.update(self.presets[preset])
        for key, value in overrides.items():
            if key not in self.params:
                raise KeyError(key)
            params[key] = value
            given.add(key)
        for name, source in self.follows.items():
            if name not in given:
                params[name] = params[source]
        return params
