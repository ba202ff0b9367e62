"""HTTP routes for tasks."""

from collections.abc import Iterator

from fastapi import APIRouter, Depends, HTTPException, Request, status
from sqlalchemy.orm import Session

from tasktracker.api.schemas import TaskCreate, TaskList, TaskOut, TaskUpdate
from tasktracker.domain.models import TaskStatus
from tasktracker.domain.services import TaskNotFoundError, TaskService
from tasktracker.repository.sql import SqlTaskRepository

router = APIRouter(tags=["tasks"])


def get_service(request: Request) -> Iterator[TaskService]:
    session: Session = request.app.state.session_factory()
    try:
        yield TaskService(SqlTaskRepository(session))
        session.commit()
    finally:
        session.close()


@router.get("/tasks", response_model=TaskList)
def list_tasks(
    status_filter: TaskStatus | None = None, service: TaskService = Depends(get_service)
) -> TaskList:
    tasks = service.list_tasks(status=status_filter)
    return TaskList(items=[TaskOut.model_validate(t) for t in tasks], total=len(tasks))


@router.post("/tasks", response_model=TaskOut, status_code=status.HTTP_201_CREATED)
def create_task(payload: TaskCreate, service: TaskService = Depends(get_service)) -> TaskOut:
    task = service.create_task(**payload.model_dump())
    return TaskOut.model_validate(task)


@router.patch("/tasks/{task_id}", response_model=TaskOut)
def update_task(
    task_id: int, payload: TaskUpdate, service: TaskService = Depends(get_service)
) -> TaskOut:
    try:
        task = service.update_task(task_id, **payload.model_dump(exclude_unset=True))
    except TaskNotFoundError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    return TaskOut.model_validate(task)


@router.delete("/tasks/{task_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_task(task_id: int, service: TaskService = Depends(get_service)) -> None:
    try:
        service.delete_task(task_id)
    except TaskNotFoundError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
