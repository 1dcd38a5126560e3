"""N trainer ranks on Ray behind the in-process Learner's interface.

The LLM loop talks to its learner through three things: `step(samples) -> metrics`, `optimizer`
(whose `state_dict()` / `load_state_dict()` the checkpoints call) and `model` (the module the
checkpoints save and the in-process engine samples from). `TrainerGroup` offers the same three, so
the loop runs unchanged on one in-process rank or on N FSDP2 ranks:

* `model` is the driver's own replica of the policy. After every step rank 0 sends the trainable
  tensors (all of them for full fine-tuning, the adapter under LoRA) and the replica loads them:
  checkpoints and an in-driver engine always see the latest weights.
* The ranks receive the replica's full weights before their first step, so a run that resumed
  (`load_checkpoint` into the replica) trains on from the checkpoint's weights; optimizer state
  loaded before that first step is handed on with them.
* A rank that dies (its process killed, out of memory) ends the step with `TrainerRankDied`: the
  other ranks, stuck in a collective, are killed, and the message says what happened and how to
  resume. The replica still holds the weights of the last finished step; `optimizer.state_dict()`
  then returns the state gathered at the last checkpoint (or none), so the loop can still write a
  checkpoint that resumes.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from arena_core.distributed.trainer_rank import ROOT
from arena_core.errors import ArenaError
from arena_core.learn.packing import Sample
from arena_core.learn.settings import learner_settings

RANK_WAIT_S = 1.0  # how often the driver checks on the ranks while a step runs


class TrainerRankDied(ArenaError):
    """A trainer rank's process died: the run cannot continue without it."""


def trainable_names(model: nn.Module) -> list[str]:
    """Names of the parameters an in-process Learner's AdamW holds, in its order."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def to_plain(named: dict[str, Any], names: list[str], prefix: str = ROOT) -> dict[str, Any]:
    """A full optimizer state keyed by parameter name -> torch's plain format (indices in the
    order of `names`), the one a single-process Learner's AdamW saves and loads."""
    index = {prefix + n: i for i, n in enumerate(names)}
    groups = [
        {**g, "params": [index[p] for p in g["params"] if p in index]}
        for g in named.get("param_groups", [])
    ]
    state = {index[k]: v for k, v in named.get("state", {}).items() if k in index}
    return {"state": state, "param_groups": groups}


def to_named(plain: dict[str, Any], names: list[str], prefix: str = ROOT) -> dict[str, Any]:
    """The inverse of `to_plain`."""
    groups = [
        {**g, "params": [prefix + names[i] for i in g["params"]]}
        for g in plain.get("param_groups", [])
    ]
    state = {prefix + names[int(i)]: v for i, v in plain.get("state", {}).items()}
    return {"state": state, "param_groups": groups}


class GroupOptimizer:
    """Checkpoint access to the ranks' sharded AdamW state, as one optimizer's state dict.

    Saved in torch's plain format, indexed like the driver model's trainable parameters: a
    checkpoint of N ranks resumes on one in-process Learner and the other way round."""

    def __init__(self, group: TrainerGroup) -> None:
        self.group = group
        self.last: dict[str, Any] = {}  # the state gathered at the last checkpoint
        self.pending: dict[str, Any] | None = None  # loaded before the ranks' first step

    @property
    def state(self) -> dict[int, dict[str, Any]]:
        """Like `torch.optim.Optimizer.state`, for sizing only (a checkpoint's disk-space check):
        the state gathered last, else AdamW's two moments per trainable parameter as meta
        tensors (their sizes, nothing gathered from the ranks); {} before the first step."""
        if self.last:
            return self.last.get("state", {})
        if not self.group.started and self.pending is None:
            return {}
        import torch

        params = [p for p in self.group.model.parameters() if p.requires_grad]
        return {
            i: {m: torch.empty_like(p, device="meta") for m in ("exp_avg", "exp_avg_sq")}
            for i, p in enumerate(params)
        }

    def state_dict(self) -> dict[str, Any]:
        if self.group.dead is not None:  # the ranks are gone: the last gathered state
            return self.last or self.group.fresh_optimizer_state()
        if not self.group.started:
            return self.pending or self.group.fresh_optimizer_state()
        named = self.group._collective("optimizer_state")[0]
        self.last = to_plain(named, trainable_names(self.group.model))
        return self.last

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = dict(state) if state and state.get("state") else None
        if self.group.started and self.pending is not None:
            named = to_named(self.pending, trainable_names(self.group.model))
            self.group._collective("load_optimizer_state", named)
            self.pending = None


class TrainerGroup:
    """Learner-compatible front for `world` FSDP2 trainer ranks (see the module docstring).

    `cluster` is a started `arena_core.distributed.RayCluster` whose layout has `world` trainer
    slots; `model` is the driver's replica (a LoadedPolicy's module); the other arguments are those
    of `Learner` plus what a rank needs to rebuild the policy and algorithm from the config.
    """

    def __init__(
        self,
        cluster: Any,
        model: nn.Module,
        *,
        model_cfg: dict[str, Any],
        algo_cfg: dict[str, Any],
        learner_kw: dict[str, Any],
        device: str = "cpu",
        plan: dict[str, Any] | None = None,
        seed: int = 0,
        threads: int | None = 1,
    ) -> None:
        import ray

        from arena_core.distributed.trainer_rank import TrainerRank

        self.model = model
        self.micro_batch_tokens = int(learner_kw.get("micro_batch_tokens", 4096))
        self.world = len(cluster.plan.trainers)
        if self.world < 1:
            raise ArenaError("the cluster's layout has no trainer ranks (trainer_devices >= 2)")
        self.dead: str | None = None
        self.started = False
        self._algo_cfg = dict(algo_cfg)
        self.optimizer = GroupOptimizer(self)
        remote = ray.remote(TrainerRank)
        self.ranks = [
            cluster.track(
                remote.options(**cluster.options(slot), max_restarts=0).remote(
                    r, self.world, threads
                )
            )
            for r, slot in enumerate(cluster.plan.trainers)
        ]
        self._cluster = cluster
        self._nodes = [cluster.record("trainer", r, s) for r, s in enumerate(cluster.plan.trainers)]
        master = ray.get(self.ranks[0].address.remote())
        self._collective(
            "setup", master, dict(model_cfg), dict(algo_cfg), dict(learner_kw), device, plan, seed
        )

    # -- the Learner interface -------------------------------------------------------------------
    def step(self, samples: list[Sample]) -> dict[str, float]:
        """One update on every rank; the driver's replica then holds the new weights."""
        import ray

        if not self.started:
            self._start()
        ref = ray.put(list(samples))
        metrics = self._collective("step", ref)[0]
        self._pull_weights()
        return metrics

    def fresh_optimizer_state(self) -> dict[str, Any]:
        """An AdamW state before any step (what a checkpoint holds when no state was gathered):
        the hyperparameters and parameter groups of the in-process Learner's optimizer."""
        import torch

        from arena_core.run_parts.build import build_algorithm

        algo = build_algorithm(self._algo_cfg)
        params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=algo.lr, weight_decay=algo.weight_decay).state_dict()

    def close(self) -> None:
        """Leave the process group; the cluster kills the actors when the run ends."""
        if self.dead is None:
            try:
                self._collective("close")
            except TrainerRankDied:
                pass

    # -- weights ---------------------------------------------------------------------------------
    def _start(self) -> None:
        import ray

        state = ray.put({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        self._collective("load_weights", state)
        self.started = True
        if self.optimizer.pending is not None:
            self.optimizer.load_state_dict(self.optimizer.pending)

    def _pull_weights(self) -> None:
        state = self._collective("trainable_state")[0]
        missing = [k for k in state if k not in dict(self.model.named_parameters())]
        self.model.load_state_dict(state, strict=False)
        if missing and len(missing) == len(state):
            raise ArenaError(f"rank 0 sent tensors the driver's model does not have: {missing[:3]}")

    # -- calling every rank ----------------------------------------------------------------------
    def _collective(self, method: str, *args: Any) -> list[Any]:
        """Call `method` on every rank at once; returns their results in rank order. A rank that
        dies stops the others and raises TrainerRankDied."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        if self.dead is not None:
            raise TrainerRankDied(self.dead)
        refs = [getattr(rank, method).remote(*args) for rank in self.ranks]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=RANK_WAIT_S)
            for ref in done:
                try:
                    ray.get(ref)
                except RayActorError as exc:
                    self._die(refs.index(ref), method, exc)
                except RayTaskError as exc:
                    cause = exc.as_instanceof_cause()
                    if isinstance(cause, ArenaError):  # decided after an all-reduce: every rank
                        raise cause from None  # raises it (a non-finite loss), none is stuck
                    self._die(refs.index(ref), method, exc)  # the others wait in a collective
        return ray.get(refs)

    def _die(self, rank: int, method: str, exc: BaseException) -> None:
        import ray

        for actor in self.ranks:
            ray.kill(actor, no_restart=True)  # the survivors wait in a collective forever
        lines = [x for x in str(exc).splitlines() if x.strip()]
        lost = self._lost_node(rank)
        if lost is not None:
            self.dead = (
                f"trainer rank {rank} of {self.world} was lost with its node {lost} during "
                f"{method}(): the node left the Ray cluster (stopped, crashed or unreachable). "
                "The run stopped; the weights of the last finished step are kept and every "
                "other actor of the run was stopped. Resume with train.resume=RUN_DIR once the "
                f"cluster again has a node with room for the trainer ranks "
                f"({len(self._cluster.plan.trainers)} bundle(s))."
            )
            raise TrainerRankDied(self.dead)
        self.dead = (
            f"trainer rank {rank} of {self.world} died during {method}() "
            f"({type(exc).__name__}: {lines[-1] if lines else 'no details'}). "
            "The run stopped; the weights of the last finished step are kept. Its logs are under "
            "the run directory's ray/ folder. Common causes: out of memory (lower "
            "train.micro_batch_tokens or use plan.activation_checkpointing=true), a killed process."
            " Resume with train.resume=RUN_DIR."
        )
        raise TrainerRankDied(self.dead)

    def _lost_node(self, rank: int) -> str | None:
        """'<node id> (<address>)' when rank `rank` died because its node left the cluster."""
        import ray

        node = self._nodes[rank] if rank < len(self._nodes) else None
        try:
            nodes = {n["NodeID"]: n for n in ray.nodes()}
        except Exception:  # noqa: BLE001 - the cluster cannot tell: a plain rank death
            return None
        info = nodes.get(node or "")
        if info is None or info.get("Alive"):
            return None
        return f"{str(node)[:12]} ({info.get('NodeManagerAddress') or 'address unknown'})"


def build_trainer_group(
    cluster: Any, core: Any, plan: dict[str, Any] | None, policy: Any, device: str = "cpu"
) -> TrainerGroup:
    """The loop's learner for a plan with several trainer ranks: a TrainerGroup configured as the
    in-process Learner would be from the same `CoreConfig` (`core`), over `cluster`'s trainer
    slots, around the driver's `policy.model`."""
    learner_kw = learner_settings(core, plan)  # the in-process Learner's, from one place
    return TrainerGroup(
        cluster,
        policy.model,
        model_cfg=core.model.model_dump(),
        algo_cfg=dict(core.algo),
        learner_kw=learner_kw,
        device=device,
        plan=plan,
        seed=core.seed,
        threads=core.runtime.threads or 1,
    )


def learner_for(
    engines: Any, core: Any, plan: dict[str, Any] | None, policy: Any, learner: Any
) -> Any:
    """The loop's learner: the in-process `learner`, unless the run's process layout has trainer
    ranks (`engines.cluster.plan.trainers`, plan.trainer_devices > 1); then a TrainerGroup in that
    cluster, with the optimizer state already loaded into `learner` (a resume) handed on."""
    cluster = getattr(engines, "cluster", None)
    if cluster is None or not cluster.plan.trainers:
        return learner
    group = build_trainer_group(cluster, core, plan, policy, device=cluster.layout.device)
    group.optimizer.load_state_dict(learner.optimizer.state_dict())
    print(f"trainers: {group.world} FSDP2 ranks as Ray actors", flush=True)
    return group
