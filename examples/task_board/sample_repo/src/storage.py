"""Storage: a dictionary in memory."""

_DATA = {}


def save(key, value):
    _DATA[key] = value


def load(key):
    return _DATA.get(key)
