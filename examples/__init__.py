"""Runnable examples of the Taskhub SDK (see examples/README.md)."""
