"""A plan over several Ray nodes: each node's bundles on a node of their own, a lost node's
bundles placed again where there is room, and a record of where every actor ran.

`hardware.nodes=N` deals the plan's bundles into N groups (`bundle_plan`); each group is one
STRICT_PACK placement group. STRICT_PACK keeps a group on one node, but nothing stops Ray from
packing two groups onto the same large node, which would put the engines beside the trainer
ranks against the plan. So the groups are reserved one after the other, each with a bundle label
selector that excludes the nodes the earlier groups took (`ray.io/node-id`, a label every Ray
node carries): Ray still chooses the nodes, the plan only asks that they differ.

When a node dies, Ray reschedules its placement groups, but under the same selector: an engine
group would wait for a brand-new node while a surviving node has room. `revive` replaces such a
group by one without the exclusion (any node with room), which is what "restart the engine
where resources allow" means; when no node has room in time the caller stops with an error that
says what to add.

Every actor placed is written to `RUN/ray/placement.jsonl` (role, index, node id and address,
start or restart): where each part of a run ran, and where a lost one came back.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError

NODE_LABEL = "ray.io/node-id"


class NodeLostError(ArenaError):
    """A node holding part of the run died and no node has room to take its place."""


def supports_label_selectors() -> bool:
    import inspect

    from ray.util.placement_group import placement_group

    return "bundle_label_selector" in inspect.signature(placement_group).parameters


def alive_nodes(ray: Any) -> dict[str, str]:
    """Node id -> address of every live node of the cluster."""
    return {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}


def group_nodes(group: Any) -> list[str]:
    """The node ids a placement group's bundles sit on, in bundle order ([] while unplaced)."""
    from ray.util.placement_group import placement_group_table

    placed = placement_group_table(group).get("bundles_to_node_id") or {}
    return [placed[i] for i in sorted(placed)]


def reserve_on_distinct_nodes(
    ray: Any,
    nodes: list[list[dict[str, float]]],
    groups: list[Any],
    timeout_s: float,
    avoid: list[str] | None = None,
) -> bool:
    """One STRICT_PACK group per entry of `nodes`, each on a node none of the earlier groups
    took nor `avoid` names (the driver's node when the trainer runs there); appended to `groups`
    as they are made (so the caller can remove them on failure). False when a group was not
    placed within `timeout_s`."""
    from ray.util.placement_group import placement_group

    selectors = supports_label_selectors()
    taken: list[str] = list(avoid or [])
    for bundles in nodes:
        kwargs: dict[str, Any] = {}
        if taken and selectors:
            kwargs["bundle_label_selector"] = [{NODE_LABEL: f"!in({','.join(taken)})"}] * len(
                bundles
            )
        group = placement_group(bundles, strategy="STRICT_PACK", **kwargs)
        groups.append(group)
        ready, _ = ray.wait([group.ready()], timeout=timeout_s)
        if not ready:
            return False
        where = group_nodes(group)
        if not selectors and set(where) & set(taken):
            raise ArenaError(
                f"Ray {ray.__version__} placed two of the plan's {len(nodes)} node groups on one "
                "node (it has no placement-group label selectors to keep them apart). Upgrade "
                "Ray (pip install -U ray) or use hardware.nodes=1"
            )
        taken += where[:1]
    return True


def is_lost(ray: Any, group: Any) -> bool:
    """Whether a placement group lost a node (Ray is rescheduling it, or it sits on a dead one)."""
    from ray.util.placement_group import placement_group_table

    if placement_group_table(group).get("state") != "CREATED":
        return True
    return not set(group_nodes(group)) <= set(alive_nodes(ray))


def revive(ray: Any, group: Any, bundles: list[dict[str, float]], timeout_s: float) -> Any:
    """A group in place of `group`, which lost its node: the same bundles, STRICT_PACK, on any
    node with room (the survivors included). Raises NodeLostError when none has room within
    `timeout_s` (the new group is returned on the error as `.group`, for the caller to remove)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    try:
        remove_placement_group(group)
    except Exception:  # noqa: BLE001, S110 - the cluster may have dropped it already
        pass
    fresh = placement_group(bundles, strategy="STRICT_PACK")
    ready, _ = ray.wait([fresh.ready()], timeout=timeout_s)
    if not ready:
        error = NodeLostError(
            f"a node of the run was lost and no live node has room for its {len(bundles)} "
            f"bundle(s) {bundles[0]} within {timeout_s:.0f} s (live nodes: "
            f"{len(alive_nodes(ray))}, free: {_free(ray)}). Add a node (`ray start "
            "--address=HEAD_IP:6379` on it) or free resources; the run can be resumed from its "
            "last checkpoint with train.resume=RUN_DIR"
        )
        error.group = fresh  # type: ignore[attr-defined]
        raise error
    return fresh


def _free(ray: Any) -> dict[str, float]:
    free = ray.available_resources()
    return {k: free[k] for k in ("CPU", "GPU") if k in free}


def record_placement(
    ray: Any, run_dir: Path | None, role: str, index: int, group: Any, bundle: int, event: str
) -> str | None:
    """Append where actor `role` `index` was placed to RUN/ray/placement.jsonl; its node id."""
    nodes = group_nodes(group)
    node = nodes[bundle] if bundle < len(nodes) else None
    if run_dir is None:
        return node
    path = Path(run_dir) / "ray"
    path.mkdir(parents=True, exist_ok=True)
    line = {
        "role": role,
        "index": index,
        "event": event,
        "node_id": node,
        "node_address": alive_nodes(ray).get(node or "", None),
        "time": time.time(),
    }
    with open(path / "placement.jsonl", "a") as fh:
        fh.write(json.dumps(line) + "\n")
    return node
