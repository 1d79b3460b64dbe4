"""Taskhub: a real-time collaborative task hub."""

__version__ = "0.1.0"
