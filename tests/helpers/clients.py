"""Where the two benchmark clients the testbed installs live (`make local-assets`).

Each sits in a directory of its own, which the local site's [env] PYTHONPATH names (SGLang 0.5.23)
or testbed/configs/client-sglang-0.5.2.toml's (0.5.2); the Python environment itself holds no
sglang, as the local site's router expects (testbed/sites/local.toml). Nothing here imports sglang
(its import takes 15-30 s here); a missing client is a failure that names the make target, not a
skip.
"""
from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from helpers import ROOT

OLD_CONFIG = ROOT / "testbed" / "configs" / "client-sglang-0.5.2.toml"
LOCAL_SITE = ROOT / "testbed" / "sites" / "local.toml"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _client_dir(config: Path, version: str) -> Path:
    path = Path(tomllib.loads(config.read_text())["env"]["PYTHONPATH"])
    assert (path / "sglang" / "bench_serving.py").is_file(), \
        f"sglang {version} is not installed in {path}: run `make local-assets`"
    return path


def old_client_dir() -> Path:
    """The directory holding sglang 0.5.2 (the 0.5.2 config's PYTHONPATH)."""
    return _client_dir(OLD_CONFIG, "0.5.2")


def client_dir() -> Path:
    """The directory holding sglang 0.5.23 (the local site's PYTHONPATH)."""
    return _client_dir(LOCAL_SITE, "0.5.23")


def installed_sglang() -> Path:
    """The sglang package directory of 0.5.23."""
    return client_dir() / "sglang"


def importable_sglang() -> None:
    """Put 0.5.23's directory on this process's sys.path (tests that import its parsers)."""
    path = str(client_dir())
    if path not in sys.path:
        sys.path.append(path)


def _with_path(env: dict, path: Path) -> dict:
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))}


def client_cmd(old: bool = False) -> tuple[list[str], dict]:
    """(argv prefix, environment) of one client: 0.5.23's steady-state entry point or 0.5.2's
    sglang.bench_serving, as the local site's profiles run them."""
    env = {**os.environ, **ENV}
    if old:   # the 0.5.2 config's own command: its Python environment (no torch) and module
        command = tomllib.loads(OLD_CONFIG.read_text())["client_profiles"]["sglang_0_5_2"]["command"]
        assert Path(command[0]).is_file(), f"{command[0]} is missing: run `make local-assets`"
        return list(command), _with_path(env, old_client_dir())
    return [sys.executable, "-m", "sglang.benchmark.steady_state_serving",
            "--steady-state-concurrency-ratio", "0.5"], _with_path(env, client_dir())
