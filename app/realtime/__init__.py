"""Real-time fan-out and wake-ups: in-process waiters, and publishing events after commit."""
