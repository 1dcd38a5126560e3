"""Offline training: SFT and DPO on datasets with the same learner as GRPO, no generation
(dataset encoding and batching, the loop, held-out evaluation). The `offline` recipe runs it."""
