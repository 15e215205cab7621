"""The noise band: how many cases flip between two runs of the SAME arm (A/A), measured.

Two sessions of one answerer, model and judge do not give the same verdicts: an answerer picks a
different field, a judge reads a borderline answer the other way. The flips between them are
what a change must beat before its flips mean anything. `measure_noise` counts the flips between
every pair of A/A runs (with the flip table of `arms.py`, so a flip means the same thing here
and in a comparison) and writes the band to the file the user names; a comparison reads it back
only from the file `--band` names. Never a band that nobody measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any

from malloy_evals.core import commands, files, jsonl, schemas
from malloy_evals.core.errors import EXIT_OK, EXIT_UNMEASURED, InputError, UsageError
from malloy_evals.core.findings import Ignored
from malloy_evals.ledger.events import now
from malloy_evals.report.arms import (
    JUDGE_PINS,
    Arm,
    Difference,
    RunInfo,
    flip_table,
    flips,
    load_arm,
    pair_arms,
)
from malloy_evals.sets.eval_set import load_set

BAND_KIND = "noise_band"
BAND_VERSION = 1


@dataclass(frozen=True)
class PairFlips:
    """The flips between two runs of one arm."""

    runs: list[str]           # the two run ids
    flips: int                # cases that passed in one run and failed in the other
    flipped: list[str]        # their qids
    cases_compared: int       # cases decided in both runs


@dataclass(frozen=True)
class NoiseBand:
    """A measured A/A band, as written to (and read back from) its file."""

    set_name: str
    measured_at: str
    runs: list[dict[str, Any]]      # run_id, dir, started, answerer_model, model_sha
    pairs: list[PairFlips]
    max_flips: int                  # the band: the most flips any A/A pair showed
    mean_flips: float
    cases: int                      # the fewest cases decided in both runs of a pair
    judge: dict[str, Any]           # the judge pins every run's scores carry
    only_common_cases: bool = False
    command: str | None = None
    path: str | None = None         # the file it was read from or written to

    def to_json(self) -> dict[str, Any]:
        """The band file's document (reference/schemas/noise_band.schema.json)."""
        return {"kind": BAND_KIND, "version": BAND_VERSION, "set": self.set_name,
                "measured_at": self.measured_at, "runs": self.runs,
                "pairs": [{"runs": p.runs, "flips": p.flips, "flipped": p.flipped,
                           "cases_compared": p.cases_compared} for p in self.pairs],
                "band": {"max_flips": self.max_flips, "mean_flips": self.mean_flips},
                "cases": self.cases, "judge": self.judge,
                "only_common_cases": self.only_common_cases, "command": self.command}

    def summary(self) -> dict[str, Any]:
        """What a comparison reports of the band it used."""
        return {"file": self.path, "max_flips": self.max_flips, "mean_flips": self.mean_flips,
                "cases": self.cases, "pairs": len(self.pairs),
                "runs": [r.get("run_id") for r in self.runs], "measured_at": self.measured_at}


@dataclass(frozen=True)
class NoiseResult:
    """What measure_noise.py did: the band it wrote, or why it measured none."""

    band: NoiseBand | None
    differences: list[str]
    refused: bool
    out: str | None
    notes: list[str] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)  # verdicts its runs did not count

    @property
    def exit_code(self) -> int:
        return EXIT_UNMEASURED if self.refused else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"refused": self.refused, "differences": self.differences, "out": self.out,
                "band": self.band.to_json() if self.band else None, "notes": self.notes,
                "ignored": self.ignored, "exit_code": self.exit_code}


def _same_arm_differences(runs: list[RunInfo]) -> list[Difference]:
    """An A/A band is measured on one arm: same answerer and same served model."""
    out = []
    for key, name in (("answerer_model", "answererModel"), ("model_sha", "modelSha")):
        values = sorted({str(getattr(r, key)) for r in runs if getattr(r, key) is not None})
        if len(values) > 1:
            out.append(Difference("arm", f"{name} differs between the runs ({', '.join(values)}): "
                                         "an A/A band needs runs of the same arm"))
    return out


def band_from_arms(arms: list[Arm], set_name: str, *, only_common_cases: bool = False,
                   command: str | None = None) -> tuple[NoiseBand | None, list[Difference]]:
    """The band over every pair of `arms` (one run each) and the differences found; no band
    when a difference refuses the measurement. Pure: the arms are already read."""
    runs = [r for a in arms for r in a.runs]
    found = _same_arm_differences(runs)
    pairs: list[PairFlips] = []
    refused = bool(found)
    seen: list[Difference] = list(found)
    for a, b in combinations(arms, 2):
        pairing = pair_arms(a, b, set_name, only_common_cases=only_common_cases)
        for d in pairing.differences:
            if d.text not in {x.text for x in seen}:
                seen.append(d)
        refused = refused or pairing.refused
        rows = flip_table(a, b, pairing.qids)
        fixed, broken = flips(rows)
        pairs.append(PairFlips([a.label, b.label], len(fixed) + len(broken),
                               sorted(fixed + broken),
                               sum(1 for r in rows if r.decided_in_both)))
    if refused or not pairs:
        return None, seen
    judge = {pin: (arms[0].pins.get(pin) or [None])[0] for pin in JUDGE_PINS}
    counts = [p.flips for p in pairs]
    band = NoiseBand(
        set_name=set_name, measured_at=now(),
        runs=[{"run_id": r.run_id, "dir": r.dir, "started": r.started,
               "answerer_model": r.answerer_model, "model_sha": r.model_sha} for r in runs],
        pairs=pairs, max_flips=max(counts), mean_flips=round(sum(counts) / len(counts), 4),
        cases=min(p.cases_compared for p in pairs), judge=judge,
        only_common_cases=only_common_cases, command=command)
    return band, seen


def measure_noise(run_dirs: list[str | Path], set_dir: str | Path, out: str | Path, *,
                  only_common_cases: bool = False) -> NoiseResult:
    """measure_noise.py: the A/A band over every pair of `run_dirs`, written to `out`.

    Refused (exit 3, nothing written) when the runs cannot be compared (another set, different
    judge pins, another answerer or model, different cases without --only-common-cases).
    """
    if len(run_dirs) < 2:
        raise UsageError("a noise band needs at least two runs of the same arm (--runs A B)")
    resolved = [Path(d).resolve() for d in run_dirs]
    if len(set(resolved)) != len(resolved):
        raise UsageError("--runs names the same run folder twice")
    out_path = Path(out)
    if out_path.is_dir():
        raise UsageError(f"--out {out}: a folder; --out names the band file to write")
    eval_set = load_set(set_dir)
    arms = []
    for d in run_dirs:
        arm = load_arm(str(d), [d], eval_set)
        arms.append(replace(arm, label=arm.runs[0].run_id))  # an A/A arm is named by its run
    command = str(commands.measure_noise(run_dirs, set_dir, out,
                                         only_common_cases=only_common_cases))
    band, found = band_from_arms(arms, eval_set.name,
                                          only_common_cases=only_common_cases, command=command)
    notes = []
    for arm in arms:
        if arm.left_out:
            left = ", ".join(f"{n} {why}" for why, n in arm.left_out.items())
            notes.append(f"{arm.label}: {sum(arm.left_out.values())} attempt(s) left out "
                         f"({left}); measured over clean attempts only")
    ignored = [i for arm in arms for i in arm.ignored]
    if band is None:
        return NoiseResult(None, [d.text for d in found], True, None, notes, ignored)
    if len(band.pairs) == 1:
        notes.append("one A/A pair is a floor, not a distribution: more runs of the same arm "
                     "give a band worth trusting")
    band = replace(band, path=str(out_path))
    write_band(out_path, band)
    return NoiseResult(band, [d.text for d in found], False, str(out_path), notes, ignored)


def write_band(path: Path, band: NoiseBand) -> None:
    """Write the band file (validated against its schema first)."""
    doc = band.to_json()
    schemas.check(BAND_KIND, doc)
    path.parent.mkdir(parents=True, exist_ok=True)  # the folder the user named, taken as given
    files.replace(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n", path.parent)


def read_band(path: str | Path) -> NoiseBand:
    """A band file written by measure_noise.py; InputError (exit 3) when it is not one."""
    p = Path(path)
    try:
        doc = jsonl.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(p, None, f"cannot be read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(p, getattr(exc, "lineno", None), "not a JSON noise band") from None
    problems = schemas.validate(BAND_KIND, doc)
    if problems:
        raise InputError(p, None, f"not a noise band written by measure_noise.py: {problems[0]}")
    return NoiseBand(
        set_name=doc["set"], measured_at=doc["measured_at"], runs=doc["runs"],
        pairs=[PairFlips(x["runs"], x["flips"], x["flipped"], x["cases_compared"])
               for x in doc["pairs"]],
        max_flips=doc["band"]["max_flips"], mean_flips=doc["band"]["mean_flips"],
        cases=doc["cases"], judge=doc["judge"], only_common_cases=doc.get("only_common_cases")
        is True, command=doc.get("command"), path=str(p))


def band_differences(band: NoiseBand, set_name: str, pins: dict[str, list[Any]]) -> list[Difference]:
    """Where a band does not describe the arms it is held against: another set (never allowed)
    or other judge pins (allowed by --allow-different-judge, and said so)."""
    out = []
    if band.set_name != set_name:
        out.append(Difference("set", f"noise band: measured on set {band.set_name}, not {set_name}"))
    for pin in JUDGE_PINS:
        measured, used = band.judge.get(pin), pins.get(pin) or []
        if measured is not None and used and used != [measured]:
            out.append(Difference("judge", f"noise band: {pin} {measured} when measured, "
                                           f"{', '.join(str(u) for u in used)} here"))
    return out


def render_text(result: NoiseResult) -> str:
    """What measure_noise.py prints."""
    lines = []
    if result.refused:
        lines.append("noise band NOT measured: these runs cannot be compared")
        lines += [f"  - {d}" for d in result.differences]
        lines.append("give runs of the same arm (same set, cases, answerer, model and judge), "
                     "or --only-common-cases when only the case sets differ")
    else:
        band = result.band
        assert band is not None
        lines.append(f"A/A noise band: at most {band.max_flips} flip(s) (mean {band.mean_flips:g}) "
                     f"over {len(band.pairs)} pair(s) of {len(band.runs)} runs, {band.cases} "
                     "cases decided in both runs of every pair")
        for p in band.pairs:
            flipped = f" ({', '.join(p.flipped)})" if p.flipped else ""
            lines.append(f"  {p.runs[0]} vs {p.runs[1]}: {p.flips} flip(s){flipped} over "
                         f"{p.cases_compared} cases")
        if result.differences:
            lines += [f"  allowed: {d}" for d in result.differences]
        lines.append(f"written to {result.out}; compare against it with "
                     f"compare_runs.py ... --band {result.out}")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
