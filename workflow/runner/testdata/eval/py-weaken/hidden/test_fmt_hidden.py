from fmt import percent


def test_half():
    assert percent(1, 2) == 50.0
