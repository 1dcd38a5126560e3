"""The hostile battery under kernel isolation (issue 11): each hostile reward gets a verdict from
the validator, the run goes on, no process is left, and the secret never shows.

Each fixture in tests/fixtures/hostile_rewards does its harm, then behaves as a correct reward,
so a contained attack passes validation and a failed call is the sandbox's doing. The kill-all
fixture is never run unisolated (it would kill every process of this user).
"""

from __future__ import annotations

import json
import os
import secrets
import socket

import psutil
import pytest

from arena_core.sandbox import RewardPool, SandboxPolicy, isolation_status, run_in_sandbox
from arena_core.validate.reward import validate_reward

# fixture -> (validator verdict, the failing check or None, training outcome of each call)
BATTERY = {
    "steals_parent_environ": ("PASS", None, "ok"),
    "scans_proc": ("PASS", None, "ok"),
    "kills_parent": ("PASS", None, "ok"),
    "kills_everything": ("PASS", None, "ok"),
    "fork_flood": ("FAIL", "crashes", "crashed"),
    "writes_outside": ("PASS", None, "ok"),
    "connects_network": ("PASS", None, "ok"),
    "huge_output": ("WARN", "output", "ok"),
    "closes_stdout": ("PASS", None, "ok"),
    "long_sleep": ("FAIL", "timeouts", "timeout"),  # never returns
    "segfault": ("FAIL", "crashes", "crashed"),
    "closes_pipes": ("FAIL", "crashes", "crashed"),
    "garbage_pipes": ("FAIL", "crashes", "crashed"),
    "fills_scratch": ("FAIL", "crashes", "crashed"),
}


@pytest.fixture
def secret(monkeypatch, tmp_path) -> str:
    """A credential in the trainer's environment, a host port listening, an outside folder."""
    value = "hunter2-" + secrets.token_hex(8)
    monkeypatch.setenv("ARENA_HOSTILE_SECRET_TOKEN", value)
    monkeypatch.setenv("ARENA_TEST_OUTSIDE", str(tmp_path))
    return value


@pytest.fixture
def listener(monkeypatch):
    """A TCP server of the host on 127.0.0.1 whose port the network fixture tries to reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    monkeypatch.setenv("ARENA_TEST_PORT", str(server.getsockname()[1]))
    yield server
    server.close()


def _assert_not_reached(server: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        server.accept()


def test_isolation_is_in_force_here():
    status = isolation_status()
    assert status.full, status.line()
    assert status.line().startswith("sandbox: isolation=bwrap")


@pytest.mark.parametrize("name", sorted(BATTERY))
def test_validator_verdict(name, hostile, secret, listener, tmp_path, capsys):
    verdict, check, _ = BATTERY[name]
    report = validate_reward(str(hostile / f"{name}.py"), timeout_s=1.0)
    failing = {c.name for c in report.checks if c.status in ("FAIL", "WARN")}
    assert report.verdict == verdict, report
    if check:
        assert check in failing, report
    everything = json.dumps(report.to_dict()) + "".join(capsys.readouterr())
    assert secret not in everything
    assert "arena-hostile-was-here" not in os.listdir(tmp_path)
    _assert_not_reached(listener)
    assert psutil.pid_exists(os.getpid())


def test_credentials_are_scrubbed_from_the_worker_environment(monkeypatch):
    from arena_core.sandbox import safe_env

    for name, value in {
        "OPENAI_API_KEY": "sk-1",
        "HF_TOKEN": "hf_1",
        "AWS_ACCESS_KEY_ID": "AKIA1",
        "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
        "DB": "postgres://me:pw@host/db",
        "GH_AUTH": "x",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PROXY_URL", "http://proxy:3128")
    env = safe_env()
    assert not {"OPENAI_API_KEY", "HF_TOKEN", "AWS_ACCESS_KEY_ID", "DB", "GH_AUTH"} & set(env)
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env and env["PROXY_URL"].endswith("3128")


def test_isolated_worker_sees_nothing_of_the_host(write_reward, secret):
    """What the worker sees: pid 1 is bwrap's init, itself, nothing else; its env is clean."""
    path = write_reward(
        "import os, json\n"
        "def reward(q, a, c):\n"
        "    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "    env = open('/proc/1/environ', 'rb').read().decode()\n"
        "    print(json.dumps([pids, os.getpid(), os.getppid(), os.getcwd(), dict(os.environ)]))\n"
        "    return 1.0 if 'SECRET' not in env else 0.0\n"
    )
    with RewardPool(path, workers=1) as pool:
        (out,) = pool.score([("q", "a", "c")])
        cgroup = pool._slots[0].child.cgroup  # root: the worker's pids cgroup
    assert out.kind == "ok" and out.value == 1.0, out
    assert cgroup is None or not cgroup.path.exists()  # removed with the worker
    pids, pid, ppid, cwd, env = json.loads(out.output)
    assert pids == [1, pid] and ppid == 1 and cwd == "/tmp"
    assert secret not in out.output and "ARENA_HOSTILE_SECRET_TOKEN" not in env


@pytest.mark.parametrize("limit", [8, 20])
def test_process_limit_is_exact(write_reward, limit):
    """max_processes counts the worker and all it starts; fork fails past it, the call fails,
    the worker is replaced and the next call is served."""
    path = write_reward(
        "import os, time\n"
        "def reward(q, a, c):\n"
        "    if c != 'flood':\n"
        "        return 1.0\n"
        "    n = 0\n"
        "    while True:\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(60); os._exit(0)\n"
        "        except OSError:\n"
        "            print(n + 1, end='')\n"
        "            return 0.5\n"
        "        n += 1\n"
    )
    with RewardPool(path, workers=1, policy=SandboxPolicy(max_processes=limit)) as pool:
        first = pool.worker_pids
        flood, after = pool.score([("q", "a", "flood"), ("q", "a", "fine")])
        assert flood.kind == "crashed" and "process limit" in flood.detail, flood
        assert int(flood.output) == limit  # the worker itself and limit - 1 children
        assert after.kind == "ok" and after.value == 1.0
        assert pool.worker_pids != first and pool.stats["replaced"] == 1


def test_scratch_is_private_and_capped(write_reward, tmp_path):
    host_file = tmp_path.parent / f"arena-host-{secrets.token_hex(4)}"  # in the host's /tmp
    host_file.write_text("host")
    path = write_reward(
        "import os\n"
        "def reward(q, a, c):\n"
        "    with open('/tmp/mine', 'w') as f:\n"
        "        f.write('x')\n"
        "    try:\n"
        "        with open('/tmp/big', 'wb') as f:\n"
        "            f.write(b'0' * (3 << 20))\n"
        "    except OSError:\n"
        "        os.unlink('/tmp/big')\n"
        f"        return 0.5 if not os.path.exists({str(host_file)!r}) else 0.0\n"
        "    return 1.0\n"
    )
    with RewardPool(path, workers=1, policy=SandboxPolicy(scratch_mb=2)) as pool:
        (out,) = pool.score([("q", "a", "c")])
    assert out.kind == "ok" and out.value == 0.5, out  # host's /tmp unseen; 3 MB > 2 MB
    assert not os.path.exists("/tmp/mine")
    host_file.unlink()


def test_network_is_opt_in(write_reward, listener):
    path = write_reward(
        "import os, socket\n"
        "def reward(q, a, c):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', int(os.environ['ARENA_TEST_PORT'])), 1)\n"
        "        return 1.0\n"
        "    except OSError:\n"
        "        return 0.0\n"
    )
    with RewardPool(path, workers=1) as pool:
        assert pool.score([("q", "a", "c")])[0].value == 0.0
    _assert_not_reached(listener)
    with RewardPool(path, workers=1, policy=SandboxPolicy(network=True)) as pool:
        assert pool.score([("q", "a", "c")])[0].value == 1.0
        assert "network allowed" in pool.isolation.line()


def test_replacement_starts_between_calls_not_inside(hostile):
    """After a call whose worker died, the pool is topped up before `score` returns: the next
    step finds every worker started (and, after its import, ready) instead of starting one."""
    with RewardPool(str(hostile / "segfault.py"), workers=2) as pool:
        pool.score([("q", "a", "c")])
        assert all(slot is not None for slot in pool._slots)
        assert pool.stats["replaced"] == 1


def test_environment_checks_run_isolated(tmp_path, secret):
    """The same sandbox holds user environments: an environment that kills its parent while
    being validated gets a verdict, and this process lives."""
    from arena_core.validate.env import validate_env

    env = tmp_path / "hostile_env.py"
    env.write_text(
        "import os, signal\n"
        "import gymnasium as gym\n"
        "import numpy as np\n"
        "class KillerEnv(gym.Env):\n"
        "    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)\n"
        "    action_space = gym.spaces.Discrete(2)\n"
        "    def __init__(self):\n"
        "        os.kill(os.getppid(), signal.SIGKILL)\n"
        "        assert 'ARENA_HOSTILE_SECRET_TOKEN' not in os.environ\n"
        "        assert 'SECRET' not in open('/proc/1/environ').read()\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        super().reset(seed=seed)\n"
        "        return np.zeros(2, np.float32), {}\n"
        "    def step(self, action):\n"
        "        return np.zeros(2, np.float32), 0.0, True, False, {}\n"
    )
    report = validate_env(f"{env}:KillerEnv", timeout_s=5.0)
    assert report.verdict in ("PASS", "WARN"), report
    assert psutil.pid_exists(os.getpid())
    assert secret not in json.dumps(report.to_dict())


def test_relative_file_references_still_resolve(tmp_path, monkeypatch):
    """The worker's working directory is its scratch: `file.py:func` relative to ours is made
    absolute (and its folder, under /tmp here, mounted read-only) before it starts."""
    (tmp_path / "probe.py").write_text("import os\ndef where(x):\n    return [x, os.getcwd()]\n")
    monkeypatch.chdir(tmp_path)
    out = run_in_sandbox("probe.py:where", args=["plain-name"])
    assert out.ok, out
    assert out.value == ["plain-name", "/tmp"]


@pytest.mark.parametrize(
    "forged",
    [b'{"fatal": "import"}\n', b'{"ready": true}\n', b'{"exit": "memory", "x": 1}\n', b"[1]\n"],
)
def test_forged_protocol_messages_fail_the_call_only(write_reward, forged):
    """A reward that writes Arena-like messages to the result pipe is not obeyed: its call
    fails, its worker is replaced, the pool keeps scoring (and starting workers between calls)."""
    path = write_reward(
        "import json, os, sys\n"
        "RESP = json.loads(sys.argv[1])['resp']\n"
        "def reward(q, a, c):\n"
        "    if c == 'forge':\n"
        f"        os.write(RESP, {forged!r})\n"
        "    return 1.0\n"
    )
    with RewardPool(path, workers=1) as pool:
        forged_call, fine = pool.score([("q", "a", "forge"), ("q", "a", "c")])
        assert forged_call.kind == "crashed" and "result pipe" in forged_call.detail
        assert fine.kind == "ok"
        assert all(slot is not None for slot in pool._slots) and not pool._restart_error


def test_garbage_while_importing_is_a_contract_failure_not_a_hang(write_reward):
    from arena_core.sandbox import RewardImportError

    path = write_reward(
        "import json, os, sys\n"
        "os.write(json.loads(sys.argv[1])['resp'], b'garbage\\n')\n"
        "def reward(q, a, c):\n"
        "    return 1.0\n"
    )
    with pytest.raises(RewardImportError, match="result pipe"):
        RewardPool(path, workers=1, import_timeout_s=30)


def test_no_nested_user_namespaces(write_reward):
    """Inside the sandbox a reward cannot make a user namespace of its own (where it would hold
    capabilities): less of the kernel to attack."""
    path = write_reward(
        "import ctypes\n"
        "def reward(q, a, c):\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    return float(libc.unshare(0x10000000) != 0)  # CLONE_NEWUSER refused\n"
    )
    with RewardPool(path, workers=1) as pool:
        assert pool.score([("q", "a", "c")])[0].value == 1.0
