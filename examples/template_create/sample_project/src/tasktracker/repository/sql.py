from datetime import datetime

from sqlalchemy import DateTime, Enum, String, Text, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tasktracker.domain.models import Priority, Task, TaskStatus

COLUMNS = ("id", "title", "description", "priority", "status", "created_at", "due_at")


class Base(DeclarativeBase):
    pass


class TaskRow(Base):
    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[Priority] = mapped_column(Enum(Priority))
    status: Mapped[TaskStatus] = mapped_column(Enum(TaskStatus), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    def to_domain(self) -> Task:
        return Task(**{name: getattr(self, name) for name in COLUMNS})


class SqlTaskRepository:
    """SQLAlchemy repository: maps domain Task objects to TaskRow records."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(self, task: Task) -> Task:
        row = TaskRow(**{name: getattr(task, name) for name in COLUMNS if name != "id"})
        self._session.add(row)
        self._session.flush()
        return row.to_domain()

    def get(self, task_id: int) -> Task | None:
        row = self._session.get(TaskRow, task_id)
        return None if row is None else row.to_domain()

    def list(self, status: TaskStatus | None = None) -> list[Task]:
        query = select(TaskRow).order_by(TaskRow.created_at)
        query = query if status is None else query.where(TaskRow.status == status)
        return [row.to_domain() for row in self._session.scalars(query)]

    def save(self, task: Task) -> Task:
        row = self._session.merge(TaskRow(**{name: getattr(task, name) for name in COLUMNS}))
        self._session.flush()
        return row.to_domain()

    def remove(self, task_id: int) -> bool:
        row = self._session.get(TaskRow, task_id)
        if row is not None:
            self._session.delete(row)
        return row is not None
