"""arena-example: text environments (reverse_words, countdown), their rewards and config options."""

__version__ = "0.1.0"
