"""The loggers are tested inside a real LLM run: the LLM RL tests' small task and config."""

from tests.llm_rl.conftest import digits_env, run_config  # noqa: F401 - fixtures, used by name
