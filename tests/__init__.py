"""refattn test suite (a package, so that tests share tests/naive.py)."""
