"""arena-example: a word-reversal text environment, its reward and a config option for Arena."""

__version__ = "0.1.0"
