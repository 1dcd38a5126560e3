"""The Tinker SDK's binary wire format, server side: forward_backward requests in, results out.

SDK 0.38 sends `forward_backward` as a protobuf `ForwardBackwardRequest` and will only read the
results of forward/backward and of sampling as protobuf (`Accept: application/x-protobuf`): a
`ForwardBackwardOutput` whose per-datum outputs are one `ArrayRecord` of `BatchedTensor`s (all
datums' values concatenated, int64 byte offsets between them), and a `SampleResponse` whose
tokens are int32 bytes and logprobs float32 bytes. The message classes are the SDK's own
(`tinker.proto.tinker_public_pb2`), and decoding a request tensor reuses the SDK's own decoder,
so this module holds only the packing the SDK does not ship (it is a client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.response_conv import _tensor_data_from_proto

from arena_core.errors import ArenaError

PROTO = "application/x-protobuf"
TOPK_SENTINEL = -99999.0  # the SDK's logprob of an empty top-k cell (`types.topk_logprobs`)


class WireError(ArenaError):
    """A request body the server cannot read; the message names the datum and the field."""


@dataclass
class WireDatum:
    """One decoded datum: its input tokens, its `loss_fn_inputs` as flat numpy arrays and, when
    the client attached provenance (`Datum.with_provenance`), which target positions a sampled
    sequence produced (`sampled`, one bool per `loss_fn_inputs` position; None without spans)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    sampled: np.ndarray | None = None
    # targets per position: K when `target_tokens` came as [N, K] (soft targets, a teacher's
    # top-K: cross_entropy scores each), its rows flattened in `inputs`; 1 for [N]
    width: int = 1


@dataclass
class FwdBwdRequest:
    """A decoded `ForwardBackwardRequest`."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[WireDatum]


def decode_forward_backward(body: bytes) -> FwdBwdRequest:
    """Parse the SDK's protobuf `forward_backward` body (zstd already undone by the caller)."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
        raise WireError(
            f"forward_backward: the body is not a ForwardBackwardRequest ({exc})"
        ) from None
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():  # v2 wins: it also carries strings
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data = []
    for i, datum in enumerate(msg.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise WireError(
                    f"data[{i}].model_input holds a {kind} chunk: this server takes token "
                    "chunks only (ModelInput.from_ints); images and audio are not supported"
                )
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        inputs, width = {}, 1
        for name, tensor in datum.loss_fn_inputs.items():
            try:
                values = np.asarray(_tensor_data_from_proto(tensor).to_numpy())
            except Exception as exc:
                raise WireError(
                    f"data[{i}].loss_fn_inputs['{name}'] cannot be read: {exc}"
                ) from None
            if name == "target_tokens" and values.ndim == 2:
                width = int(values.shape[1])
            inputs[name] = values.reshape(-1)
        spans = _sampled_positions(datum.loss_fn_input_spans)
        data.append(WireDatum(tokens, inputs, spans, width))
    return FwdBwdRequest(
        model_id=msg.model_id,
        seq_id=int(msg.seq_id),
        loss_fn=msg.loss_fn,
        loss_fn_config=config,
        forward_only=bool(msg.forward_only),
        data=data,
    )


def _sampled_positions(spans) -> np.ndarray | None:
    """The runs of `loss_fn_input_spans` (prompt or sampled, tiling the targets in order) as one
    bool per target position: True where a sampled sequence produced the token."""
    if not spans:
        return None
    runs = []
    for span in spans:
        kind = span.WhichOneof("span")
        length = getattr(span, kind).length if kind else 0
        runs.append(np.full(length, kind == "sampled_tokens", dtype=bool))
    return np.concatenate(runs)


def _batched(arrays: list[np.ndarray], dtype: np.dtype, proto_dtype: int) -> pb.BatchedTensor:
    flat = [np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays]
    sizes = np.array([0] + [a.nbytes for a in flat], dtype=np.int64)
    return pb.BatchedTensor(
        data=b"".join(a.tobytes() for a in flat),
        offsets=np.cumsum(sizes).astype(np.int64).tobytes(),
        dtype=proto_dtype,
    )


def encode_forward_backward_output(
    outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]
) -> bytes:
    """A `ForwardBackwardOutput`: float32 records of the datums' outputs (every datum has the
    same fields), one record per run of consecutive datums whose arrays share their trailing
    shape (a soft-target datum's [N, K] logprobs, a plain one's [N])."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    runs: list[list[dict[str, np.ndarray]]] = []
    for out in outputs:
        shapes = [a.shape[1:] for a in out.values()]
        if runs and [a.shape[1:] for a in runs[-1][0].values()] == shapes:
            runs[-1].append(out)
        else:
            runs.append([out])
    for run in runs:
        record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(run))
        for name in run[0]:
            batched = _batched([o[name] for o in run], np.dtype(np.float32), pb.DTYPE_FLOAT32)
            batched.trailing_shape.extend(run[0][name].shape[1:])
            record.fields[name].CopyFrom(batched)
        msg.loss_fn_outputs.append(record)
    return msg.SerializeToString()


@dataclass
class TargetIds:
    """A request's `target_prompt_logprobs` as a dense int64 [len(prompt) - 1, K] array (-1: no
    id asked), and its CSR row pointers and columns when it came sparse: the response lists the
    logprobs of those cells alone, in the same layout."""

    ids: np.ndarray
    csr: tuple[np.ndarray, np.ndarray] | None = None


def target_ids(td: Any, rows: int) -> TargetIds:
    """Read `target_prompt_logprobs` (the SDK's `TensorData`, dense or sparse CSR), checking
    what the SDK documents: int64, exactly `rows` rows, ids >= 0 or -1 in a dense cell.
    WireError names what is wrong."""
    where = "target_prompt_logprobs"
    if str(getattr(td.dtype, "value", td.dtype)) != "int64":
        raise WireError(f"{where}: token ids are int64, not {td.dtype}")
    shape = list(td.shape or [])
    if len(shape) != 2 or shape[0] != rows or shape[1] < 1:
        raise WireError(
            f"{where}: shape {shape}, expected [{rows}, K] (one row per prompt position after "
            "the first, K >= 1 ids each)"
        )
    values = np.asarray(td.data, dtype=np.int64)
    if td.sparse_crow_indices is None:
        if values.size != shape[0] * shape[1]:
            raise WireError(f"{where}: {values.size} values for shape {shape}")
        ids, csr = values.reshape(shape), None
    else:
        crow = np.asarray(td.sparse_crow_indices, dtype=np.int64)
        col = np.asarray(td.sparse_col_indices or [], dtype=np.int64)
        if (
            len(crow) != rows + 1
            or crow[0] != 0
            or np.any(np.diff(crow) < 0)
            or crow[-1] != len(col)
            or len(col) != len(values)
            or np.any((col < 0) | (col >= shape[1]))
        ):
            raise WireError(f"{where}: its sparse CSR indices do not describe a {shape} tensor")
        if np.any(values < 0):
            raise WireError(f"{where}: a listed cell holds {values.min()}, not a token id")
        ids = np.full(shape, -1, dtype=np.int64)
        ids[np.repeat(np.arange(rows), np.diff(crow)), col] = values
        csr = (crow, col)
    if np.any(ids < -1):
        raise WireError(f"{where}: {ids.min()} is not a token id (-1 asks for nothing)")
    if not np.any(ids >= 0):
        raise WireError(f"{where}: names no token id (every cell is -1)")
    return TargetIds(ids, csr)


def _tensor(values: np.ndarray, proto_dtype: int, csr: Any = None) -> pb.Tensor:
    """A response tensor, dense, or sparse CSR over the cells `csr` lists."""
    msg = pb.Tensor(dtype=proto_dtype, shape=list(values.shape))
    if csr is None:
        msg.dense = np.ascontiguousarray(values).tobytes()
    else:
        crow, col = csr
        rows = np.repeat(np.arange(len(crow) - 1), np.diff(crow))
        msg.sparse_csr.values = np.ascontiguousarray(values[rows, col]).tobytes()
        msg.sparse_csr.crow_indices = crow.astype(np.int64).tobytes()
        msg.sparse_csr.col_indices = col.astype(np.int64).tobytes()
    return msg


def _topk(rows: list[list[tuple[int, float]] | None]) -> pb.TopkLogprobs:
    """Per-position (token, logprob) lists as the SDK's [length, k] matrices: each row padded
    with its sentinel (token 0, logprob -99999), a whole row of it where nothing was ranked."""
    k = max((len(row) for row in rows if row), default=0)
    ids = np.zeros((len(rows), k), dtype=np.int32)
    logprobs = np.full((len(rows), k), TOPK_SENTINEL, dtype=np.float32)
    for at, row in enumerate(rows):
        for j, (token, logprob) in enumerate(row or []):
            ids[at, j], logprobs[at, j] = token, logprob
    return pb.TopkLogprobs(
        length=len(rows), k=k, token_ids=ids.tobytes(), logprobs=logprobs.tobytes()
    )


@dataclass
class Sequence:
    """One sampled continuation: its tokens, their logprobs, and why it stopped."""

    tokens: list[int]
    logprobs: list[float]
    stopped: bool  # True: a stop token/string or EOS; False: max_tokens
    topk: list[list[tuple[int, float]]] | None = None  # topk_sample_logprobs, when asked


def encode_sample_response(sequences: list[Sequence], scored: Any = None) -> bytes:
    """A `SampleResponse`: each sequence with its sampled tokens' top-k when asked;
    `scored` (`sampling.PromptLogprobs`) the prompt's logprobs, NaN where there is none
    (position 0), which the SDK turns into None, and its top-k (`_topk`); the logprobs of the
    ids `target_prompt_logprobs` named (NaN in a dense cell of -1; a sparse request's cells
    alone) and the alternative draws, when asked."""
    msg = pb.SampleResponse()
    for seq in sequences:
        one = pb.SampledSequence(
            stop_reason=pb.STOP_REASON_STOP if seq.stopped else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(seq.tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(seq.logprobs, dtype=np.float32).tobytes(),
        )
        if seq.topk is not None:
            one.topk_sampled_logprobs.CopyFrom(_topk(seq.topk))
        msg.sequences.append(one)
    if scored is not None and scored.logprobs is not None:
        msg.prompt_logprobs = np.asarray(scored.logprobs, dtype=np.float32).tobytes()
    if scored is not None and scored.topk is not None:
        msg.topk_prompt_logprobs.CopyFrom(_topk(scored.topk))
    if scored is not None and scored.targets is not None:
        csr = scored.target_ids.csr if scored.target_ids is not None else None
        msg.target_prompt_logprobs.CopyFrom(_tensor(scored.targets, pb.DTYPE_FLOAT32, csr))
    if scored is not None and scored.alt_tokens is not None:
        msg.prompt_alt_tokens.tokens.CopyFrom(_tensor(scored.alt_tokens, pb.DTYPE_INT64))
        msg.prompt_alt_tokens.logprobs.CopyFrom(_tensor(scored.alt_logprobs, pb.DTYPE_FLOAT32))
    return msg.SerializeToString()
