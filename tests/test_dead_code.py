"""Nothing written that is not wired (issue 29 item 5): no product function, method, property or
class that only tests reach (tests/helpers/dead_code.py: vulture over slurm_ab/, benchmarks/ and
the job templates, never over tests/)."""
from __future__ import annotations

import re
import shutil

from helpers import ROOT
from helpers.dead_code import WHITELIST, unreached


def test_no_product_code_is_reached_only_from_tests():
    found = unreached()
    assert found == [], ("product code that nothing but tests reaches: delete it, wire it, or (when "
                         "its use is invisible to vulture) list it in tests/dead_code_whitelist.py with "
                         "why:\n" + "\n".join(found))


def test_the_check_reports_a_function_only_a_test_calls(tmp_path):
    """A copy of the product with one function more, which a test calls: reported; the same
    function called from product code, or read by a job template, is not."""
    product = tmp_path / "slurm_ab"
    shutil.copytree(ROOT / "slurm_ab", product, ignore=shutil.ignore_patterns("__pycache__"))
    templates = tmp_path / "templates"
    templates.mkdir()
    module = product / "collect" / "verdict.py"
    module.write_text(module.read_text() + "\n\ndef only_a_test_calls_me(x):\n    return x\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_it.py").write_text(
        "from slurm_ab.collect.verdict import only_a_test_calls_me\n\n\n"
        "def test_it():\n    assert only_a_test_calls_me(1) == 1\n")
    found = unreached(product, callers=(tmp_path / "tests-are-not-callers",), templates=templates)
    assert [f for f in found if "only_a_test_calls_me" in f] == [
        f"slurm_ab/collect/verdict.py:{len(module.read_text().splitlines()) - 1}: "
        "unused function 'only_a_test_calls_me'"]
    (templates / "x.sbatch.j2").write_text("{{ p.only_a_test_calls_me(1) }}\n")
    assert not [f for f in unreached(product, (), templates) if "only_a_test_calls_me" in f]


def test_every_whitelist_entry_says_why():
    for line in WHITELIST.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.fullmatch(r"\S+\s+# .{20,}", line), f"{line!r}: a name, then '# why'"
