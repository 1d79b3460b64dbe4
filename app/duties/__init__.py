"""Background duties of a hub process, one loop shape each: the sweeper, the due-task
announcer, worker presence, the outbox."""
