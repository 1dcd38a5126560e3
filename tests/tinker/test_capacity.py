"""The server holds as many training clients as the planner's memory model fits (or
--max-clients); one more is a 400 that says why, and closing a session frees its clients."""

from __future__ import annotations

from pathlib import Path

import pytest

API_KEY = "tml-capacity-test"
BASE = "arena:tiny"


def test_a_client_beyond_the_memory_model_is_refused(tmp_path: Path) -> None:
    import tinker

    from arena_core.planner.hardware import cpu_profile
    from arena_core.store.index import list_runs
    from arena_core.tinker.capacity import clients_that_fit, footprint
    from arena_core.tinker.learner import TOKEN_BUDGET
    from arena_core.tinker.server import TinkerHost

    with TinkerHost(port=0, api_key=API_KEY, state_dir=tmp_path).start() as host:
        service = tinker.ServiceClient(base_url=host.url, api_key=API_KEY)
        service.create_lora_training_client(base_model=BASE, rank=4).result()
        tinker_service = host.service
        fp = footprint(
            tinker_service.hosts[BASE].config,
            tinker_service.hw,
            rank=4,
            roles=["attention", "mlp", "unembed"],
            tokens=TOKEN_BUDGET,
            samplers_kept=4,
        )
        # a device with room for the base and one and a half clients of this shape
        tinker_service.hw = cpu_profile(memory_gb=(fp.shared + 1.5 * fp.per_client) / 0.9e9)
        assert clients_that_fit(tinker_service.hw, fp) == 1
        with pytest.raises(tinker.BadRequestError, match="planner's memory model.*fits 1"):
            service.create_lora_training_client(base_model=BASE, rank=4).result()
        service.close("success").result()  # frees the first client: one fits again
        # and its run is finished, as `arena runs list` reads it
        assert [r.status for r in list_runs(tmp_path)] == ["finished"]

        again = tinker.ServiceClient(base_url=host.url, api_key=API_KEY)
        again.create_lora_training_client(base_model=BASE, rank=4).result()
        tinker_service.max_clients = 1  # an explicit --max-clients wins over the estimate
        with pytest.raises(tinker.BadRequestError, match="--max-clients 1"):
            again.create_lora_training_client(base_model=BASE, rank=4).result()
        again.close("success").result()


def test_smollm2_clients_fit_by_the_dozen_on_this_machine() -> None:
    """The estimate for the model the cookbook bench trains: base ~0.5 GB of weights plus one
    packed forward's activations, each rank-32 client ~0.35 GB (fp32 on the CPU)."""
    from arena_core.models.catalog import CATALOG
    from arena_core.planner.hardware import cpu_profile
    from arena_core.tinker.capacity import clients_that_fit, footprint
    from arena_core.tinker.learner import TOKEN_BUDGET

    if "smollm2-135m-instruct" not in CATALOG:
        pytest.skip("SmolLM2 is not in this catalog")
    roles = ["attention", "mlp", "unembed"]
    fp = footprint(
        "smollm2-135m-instruct",
        cpu_profile(memory_gb=16),
        rank=32,
        roles=roles,
        tokens=TOKEN_BUDGET,
        samplers_kept=4,
    )
    assert 0.2e9 < fp.per_client < 0.5e9
    assert 10 <= clients_that_fit(cpu_profile(memory_gb=16), fp) <= 40
