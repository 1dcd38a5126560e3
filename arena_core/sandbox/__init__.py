"""Running user code (reward files, environments) in sandboxed child processes.

Every child has a wall-clock timeout, RLIMIT_AS and RLIMIT_CPU caps, its own process group killed
whole on timeout and at the end of the work, an environment without credentials, and captured,
truncated output. Results are typed outcomes (ok, error, timeout, memory, crashed, bad_return).
"""

from arena_core.sandbox.contract import (
    ContractReport,
    MissingRewardError,
    RewardContractError,
    RewardFileNotFound,
    RewardImportError,
    RewardSignatureError,
    RewardSyntaxError,
    check_reward_contract,
    resolve_reward,
)
from arena_core.sandbox.outcome import KINDS, Outcome, RewardOutcome
from arena_core.sandbox.pool import RewardPool
from arena_core.sandbox.process import safe_env
from arena_core.sandbox.runner import run_in_sandbox

__all__ = [
    "KINDS",
    "ContractReport",
    "MissingRewardError",
    "Outcome",
    "RewardContractError",
    "RewardFileNotFound",
    "RewardImportError",
    "RewardOutcome",
    "RewardPool",
    "RewardSignatureError",
    "RewardSyntaxError",
    "check_reward_contract",
    "resolve_reward",
    "run_in_sandbox",
    "safe_env",
]
