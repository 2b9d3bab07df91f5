from words import title


def test_other_acronym():
    assert title('made in usa') == 'Made In USA'
