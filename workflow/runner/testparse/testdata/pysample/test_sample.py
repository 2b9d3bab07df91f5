import pytest


def test_pass():
    assert 1 + 1 == 2


def test_fail():
    assert 1 + 1 == 3, "arithmetic"


@pytest.mark.skip(reason="not here")
def test_skip():
    pass


class TestCls:
    def test_method_fails(self):
        assert [1, 2] == [1, 3]
