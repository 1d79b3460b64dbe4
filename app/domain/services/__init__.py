"""Services: each function runs one short transaction, applies the domain rules, and returns
its result plus the events to publish after the commit."""
