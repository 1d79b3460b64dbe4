"""Job schemas and task payloads checked: sizes, costs, linear-time patterns, on threads of
their own where costly."""
