"""Moving the learner's weights to engine processes, tagged with the policy version.

After each learner step the trainable tensors (all weights in full fine-tuning, the adapter's
tensors with LoRA) travel as one `WeightPacket`:

- on CPU (`object_store`): the packet is put once in Ray's shared-memory object store and every
  engine maps it (numpy-backed tensors are read without a copy); the engine copies it into its
  own module between two decode steps, so generation never stops for a transfer;
- on GPU (`nccl`; `gloo` is the same path on CPU): the packet carries only names, shapes, dtypes
  and checksums; the tensors go by a broadcast in a private process group of the trainer and
  the engines (see `CollectiveChannel`).

A packet may carry a CRC32 per tensor (`cluster.checksum_every`, every sync by default): the
engine checks what it received against what the trainer sent and refuses a corrupt update with
the tensor's name, instead of sampling from silently wrong weights.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from arena_core.errors import ArenaError, ConfigError


class WeightChecksumError(ArenaError):
    """Weights received by an engine differ from what the trainer sent."""


def tensor_checksum(tensor: torch.Tensor) -> int:
    """CRC32 of a tensor's bytes (dtype-agnostic: the bytes are hashed as they are)."""
    t = tensor.detach().to("cpu").contiguous()
    return zlib.crc32(t.view(torch.uint8).numpy().data) if t.numel() else 0


def state_checksums(state: dict[str, Any]) -> dict[str, int]:
    return {name: tensor_checksum(as_tensor(value)) for name, value in state.items()}


def as_tensor(value: Any) -> torch.Tensor:
    """A packet's tensor: numpy arrays mapped read-only from the object store are wrapped
    without a copy (only ever read: copied into the engine's module, or hashed)."""
    if isinstance(value, np.ndarray):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "array is not writable": we only read
            return torch.from_numpy(value)
    return value


def _shareable(tensor: torch.Tensor) -> Any:
    """numpy when the dtype has one (zero-copy in the object store), else the tensor itself."""
    t = tensor.detach().to("cpu").contiguous()
    return t if t.dtype == torch.bfloat16 else t.numpy()


@dataclass
class WeightPacket:
    """One weight update: version, tensors (or their specs, collective transport), checksums."""

    version: int
    state: dict[str, Any] = field(default_factory=dict)
    checksums: dict[str, int] | None = None
    specs: dict[str, tuple[tuple[int, ...], str]] | None = None  # collective: name -> spec

    @classmethod
    def of(cls, state: dict[str, torch.Tensor], version: int, *, checksum: bool) -> WeightPacket:
        return cls(
            version=int(version),
            state={n: _shareable(t) for n, t in state.items()},
            checksums=state_checksums(state) if checksum else None,
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: as_tensor(value) for name, value in self.state.items()}

    def verify(self, tensors: dict[str, torch.Tensor] | None = None) -> None:
        """Raise WeightChecksumError naming the first tensor whose bytes differ (no-op without
        checksums)."""
        if self.checksums is None:
            return
        got = tensors if tensors is not None else self.tensors()
        missing = sorted(set(self.checksums) - set(got))
        if missing:
            raise WeightChecksumError(
                f"weight update v{self.version}: {len(missing)} tensor(s) missing on receipt, "
                f"first {missing[0]}"
            )
        for name, expected in self.checksums.items():
            actual = tensor_checksum(got[name])
            if actual != expected:
                raise WeightChecksumError(
                    f"weight update v{self.version}: tensor {name} arrived corrupted (crc32 "
                    f"{actual:#010x}, sent {expected:#010x}); the engine keeps its previous "
                    "weights. Check the transport (cluster.transport) and the node's memory"
                )


def choose_transport(setting: str, device: str, *, split: bool = True) -> str:
    """The transport a run uses. `auto`: NCCL when trainer and engines sit on their own GPUs
    (split plan), Ray's object store otherwise (CPU, or engines sharing the trainer's GPU).
    `gloo` is the same collective path over TCP on CPU (what the tests run); `nccl` on a CPU is
    a config error."""
    on_gpu = str(device).startswith("cuda")
    if setting == "auto":
        return "nccl" if on_gpu and split else "object_store"
    if setting == "nccl" and not on_gpu:
        raise ConfigError(
            "cluster.transport=nccl needs CUDA devices (runtime.device=cuda); on CPU use "
            "cluster.transport=object_store (or auto, or gloo)"
        )
    if setting not in ("object_store", "nccl", "gloo"):
        raise ConfigError(f"cluster.transport={setting!r}: use auto, object_store, nccl or gloo")
    return setting


class CollectiveChannel:
    """A private process group of the trainer (rank 0) and the K engines (ranks 1..K) that only
    broadcasts weights: NCCL on GPUs, gloo on CPU (same code path, what the tests exercise).

    It has its own TCPStore (hosted by rank 0) and never touches the default process group, so
    trainer ranks' own torch.distributed world is unaffected. The packet sent through Ray holds
    only names, shapes, dtypes and checksums (`specs`); the tensors follow by broadcast in name
    order. Rank 0 must post the packet to the engines before it broadcasts (they join on
    receipt); every rank constructs the channel concurrently (the constructor rendezvous).
    """

    def __init__(
        self, backend: str, host: str, port: int, rank: int, world_size: int, device: str = "cpu"
    ) -> None:
        from datetime import timedelta

        import torch.distributed as dist

        self.dist, self.rank, self.device = dist, rank, torch.device(device)
        store = dist.TCPStore(
            host,
            port,
            world_size,
            is_master=rank == 0,
            wait_for_workers=False,
            timeout=timedelta(seconds=300),
        )
        if backend == "nccl":
            self.pg = dist.ProcessGroupNCCL(store, rank, world_size)
        else:
            self.pg = dist.ProcessGroupGloo(store, rank, world_size)

    def _broadcast(self, tensor: torch.Tensor) -> None:
        opts = self.dist.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()

    @staticmethod
    def describe(state: dict[str, torch.Tensor], version: int, *, checksum: bool) -> WeightPacket:
        specs = {n: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in state.items()}
        sums = state_checksums(state) if checksum else None
        return WeightPacket(version=int(version), checksums=sums, specs=specs)

    def send(self, state: dict[str, torch.Tensor]) -> None:
        for name in sorted(state):
            self._broadcast(state[name].detach().to(self.device).contiguous())

    def receive(self, packet: WeightPacket) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for name in sorted(packet.specs or {}):
            shape, dtype = (packet.specs or {})[name]
            buf = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            self._broadcast(buf)
            out[name] = buf
        return out


def free_port() -> int:
    """A TCP port free on this host now: where a rendezvous listens (the weight-sync channel's,
    the trainer ranks' MASTER_PORT)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


class BackgroundPoster:
    """Runs `send(item)` on a thread of its own for the newest item submitted (an older item not
    yet taken is replaced: engines only ever need the newest weights).

    This keeps serialising, checksumming and putting an update in the object store off the
    learner's critical path: the learner only snapshots its tensors and goes on. An error raised
    by `send` is re-raised by the next `submit` or `flush`, so a failed post never goes unseen.
    """

    def __init__(self, send: Any, name: str = "arena-weight-poster") -> None:
        import threading

        self._send = send
        self._cond = threading.Condition()
        self._item: Any = None
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Any) -> None:
        with self._cond:
            self._raise()
            self._item = item
            self._cond.notify_all()

    def check(self) -> None:
        """Re-raise a send error, if one happened (never waits)."""
        with self._cond:
            self._raise()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything submitted was sent; False on timeout. Re-raises a send error."""
        with self._cond:
            done = self._cond.wait_for(
                lambda: (self._item is None and not self._busy) or self._closed, timeout_s
            )
            self._raise()
        return bool(done)

    def close(self, timeout_s: float = 30.0) -> None:
        """Send what is pending, then stop the thread."""
        with self._cond:
            self._cond.wait_for(lambda: self._item is None and not self._busy, timeout_s)
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._item is not None or self._closed)
                if self._item is None:
                    return  # closed with nothing pending
                item, self._item, self._busy = self._item, None, True
            try:
                self._send(item)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the learner's thread
                with self._cond:
                    self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the tensors an update changes (all weights, or just the adapter)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
