"""Where the two benchmark clients the testbed installs live (`make setup`, `make local-assets`).

SGLang 0.5.23 is the Python environment's own sglang; 0.5.2 sits in a directory of its own, which
testbed/configs/client-sglang-0.5.2.toml puts on PYTHONPATH. Nothing here imports sglang (its
import takes 15-30 s here); a missing client is a failure that names the make target, not a skip.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
from pathlib import Path

from helpers import ROOT

OLD_CONFIG = ROOT / "testbed" / "configs" / "client-sglang-0.5.2.toml"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def old_client_dir() -> Path:
    """The directory holding sglang 0.5.2 (the 0.5.2 config's PYTHONPATH)."""
    path = Path(tomllib.loads(OLD_CONFIG.read_text())["env"]["PYTHONPATH"])
    assert (path / "sglang" / "bench_serving.py").is_file(), \
        f"sglang 0.5.2 is not installed in {path}: run `make local-assets`"
    return path


def installed_sglang() -> Path:
    """The installed sglang package directory (0.5.23)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed: run `make setup`"
    return Path(list(spec.submodule_search_locations)[0])


def client_cmd(old: bool = False) -> tuple[list[str], dict]:
    """(argv prefix, environment) of one client: 0.5.23's steady-state entry point or 0.5.2's
    sglang.bench_serving, as the local site's profiles run them."""
    env = {**os.environ, **ENV}
    if old:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(old_client_dir()), env.get("PYTHONPATH")]))
        return [sys.executable, "-m", "sglang.bench_serving"], env
    return [sys.executable, "-m", "sglang.benchmark.steady_state_serving",
            "--steady-state-concurrency-ratio", "0.5"], env
