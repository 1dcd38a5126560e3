"""Running a plan as processes on Ray: the cluster, engine actors and weight transport.

Nothing here imports Ray at module import time: a single-process run (the quickstart) never
loads it. `RayCluster` starts or joins Ray for one run and reserves the plan's devices;
`EngineGroup` puts K generation engines behind the ordinary `GenerationBackend` contract; the
weight transport moves the learner's tensors to every engine, tagged with the policy version.
"""

from arena_core.distributed.cluster import BundlePlan, ClusterError, Layout, RayCluster, bundle_plan

__all__ = ["BundlePlan", "ClusterError", "Layout", "RayCluster", "bundle_plan"]
