import sys

sys.path.insert(0, "src")

from calc import add, total  # noqa: E402


def test_add():
    assert add(2, 3) == 5


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_empty():
    assert total([]) == 0
