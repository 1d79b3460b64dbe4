"""Every SQL statement: tables, engines, hot statements, and the SQLite and PostgreSQL
variants side by side."""
