"""The SFT and DPO path: training on datasets with the same learner as the RL paths, no
generation. The recipe (`recipe.py`, registered as `offline`) runs the loop; `data.py` encodes and
batches, `eval.py` scores held-out prompts."""
