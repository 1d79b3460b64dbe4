"""Storage: table models, engines and transactions, and the few dialect-specific statements."""
