"""Did the change help? Two arms compared case by case: the flip table, the paired statistics,
the measured noise band, the targets, and a verdict line a person can act on.

`compare_arms` is the pure core (arms already read, band already loaded); `compare_runs` is
compare_runs.py: it reads each arm's live ledgers, the band from the file `--band` names, and
writes COMPARE.md and compare.json. The document's shape is
reference/schemas/compare.schema.json (the comparison page is built from exactly that).

The verdict's first words follow one rule: `candidate better` only when the 95% interval of the
pass-rate difference lies above 0 and, with a band, the flips exceed what two runs of the same
arm produced; `candidate worse` symmetrically; otherwise `no detectable difference`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from malloy_evals.core import cli, commands, files, schemas, seal
from malloy_evals.core.commands import from_kit_root
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, UsageError
from malloy_evals.core.findings import Ignored
from malloy_evals.core.words import signed
from malloy_evals.report.arms import (
    FIXED,
    MOVED,
    Arm,
    CaseRow,
    flip_table,
    flips,
    load_arm,
    pair_arms,
)
from malloy_evals.report.figures import samples_text
from malloy_evals.report.noise import NoiseBand, band_differences, read_band
from malloy_evals.report.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    mcnemar_exact_p,
    paired_bootstrap,
    sample_figures,
    sign_flip_p,
)
from malloy_evals.sets.eval_set import CASES_FILE, load_set

BETTER, WORSE, NO_DIFFERENCE = "candidate better", "candidate worse", "no detectable difference"
NOT_COMPARABLE = "not comparable"
SIGN_FLIP = "paired sign-flip permutation test"
COMPARE_MD, COMPARE_JSON = "COMPARE.md", "compare.json"


@dataclass(frozen=True)
class Comparison:
    """Two arms compared: every figure of COMPARE.md and compare.json."""

    verdict: str                       # the first line, in words a person can act on
    headline: list[str]                # what every output prints right after the verdict
    comparable: bool                   # False: refused (exit 3), no figures
    differences: list[str]             # every difference found, allowed or not
    allowed: list[str]                 # the flags that let differences through
    set_name: str
    base: Arm
    candidate: Arm
    rows: list[CaseRow]
    cases_compared: int                # cases decided in both arms
    fixed: list[str]
    broken: list[str]
    base_pass_rate: float | None       # mean per-case pass fraction over the compared cases
    candidate_pass_rate: float | None
    delta_points: float | None         # candidate minus base, in percentage points
    delta_ci: list[float] | None       # 95% paired bootstrap interval, points
    bootstrap_seed: int
    bootstrap_resamples: int
    mcnemar_p: float | None
    band: NoiseBand | None
    beyond_band: bool | None           # flips > band.max_flips; None without a band
    measure_band_command: str | None   # printed when no band was given
    targets: dict[str, str]            # qid -> "fixed" | "not fixed"
    non_target_broken: list[str]
    regression: bool                   # what --fail-on-regression exits 1 on
    fail_on_regression: bool = False
    dropped: dict[str, str] = field(default_factory=dict)  # qid -> why --only-common-cases left it
    # with K > 1 samples per case: the paired sign-flip test on per-case pass fractions, and the
    # k-sample figures of each arm (report/stats.sample_figures)
    paired_test: dict[str, Any] | None = None
    samples: dict[str, Any] | None = None

    @property
    def flips(self) -> int:
        return len(self.fixed) + len(self.broken)

    @property
    def ignored(self) -> list[Ignored]:
        """The live verdicts of either arm's runs that no outcome counts, and why."""
        return [*self.base.ignored, *self.candidate.ignored]

    @property
    def moved(self) -> list[dict[str, Any]]:
        """Every other change, each with both outcomes (into or out of neither and null, or a
        pass fraction that moved without crossing half): listed apart, never flips."""
        return [{"qid": r.qid, "base": r.base.outcome, "candidate": r.candidate.outcome,
                 "base_text": r.base.text, "candidate_text": r.candidate.text}
                for r in self.rows if r.change == MOVED]

    @property
    def exit_code(self) -> int:
        if not self.comparable:
            return EXIT_UNMEASURED
        if self.fail_on_regression and self.regression:
            return EXIT_FINDING
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The compare.json document (reference/schemas/compare.schema.json)."""
        return {
            "verdict": self.verdict, "comparable": self.comparable,
            "differences": self.differences, "allowed": self.allowed, "headline": self.headline,
            "set": self.set_name,
            "arms": {"base": self.base.to_json(), "candidate": self.candidate.to_json()},
            "cases_compared": self.cases_compared, "flips": self.flips,
            "fixed": self.fixed, "broken": self.broken, "moved": self.moved,
            "base_pass_rate": _round(self.base_pass_rate, 6),
            "candidate_pass_rate": _round(self.candidate_pass_rate, 6),
            "delta_points": _round(self.delta_points, 4),
            "delta_ci": [_round(x, 4) for x in self.delta_ci] if self.delta_ci else None,
            "bootstrap_seed": self.bootstrap_seed, "bootstrap_resamples": self.bootstrap_resamples,
            "mcnemar_p": _round(self.mcnemar_p, 6),
            "band": self.band.summary() if self.band else None, "beyond_band": self.beyond_band,
            "measure_band_command": self.measure_band_command,
            "targets": self.targets, "non_target_broken": self.non_target_broken,
            "regression": self.regression, "fail_on_regression": self.fail_on_regression,
            "dropped": self.dropped,
            "paired_test": self.paired_test, "samples": self.samples,
            "cases": [r.to_json() for r in self.rows],
            "exit_code": self.exit_code,
        }


# ---------------------------------------------------------------------------------------------
# Words and numbers


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def p_text(p: float) -> str:
    """A p-value as printed: two decimals rounded half up (`0.13`), finer only when small."""
    if p >= 0.01:
        return str(Decimal(repr(p)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
    return f"{p:.3f}" if p >= 0.001 else "<0.001"


def _cases(qids: Sequence[str]) -> str:
    return f"{len(qids)} other case{'s' if len(qids) != 1 else ''} ({', '.join(qids)})"


def verdict_line(*, delta_points: float | None, delta_ci: Sequence[float] | None,
                 fixed: Sequence[str], broken: Sequence[str], mcnemar_p: float | None,
                 band_max: int | None, targets: dict[str, str],
                 non_target_broken: Sequence[str]) -> str:
    """The first line of every output. Its first words: `candidate better` only when the 95%
    interval lies above 0 and (with a band) the flips exceed it; `candidate worse` when it lies
    below 0 and (with a band) the flips exceed it; otherwise `no detectable difference`, saying
    by how much the point estimate moved and why that is not enough."""
    n_flips = len(fixed) + len(broken)
    beyond = None if band_max is None else n_flips > band_max
    if delta_points is None or delta_ci is None:
        line = f"{NO_DIFFERENCE}: no case was decided in both arms"
    else:
        low, high = delta_ci
        word = NO_DIFFERENCE
        if low > 0 and beyond is not False:
            word = BETTER
        elif high < 0 and beyond is not False:
            word = WORSE
        band_part = ("noise band not measured" if band_max is None else
                     f"flips {n_flips} {'>' if beyond else '<='} A/A band {band_max}")
        line = (f"{word}: {signed(delta_points)} points (95% CI {signed(low)} to {signed(high)}), "
                f"{len(fixed)} fixed / {len(broken)} broken, McNemar p={p_text(mcnemar_p or 1.0)}, "
                f"{band_part}")
        if word == NO_DIFFERENCE and signed(delta_points) != "0.0":
            why = []
            if low <= 0 <= high:
                why.append("the 95% CI includes 0")
            if beyond is False:
                why.append(f"two runs of the same arm already differ by {band_max} "
                           f"flip{'s' if band_max != 1 else ''}")
            line += f"; not enough: {' and '.join(why)}"
    if targets:
        done = sum(1 for v in targets.values() if v == FIXED)
        line += f"; targets {done}/{len(targets)} fixed"
        if non_target_broken:
            others = list(non_target_broken)
            if band_max is None:
                line += f"; broke {_cases(others)}, noise band not measured"
            elif len(others) > band_max:
                line += f"; BUT broke {_cases(others)}, beyond the A/A band {band_max}"
            else:
                line += f"; broke {_cases(others)}, within the A/A band {band_max}"
    return line


# ---------------------------------------------------------------------------------------------
# The comparison


def _left_out_line(arm: Arm) -> str | None:
    if not arm.left_out:
        return None
    total = sum(arm.left_out.values())
    why = "; ".join(f"{n} {reason}: {', '.join(arm.left_out_labels.get(reason, []))}"
                    for reason, n in arm.left_out.items())
    return (f"{arm.label}: {total} of {arm.attempts} attempts left out ({why}); compared over "
            "its clean attempts only")


def _measure_command(base: Arm, set_label: str) -> str:
    return str(commands.measure_noise([r.dir for r in base.runs], set_label, commands.BAND_FILE))


def compare_arms(base: Arm, candidate: Arm, *, set_name: str, band: NoiseBand | None = None,
                 targets: Sequence[str] = (), seed: int = DEFAULT_SEED,
                 resamples: int = DEFAULT_RESAMPLES, allow_different_judge: bool = False,
                 only_common_cases: bool = False, fail_on_regression: bool = False,
                 set_label: str = "<set>", allow_different_set: bool = False,
                 allow_different_retrieval: bool = False) -> Comparison:
    """Compare two arms already read: refuse (naming every difference) or compute the flip
    table, the paired statistics over cases decided in both arms, the band decision, the
    targets and the verdict line; a run answered unsealed marks the verdict and the headline."""
    c = _compare_arms(base, candidate, set_name=set_name, band=band, targets=targets, seed=seed,
                      resamples=resamples, allow_different_judge=allow_different_judge,
                      only_common_cases=only_common_cases, fail_on_regression=fail_on_regression,
                      set_label=set_label, allow_different_set=allow_different_set,
                      allow_different_retrieval=allow_different_retrieval)
    note = seal.unsealed_note((r.run_id, {"sandbox": r.sandbox})
                              for arm in (base, candidate) for r in arm.runs)
    if note is None:
        return c
    return replace(c, verdict=f"{c.verdict} ({note})", headline=[note, *c.headline])


def _compare_arms(base: Arm, candidate: Arm, *, set_name: str, band: NoiseBand | None,
                  targets: Sequence[str], seed: int, resamples: int, allow_different_judge: bool,
                  only_common_cases: bool, fail_on_regression: bool,
                  set_label: str, allow_different_set: bool = False,
                  allow_different_retrieval: bool = False) -> Comparison:
    # The band must describe both arms: held against every judge pin either arm's scores carry.
    pins = {k: list(dict.fromkeys([*base.pins.get(k, []), *candidate.pins.get(k, [])]))
            for k in {*base.pins, *candidate.pins}}
    extra = band_differences(band, set_name, pins) if band is not None else []
    pairing = pair_arms(base, candidate, set_name, only_common_cases=only_common_cases,
                        allow_different_judge=allow_different_judge,
                        allow_different_set=allow_different_set,
                        allow_different_retrieval=allow_different_retrieval, extra=extra)
    differences = [d.text for d in pairing.differences]
    common: dict[str, Any] = {"set_name": set_name, "base": base, "candidate": candidate,
                              "bootstrap_seed": seed, "bootstrap_resamples": resamples,
                              "band": band, "fail_on_regression": fail_on_regression,
                              "differences": differences, "dropped": pairing.dropped}
    if pairing.refused:
        first = pairing.differences[0].text
        more = len(differences) - 1
        verdict = f"{NOT_COMPARABLE}: {first}" + (f" (and {more} more)" if more else "")
        flags = sorted({d.allowed_by for d in pairing.differences if d.allowed_by})
        headline = [f"difference: {d}" for d in differences]
        if flags and all(d.allowed_by for d in pairing.differences):
            headline.append(f"to compare anyway, say so: {' '.join(flags)}")
        return Comparison(verdict=verdict, headline=headline, comparable=False, allowed=[],
                          rows=[], cases_compared=0, fixed=[], broken=[], base_pass_rate=None,
                          candidate_pass_rate=None, delta_points=None, delta_ci=None,
                          mcnemar_p=None, beyond_band=None, measure_band_command=None,
                          targets={}, non_target_broken=[], regression=False, **common)

    rows = flip_table(base, candidate, pairing.qids, targets)
    fixed, broken = flips(rows)
    decided = [r for r in rows if r.decided_in_both]
    base_rate = cand_rate = delta = None
    ci = None
    if decided:
        base_rate = sum(r.base.pass_fraction or 0.0 for r in decided) / len(decided)
        cand_rate = sum(r.candidate.pass_fraction or 0.0 for r in decided) / len(decided)
        delta = 100 * (cand_rate - base_rate)
        diffs = [(r.candidate.pass_fraction or 0.0) - (r.base.pass_fraction or 0.0)
                 for r in decided]
        interval = paired_bootstrap(diffs, seed=seed, resamples=resamples)
        ci = [100 * interval[0], 100 * interval[1]] if interval else None
    p = mcnemar_exact_p(len(fixed), len(broken))
    target_state = {q: ("fixed" if q in fixed else "not fixed") for q in targets}
    non_target = [q for q in broken if q not in target_state]
    band_max = band.max_flips if band is not None else None
    regression = len(non_target) > (band_max if band_max is not None else 0)
    verdict = verdict_line(delta_points=delta, delta_ci=ci, fixed=fixed, broken=broken,
                           mcnemar_p=p, band_max=band_max, targets=target_state,
                           non_target_broken=non_target)

    headline = [f"compared despite (allowed by {d.allowed_by}): {d.text}"
                for d in pairing.differences]
    headline += [line for line in (_left_out_line(base), _left_out_line(candidate)) if line]
    measure = None
    if band is None:
        measure = _measure_command(base, set_label)
        headline.append(f"noise band not measured: measure it with {measure}, then pass --band")
    else:
        headline.append(f"noise band: at most {band.max_flips} flip(s) between runs of the same "
                        f"arm (mean {band.mean_flips:g}; {len(band.pairs)} pair(s), {band.cases} "
                        f"cases; {band.path})")
        if band.cases != len(decided):
            headline.append(f"the band was measured over {band.cases} cases, this comparison "
                            f"over {len(decided)}: flip counts grow with the number of cases")
    for q in targets:
        if q in pairing.dropped:
            headline.append(f"target {q}: not compared ({pairing.dropped[q]})")
        elif q not in base.cases or q not in candidate.cases:
            arm = base.label if q not in base.cases else candidate.label
            headline.append(f"target {q}: not attempted in {arm}")
        elif q in fixed:
            continue
        elif base.cases[q].outcome == "pass":
            headline.append(f"target {q}: already passed in {base.label}")
    paired_test = samples = None
    if max(base.samples_per_case, candidate.samples_per_case) > 1:
        headline.append("several attempts per case: per-case pass fractions and the bootstrap "
                        "carry the comparison; a flip is a case whose majority outcome crossed")
        diffs = [(r.candidate.pass_fraction or 0.0) - (r.base.pass_fraction or 0.0)
                 for r in decided]
        sign_p = sign_flip_p(diffs, seed=seed, resamples=resamples)
        paired_test = {"test": SIGN_FLIP, "p": round(sign_p, 6), "cases": len(decided)}
        headline.append(f"paired test on per-case pass fractions: {SIGN_FLIP}, p={p_text(sign_p)} "
                        f"over {len(decided)} case(s) (McNemar stays on majority flips)")
        samples = {name: sample_figures(
            [(side.cases[r.qid].passed, side.cases[r.qid].decided) for r in decided],
            seed=seed, resamples=resamples) for name, side in (("base", base), ("candidate", candidate))}
    return Comparison(verdict=verdict, headline=headline, comparable=True,
                      allowed=pairing.allowed, rows=rows, cases_compared=len(decided),
                      fixed=fixed, broken=broken, base_pass_rate=base_rate,
                      candidate_pass_rate=cand_rate, delta_points=delta, delta_ci=ci,
                      mcnemar_p=p,
                      beyond_band=None if band_max is None else len(fixed) + len(broken) > band_max,
                      measure_band_command=measure, targets=target_state,
                      non_target_broken=non_target, regression=regression,
                      paired_test=paired_test, samples=samples, **common)


def compare_runs(base_dirs: Sequence[str | Path], candidate_dirs: Sequence[str | Path],
                 set_dir: str | Path, *, targets: Sequence[str] = (),
                 band_path: str | Path | None = None, out_dir: str | Path | None = None,
                 seed: int = DEFAULT_SEED, resamples: int = DEFAULT_RESAMPLES,
                 allow_different_judge: bool = False, only_common_cases: bool = False,
                 fail_on_regression: bool = False, allow_different_set: bool = False,
                 allow_different_retrieval: bool = False) -> Comparison:
    """compare_runs.py: read both arms' live ledgers and the band file, compare, and write
    COMPARE.md + compare.json into `out_dir` (when given)."""
    resolved = [Path(d).resolve() for d in [*base_dirs, *candidate_dirs]]
    if len(set(resolved)) != len(resolved):
        raise UsageError("a run folder appears twice in --base / --candidate: each run belongs "
                         "to one arm, once")
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise UsageError(f"--out {out_dir}: not a folder")
    if resamples < 1:
        raise UsageError("--resamples must be at least 1")
    eval_set = load_set(set_dir)
    cli.check_known(targets, eval_set.cases, where=eval_set.dir / CASES_FILE,
                    what="qids that are not cases of this set", flag="--targets")
    band = read_band(band_path) if band_path is not None else None
    base = load_arm("base", base_dirs, eval_set)
    candidate = load_arm("candidate", candidate_dirs, eval_set)
    result = compare_arms(base, candidate, set_name=eval_set.name, band=band, targets=targets,
                          seed=seed, resamples=resamples,
                          allow_different_judge=allow_different_judge,
                          only_common_cases=only_common_cases,
                          fail_on_regression=fail_on_regression,
                          set_label=from_kit_root(str(set_dir)),
                          allow_different_set=allow_different_set,
                          allow_different_retrieval=allow_different_retrieval)
    if out_dir is not None:
        write_outputs(Path(out_dir), result)
    return result


def write_outputs(out_dir: Path, result: Comparison) -> tuple[Path, Path]:
    """COMPARE.md and compare.json (validated against its schema) in `out_dir`."""
    doc = result.to_json()
    schemas.check("compare", doc)
    out_dir.mkdir(parents=True, exist_ok=True)  # the folder the user named, taken as given
    md, js = out_dir / COMPARE_MD, out_dir / COMPARE_JSON
    # Rewritten whole, never through a link planted in their place (core/files.py).
    files.replace(md, render_markdown(result), out_dir)
    files.replace(js, json.dumps(doc, indent=2, ensure_ascii=False) + "\n", out_dir)
    return md, js


# ---------------------------------------------------------------------------------------------
# Renderings


def _figures(c: Comparison) -> list[str]:
    """The statistics, one line each (text and markdown share them)."""
    if not c.comparable:
        return []
    decided = [r for r in c.rows if r.decided_in_both]
    single = all(r.base.decided == 1 and r.candidate.decided == 1 for r in decided)

    def rate(value: float | None, side: str) -> str:
        if value is None:
            return "n/a"
        if single:
            passed = sum(1 for r in decided if getattr(r, side).outcome == "pass")
            return f"{100 * value:.1f}% ({passed}/{len(decided)})"
        return f"{100 * value:.1f}% (mean per-case pass fraction)"

    lines = [f"cases decided in both arms: {c.cases_compared} of {len(c.rows)} compared"]
    if c.delta_points is not None and c.delta_ci is not None:
        lines.append(f"pass rate: base {rate(c.base_pass_rate, 'base')}, candidate "
                     f"{rate(c.candidate_pass_rate, 'candidate')}")
        lines.append(f"difference: {signed(c.delta_points)} points, 95% CI {signed(c.delta_ci[0])} "
                     f"to {signed(c.delta_ci[1])} (paired bootstrap over cases, "
                     f"{c.bootstrap_resamples} resamples, seed {c.bootstrap_seed})")
    lines.append(f"flips: {c.flips} ({len(c.fixed)} fixed, {len(c.broken)} broken); exact "
                 f"McNemar p={p_text(c.mcnemar_p if c.mcnemar_p is not None else 1.0)}")
    if c.paired_test is not None:
        lines.append(f"paired test on per-case pass fractions: {c.paired_test['test']}, "
                     f"p={p_text(c.paired_test['p'])}")
    for side, figures in (c.samples or {}).items():
        k_line = samples_text({"k": max(c.base.samples_per_case, c.candidate.samples_per_case),
                               **figures})
        if k_line:
            lines.append(f"{side}: {k_line}")
    if c.band is not None:
        lines.append(f"noise band: {c.flips} flip(s) {'beyond' if c.beyond_band else 'within'} "
                     f"the A/A band of {c.band.max_flips}")
    moved = c.moved
    if moved:
        lines.append(f"moved, not flips: {len(moved)} ("
                     + "; ".join(f"{m['qid']}: {m['base_text']} -> {m['candidate_text']}"
                                 for m in moved) + ")")
    if c.targets:
        lines.append("targets: " + ", ".join(f"{q} {v}" for q, v in c.targets.items()))
        lines.append(f"non-target cases broken: {len(c.non_target_broken)}"
                     + (f" ({', '.join(c.non_target_broken)})" if c.non_target_broken else ""))
    return lines


def _arms_line(arm: Arm) -> str:
    runs = ", ".join(f"{r.run_id} (model {r.model_sha[:12] if r.model_sha else 'unknown'})"
                     for r in arm.runs)
    return f"{arm.label}: {runs}; {arm.attempts} attempts"


def _change_cell(r: CaseRow) -> str:
    return r.change + (" (target)" if r.target else "")


def render_text(c: Comparison) -> str:
    """What compare_runs.py prints: the verdict, the headline, the figures, the table."""
    lines = [c.verdict, *c.headline, ""]
    lines += [_arms_line(c.base), _arms_line(c.candidate), *_figures(c)]
    if c.rows:
        width = max(len(r.qid) for r in c.rows)
        cols = max(len(r.base.text) for r in c.rows)
        lines += ["", f"{'case'.ljust(width)}  {'base'.ljust(cols)}  candidate -> change"]
        for r in c.rows:
            lines.append(f"{r.qid.ljust(width)}  {r.base.text.ljust(cols)}  {r.candidate.text}"
                         f" -> {_change_cell(r)}")
    return "\n".join(lines)


def render_markdown(c: Comparison) -> str:
    """COMPARE.md."""
    out = ["# Comparison: candidate against base", "", f"**{c.verdict}**", ""]
    out += [f"- {h}" for h in c.headline]
    out += ["", "## Arms", "", f"- {_arms_line(c.base)}", f"- {_arms_line(c.candidate)}", ""]
    if c.comparable:
        out += ["## Figures", ""] + [f"- {line}" for line in _figures(c)] + [""]
        out += ["## Flip table", "",
                ("Ordered fixed, broken, moved (into or out of neither and null: not flips), "
                 "unchanged."), "", "| case | base | candidate | change |", "|---|---|---|---|"]
        out += [f"| `{r.qid}` | {r.base.text} | {r.candidate.text} | {_change_cell(r)} |"
                for r in c.rows]
    else:
        out += ["## Differences", ""] + [f"- {d}" for d in c.differences]
    return "\n".join(out) + "\n"
