"""Which aten calls move data: the op classification behind the cast ledger's copies.

The ledger (:mod:`numcheck.overhead.casts`) sees every aten call a variant makes. A copy
is not only ``.clone()``: ``torch.cat`` of x's streams, ``kv_cache[idx]``, ``x.flip(0)``,
``torch.where(mask, x, 0)`` each write a new tensor whose elements are the input's,
re-arranged, selected, replicated or padded: a full pass over memory that computes
nothing. :func:`classify` puts every aten overload in one of six classes, from torch's
own schema and tags first and a curated list second, so an op nobody listed still lands
somewhere sensible:

- ``view``: the schema says a result aliases an input (``view``, ``transpose``,
  ``select``, ``expand``, ``unfold``...): no bytes move. (At run time a result that shares
  a storage with an argument, e.g. ``_unsafe_view``, is treated the same way.)
- ``convert``: ``_to_copy``, ``copy_``, ``clone``: the ledger's dtype conversions and
  copies (casts, ``.contiguous()``, device moves).
- ``move``: data movement, recognised by rule, not only by name: torch's ``view_copy``
  tag (the functional copies of views: ``permute_copy``, ``narrow_copy``...), any op named
  ``*_copy`` or ``*_scatter`` (``index_copy``, ``slice_scatter``, ``masked_scatter``), the
  nearest-neighbour upsamplers (pure replication), and :data:`DATA_MOVEMENT` (``cat``,
  ``stack``, ``index``, ``gather``, ``repeat``, ``flip``, ``roll``, ``where``, pads...).
  In-place and ``out=`` forms (``index_put_``, ``cat.out``) move data into the tensor
  they write.
- ``compute``: ops torch tags ``pointwise`` or ``reduction`` (except the data-movement
  ones above, which torch tags pointwise too: ``where``, ``masked_fill``, ``clone``),
  :data:`COMPUTE_OPS` (GEMMs, softmax, norms, sorts and selections that compare values).
- ``create``: ops that read no tensor's elements: no tensor argument (``empty``,
  ``arange``, ``full``), or one read for its shape and dtype only (``*_like``, ``new_*``).
  Whatever their result holds, it is no copy of an input: ``torch.empty_like(x)`` may be
  handed a freed block that held x's bits (the caching allocator does that on CUDA).
- ``unknown``: anything else. The ledger decides these at run time by value: a result
  whose sampled elements all occur among one argument's elements (of its dtype) is data
  movement of that argument (:class:`numcheck.overhead.casts.CastLedger`).

Data sources of a ``move`` are its tensor arguments except the ones that only say where
elements go: index, mask and repeat tensors (:data:`METADATA_ARGS`), and the tensor it
writes in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

VIEW = "view"
CONVERT = "convert"
MOVE = "move"
COMPUTE = "compute"
CREATE = "create"
UNKNOWN = "unknown"

#: The ledger's conversions: their own recording path (dtype changes, round trips); their
#: entries read ``bf16 -> fp32`` or ``fp32 copy``, where data movement names its op.
CONVERSIONS = frozenset({"_to_copy", "copy_", "clone"})

#: Data movement that no rule below recognises by itself (names without a trailing ``_``).
#: Each writes a result whose every element is an element of a data source or a constant.
DATA_MOVEMENT = frozenset({
    # concatenation and stacking
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack",
    "_chunk_cat", "block_diag", "pad_sequence",
    # selection by index or mask
    "index", "_unsafe_index", "_unsafe_masked_index", "index_select", "gather", "take",
    "take_along_dim", "embedding", "masked_select", "index_put", "_index_put_impl",
    "_unsafe_index_put", "index_fill", "put", "scatter", "max_unpool2d", "max_unpool3d",
    # replication, reordering, padding
    "repeat", "repeat_interleave", "tile", "flip", "fliplr", "flipud", "roll", "rot90",
    "constant_pad_nd", "pad", "_pad_circular", "_pad_enum", "reflection_pad1d",
    "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
    "replication_pad3d", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
    "native_channel_shuffle", "im2col", "copy", "_copy_from", "_copy_from_and_resize",
    "_pin_memory", "lift",
    # elements kept or replaced by a constant
    "where", "masked_fill", "tril", "triu", "diag", "diag_embed", "diagflat",
    "slice_backward", "select_backward", "diagonal_backward", "unfold_backward",
    "_jagged_to_padded_dense_forward", "_padded_dense_to_jagged_forward",
})

#: Compute ops that torch does not tag ``pointwise`` or ``reduction``. Sorts and selections
#: are here on purpose: their results are input elements, but choosing them compares values.
#: Ops that move or compute depending on a mode (``grid_sampler_2d``: nearest or bilinear)
#: are left out, to the run-time test.
COMPUTE_OPS = frozenset({
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "dot", "vdot",
    "matmul", "linear", "einsum", "tensordot", "kron", "_int_mm", "_scaled_mm",
    "_scaled_mm_v2", "_grouped_mm", "_scaled_grouped_mm", "_addmm_activation",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "col2im",
    "_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax",
    "native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "_fused_rms_norm", "rms_norm", "layer_norm",
    "group_norm", "batch_norm",
    "cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "diff",
    "topk", "sort", "argsort", "msort", "kthvalue", "median", "nanmedian", "mode",
    "_unique", "_unique2", "unique_dim", "unique_consecutive", "searchsorted", "bucketize",
    "bincount", "histc", "isin", "nonzero", "nonzero_static", "argwhere", "one_hot",
    "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool2d",
    "adaptive_max_pool3d", "fractional_max_pool2d", "fractional_max_pool3d", "avg_pool2d",
    "avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "index_add",
    "index_reduce", "scatter_add", "scatter_reduce", "_embedding_bag", "embedding_bag",
    "_embedding_bag_forward_only", "segment_reduce", "trace", "cross", "linalg_cross",
    "renorm", "prelu", "_prelu_kernel", "glu", "hardswish", "dist", "cdist", "_cdist_forward",
    "pdist", "_pdist_forward", "_euclidean_dist", "complex", "polar",
    "affine_grid_generator", "upsample_bilinear2d", "upsample_bicubic2d",
    "upsample_linear1d", "upsample_trilinear3d", "_upsample_bilinear2d_aa",
    "_upsample_bicubic2d_aa", "stft", "istft", "dropout", "native_dropout", "_fused_dropout",
    "_masked_scale", "bernoulli", "multinomial", "normal", "uniform", "exponential",
    "geometric", "log_normal", "cauchy", "poisson", "_standard_gamma",
})

#: Name prefixes of compute families (FFTs, linear algebra, attention, losses...).
COMPUTE_PREFIXES = (
    "linalg_", "_linalg_", "fft_", "_fft_", "special_", "_scaled_dot_product_",
    "scaled_dot_product_", "_flash_attention", "_efficient_attention", "_native_multi_head",
    "_foreach_", "_fused_", "_weight_int", "_convert_weight", "quantize", "_thnn_", "lstm",
    "gru", "rnn_", "_cudnn", "cudnn_", "miopen_", "mkldnn_", "nll_loss", "mse_loss",
    "huber_loss", "smooth_l1_loss", "binary_cross_entropy", "soft_margin_loss",
    "multi_margin_loss", "multilabel_margin_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "cholesky", "triangular_solve", "ormqr", "svd", "lu_",
)

#: Argument names that say where elements go, not which elements: never data sources.
METADATA_ARGS = frozenset({
    "index", "indices", "mask", "condition", "repeats", "output_size", "offsets",
    "per_sample_weights", "boundaries", "sorted_sequence", "lengths", "batch_sizes",
})


@dataclass(frozen=True)
class OpClass:
    """How the ledger treats one aten overload.

    ``data_args`` are the schema names of the arguments whose elements a ``move`` (or an
    ``unknown`` op) copies; ``mutated`` names the argument it writes in place, if any
    (``index_put_``'s ``self``, ``cat.out``'s ``out``).
    """

    kind: str
    name: str
    data_args: tuple[str, ...] = ()
    mutated: str | None = None


def _tags_of_packet(packet: Any) -> set[Any]:
    """Tags of every overload of ``packet``: an ``out`` or in-place overload carries fewer
    tags than the functional one, and the class belongs to the op, not the overload."""
    tags: set[Any] = set()
    for overload in packet.overloads():
        tags.update(getattr(packet, overload).tags)
    return tags


def _is_move(name: str, tags: set[Any]) -> bool:
    return (
        name in DATA_MOVEMENT
        or torch.Tag.view_copy in tags
        or name.endswith(("_copy", "_scatter"))
        or name.startswith(("upsample_nearest", "_upsample_nearest"))
    )


def _is_compute(name: str, tags: set[Any]) -> bool:
    return (
        torch.Tag.pointwise in tags
        or torch.Tag.reduction in tags
        or name in COMPUTE_OPS
        or name.startswith(COMPUTE_PREFIXES)
    )


def _is_creation(name: str, tensors: list[Any]) -> bool:
    """Reads no tensor's elements: no tensor argument, or only a template's metadata."""
    return not tensors or name.endswith("_like") or name.startswith("new_")


@cache
def classify(func: Any) -> OpClass:
    """The class of an aten ``OpOverload`` (cached: the ledger asks once per call)."""
    packet = func.overloadpacket
    full = packet.__name__
    if full in CONVERSIONS:
        return OpClass(CONVERT, full)
    name = full.rstrip("_") if not full.startswith("__") else full
    schema = func._schema
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return OpClass(VIEW, name)
    mutated = next((a.name for a in schema.arguments
                    if a.alias_info is not None and a.alias_info.is_write), None)
    tensors = [a for a in schema.arguments if "Tensor" in str(a.type)]
    data = tuple(a.name for a in tensors if a.name not in METADATA_ARGS and a.name != mutated)
    tags = _tags_of_packet(packet)
    if _is_move(name, tags):
        return OpClass(MOVE, name, data, mutated)
    if _is_creation(name, tensors):
        return OpClass(CREATE, name)
    if _is_compute(name, tags):
        return OpClass(COMPUTE, name)
    if mutated is not None:  # an unlisted in-place op (resize_, set_, fill_): writes, moves none
        return OpClass(COMPUTE, name)
    return OpClass(UNKNOWN, name, data)


def bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by schema name."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
    return bound


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors in an argument or a result: itself, or those of a list or tuple."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []
