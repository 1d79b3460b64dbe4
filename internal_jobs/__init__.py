"""Taskhub's ``@internal`` jobs and the taskiq broker entry point
(``taskiq worker internal_jobs.broker:broker``)."""
