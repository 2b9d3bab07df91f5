from slug import slugify


def test_many_spaces():
    assert slugify('  a   b  ') == 'a-b'
