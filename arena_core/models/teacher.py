"""The teacher of on-policy distillation: a frozen model that scores the student's sampled tokens.

The teacher only ever runs forward passes on token ids the student sampled, so it must read those
ids exactly as the student wrote them: the two tokenizers must have the same vocabulary (token
string -> id). A teacher of another model family would score different tokens under the same
ids and the distillation would silently train on nonsense, so a mismatch is an error here.

`load_teacher(ref)` accepts what `model.init_from` accepts (a finished run's checkpoint,
`RUN[:STEP|best|latest]`: full weights as they are, a LoRA adapter merged into its base) and
anything `model.name_or_path` accepts (`arena:tiny`, a local model or adapter directory, a
cached or hub model). It is loaded once, in eval mode, with every parameter frozen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from arena_core.errors import ArenaError, ModelLoadError
from arena_core.models.loading import load_policy


class TeacherMismatchError(ModelLoadError):
    """The teacher's tokenizer differs from the student's: it cannot score the student's ids."""


def load_teacher(
    ref: str,
    *,
    student_tokenizer: Any = None,
    device: str = "cpu",
    runs: str | Path = "./runs",
    dtype: str = "auto",
) -> nn.Module:
    """The frozen teacher model `ref` names (see the module docstring), on `device`.

    With `student_tokenizer` the vocabularies are compared (TeacherMismatchError when they
    differ); the teacher's output layer must cover every id of that vocabulary."""
    policy = _load(str(ref), device=device, runs=runs, dtype=dtype)
    model = policy.model
    if policy.is_lora:  # a LoRA teacher: fold its adapter in (one plain forward per batch)
        model = model.merge_and_unload()
    if student_tokenizer is not None:
        check_same_vocabulary(str(ref), policy.tokenizer, student_tokenizer, model)
    model.requires_grad_(False)
    return model.eval().to(device)


def pin_teacher(run_dir: Path, ref: str, runs: str | Path = "./runs") -> str:
    """The teacher reference a run loads: the exact checkpoint (`ABS_RUN:STEP`) its `ref` named
    when it started, recorded in `teacher.json`, so a resume is taught by the same weights even
    after `RUN`, `RUN:best` or `RUN:latest` has moved on (the teacher run trained further). A
    model teacher (no run) is returned as it is. When `ref` changed (a resume with
    `train.resume_allow_changes`) the new one is pinned. ModelLoadError when the checkpoint the
    run started with is gone."""
    from arena_core.store.index import select_model_checkpoint
    from arena_core.store.rundir import read_teacher, write_teacher

    record = read_teacher(run_dir)
    if record is not None and record["ref"] == ref:
        try:
            select_model_checkpoint(record["checkpoint"], runs)
        except ArenaError as exc:
            raise ModelLoadError(
                f"algo.teacher={ref}: the checkpoint this run started with, "
                f"{record['checkpoint']}, cannot be loaded any more ({exc}). Resuming with "
                "another teacher changes what the run learns: restore it, or name a teacher with "
                "algo.teacher=... train.resume_allow_changes=true."
            ) from None
        try:
            now = select_model_checkpoint(ref, runs)
        except ArenaError:
            now = None
        pinned = record["checkpoint"]
        if now is not None and f"{now[0].resolve()}:{now[1].step}" != pinned:
            print(
                f"note: algo.teacher={ref} now names step {now[1].step} of {now[0].name}; this "
                f"run goes on with the teacher it started with, {pinned}",
                flush=True,
            )
        return pinned
    try:
        teacher_run, ckpt = select_model_checkpoint(ref, runs)
    except ArenaError:
        return ref  # a model teacher, or a ref `load_teacher` explains
    pinned = f"{teacher_run.resolve()}:{ckpt.step}"
    write_teacher(run_dir, ref, pinned)
    return pinned


def _load(ref: str, *, device: str, runs: str | Path, dtype: str) -> Any:
    """A run checkpoint when `ref` names a run, else a model name or path."""
    from arena_core.store.index import NotALanguageModel, select_model_checkpoint, split_ref

    try:
        _, ckpt = select_model_checkpoint(ref, runs)
    except NotALanguageModel as exc:  # a run, certainly, but not one that can teach
        raise ModelLoadError(f"algo.teacher={ref}: {exc}") from None
    except ArenaError as run_error:
        if split_ref(ref)[1] is not None:  # RUN:STEP|best|latest: certainly meant as a run
            raise ModelLoadError(f"algo.teacher={ref}: {run_error}") from None
        try:
            return load_policy(
                {"name_or_path": ref, "dtype": dtype, "lora": {"r": 0}}, device=device
            )
        except ArenaError as model_error:
            raise ModelLoadError(
                f"algo.teacher={ref} is neither a run nor a model Arena can load.\n"
                f"  as a run: {run_error}\n  as a model: {model_error}\n"
                "Name a finished run's checkpoint (RUN, RUN:best, RUN:STEP; `arena runs list`) "
                "or a model (arena:tiny, a local model or adapter directory, a hub id)."
            ) from None
    print(f"teacher: {ckpt.dir} (step {ckpt.step}, {ckpt.kind})", flush=True)
    return load_policy(
        {"name_or_path": str(ckpt.weights_dir), "dtype": dtype, "lora": {"r": 0}}, device=device
    )


def check_same_vocabulary(ref: str, teacher_tok: Any, student_tok: Any, teacher: nn.Module) -> None:
    """Raise TeacherMismatchError unless both tokenizers map the same strings to the same ids."""
    t_vocab, s_vocab = teacher_tok.get_vocab(), student_tok.get_vocab()
    if t_vocab != s_vocab:
        differ = sorted(
            (set(t_vocab.items()) ^ set(s_vocab.items())), key=lambda kv: (kv[1], kv[0])
        )
        examples = ", ".join(f"{tok!r}->{i}" for tok, i in differ[:4])
        raise TeacherMismatchError(
            f"algo.teacher={ref} has a different vocabulary from the student ({len(t_vocab)} vs "
            f"{len(s_vocab)} tokens; e.g. {examples} is in only one of them). On-policy "
            "distillation scores the student's sampled token ids with the teacher, so both must "
            "share one tokenizer: pick a teacher of the student's model family (or a run that "
            "trained the student's model), or a student of the teacher's family."
        )
    out = teacher.get_output_embeddings()
    n_out = int(out.weight.shape[0]) if out is not None else len(s_vocab)
    if n_out < len(s_vocab):
        raise TeacherMismatchError(
            f"algo.teacher={ref} predicts {n_out} token ids but the tokenizer has {len(s_vocab)}: "
            "its output layer cannot score every token the student may sample."
        )
