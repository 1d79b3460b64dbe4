"""Reading one task."""

from __future__ import annotations

from uuid import UUID

from taskhub.rules.errors import TaskNotFound
from taskhub.rules.records import TaskRecord
from taskhub.store.database import Database
from taskhub.store.task_rows import load_task


async def get_task(db: Database, task_id: UUID, *, stored_documents: bool = False) -> TaskRecord:
    """The task with its queue position, or ``TaskNotFound``. ``stored_documents``: its
    payload and result as their stored text, to be written into an answer as they are
    (see ``load_task``)."""
    async with db.read() as conn:
        record = await load_task(conn, task_id, stored_documents=stored_documents)
    if record is None:
        raise TaskNotFound(f"Task {task_id} not found.")
    return record
