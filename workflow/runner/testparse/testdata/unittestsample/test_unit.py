import unittest


class TestCalc(unittest.TestCase):
    def test_pass(self):
        self.assertEqual(1 + 1, 2)

    def test_fail(self):
        self.assertEqual(1 + 1, 3, "arithmetic")

    def test_error(self):
        raise ValueError("boom")

    @unittest.skip("not here")
    def test_skip(self):
        pass

    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertEqual(i, 0)

    def test_doc(self):
        """A docstring's first line goes between the name and the status."""
        self.assertTrue(True)
