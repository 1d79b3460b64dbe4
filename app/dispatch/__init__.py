"""``@internal`` dispatch: which internal jobs have an executor in this deployment."""
