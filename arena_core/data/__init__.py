"""Datasets: categories (reasoning, preference, sft), column mapping, local files or a hub id."""

from arena_core.data.loading import CATEGORIES, DatasetError, load_dataset, local_rows, read_rows

__all__ = ["CATEGORIES", "DatasetError", "load_dataset", "local_rows", "read_rows"]
