"""What the LLM recipe's loop runs on: engines in processes (`process_runtime`), the progress
line, torch threads, the mismatch guard and the plan check.

The loop itself is the `llm` recipe (`arena_core.recipes.llm`, with `run_training`); this room
sits below the recipes and never imports them. Sandboxed children import small helpers from
below it and must not pay for importing torch, so nothing is imported here.
"""
