"""A classic verifiers EnvGroup (test fixture): the ToolEnv and the MultiTurnEnv fixtures as one
environment; each row is routed to its member by `info["env_id"]`."""

import verifiers as vf
import vf_calc_fixture
import vf_guess_fixture


def load_environment():
    return vf.EnvGroup(
        envs=[vf_calc_fixture.load_environment(), vf_guess_fixture.load_environment()],
        env_names=["calc", "guess"],
    )
