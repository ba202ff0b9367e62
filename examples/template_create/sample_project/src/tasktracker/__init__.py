"""Task tracker: a small FastAPI service for managing tasks.

Layers:
    api         HTTP routes and Pydantic schemas
    domain      entities and use-case services (framework free)
    repository  persistence adapters (SQLAlchemy)
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tasktracker")
except PackageNotFoundError:  # running from a source checkout
    __version__ = "0.3.1"

__all__ = ["__version__"]
