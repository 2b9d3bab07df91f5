from slug import slugify


def test_simple():
    assert slugify('Hello World') == 'hello-world'


def test_punctuation():
    assert slugify('Hello, World!') == 'hello-world'
