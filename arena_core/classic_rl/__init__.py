"""The classic RL path: PPO on Gymnasium envs and IPPO on PettingZoo parallel envs. The recipes
(`ppo.py`, `ippo.py`) share one loop (`loop.py`); vector envs, GAE, actor-critic nets and the PPO
update are theirs alone: nothing here is needed to train a language model."""
