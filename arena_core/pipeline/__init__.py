"""The parts of an LLM RL step that every way of running one shares.

Built from the config (`build`, `parts`), sampled (`groups`, `collecting`, `batch_source`,
`async_rollout`), scored in the sandbox (`scoring`, `components`), evaluated (`evaluate`) and
logged (`step_row`, `run_warnings`). The single run (`recipes/llm.py`), population members
(`evolution/`) and the Ray actors (`distributed/`) all build on these modules, so this room sits
below all three and imports none of them: that is what keeps the three out of one import cycle.
Nothing here imports torch at package import (sandboxed children import `components`).
"""
