from stats import median


def test_two():
    assert median([1, 4]) == 2.5
