from words import title


def test_acronym():
    assert title('nasa rocket') == 'NASA Rocket'
