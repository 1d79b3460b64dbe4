"""The programs of ``python -m benchmarks peers``: one module per system, each an enqueuer
and a worker of the same no-op job, run as ``python -m benchmarks.apps.peers.<module>
setup|work|enqueue`` by the interpreter of that system's own virtual environment (the
peers' packages are never installed in Taskhub's). ``protocol`` is what they share; like
this package, it imports the standard library only."""
