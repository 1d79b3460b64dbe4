"""Pure rules, without I/O: naming, task states, retries, events, errors, records."""
