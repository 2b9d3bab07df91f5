from fmt import percent


def test_percent():
    assert percent(1, 3) == 33.3
