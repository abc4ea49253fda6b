"""The correctness gate (issue 33 item 4): faster only counts if it is still right.

Every launch sent a canary of fixed prompts at temperature 0 to each of its servers directly (a
prefill/decode launch: through its router; the job's ``correctness_canary``). Here each answer's
tokens are compared with the reference's: the reference mode's (``correctness.reference``, else the
campaign's first) first launch with a complete canary, its first server. Per prompt: the longest
common prefix (LCP) and whether the whole answer is identical. A launch is invalid, whatever its
speed, when a prompt diverged early (LCP < ``min_common_prefix``), an answer was empty or missing,
or fewer than ``min_exact_match`` of its answers equal the reference's; the reasons name the
prompts. Greedy decoding is deterministic per layout, but kernels of different parallel layouts may
round differently and diverge late: the thresholds say how late is tolerated (docs/metrics.md).
Pure: reads the launch's canary files (rundir.Layout) and nothing else.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..model.experiment import Correctness, instance_name
from ..model.rundir import Layout


@dataclass(frozen=True)
class Answer:
    """One canary answer: its tokens, or why there are none."""

    target: str                         # r<G> (a server, directly) | router
    prompt: int
    ids: tuple[int, ...] = ()
    empty: bool = False                 # the model said nothing (no text; at most an EOS)
    error: str = ""                     # no usable answer: HTTP status, curl's message, bad JSON


@dataclass(frozen=True)
class PromptCheck:
    """One prompt of one target against the reference."""

    target: str
    prompt: int
    common_prefix: int | None           # tokens equal to the reference's from the start
    tokens: int                         # the answer's length
    exact: bool
    problem: str = ""                   # "" | "diverged" | "empty" | "failed"


@dataclass(frozen=True)
class CorrectnessSummary:
    """A launch's canary against the reference (LaunchSummary.correctness)."""

    verdict: str                        # ok | invalid | not run
    reference: str                      # "tp32 launch 1 replica 0", or why there is none
    prompts: int
    checks: tuple[PromptCheck, ...] = ()
    exact_match: float | None = None    # share of the launch's answers identical to the reference's
    min_common_prefix: int | None = None
    reasons: tuple[str, ...] = ()
    thresholds: tuple[tuple[str, float], ...] = ()   # (("min_common_prefix", 16), ("min_exact_match", 0.5))


def target_name(target: str, names: dict | None = None) -> str:
    """r<G> -> "replica 1" / "decode 0" (the launch's role names), router -> "the router"."""
    if target == "router":
        return "the router"
    g = int(target[1:]) if target[1:].isdigit() else None
    if names and g in names:
        return instance_name(*names[g])
    return f"replica {g}" if g is not None else target


def read_answers(lay: Layout, prompts: int, targets: list[str]) -> dict[str, list[Answer]]:
    """Every target's answers, by prompt (a missing file: an answer with its error)."""
    out: dict[str, list[Answer]] = {}
    for t in targets:
        out[t] = [_answer(lay, t, k) for k in range(prompts)]
    return out


def _answer(lay: Layout, target: str, k: int) -> Answer:
    path, http = lay.correctness_response(target, k), lay.correctness_http(target, k)
    status = http.read_text(errors="replace").strip() if http.is_file() else ""
    if not path.is_file():
        return Answer(target, k, error=f"no answer ({status[:80] or 'not sent'})")
    if not status.startswith("200"):
        return Answer(target, k, error=f"HTTP {status[:80] or 'none'}")
    try:
        d = json.loads(path.read_text(errors="replace"))
    except ValueError:
        return Answer(target, k, error="an answer that is not JSON")
    ids = d.get("output_ids") if isinstance(d, dict) else None
    if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
        return Answer(target, k, error="no output_ids in the answer")
    text = d.get("text")
    empty = not ids or (isinstance(text, str) and not text.strip())
    return Answer(target, k, tuple(ids), empty=empty)


def targets_of(lay: Layout) -> list[str]:
    """The canary's targets of a launch, from its answer files (r<G> in group order, router)."""
    found = {p.name.split("-p")[0].split("correctness-", 1)[1]
             for p in lay.root.glob(str(lay.correctness_response("*", "*").relative_to(lay.root)))}
    return sorted(found, key=lambda t: (t == "router", int(t[1:]) if t[1:].isdigit() else 0, t))


def complete(answers: dict[str, list[Answer]]) -> bool:
    """Every prompt of the first target answered with tokens (usable as a reference)."""
    first = next(iter(answers.values()), [])
    return bool(first) and all(a.ids and not a.error and not a.empty for a in first)


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def check_launch(answers: dict[str, list[Answer]], reference: list[Answer] | None, ref_label: str,
                 cfg: Correctness, names: dict | None = None) -> CorrectnessSummary:
    """A launch's answers against the reference's (None: the launch's first target's own, said)."""
    thresholds = (("min_common_prefix", cfg.min_common_prefix), ("min_exact_match", cfg.min_exact_match))
    if not answers or not any(answers.values()):
        return CorrectnessSummary("not run", ref_label, cfg.prompts, thresholds=thresholds,
                                  reasons=("no canary answers (the launch ended before its canary, or "
                                           "correctness.enabled = false)",))
    if reference is None:
        reference = next(iter(answers.values()))
    checks = []
    for t, ans in answers.items():
        for a in ans:
            ref = reference[a.prompt] if a.prompt < len(reference) else None
            if a.error:
                checks.append(PromptCheck(t, a.prompt, None, 0, False, "failed"))
            elif a.empty:
                checks.append(PromptCheck(t, a.prompt, 0, len(a.ids), False, "empty"))
            elif ref is None or not ref.ids:
                checks.append(PromptCheck(t, a.prompt, None, len(a.ids), False, ""))
            else:
                n = common_prefix(a.ids, ref.ids)
                exact = a.ids == ref.ids
                early = n < min(cfg.min_common_prefix, len(ref.ids))
                checks.append(PromptCheck(t, a.prompt, n, len(a.ids), exact, "diverged" if early else ""))
    compared = [c for c in checks if c.common_prefix is not None or c.problem]
    exact = sum(c.exact for c in compared) / len(compared) if compared else None
    lcp = min((c.common_prefix for c in checks if c.common_prefix is not None), default=None)
    reasons = []
    for what, words in (("failed", "no answer"), ("empty", "an empty answer"), ("diverged", "diverged")):
        bad = [c for c in checks if c.problem == what]
        by: dict[str, list[PromptCheck]] = {}
        for c in bad:
            by.setdefault(c.target, []).append(c)
        for t, cs in by.items():
            prompts = ", ".join(str(c.prompt) for c in cs)
            detail = (" at token " + ", ".join(str(c.common_prefix) for c in cs)
                      + f" (common prefix < correctness.min_common_prefix = {cfg.min_common_prefix})"
                      if what == "diverged" else "")
            reasons.append(f"correctness: {target_name(t, names)}: {words} for canary prompt(s) {prompts}"
                           f"{' against ' + ref_label if what == 'diverged' else ''}{detail}")
    if exact is not None and exact < cfg.min_exact_match:
        differ = sorted({c.prompt for c in compared if not c.exact})
        reasons.append(f"correctness: {exact:.0%} of the canary's answers equal {ref_label}'s, below "
                       f"correctness.min_exact_match = {cfg.min_exact_match:g} (prompts differing: "
                       f"{', '.join(map(str, differ))})")
    return CorrectnessSummary("invalid" if reasons else "ok", ref_label, cfg.prompts, tuple(checks), exact, lcp,
                              tuple(reasons), thresholds)


def campaign_correctness(launches: list[tuple], reference_mode: str, cfg: Correctness) -> dict[int, CorrectnessSummary]:
    """launches: (index, mode, Layout, role names) per launch, in order -> index -> its summary. The
    reference: the reference mode's first launch whose canary is complete, its first target."""
    answers = {}
    for index, mode, lay, names in launches:
        targets = targets_of(lay)
        answers[index] = read_answers(lay, cfg.prompts, targets) if targets else {}
    ref, ref_label = None, f"no launch of {reference_mode} answered its canary completely: each launch compared with its own first server"
    for index, mode, lay, names in launches:
        if mode == reference_mode and complete(answers[index]):
            t = next(iter(answers[index]))
            ref, ref_label = answers[index][t], f"{mode} launch {index} {target_name(t, names)}"
            break
    return {index: check_launch(answers[index], ref, ref_label, cfg, names)
            for index, mode, lay, names in launches}


def apply(summary: CorrectnessSummary | None, verdict: str, reasons: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """A pass's verdict and reasons once its launch's canary is judged: an ok pass of an invalid
    launch is invalid, the canary's reasons first; any other verdict keeps its own and adds them."""
    if summary is None or summary.verdict != "invalid":
        return verdict, reasons
    if verdict == "ok":
        return "invalid", summary.reasons + reasons
    return verdict, reasons + tuple(r for r in summary.reasons if r not in reasons)


__all__ = ["Answer", "CorrectnessSummary", "PromptCheck", "apply", "campaign_correctness", "check_launch",
           "common_prefix", "read_answers", "target_name", "targets_of"]
