from src import api


def test_put_then_get():
    api.put("a", 1)
    assert api.get("a")["value"] == 1
