"""Running user code (reward files, environments) in sandboxed child processes.

Every child has a wall-clock timeout, RLIMIT_AS and RLIMIT_CPU caps, its own process group killed
whole on timeout and at the end of the work, an environment without credentials, and captured,
truncated output. Where the kernel allows it (isolation.py), it also runs under bubblewrap in its
own PID, user and network namespaces, on a read-only file system with a private /tmp and a
process-count limit. Results are typed outcomes (ok, error, timeout, memory, crashed, bad_return).
`isolation_status(policy).line()` says which protections are in force.
"""

from arena_core.sandbox import isolation
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
from arena_core.sandbox.isolation import (
    IsolationStatus,
    SandboxIsolationError,
    SandboxPolicy,
    isolation_status,
)
from arena_core.sandbox.outcome import KINDS, Outcome, RewardOutcome
from arena_core.sandbox.pool import RewardPool
from arena_core.sandbox.process import safe_env
from arena_core.sandbox.runner import run_in_sandbox

__all__ = [
    "KINDS",
    "ContractReport",
    "IsolationStatus",
    "MissingRewardError",
    "Outcome",
    "RewardContractError",
    "RewardFileNotFound",
    "RewardImportError",
    "RewardOutcome",
    "RewardPool",
    "RewardSignatureError",
    "RewardSyntaxError",
    "SandboxIsolationError",
    "SandboxPolicy",
    "check_reward_contract",
    "isolation",
    "isolation_status",
    "resolve_reward",
    "run_in_sandbox",
    "safe_env",
]
