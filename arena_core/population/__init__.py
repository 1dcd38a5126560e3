"""Populations of LLM RL runs on one base: members take turns (or run in parallel as actors),
tournament selection and mutation between rounds, lineage, population checkpoints and the
manifest. The recipe (`recipe.py`) drives it; a member's step is the LLM RL path's."""
