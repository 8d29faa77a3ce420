"""Collection settings for notebooks/: pytest runs the .ipynb files (nbmake), never their .py twins.

Each notebook has a jupytext text form beside it (NAME.py, py:percent). ``--doctest-modules`` would
import those as modules, that is, run every notebook a second time outside Jupyter; they are left
out here, and tests/test_notebooks.py checks that each twin matches its notebook.
"""

collect_ignore_glob = ["*.py"]
