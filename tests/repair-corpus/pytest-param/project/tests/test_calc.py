import pytest

from calc import add, total


@pytest.mark.parametrize("a,b,want", [(2, 3, 5), (0, 0, 0), (-1, 1, 0)])
def test_add(a, b, want):
    assert add(a, b) == want


class TestTotal:
    @pytest.mark.parametrize("xs,want", [([], 0), ([1, 2, 3], 6), ([5, 5], 10)])
    def test_total(self, xs, want):
        assert total(xs) == want

    def test_single(self):
        assert total([7]) == 7
