"""Hand-authored judge recordings, written by running the real request paths with the hand provider under --record."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from malloy_evals.answer.reexecute import open_endpoint
from malloy_evals.answer.scoring import judge_recording_key, score_attempt
from malloy_evals.core.errors import EXIT_FINDING, EXIT_OK, EXIT_UNMEASURED, KitError
from malloy_evals.judge.calibration import (
    CalibrationReport,
    RegressionReport,
    calibrate,
    check_regressions,
    render_calibration,
    render_regressions,
)
from malloy_evals.ledger.run import Run
from malloy_evals.llm.hand import HandProvider, answering_key
from malloy_evals.llm.replay import RecordingProvider
from malloy_evals.sets.eval_set import EvalSet


@dataclass(frozen=True)
class AuthorReport:
    """What author_recordings.py wrote, and whether the authored replies end as they must."""

    out_dir: str
    written: list[str]
    calibration: CalibrationReport | None
    regressions: RegressionReport | None
    runs: list[dict]

    @property
    def exit_code(self) -> int:
        codes = [r.exit_code for r in (self.calibration, self.regressions) if r is not None]
        codes += [EXIT_UNMEASURED for r in self.runs if r.get("status") not in ("scored",)]
        if EXIT_FINDING in codes:
            return EXIT_FINDING
        return max(codes, default=EXIT_OK)

    def to_json(self) -> dict:
        return {"out_dir": self.out_dir, "written": self.written,
                "calibration": self.calibration.to_json() if self.calibration else None,
                "regressions": self.regressions.to_json() if self.regressions else None,
                "runs": self.runs, "exit_code": self.exit_code}


def author_judge_recordings(eval_set: EvalSet, replies: Path, *, out_dir: Path | None = None,
                            samples: int = 3, repeat: int = 1, run_dir: Path | None = None,
                            mcp_url: str | None = None, local: bool = False,
                            model_dir: Path | None = None) -> AuthorReport:
    """Write hand-authored judge recordings for every key of `replies` by running the real code
    paths (calibration, regressions, and optionally a run's attempts in a scratch copy) with the
    hand provider under --record, so each recording carries the digest a replay will compute.
    With `model_dir`, the run's attempts are re-executed against and judged with that package
    folder (the model the run was answered against) instead of the set's model/."""
    import shutil
    import tempfile


    out = Path(out_dir) if out_dir else eval_set.recordings_dir("judge")
    hand = HandProvider(Path(replies))
    provider = RecordingProvider(hand, out)
    keys = set(hand.replies)
    calib_qids = sorted({k.split(".")[1] for k in keys if k.startswith("calib.")})
    fixture_ids = sorted({k.removeprefix("regress.") for k in keys if k.startswith("regress.")})
    calibration = calibrate(eval_set, provider, samples=samples, only=calib_qids) \
        if calib_qids else None
    regressions = check_regressions(eval_set, provider, repeat=repeat, only=fixture_ids) \
        if fixture_ids else None
    runs: list[dict] = []
    if run_dir is not None:

        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "run"
            shutil.copytree(run_dir, copy)
            run = Run.open(copy)
            if model_dir is not None:
                eval_set = eval_set.with_model(model_dir)
            with open_endpoint(eval_set, mcp_url=mcp_url, local=local) as endpoint:
                view = run.view()
                for attempt in run.attempts(view):
                    qid, sample = attempt["qid"], attempt.get("sample")
                    key = judge_recording_key(run, qid, sample)
                    if key not in keys:
                        continue
                    try:
                        result = score_attempt(run, eval_set, qid, sample, provider=provider,
                                               endpoint=endpoint, view=view)
                        runs.append({"key": key,
                                     "status": result.status, "verdict": result.verdict,
                                     "reason": result.reason})
                    except KitError as exc:
                        runs.append({"key": key, "status": "error",
                                     "message": str(exc)})
    written = sorted(p.stem for p in out.glob("*.json") if answering_key(p.stem, keys))
    return AuthorReport(str(out), written, calibration, regressions, runs)


def render_author(report: AuthorReport) -> str:
    out = [f"wrote {len(report.written)} hand-authored recording(s) to {report.out_dir}"]
    if report.calibration is not None:
        out.append(render_calibration(report.calibration))
    if report.regressions is not None:
        out.append(render_regressions(report.regressions))
    for r in report.runs:
        out.append(f"  {r['key']}: {r.get('verdict') or r.get('reason') or r.get('message')}")
    return "\n".join(out)
