"""Application factory and ASGI entry point."""

from fastapi import FastAPI
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from tasktracker import __version__
from tasktracker.api.routes import router
from tasktracker.repository.sql import Base

DEFAULT_DATABASE_URL = "sqlite:///./tasktracker.db"


def create_app(database_url: str = DEFAULT_DATABASE_URL) -> FastAPI:
    engine = create_engine(database_url, connect_args={"check_same_thread": False})
    Base.metadata.create_all(engine)

    app = FastAPI(title="Task Tracker", version=__version__)
    app.state.session_factory = sessionmaker(bind=engine, expire_on_commit=False)
    app.include_router(router, prefix="/api")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


app = create_app()
