"""Classic RL: PPO on Gymnasium envs and IPPO on PettingZoo parallel envs (vector envs, GAE,
actor-critic nets, the `/v1/act` route). Kept out of the LLM rooms: nothing here is needed to
train a language model, and the `ppo`/`ippo` recipes are the only callers of the loops."""
