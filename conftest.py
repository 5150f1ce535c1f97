"""pytest's set-up for the whole repository (tests/ and the notebooks in book/); tests/conftest.py holds the
tests' own helpers. This file is read whatever paths pytest is given, so the scheduler below also applies to
`pytest -n 2 book/01_attention_by_hand.ipynb`."""

# Under `make test` (pytest-xdist, one worker per core) a test file goes to one worker as a whole: a notebook's
# cells run in order in one kernel, and a file's module-scoped fixture (a browser, JupyterLab, the simulated
# Colab) is built once. The chapters' simulated-Colab runs, a few minutes of one core each, are the exception:
# they are handed out one by one (each worker then builds its own simulated Colab).
SPREAD_ONE_BY_ONE = "tests/test_colab.py::test_chapter_runs_in_colab"


import pytest


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown where xdist is not installed
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class FileOrChapterScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.startswith(SPREAD_ONE_BY_ONE) else nodeid.split("::", 1)[0]

    return FileOrChapterScheduling(config, log)
