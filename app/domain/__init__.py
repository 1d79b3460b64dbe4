"""The rules of the hub: naming, the task state machine, and the services that apply them."""
