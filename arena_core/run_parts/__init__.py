"""What every LLM run builds, whichever path runs it.

The task, generation backend and algorithm from the config (`build`), the run's parts opened and
closed together (`parts`), prompts through the chat template (`prompts`), rewards scored in the
sandbox, with a reward file's per-component values (`scoring`) and held-out evaluation
(`evaluate`). The LLM RL loop (`llm_rl/`), population members (`population/`), the Ray actors
(`distributed/`), SFT/DPO evaluation (`sft_dpo/`) and validation all build on these modules, so
this room sits below them and imports none of them.
"""
