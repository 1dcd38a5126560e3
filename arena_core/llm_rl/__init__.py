"""The LLM RL path (GRPO, CISPO and every algorithm without a recipe of its own), sync, async or
with engines in Ray actors.

Read `recipe.py` top to bottom: the recipe, its loop and the step (generate -> score ->
advantages -> learn -> weight sync). The step's groups come from `groups.py` (sampling rounds,
reward scoring, advantages, the flat-group refill), through the sync or async batch source
(`batch_source.py`, `async_rollout.py`) or the engine actors (`engine_processes.py`); the
mismatch guard, the step's metrics row and the run's warnings are the loop's too.
"""
