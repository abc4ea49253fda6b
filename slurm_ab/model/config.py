"""Load the layered TOML configuration into one plain, checked tree.

Layers, later wins: the built-in experiment < the site file < the user's experiment file <
``--set key=value``. Every settable key exists in the built-in experiment, so an unknown key
is reported with the closest known one; types are checked against the built-in values.
"""
from __future__ import annotations

import copy
import functools
import difflib
import os
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .errors import ConfigError, ConfigErrors
from .experiment import PD_KINDS

Tree = dict[str, Any]

# Tables whose keys are the user's own (flag names, variable names, mode and dataset names).
FREE_TABLES = ("server.args", "server.env", "router.args", "env", "cache.env", "pd.env", "modes", "datasets",
               "router_profiles", "client_profiles", "nccl_networks")
MODE_KEYS = {"description": str, "tp": int, "pp": int, "ep": int, "args": dict, "roles": dict, "router": dict}
# A PD mode's roles ([modes.<M>.roles.prefill|decode]) and its router's per-role policies.
ROLE_NAMES = PD_KINDS
ROLE_KEYS = {"instances": int, "nodes": int, "tp": int, "pp": int, "ep": int, "args": dict, "env": dict}
MODE_ROUTER_KEYS = {"prefill_policy": str, "decode_policy": str}
DATASET_KEYS = {"args": list}
PROFILE_KEYS = {"description": str, "command": list, "module": str, "distribution": str,
                "ready_path": str, "ready_field": str, "args": dict, "prefill_policies": list,
                "decode_policies": list}
CLIENT_PROFILE_KEYS = {"description": str, "command": list, "module": str, "distribution": str,
                       "args": dict, "datasets": list, "goodput": bool}
NAMED_TABLES = {"modes": MODE_KEYS, "datasets": DATASET_KEYS, "router_profiles": PROFILE_KEYS,
                "client_profiles": CLIENT_PROFILE_KEYS}
SITES_ENV = "SLURM_AB_SITES"
REF = re.compile(r"\{([a-z_][a-z0-9_-]*(?:\.[A-Za-z0-9_-]+)+)\}")


@functools.lru_cache(maxsize=1)
def _builtin_text() -> str:
    return resources.files("slurm_ab.data").joinpath("experiment.toml").read_text()


def builtin_experiment() -> Tree:
    return copy.deepcopy(_builtin_parsed())


@functools.lru_cache(maxsize=1)
def _builtin_parsed() -> Tree:
    return _load_text(_builtin_text(), "built-in experiment")


def builtin_sites() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("slurm_ab.data.sites").iterdir() if p.name.endswith(".toml"))


def site_dirs() -> list[Path]:
    """Directories of named site files besides the built-in ones: ``$SLURM_AB_SITES``, colon-separated
    (a cluster's shared site files; the testbed's ``local`` site)."""
    return [Path(d) for d in os.environ.get(SITES_ENV, "").split(os.pathsep) if d]


def site_text(site: str) -> tuple[str, str]:
    """Return (text, origin) of a site given as a name (built-in, then ``$SLURM_AB_SITES``) or a file path."""
    if site in builtin_sites():
        return resources.files("slurm_ab.data.sites").joinpath(f"{site}.toml").read_text(), f"built-in site {site!r}"
    if "/" not in site:
        for d in site_dirs():
            if (d / f"{site}.toml").is_file():
                return (d / f"{site}.toml").read_text(), str(d / f"{site}.toml")
    path = Path(site)
    if not path.is_file():
        dirs = ", ".join(str(d) for d in site_dirs()) or "none, it is unset"
        raise ConfigError("--site", site, "no such site or file",
                          f"built-in {', '.join(builtin_sites())}; NAME.toml in ${SITES_ENV} ({dirs}); or a TOML file")
    return path.read_text(), str(path)


def _load_text(text: str, origin: str) -> Tree:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(origin, "<file>", f"not valid TOML: {e}") from None


def load_file(path: str, what: str) -> Tree:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(what, path, "no such file")
    return _load_text(p.read_text(), str(p))


def parse_set(item: str, mode: str | None = None) -> tuple[list[str], Any]:
    """Parse ``key=value``; the value is read as a TOML value when it is one, else as a string.

    ``mode.`` is short for ``modes.<the selected mode>.``.
    """
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", item, "expected key=value", "e.g. benchmark.num_prompts=20")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    parts = key.split(".")
    if parts[0] == "mode" and mode:
        parts = ["modes", mode, *parts[1:]]
    if any(not p for p in parts):
        raise ConfigError("--set", item, "empty key segment")
    if not isinstance(value, str) and isinstance(value, (int, float, bool)) and _is_string_key(parts):
        value = raw.strip()  # --set cluster.account=12345 means the string "12345"
    return parts, value


def _is_string_key(parts: list[str]) -> bool:
    node: Any = builtin_experiment()
    for p in parts:
        if not isinstance(node, dict) or p not in node:
            return parts[0] in ("env",) or parts[:2] == ["server", "env"]
        node = node[p]
    return isinstance(node, str)


def _set_path(tree: Tree, parts: list[str], value: Any) -> None:
    node = tree
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(".".join(parts), value, f"{p!r} is a value, not a table")
        node = nxt
    node[parts[-1]] = value


def merge(base: Tree, over: Tree) -> Tree:
    """Deep-merge ``over`` into a copy of ``base``; tables merge, everything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _type_name(t: type) -> str:
    return {int: "integer", float: "number", str: "string", bool: "true/false", list: "list", dict: "table"}[t]


def _type_ok(value: Any, expected: type) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def check_keys(layer: Tree, defaults: Tree, origin: str) -> list[ConfigError]:
    """Unknown keys and wrong types of one layer, checked against the built-in tree."""
    errors: list[ConfigError] = []

    def walk(node: Tree, ref: Tree, path: str) -> None:
        for key, value in node.items():
            full = f"{path}.{key}" if path else key
            if path in FREE_TABLES or path.split(".")[0] in NAMED_TABLES and "." in path:
                errors.extend(_check_free(full, key, value, path))
                continue
            if key not in ref:
                close = difflib.get_close_matches(key, list(ref), n=1)
                hint = f"did you mean {path + '.' if path else ''}{close[0]}?" if close else None
                errors.append(ConfigError(full, value, f"unknown key in {origin}", hint or ", ".join(sorted(ref))))
                continue
            expected = type(ref[key])
            if not _type_ok(value, expected):
                errors.append(ConfigError(full, value, f"must be a {_type_name(expected)}"))
            elif isinstance(value, dict):
                walk(value, ref[key], full)
            elif isinstance(value, list) and not all(isinstance(v, str) for v in value):
                errors.append(ConfigError(full, value, "must be a list of strings"))

    walk(layer, defaults, "")
    return errors


SCALAR = (str, int, float, bool)


def _check_free(full: str, key: str, value: Any, table: str) -> list[ConfigError]:
    """Checks for the user-named tables: flag names, variable names, modes, datasets."""
    if table in ("server.args", "router.args") or (table.split(".")[0] in NAMED_TABLES and table.endswith(".args")):
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
            return [ConfigError(full, value, "flag name must be lower-case words joined by '-', without leading dashes")]
        if not (isinstance(value, SCALAR) or (isinstance(value, list) and all(isinstance(v, SCALAR) for v in value))):
            return [ConfigError(full, value, "flag value must be a string, number, true/false or a list of them")]
        return []
    if table in ("env", "server.env", "cache.env", "pd.env") or table.endswith(".env"):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            return [ConfigError(full, value, "not a valid environment variable name")]
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            return [ConfigError(full, value, "environment value must be a string or number")]
        return []
    if table == "nccl_networks":
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", key):
            return [ConfigError(full, value, "not an NCCL network family name", "letters, digits, '_', '.', '-'")]
        if not (isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value)):
            return [ConfigError(full, value, "must be a non-empty list of network names",
                                'names NCCL prints in "Using network NAME", * for any text, e.g. ["IB", "IBext_v*"]')]
        return []
    if table in NAMED_TABLES:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", key):
            return [ConfigError(full, value, "name must be letters, digits, '.', '_' or '-'")]
        if not isinstance(value, dict):
            return [ConfigError(full, value, "must be a table")]
        spec = NAMED_TABLES[table]
        errs = []
        for k, v in value.items():
            first = _check_table(full, {k: v}, spec)        # unknown key, wrong type
            if first:
                errs.extend(first)
            elif k == "args" and isinstance(v, dict):
                errs.extend(e for ak, av in v.items() for e in _check_free(f"{full}.args.{ak}", ak, av, f"{full}.args"))
            elif k == "roles" and isinstance(v, dict):
                errs.extend(_check_roles(f"{full}.roles", v))
            elif k == "router" and isinstance(v, dict):
                errs.extend(_check_table(f"{full}.router", v, MODE_ROUTER_KEYS))
            elif isinstance(v, list) and not all(isinstance(a, str) for a in v):
                errs.append(ConfigError(f"{full}.{k}", v, "must be a list of strings"))
        return errs
    return []


def _check_table(full: str, table: dict, spec: dict) -> list[ConfigError]:
    """A small fixed table: known keys of the right type."""
    errs = []
    for k, v in table.items():
        if k not in spec:
            close = difflib.get_close_matches(k, list(spec), n=1)
            errs.append(ConfigError(f"{full}.{k}", v, "unknown key", f"did you mean {close[0]}?" if close else ", ".join(spec)))
        elif not _type_ok(v, spec[k]):
            errs.append(ConfigError(f"{full}.{k}", v, f"must be a {_type_name(spec[k])}"))
    return errs


def _check_roles(full: str, roles: dict) -> list[ConfigError]:
    """[modes.<M>.roles]: the roles SGLang's --disaggregation-mode knows, each a role table whose
    args are flags and env variables."""
    errs = []
    for name, role in roles.items():
        where = f"{full}.{name}"
        if name not in ROLE_NAMES:
            errs.append(ConfigError(where, role, "not a PD role", ", ".join(ROLE_NAMES)))
            continue
        if not isinstance(role, dict):
            errs.append(ConfigError(where, role, "must be a table"))
            continue
        errs += _check_table(where, {k: v for k, v in role.items() if k not in ("args", "env")}, ROLE_KEYS)
        for k, table in (("args", f"{where}.args"), ("env", f"{where}.env")):
            v = role.get(k, {})
            if not isinstance(v, dict):
                errs.append(ConfigError(table, v, "must be a table"))
                continue
            errs.extend(e for ak, av in v.items() for e in _check_free(f"{table}.{ak}", ak, av, table))
    return errs


def load_tree(site: str | None = None, config_files: Iterable[str] = (), sets: Iterable[str] = (), mode: str | None = None) -> Tree:
    """Merge all layers and return the raw tree (references not yet resolved)."""
    defaults = builtin_experiment()
    tree = defaults
    errors: list[ConfigError] = []
    layers: list[tuple[Tree, str]] = []
    if site:
        text, origin = site_text(site)
        layers.append((_load_text(text, origin), origin))
    for f in config_files:
        layers.append((load_file(f, "--config"), f))
    set_layer: Tree = {}
    for item in sets:
        parts, value = parse_set(item, mode)
        _set_path(set_layer, parts, value)
    if set_layer:
        layers.append((set_layer, "--set"))
    for layer, origin in layers:
        errors.extend(check_keys(layer, defaults, origin))
        tree = merge(tree, layer)
    if errors:
        raise ConfigErrors(errors)
    return tree


def lookup(tree: Tree, dotted: str) -> Any:
    node: Any = tree
    for p in dotted.split("."):
        if not isinstance(node, dict) or p not in node:
            raise KeyError(dotted)
        node = node[p]
    return node


def resolve_refs(value: Any, tree: Tree, key: str, _depth: int = 0) -> Any:
    """Replace ``{section.key}`` references in strings (recursively, in lists and tables)."""
    if isinstance(value, dict):
        return {k: resolve_refs(v, tree, f"{key}.{k}" if key else k, _depth) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, tree, key, _depth) for v in value]
    if not isinstance(value, str) or "{" not in value:
        return value
    if _depth > 8:
        raise ConfigError(key, value, "references nest too deeply (a cycle?)")

    def sub(m: re.Match) -> str:
        try:
            target = lookup(tree, m.group(1))
        except KeyError:
            raise ConfigError(key, value, f"refers to unknown key {m.group(1)!r}") from None
        if isinstance(target, (dict, list)):
            raise ConfigError(key, value, f"refers to {m.group(1)!r}, which is not a single value")
        return str(resolve_refs(target, tree, m.group(1), _depth + 1))

    return REF.sub(sub, value)


def referenced_keys(value: Any) -> set[str]:
    """Keys a value refers to, used to tell which site paths a mode or dataset needs."""
    if isinstance(value, dict):
        return set().union(*(referenced_keys(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(referenced_keys(v) for v in value)) if value else set()
    return set(REF.findall(value)) if isinstance(value, str) else set()
