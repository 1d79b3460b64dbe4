"""Taskhub's ``@internal`` jobs and the taskiq broker entry point
(``taskiq worker taskhub.internal_jobs.broker:broker``)."""
