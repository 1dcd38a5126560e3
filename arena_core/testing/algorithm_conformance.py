"""`AlgorithmConformance`: the learner's contract for an algorithm plugin, for a plugin author to
subclass in their own tests (see `arena_core.testing.conformance`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from arena_core.testing._checks import (
    _check_config_valid,
    _check_schema_forbids_extra,
    _registered,
)


class AlgorithmConformance:
    """Checks an algorithm plugin against the learner's contract (arena_core.learn.algorithm).

    Set `algorithm_name` (registered) or `algorithm_class` (+ optional `schema`), and `config`:
    the `algo` section without `name`. Checks are duck typed on the instance the learner would
    build: `AlgorithmClass(validated_config)`.
    """

    algorithm_name: ClassVar[str | None] = None
    algorithm_class: ClassVar[type | None] = None
    schema: ClassVar[Any] = None
    config: ClassVar[dict[str, Any]] = {}
    n_groups: ClassVar[int] = 3
    group_size: ClassVar[int] = 4
    n_tokens: ClassVar[int] = 24

    def algorithm_schema(self) -> Any:
        if self.algorithm_name is not None:
            schema = _registered("algorithms", self.algorithm_name).schema
        else:
            schema = self.schema
        cls = self.algorithm_cls()
        return schema if schema is not None else getattr(cls, "config_class", None)

    def algorithm_cls(self) -> type:
        if self.algorithm_name is not None:
            return _registered("algorithms", self.algorithm_name).obj
        if self.algorithm_class is None:
            pytest.fail(
                f"{type(self).__name__}: set `algorithm_name` (a registered algorithm) "
                "or `algorithm_class`"
            )
        return self.algorithm_class

    def make_algorithm(self) -> Any:
        schema = self.algorithm_schema()
        cfg: Any = dict(self.config)
        if schema is not None:
            _check_config_valid(schema, cfg, "algo")
            cfg = schema.model_validate(cfg)
        return self.algorithm_cls()(cfg)

    @pytest.fixture
    def arena_algorithm(self) -> Any:
        return self.make_algorithm()

    # -- checks ----------------------------------------------------------------------------------
    def test_registered(self) -> None:
        if self.algorithm_name is None:
            pytest.skip("no algorithm_name: testing a class directly")
        _registered("algorithms", self.algorithm_name)

    def test_schema_forbids_extra_keys(self) -> None:
        schema = self.algorithm_schema()
        if schema is None:
            pytest.fail(
                "the algorithm has no config schema: register it with schema=<pydantic "
                "model with extra='forbid'> so `algo.*` typos are errors"
            )
        _check_schema_forbids_extra(schema, dict(self.config), "algo schema")

    def test_has_learner_interface(self, arena_algorithm: Any) -> None:
        """Every member of the Algorithm protocol is present (attributes and methods)."""
        from arena_core.learn.algorithm import Algorithm

        members = {n for n in getattr(Algorithm, "__annotations__", {})} | {
            n for n, v in vars(Algorithm).items() if callable(v) and not n.startswith("_")
        }
        missing = sorted(m for m in members if not hasattr(arena_algorithm, m))
        assert not missing, (
            f"{type(arena_algorithm).__name__} lacks {', '.join(missing)} "
            "(see arena_core.learn.algorithm.Algorithm)"
        )

    def test_advantages_zero_mean_per_group(self, arena_algorithm: Any) -> None:
        import torch

        gen = torch.Generator().manual_seed(0)
        rewards = torch.rand(self.n_groups, self.group_size, generator=gen)
        adv = arena_algorithm.advantages(rewards)
        assert isinstance(adv, torch.Tensor) and adv.shape == rewards.shape, (
            f"advantages({tuple(rewards.shape)}) returned shape {getattr(adv, 'shape', adv)}"
        )
        assert torch.isfinite(adv).all(), "advantages must be finite"
        means = adv.float().mean(dim=1)
        assert torch.allclose(means, torch.zeros_like(means), atol=1e-5), (
            f"advantages must have zero mean within each group, got group means {means.tolist()}"
        )
        # a better completion never gets a smaller advantage than a worse one in its group
        for r, a in zip(rewards, adv, strict=True):
            order = torch.argsort(r)
            assert (a[order].diff() >= -1e-6).all(), "advantages must increase with the reward"

    def test_advantages_zero_for_constant_rewards(self, arena_algorithm: Any) -> None:
        import torch

        rewards = torch.tensor([[0.0] * self.group_size, [1.0] * self.group_size])
        adv = arena_algorithm.advantages(rewards)
        assert torch.allclose(adv.float(), torch.zeros_like(rewards), atol=1e-6), (
            f"a group with equal rewards carries no signal: advantages must be 0, got {adv.tolist()}"
        )

    def test_token_loss_finite_and_differentiable(self, arena_algorithm: Any) -> None:
        import torch

        from arena_core.learn.algorithm import TokenBatch

        gen = torch.Generator().manual_seed(0)
        n = self.n_tokens
        base = -1.0 - torch.rand(n, generator=gen)
        logp = (base + 0.05 * torch.randn(n, generator=gen)).requires_grad_(True)
        batch = TokenBatch(
            logp=logp,
            old_logp=base.clone(),
            behaviour_logp=base + 0.01 * torch.randn(n, generator=gen),
            is_weight=torch.ones(n),
            advantages=torch.randn(n, generator=gen),
            ref_logp=base + 0.02 * torch.randn(n, generator=gen),
            seq_ids=torch.arange(n) // 4,  # the learner always fills it: sequences of 4 tokens
        )
        loss, stats = arena_algorithm.token_loss(batch)
        assert isinstance(loss, torch.Tensor) and loss.shape == (n,), (
            f"token_loss must return a per-token loss of shape ({n},), got "
            f"{getattr(loss, 'shape', type(loss).__name__)}"
        )
        assert torch.isfinite(loss).all(), "token_loss returned non-finite values"
        assert isinstance(stats, dict), "token_loss must return (loss, dict of diagnostics)"
        for key, value in stats.items():
            assert isinstance(value, torch.Tensor) and value.shape == (n,), (
                f"diagnostic {key!r} must be a per-token tensor of shape ({n},)"
            )
        loss.sum().backward()
        assert logp.grad is not None and torch.isfinite(logp.grad).all(), (
            "the loss must be differentiable with respect to logp (finite gradient)"
        )
        assert logp.grad.abs().sum() > 0, "the loss gradient with respect to logp is all zero"
