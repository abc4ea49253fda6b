"""A pytest plugin: a test that passes without running an assertion fails (issue 36).

A test whose only assert sits under a condition its data never meets (or in a loop over nothing)
passes and checks nothing. pytest calls ``pytest_assertion_pass`` for every assert that holds in a
module it rewrote (test modules, conftest, ``helpers``: tests/conftest.py registers it) when the
ini option ``enable_assertion_pass_hook`` is on (pyproject.toml); a ``pytest.raises`` that caught
its exception counts as one too. Only the call phase counts: a fixture's checks are not the test's.
No allowlist: a test that checks by an exception alone (``subprocess.run(check=True)``) says so
with an assert on what it got. tests/test_asserted.py shows it failing a test that asserts nothing.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.assertion import rewrite

HOOK_NAME = b"_check_if_assertion_pass_impl"     # in every module rewritten with the hook
REWRITTEN = b"_format_explanation"                 # in every rewritten module with an assert


def drop_stale_rewrites(tests: Path) -> list[Path]:
    """Delete the modules pytest rewrote before the hook was on: it caches a rewritten module in
    __pycache__/*-pytest-*.pyc, keyed on the source's mtime and size but not on this option, so
    an unchanged test file would run without the hook and fail here for want of assertions."""
    stale = []
    for pyc in [*tests.glob("__pycache__/*-pytest-*.pyc"), *tests.glob("*/__pycache__/*-pytest-*.pyc")]:
        try:
            code = pyc.read_bytes()
        except OSError:
            continue
        if REWRITTEN in code and HOOK_NAME not in code:
            pyc.unlink(missing_ok=True)
            stale.append(pyc)
    return stale


class _CountedRaises:
    """pytest.raises(...) as a context manager, counting the exception it caught."""

    def __init__(self, inner, counter: "AssertionCounter"):
        self._inner, self._counter = inner, counter

    def __enter__(self):
        return self._inner.__enter__()

    def __exit__(self, *exc):
        caught = self._inner.__exit__(*exc)       # raises Failed when nothing (or another) was raised
        if caught:
            self._counter.count += 1
        return caught

    def __getattr__(self, name):
        return getattr(self._inner, name)


class AssertionCounter:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.count = 0
        self.in_call = False
        self._raises = None
        self._check = None

    def pytest_configure(self, config):
        if not config.getini("enable_assertion_pass_hook"):
            raise pytest.UsageError("tests/helpers/asserted.py needs the ini option enable_assertion_pass_hook = true")
        drop_stale_rewrites(Path(__file__).resolve().parents[1])
        self._raises = pytest.raises

        def raises(*args, **kwargs):
            got = self._raises(*args, **kwargs)
            if len(args) > 1:                      # the form raises(E, func, *args): it caught E
                self.count += 1
                return got
            return _CountedRaises(got, self)

        pytest.raises = raises
        # A rewritten assert that holds asks rewrite._check_if_assertion_pass_impl() whether any
        # hook wants it, and only then formats its explanation for the hook (saferepr, and with
        # CI set a pprint and diff of both sides of every passing ==: +9 % of the CPU of the
        # suite's heavy files). Counted here, answered no: no explanation is built. Should pytest
        # stop asking, its hook (below) counts instead: slower, never silent.
        self._check = getattr(rewrite, "_check_if_assertion_pass_impl", None)
        if self._check is not None:
            def check_counted() -> bool:
                if self.in_call:
                    self.count += 1
                    return False
                return self._check()

            rewrite._check_if_assertion_pass_impl = check_counted

    def pytest_unconfigure(self, config):
        if self._raises is not None:
            pytest.raises = self._raises
        if self._check is not None:
            rewrite._check_if_assertion_pass_impl = self._check

    def pytest_assertion_pass(self, item, lineno, orig, expl):
        if self.in_call:
            self.count += 1

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        self.count, self.in_call = 0, True
        try:
            return (yield)
        finally:
            self.in_call = False

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "call" and report.passed and self.count == 0:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} passed without running an assertion: no assert held and no "
                               "pytest.raises caught its exception in the test's call (an assert under a "
                               "condition its data never meets, or in a loop over nothing, checks nothing; "
                               "tests/helpers/asserted.py)")
        return report


def pytest_configure(config):
    """``-p helpers.asserted``, or tests/conftest.py's pytest_configure: one counter per session
    (pytest calls its pytest_configure on registration, a historic hook)."""
    if not config.pluginmanager.has_plugin("assertion-counter"):
        config.pluginmanager.register(AssertionCounter(config), "assertion-counter")
