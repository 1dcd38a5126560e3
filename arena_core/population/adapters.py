"""A population's members on one model in memory: the AdapterBank.

With LoRA (`model.lora.r > 0`) every member is a peft *named adapter* on one frozen base model, plus
its own optimizer and hyperparameters. Cloning a winner copies its adapter and optimizer tensors and
never the base, so P members cost the base plus P adapters (AgileRL rebuilds a full model per
member). The same module then serves the whole population in one generation batch (rows name their
adapter: see `arena_core.engines.multi_lora`).

Full fine-tuning (`model.lora.r == 0`) works through the same API with a whole model copy per
member; that costs P x the model's weights and optimizer (the population loop warns about it:
`arena_core.population.summary.warn_full_copies`).

The bank is algorithm-agnostic: it does not step, evaluate or select. The population loop picks a
member with `activate(name)` and trains `parameters(name)` with `optimizer(name)`.

`members_as_adapters` is the bridge for the other layout (`arena_core.population.members`: one
adapter whose tensors are swapped per member): it exposes those tensors as named adapters,
sharing their storage, for one multi-LoRA generation batch over the whole population.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from arena_core.errors import ArenaError

# optimizer_factory(params, hparams) -> optimizer; the default is AdamW(lr, weight_decay)
OptimizerFactory = Callable[[list[nn.Parameter], dict[str, Any]], torch.optim.Optimizer]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# names peft would confuse with parameter-name parts (a name inside "lora_" gets re-initialised)
_RESERVED = {
    "weight",
    "bias",
    "base_model",
    "model",
    *("lora_"[i:j] for i in range(5) for j in range(i + 1, 6)),
}


class AdapterBankError(ArenaError):
    """A member was misnamed, missing or cannot be created; the message says which and why."""


def default_optimizer(params: list[nn.Parameter], hparams: dict[str, Any]) -> torch.optim.Optimizer:
    """AdamW with the member's `lr` (default 1e-5) and `weight_decay` (default 0)."""
    return torch.optim.AdamW(
        params,
        lr=float(hparams.get("lr", 1e-5)),
        weight_decay=float(hparams.get("weight_decay", 0.0)),
    )


@dataclass
class AdapterMember:
    """One member: its hyperparameters, optimizer and (full fine-tuning only) its own module."""

    name: str
    hparams: dict[str, Any]
    optimizer: torch.optim.Optimizer
    params: list[nn.Parameter]
    module: nn.Module | None = None  # full fine-tuning: this member's copy; LoRA: None (shared)
    info: dict[str, Any] = field(default_factory=dict)  # free-form (the loop's lineage notes)


class AdapterBank:
    """P members on one model: named LoRA adapters on a frozen base, or whole copies without LoRA.

    `model` is what `load_policy` returned as `policy.model`: a peft PeftModel (LoRA mode; the
    adapters it already holds, peft's "default", are dropped once the first member exists) or a
    plain transformers model (full mode; the first fresh member adopts this very module).

    Typical use::

        bank = AdapterBank(policy.model)
        for i in range(P):
            bank.add(f"m{i}", hparams={"lr": 5e-6})
        module = bank.activate("m0")     # the module to train/generate with for m0
        opt = bank.optimizer("m0")       # its own AdamW over bank.parameters("m0")
        ...
        bank.remove("m3"); bank.add("m3", from_member="m0")   # exploit: clone the winner
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        optimizer_factory: OptimizerFactory = default_optimizer,
        lora_config: Any | None = None,
    ) -> None:
        self.model = model
        self.optimizer_factory = optimizer_factory
        self.is_lora = hasattr(model, "peft_config")
        self.members: dict[str, AdapterMember] = {}
        self.active: str | None = None
        self._template_free = True  # full mode: the given module is not yet a member's
        if self.is_lora:
            configs = model.peft_config  # type: ignore[attr-defined]
            self._orphans = set(configs)  # adapters that predate the bank (peft's "default")
            if lora_config is None:
                if not configs:
                    raise AdapterBankError("the model has no LoRA adapter to copy a config from")
                lora_config = next(iter(configs.values()))
            self.lora_config = copy.deepcopy(lora_config)
            for p in self._base_parameters():
                p.requires_grad_(False)  # the base is frozen and shared by every member

    # -- membership --------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Member names in creation order."""
        return list(self.members)

    def __contains__(self, name: object) -> bool:
        return name in self.members

    def __len__(self) -> int:
        return len(self.members)

    def add(
        self,
        name: str,
        from_member: str | None = None,
        *,
        hparams: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> AdapterMember:
        """Create member `name`: fresh, or a clone of `from_member` (weights, optimizer, hparams).

        A fresh LoRA member gets a newly initialised adapter (peft's init: B = 0, so it starts as
        the base model; `seed` makes A reproducible). A clone copies the source's adapter tensors
        and optimizer state (AdamW moments, step) into new tensors and its hyperparameters
        (overridden by `hparams`); the base weights are shared, never copied. Full fine-tuning
        clones deep-copy the source's module.
        """
        if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
            raise AdapterBankError(
                f"member name {name!r} is not valid: use letters, digits, '_' or '-', "
                "starting with a letter, not a part of peft's parameter names (e.g. 'm0')"
            )
        if name in self.members:
            raise AdapterBankError(f"member '{name}' exists already: remove('{name}') first")
        if from_member is not None:
            source = self._member(from_member)
            merged = {**copy.deepcopy(source.hparams), **(hparams or {})}
        else:
            source, merged = None, dict(hparams or {})
        if self.is_lora:
            member = self._add_lora(name, source, merged, seed)
        else:
            member = self._add_full(name, source, merged, seed)
        self.members[name] = member
        if self.active is None:
            self.activate(name)
        return member

    def remove(self, name: str) -> None:
        """Drop member `name` and free its adapter (or module) and optimizer state."""
        self._member(name)
        if self.is_lora:
            self._delete_adapter(name)
        del self.members[name]
        if self.active == name:
            self.active = None
            if self.members:
                self.activate(next(iter(self.members)))

    def activate(self, name: str) -> nn.Module:
        """Make `name` the member that runs next; returns the module to call.

        LoRA: the shared model with `name` as its active adapter; only that adapter's parameters
        require grad (the base and the other adapters are frozen). Full: that member's module.
        """
        member = self._member(name)
        self.active = name
        if self.is_lora:
            self.model.set_adapter(name)  # type: ignore[operator]
            for other in self.members.values():
                for p in other.params:
                    p.requires_grad_(other.name == name)
            return self.model
        return member.module  # type: ignore[return-value]

    @contextmanager
    def using(self, name: str) -> Iterator[nn.Module]:
        """`activate(name)` for a block, then the previously active member again."""
        before = self.active
        try:
            yield self.activate(name)
        finally:
            if before is not None and before in self.members:
                self.activate(before)

    def module(self, name: str) -> nn.Module:
        """The module member `name` runs in (the shared model under LoRA), without activating."""
        member = self._member(name)
        return self.model if self.is_lora else member.module  # type: ignore[return-value]

    # -- per-member state --------------------------------------------------------------------
    def member(self, name: str) -> AdapterMember:
        """The AdapterMember record (hparams, optimizer, params, info)."""
        return self._member(name)

    def parameters(self, name: str) -> list[nn.Parameter]:
        """The trainable tensors of `name`: its adapter under LoRA, its whole module otherwise."""
        return list(self._member(name).params)

    def optimizer(self, name: str) -> torch.optim.Optimizer:
        """`name`'s own optimizer (over `parameters(name)`)."""
        return self._member(name).optimizer

    def hparams(self, name: str) -> dict[str, Any]:
        """`name`'s hyperparameters (the live dict: the loop mutates it)."""
        return self._member(name).hparams

    def reset_optimizer(self, name: str, hparams: dict[str, Any] | None = None) -> None:
        """A fresh optimizer for `name` (after an lr mutation, as AgileRL re-inits it)."""
        member = self._member(name)
        if hparams:
            member.hparams.update(hparams)
        member.optimizer = self.optimizer_factory(member.params, member.hparams)

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """A copy of `name`'s weights: peft adapter keys (as saved by save_pretrained) under LoRA,
        the module's state dict otherwise. Safe to write with safetensors."""
        member = self._member(name)
        if self.is_lora:
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(
                self.model, adapter_name=name, save_embedding_layers=False
            )
        else:
            state = member.module.state_dict()  # type: ignore[union-attr]
        return {k: v.detach().clone().contiguous() for k, v in state.items()}

    def load_adapter_state(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        """Load `tensors` (from `adapter_state`) into `name`'s weights, in place."""
        member = self._member(name)
        if self.is_lora:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, tensors, adapter_name=name)
            bad = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
            if bad:
                raise AdapterBankError(
                    f"adapter tensors for '{name}' do not fit this model: {bad[:3]} ... "
                    "(was the checkpoint written with another model.lora config?)"
                )
        else:
            member.module.load_state_dict(tensors)  # type: ignore[union-attr]

    def state(self) -> dict[str, dict[str, Any]]:
        """Everything needed to rebuild the population: {name: {weights, optimizer, hparams}}.

        `weights` holds tensors (write them with safetensors); `optimizer` is the optimizer's
        state_dict (tensors + JSON-able groups); `hparams` and `info` are JSON-able.
        """
        return {
            name: {
                "weights": self.adapter_state(name),
                "optimizer": copy.deepcopy(m.optimizer.state_dict()),
                "hparams": copy.deepcopy(m.hparams),
                "info": copy.deepcopy(m.info),
            }
            for name, m in self.members.items()
        }

    def load_state(self, state: dict[str, dict[str, Any]]) -> None:
        """Restore a population from `state()` (resume): members not in `state` are removed,
        missing ones created, and each gets its weights, optimizer state and hparams back."""
        for name in [n for n in self.members if n not in state]:
            self.remove(name)
        for name, entry in state.items():
            if name not in self.members:
                self.add(name, hparams=entry.get("hparams"))
            member = self.members[name]
            member.hparams = copy.deepcopy(entry.get("hparams", {}))
            member.info = copy.deepcopy(entry.get("info", {}))
            self.load_adapter_state(name, entry["weights"])
            member.optimizer = self.optimizer_factory(member.params, member.hparams)
            if entry.get("optimizer"):
                member.optimizer.load_state_dict(copy.deepcopy(entry["optimizer"]))

    # -- accounting ----------------------------------------------------------------------------
    def tensor_bytes(self) -> dict[str, int]:
        """Bytes held by distinct tensors: base weights, member weights, optimizer state.

        Counted by storage (data_ptr) so shared tensors count once: the honest memory of the
        population, which `bench/population.py` reports next to the process's peak RSS.
        """
        seen: set[int] = set()

        def size(tensors: list[torch.Tensor]) -> int:
            total = 0
            for t in tensors:
                ptr = t.untyped_storage().data_ptr()
                if ptr not in seen:
                    seen.add(ptr)
                    total += t.untyped_storage().nbytes()
            return total

        members = [p for m in self.members.values() for p in m.params]
        opt = [
            v
            for m in self.members.values()
            for s in m.optimizer.state.values()
            for v in s.values()
            if torch.is_tensor(v)
        ]
        base = list(self._base_parameters()) if self.is_lora else []
        return {"base": size(base), "members": size(members), "optimizer": size(opt)}

    # -- LoRA internals ----------------------------------------------------------------------
    def _base_parameters(self) -> Iterator[nn.Parameter]:
        for n, p in self.model.named_parameters():
            if "lora_" not in n:
                yield p

    def _adapter_params(self, name: str) -> list[nn.Parameter]:
        key = f".{name}."
        params = [
            p
            for n, p in self.model.named_parameters()
            if "lora_" in n and (key in n or n.endswith(f".{name}"))
        ]
        if not params:
            raise AdapterBankError(f"adapter '{name}' has no parameters in the model")
        return params

    def _add_lora(
        self, name: str, source: AdapterMember | None, hparams: dict[str, Any], seed: int | None
    ) -> AdapterMember:
        if name in self.model.peft_config and name not in self._orphans:  # type: ignore[operator]
            raise AdapterBankError(f"the model already has an adapter named '{name}'")
        if name in self._orphans:  # a name peft already holds (its "default"): start afresh
            self._delete_adapter(name)
            self._orphans.discard(name)
        rng = torch.random.fork_rng(devices=[]) if seed is not None else nullcontext()
        with rng:
            if seed is not None:
                torch.manual_seed(seed)
            self.model.add_adapter(name, copy.deepcopy(self.lora_config))  # type: ignore[operator]
        for orphan in list(self._orphans):  # the bank owns every adapter from now on
            self._delete_adapter(orphan)
            self._orphans.discard(orphan)
        params = self._adapter_params(name)
        if source is not None:
            with torch.no_grad():
                for dst, src in zip(params, source.params, strict=True):
                    dst.copy_(src)
        for p in params:
            p.requires_grad_(self.active == name)
        optimizer = self._new_optimizer(params, hparams, source)
        return AdapterMember(name, hparams, optimizer, params)

    def _delete_adapter(self, name: str) -> None:
        if name in self.model.peft_config:  # type: ignore[operator]
            with warnings.catch_warnings():  # "adapter X was active ... now deleted": expected
                warnings.simplefilter("ignore", UserWarning)
                self.model.delete_adapter(name)  # type: ignore[operator]

    # -- full fine-tuning internals ------------------------------------------------------------
    def _add_full(
        self, name: str, source: AdapterMember | None, hparams: dict[str, Any], seed: int | None
    ) -> AdapterMember:
        if source is not None:
            module = copy.deepcopy(source.module)
        elif self._template_free:
            module = self.model  # the first fresh member adopts the given module
            self._template_free = False
        else:
            template = next(iter(self.members.values()))
            if any(m.optimizer.state for m in self.members.values()):
                raise AdapterBankError(
                    f"cannot create full fine-tuning member '{name}' afresh once training has "
                    f"started (the initial weights are not kept): add('{name}', "
                    f"from_member='{template.name}') clones a member instead"
                )
            module = copy.deepcopy(template.module)
        module.requires_grad_(True)
        params = list(module.parameters())  # type: ignore[union-attr]
        optimizer = self._new_optimizer(params, hparams, source)
        return AdapterMember(name, hparams, optimizer, params, module=module)

    def _new_optimizer(
        self, params: list[nn.Parameter], hparams: dict[str, Any], source: AdapterMember | None
    ) -> torch.optim.Optimizer:
        optimizer = self.optimizer_factory(params, hparams)
        if source is not None and source.optimizer.state:
            # deepcopy: load_state_dict keeps same-device tensors as they are (shared otherwise);
            # the group settings (lr, ...) stay the clone's own hparams', the moments are copied
            groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
            optimizer.load_state_dict(copy.deepcopy(source.optimizer.state_dict()))
            for group, own in zip(optimizer.param_groups, groups, strict=True):
                group.update(own)
        return optimizer

    def _member(self, name: str) -> AdapterMember:
        if name not in self.members:
            known = ", ".join(self.members) or "none yet"
            raise AdapterBankError(f"no member named '{name}' (members: {known})")
        return self.members[name]


@contextmanager
def members_as_adapters(
    model: nn.Module, members: dict[str, list[torch.Tensor]]
) -> Iterator[list[str]]:
    """Serve per-member tensors as named peft adapters for one multi-LoRA batch, without copies.

    For a population kept as one peft adapter whose tensors are swapped per member (the layout
    `arena_core.population.members.MemberStore` uses: each member's tensors line up with the
    model's trainable parameters, peft's active adapter): inside the block every member is also
    an adapter named by its key whose parameters *share storage* with that member's tensors, so
    `TorchBackend.generate(prompts, params, adapters=[member name per prompt])` decodes the whole
    population in one batch. The adapters are deleted on exit; the members' tensors are untouched.
    """
    active = model.active_adapter  # type: ignore[attr-defined]
    active = active if isinstance(active, str) else active[0]
    config = model.peft_config[active]  # type: ignore[index]
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    grads = {n: p.requires_grad for n, p in model.named_parameters() if "lora_" in n}
    marker = f".{active}."
    added: list[str] = []
    try:
        for name, tensors in members.items():
            taken = name in model.peft_config  # type: ignore[operator]
            if taken or name in _RESERVED or not _NAME.match(name):
                raise AdapterBankError(f"member name {name!r} cannot be an adapter name here")
            if len(tensors) != len(trainable):
                raise AdapterBankError(
                    f"member {name!r} has {len(tensors)} tensors; the model trains "
                    f"{len(trainable)} (its adapter '{active}')"
                )
            model.add_adapter(name, copy.deepcopy(config))  # type: ignore[operator]
            added.append(name)
            params = dict(model.named_parameters())
            with torch.no_grad():
                for pname, tensor in zip(trainable, tensors, strict=True):
                    params[pname.replace(marker, f".{name}.")].data = tensor
        model.set_adapter(active)  # type: ignore[operator]
        for n, p in model.named_parameters():
            if n in grads:
                p.requires_grad_(grads[n])
        yield list(members)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            for name in added:
                model.delete_adapter(name)  # type: ignore[operator]
        model.set_adapter(active)  # type: ignore[operator]
        for n, p in model.named_parameters():
            if n in grads:
                p.requires_grad_(grads[n])
