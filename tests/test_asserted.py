"""tests/helpers/asserted.py, the check that fails a test which passed without running an assertion:
a pytest of its own over tests that assert nothing, assert under a condition never met (issue 36's
Holm test), or in a loop over nothing (all failed), beside tests that check (all passed)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from helpers import ROOT
from helpers.asserted import drop_stale_rewrites

CASES = '''
import pytest


@pytest.fixture
def checked():
    assert True                        # a fixture's assert is not the test's
    return 1


def _helper(x):
    assert x == 2


def test_nothing():
    x = 1 + 1


def test_assert_under_an_unmet_condition():
    for p in (0.12, 0.85):
        if p < 0.05:
            assert p


def test_assert_in_a_loop_over_nothing():
    for row in []:
        assert row


def test_only_a_fixture_asserts(checked):
    x = checked


def test_assert():
    assert 1 + 1 == 2


def test_a_helper_asserts():
    _helper(2)


def test_raises_caught():
    with pytest.raises(ValueError, match="invalid literal"):
        int("x")


def test_raises_called():
    pytest.raises(ValueError, int, "x")


def test_raises_nothing_fails_as_before():
    with pytest.raises(ValueError):
        int("1")


@pytest.mark.parametrize("n", [1, 2])
def test_skipped(n):
    pytest.skip("a skip is not a pass")
'''


def _run(tmp_path, *args):
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(CASES))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "helpers.asserted", "--rootdir", str(tmp_path), "-c", os.devnull, *args,
                           "test_cases.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_test_that_runs_no_assertion_fails(tmp_path):
    r = _run(tmp_path, "-o", "enable_assertion_pass_hook=true")
    outcome = {name: what for what, name in re.findall(r"^(PASSED|FAILED) \S*?test_cases\.py::(\w+)",
                                                       r.stdout, re.M)}
    assert outcome == {
        "test_nothing": "FAILED", "test_assert_under_an_unmet_condition": "FAILED",
        "test_assert_in_a_loop_over_nothing": "FAILED", "test_only_a_fixture_asserts": "FAILED",
        "test_assert": "PASSED", "test_a_helper_asserts": "PASSED", "test_raises_caught": "PASSED",
        "test_raises_called": "PASSED", "test_raises_nothing_fails_as_before": "FAILED"}, r.stdout + r.stderr
    assert r.returncode == 1 and "5 failed, 4 passed, 2 skipped" in r.stdout
    assert "test_cases.py::test_nothing passed without running an assertion" in r.stdout
    assert "DID NOT RAISE" in r.stdout                  # pytest.raises wrapped, its own failure kept


def test_without_the_hook_it_refuses_to_run(tmp_path):
    r = _run(tmp_path)
    assert r.returncode != 0 and "enable_assertion_pass_hook = true" in r.stderr


def test_stale_rewrites_are_dropped(tmp_path):
    """A module rewritten before the hook was on (pytest keys its cache on the source, not on the
    option) would run without it: dropped, the others kept."""
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    stale = cache / "test_a.cpython-311-pytest-9.0.3.pyc"
    stale.write_bytes(b"\x00code @pytest_ar _format_explanation \x00")
    fresh = cache / "test_b.cpython-311-pytest-9.0.3.pyc"
    fresh.write_bytes(b"\x00_format_explanation _check_if_assertion_pass_impl _call_assertion_pass")
    no_assert = cache / "test_c.cpython-311-pytest-9.0.3.pyc"
    no_assert.write_bytes(b"\x00def test_c(): pass")
    plain = cache / "test_d.cpython-311.pyc"             # not pytest's
    plain.write_bytes(b"_format_explanation")
    assert drop_stale_rewrites(tmp_path) == [stale]
    assert not stale.exists() and fresh.exists() and no_assert.exists() and plain.exists()
