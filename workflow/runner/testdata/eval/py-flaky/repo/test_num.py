from num import is_even


def test_even():
    assert is_even(2) and is_even(0) and not is_even(3)
