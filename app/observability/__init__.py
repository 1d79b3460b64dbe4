"""Operator concerns in one place: Prometheus metrics (``metrics``, ``scrape``), structured
logs (``logging``) and per-request ids (``request_id``). The transport and real-time code
only call the small hooks these modules offer."""
