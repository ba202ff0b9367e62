"""A tiny key-value API over the storage layer."""

from src import storage


def put(key, value):
    storage.save(key, value)
    return {"ok": True}


def get(key):
    return {"ok": True, "value": storage.load(key)}
