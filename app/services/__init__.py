"""Use cases, one per module: each runs its transaction(s) through the store and returns
the events to publish after the commit."""
