"""run_answers: every question of a run's set, put to a blind answerer, each attempt recorded as
it ends (skills/eval-answer/reference/harness.md).

For each planned attempt: make its empty working folder and inputs, run the answerer (a command
in its own process group, sealed in bubblewrap unless --no-sandbox (sandbox.py), its network
only the run's destinations through the try's gateway (network.py, gateway.py), or the API
loop), then either record the session through
`record_attempt` (the very code record_attempt.py runs: contamination check, tool calls,
redacted transcript copy) or, when it was not an attempt, log the failure to harness.jsonl and
try again, up to `retries` times. `max_failures` failures in a row stop the run (exit 3); the
budget stops it before a call or an attempt it cannot cover (exit 0). Re-running the same
command resumes: recorded attempts are skipped, `--redo` runs chosen cases again.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from malloy_evals.answer.harness import api_loop, claude_cli, command, isolation, network, sandbox
from malloy_evals.answer.harness.gateway import Gateway, open_gateway
from malloy_evals.answer.harness.local import serve_model_http
from malloy_evals.answer.harness.plan import (
    DEFAULT_PROMPT,
    HARNESS_LOCK,
    AnswererSpec,
    Budget,
    HarnessLog,
    PlannedAttempt,
    attempt_label,
    parse_answerer,
    plan_attempts,
    render_prompt,
    run_spend,
)
from malloy_evals.answer.transcripts import record_attempt
from malloy_evals.core import cli, commands, files, paths, seal
from malloy_evals.core.errors import (
    EXIT_OK,
    EXIT_UNMEASURED,
    InputError,
    KitError,
    UnmeasuredError,
    UsageError,
)
from malloy_evals.core.headers import header_variables
from malloy_evals.core.redact import Redactor, redact, redact_url
from malloy_evals.core.vocab import is_contaminated, is_truncated
from malloy_evals.endpoint.mcp_client import McpToolError, connect
from malloy_evals.endpoint.mcp_server import answerer_client_prefix, answerer_client_url
from malloy_evals.endpoint.runner import LOAD_TIMEOUT_S
from malloy_evals.ledger.live import LiveView
from malloy_evals.ledger.run import Run
from malloy_evals.ledger.validate import check_before_append
from malloy_evals.llm.prices import PRICES_PATH, price_for
from malloy_evals.sets.eval_set import CASES_FILE, EvalSet, load_set

# run_answers.py's first and last line with --no-sandbox.
UNSEALED_LINE = (f"{seal.UNSEALED}: --no-sandbox: the answerer runs without bubblewrap and can "
                 "read any file its user can; every headline of this run will say UNSEALED")
STDERR_TAIL_CHARS = 4000     # of a failed try's stderr, kept in harness.jsonl
RETRY_PAUSE_S = 0.5          # times the try number, between tries of one attempt


@dataclass(frozen=True)
class HarnessOptions:
    """Everything run_answers.py's flags decide (defaults as documented in its --help)."""

    answerer: AnswererSpec
    mcp_url: str | None = None
    local: bool = False
    samples: int = 1
    only: list[str] | None = None
    redo: list[str] = field(default_factory=list)
    split: str = "all"
    parallel: int = 1
    max_turns: int = 30
    timeout: float = 900.0
    max_cost_usd: float | None = None
    prompt_file: Path | None = None
    retries: int = 2
    max_failures: int = 4
    max_output_mb: int = 64
    claude: str | None = None     # --claude PATH; else the kit's pinned Claude Code
    publisher_version: str | None = None   # the version the endpoint must report (--publisher-version)
    sandbox: bool = True                  # False: --no-sandbox, the run is UNSEALED
    sandbox_binds: list[str] = field(default_factory=list)   # --sandbox-bind, read-only
    allow_hosts: list[str] = field(default_factory=list)     # --allow-host HOST:PORT
    pass_env: list[str] = field(default_factory=list)  # --pass-env and names the plan adds


@dataclass(frozen=True)
class AttemptOutcome:
    """What happened to one planned attempt."""

    qid: str
    sample: int | None
    outcome: str                  # recorded | failed | budget_stop | not_run
    tries: int
    attempt_event_id: str | None = None
    submitted: bool | None = None
    truncated: bool | None = None
    contaminated: bool | str | None = None
    num_turns: int | None = None
    cost_usd: float | None = None
    seconds: float | None = None
    failure: str | None = None    # the last harness failure, when there was one


@dataclass(frozen=True)
class HarnessResult:
    """run_answers' output: per-attempt outcomes, why it stopped, and what it spent."""

    run_dir: str
    answerer: str
    mcp_url: str | None
    planned: int
    skipped: int
    outcomes: list[AttemptOutcome]
    stopped: str | None           # why the run stopped early, in words; None when it did not
    stop_kind: str | None         # "failures" | "budget" | None
    spent_usd: float              # the run's known answerer spend, earlier sessions included
    max_cost_usd: float | None
    unknown_cost: int             # attempts of this session whose cost nobody reported
    harness_log: str
    set_dir: str = ""
    local: bool = False
    sandbox: str | None = None    # run.json's `sandbox` for this session (None: nothing ran)

    @property
    def unsealed(self) -> bool:
        return self.sandbox == seal.NO_SANDBOX

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    @property
    def exit_code(self) -> int:
        # A run stopped by failures, or where every try failed, measured nothing it was asked to.
        if self.stop_kind == "failures":
            return EXIT_UNMEASURED
        tried = [o for o in self.outcomes if o.outcome in ("recorded", "failed")]
        if tried and all(o.outcome == "failed" for o in tried):
            return EXIT_UNMEASURED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "answerer": self.answerer, "mcp_url": self.mcp_url,
                "planned": self.planned, "skipped": self.skipped,
                "recorded": self.count("recorded"), "failed": self.count("failed"),
                "not_run": self.count("not_run") + self.count("budget_stop"),
                "stopped": self.stopped, "stop_kind": self.stop_kind,
                "spent_usd": round(self.spent_usd, 6), "max_cost_usd": self.max_cost_usd,
                "unknown_cost": self.unknown_cost, "harness_log": self.harness_log,
                "sandbox": self.sandbox, "unsealed": self.unsealed,
                "outcomes": [cli.to_jsonable(o) for o in self.outcomes],
                "exit_code": self.exit_code}


# ---------------------------------------------------------------- progress words

def _money(cost: float | None) -> str:
    return "cost unknown" if cost is None else f"${cost:.3f}"


def outcome_words(o: AttemptOutcome) -> str:
    """`submitted, 9 turns, $0.041, 38s`: how a recorded attempt reads in a progress line."""
    if o.truncated:
        state = "truncated"
    elif o.submitted:
        state = "submitted"
    else:
        state = "not submitted"
    if is_contaminated(o.contaminated):
        state += ", contaminated"
    turns = ("turns unknown" if o.num_turns is None
             else f"{o.num_turns} turn{'' if o.num_turns == 1 else 's'}")
    return f"{state}, {turns}, {_money(o.cost_usd)}, {o.seconds or 0:.0f}s"


# ---------------------------------------------------------------- one run

@dataclass
class _Shared:
    """State the worker threads share: the queue, the counters and the stop."""

    queue: Iterator[PlannedAttempt]
    total: int
    budget: Budget
    max_failures: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: int = 0
    consecutive: int = 0
    stop_kind: str | None = None
    stopped: str | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)

    def next(self) -> PlannedAttempt | None:
        with self.lock:
            if self.stop_event.is_set():
                return None
            return next(self.queue, None)

    def stop(self, kind: str, why: str) -> None:
        with self.lock:
            if self.stop_kind is None:
                self.stop_kind, self.stopped = kind, why
            self.stop_event.set()

    def failed_once(self) -> int:
        with self.lock:
            self.consecutive += 1
            return self.consecutive

    def recorded_once(self) -> int:
        with self.lock:
            self.consecutive = 0
            self.done += 1
            return self.done

    def finished_once(self) -> int:
        with self.lock:
            self.done += 1
            return self.done


@dataclass
class _Context:
    """What every attempt of one run needs to know."""

    run: Run
    eval_set: EvalSet
    options: HarnessOptions
    prompt: str
    mcp_url: str
    protected: list[str]
    log: HarnessLog
    shared: _Shared
    progress: Callable[[str], None]
    claude: str | None = None                 # the claude executable (claude-code)
    allowed: list[str] = field(default_factory=list)  # Claude Code names of the allowed tools
    withheld: list[str] = field(default_factory=list)  # the endpoint's other tools, by those names
    api: api_loop.ApiAnswerer | None = None
    view: LiveView | None = None              # the run's live view, refreshed under shared.lock
    header_vars: dict[str, str] = field(default_factory=dict)  # header -> env var (--mcp-header)
    policy: sandbox.SandboxPolicy | None = None  # None: unsealed (--no-sandbox) or the API loop
    tries: Iterator[int] = field(default_factory=lambda: itertools.count(1))  # names each try

    def attempt_url(self) -> str:
        """The endpoint URL one try gets: with --local, the kit's endpoint names it its own
        client (`/mcp/client/attempt-N`), so the endpoint serves every try in turn
        (reference/query-budgets.md); a given --mcp-url is used as it is."""
        if not self.options.local:
            return self.mcp_url
        return answerer_client_url(self.mcp_url, next(self.tries))


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While answerers run, SIGTERM ends the harness the way Ctrl-C does, so its cleanup runs
    (answerers killed, the local endpoint stopped) instead of the process vanishing mid-run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _run_lock(run: Run) -> Iterator[None]:
    """One harness per run at a time: two would answer the same attempts and void each other."""
    fd = files.open_append(run.dir / HARNESS_LOCK, run.dir)  # never through a planted link
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UnmeasuredError(f"{run.dir}: another run_answers.py is answering this run; "
                                  "wait for it to finish") from None
        yield
    finally:
        os.close(fd)


@contextmanager
def _endpoint(eval_set: EvalSet, options: HarnessOptions) -> Iterator[str]:
    """The MCP URL answerers get: the kit's local endpoint (started and stopped here), or the
    one given."""
    if options.local:
        with serve_model_http(eval_set) as url:
            yield url
        return
    yield options.mcp_url or ""


def _answerer_tools(url: str, eval_set: EvalSet, pin: str | None = None
                    ) -> tuple[list[str], list[str], str | None]:
    """The endpoint's tools an answerer may use, the others it lists (withheld from Claude Code),
    and the version it reports, checked before any answerer starts (exit 3 when the endpoint does
    not answer, offers none of them, cannot load the set's package, or reports another version
    than `pin`: a broken model would otherwise be "answered" once per attempt, at the answerer's
    price)."""
    try:
        with connect(url=url, timeout=60) as client:
            version = client.server_version()
            if pin is not None and version != pin:
                raise UnmeasuredError(f"the MCP endpoint {redact_url(url)} reports version "
                                      f"{version or 'none'}; --publisher-version pins {pin}")
            listed = client.list_tools()
            tools = isolation.answerer_tools(listed)
            if not tools:
                raise UnmeasuredError(f"the MCP endpoint {url} offers no get_context or "
                                      f"execute_query tool (it lists: {', '.join(listed) or 'nothing'})")
            # The endpoint loads the package on this call (its runners start): the readiness
            # signal, waited for up to the runner's own load ceiling.
            sources = client.call_ok("get_context", {"environmentName": eval_set.environment,
                                                     "packageName": eval_set.target_package},
                                     timeout=LOAD_TIMEOUT_S)
            if isinstance(sources, dict) and not (sources.get("results") or sources.get("sources")):
                note = sources.get("note") or "no sources listed"
                raise UnmeasuredError(f"the MCP endpoint {url} serves package "
                                      f"{eval_set.environment}/{eval_set.target_package} with "
                                      f"nothing to query ({note}): does its model compile?")
    except McpToolError as exc:
        raise UnmeasuredError(f"the MCP endpoint {url} cannot serve package "
                              f"{eval_set.environment}/{eval_set.target_package}: {exc}") from None
    except UnmeasuredError:
        raise
    except KitError as exc:
        raise UnmeasuredError(f"the MCP endpoint {url} did not answer: {exc}") from None
    return tools, isolation.withheld_tools(listed), version


def answerer_problem(answerer: str | None, answerer_cmd: str | None,
                     max_cost_usd: float | None) -> str | None:
    """Who answers, decided with the command line (exit 2 when this says why not): a known
    answerer, a usable command template, and a cost cap only on a priced model. run_answers.py
    and improve.py gate decide it here."""
    try:
        spec = parse_answerer(answerer, answerer_cmd)
        if spec.kind == "command":
            command.check_template(spec.template or "", Path.cwd())
    except UsageError as exc:
        return str(exc)
    if max_cost_usd is not None and spec.kind == "anthropic" and price_for(spec.model) is None:
        return (f"--max-cost-usd needs a priced model; {spec.model!r} is not in "
                f"{PRICES_PATH.name} (add its row, or drop the cap)")
    return None


def run_answers(run_dir: str | Path, set_dir: str | Path, options: HarnessOptions,
                progress: Callable[[str], None] = cli.progress) -> HarnessResult:
    """Answer every planned attempt of the run (see the module doc); returns what happened."""
    if options.local == bool(options.mcp_url):
        raise UsageError("give exactly one of --mcp-url URL or --local")
    spec = options.answerer
    if options.max_cost_usd is not None and spec.kind == "anthropic" \
            and price_for(spec.model) is None:
        raise UsageError(f"--max-cost-usd needs a priced model; {spec.model!r} is not in "
                         f"{PRICES_PATH.name} (add its row, or drop the cap)")
    if spec.kind == "command":
        command.check_template(spec.template or "", Path.cwd())
    prompt_path = options.prompt_file or DEFAULT_PROMPT
    if not prompt_path.is_file():
        raise UsageError(f"--prompt {prompt_path}: not a file")

    run = Run.open(run_dir)
    # The ledger it appends to, checked before any answerer is paid for: a bad line is the
    # ledger's (named: file, line, what), never blamed on an answer recorded after it.
    check_before_append(run.dir, "run_answers.py")
    eval_set = load_set(set_dir)
    cases_file = eval_set.dir / CASES_FILE
    cli.check_known(options.only, eval_set.cases, where=cases_file)
    cli.check_known(options.redo, eval_set.cases, where=cases_file, flag="--redo")
    sealed_from = sealed_protected(eval_set, run)
    extra_binds = _check_sandbox_flags(options, sealed_from)
    allowed_hosts = [network.parse_allow_host(h) for h in options.allow_hosts]
    try:
        template = prompt_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(prompt_path, None, f"cannot be read: {exc}") from None
    prompt_sha = hashlib.sha256(template.encode("utf-8")).hexdigest()
    pinned = run.info.get("answererPromptSha")
    if pinned and pinned != prompt_sha:
        raise UsageError(f"{run.dir.name}: its attempts were answered with another prompt "
                         f"(answererPromptSha {pinned[:12]}, this one {prompt_sha[:12]}); one run, "
                         "one prompt: make a new run with new_run.py for this prompt")
    if spec.model and spec.model != run.info.get("answererModel"):
        progress(f"warning: run.json names answerer model {run.info.get('answererModel')!r}; "
                 f"this command answers with {spec.model!r}")
    view = run.view()  # the one read of the ledger for this pass; refreshed as attempts are recorded
    live = view.attempts()
    plan = plan_attempts(eval_set, {(a["qid"], a.get("sample")) for a in live},
                         samples=options.samples, only=options.only, redo=options.redo,
                         split=options.split)
    log = HarnessLog(run.dir)
    budget = Budget(options.max_cost_usd, run_spend(live, log.read()))
    base: dict[str, Any] = {"run_dir": str(run.dir), "answerer": spec.label, "planned": len(plan.todo),
                            "skipped": len(plan.skipped), "max_cost_usd": options.max_cost_usd,
                            "harness_log": str(log.path), "set_dir": str(eval_set.dir.resolve())}
    if not plan.todo:
        return HarnessResult(**base, mcp_url=options.mcp_url, outcomes=[], stopped=None,
                             stop_kind=None, spent_usd=budget.spent, unknown_cost=0)

    with _run_lock(run):
        claude = None
        claude_version = None
        api = None
        protected = isolation.protected_paths(paths.KIT_ROOT, eval_set.dir, run.dir)
        if spec.kind == "claude-code":
            claude, claude_version = _claude_code(run, options, protected, progress)
        elif spec.kind == "anthropic":
            api = api_loop.ApiAnswerer.create(spec.model or "")
        policy = None
        label = sandbox.API_LOOP if spec.kind == "anthropic" else seal.NO_SANDBOX
        if spec.kind != "anthropic" and options.sandbox:
            policy = _policy(options, claude, protected, sealed_from, extra_binds)
        with _endpoint(eval_set, options) as url:
            tools, others, version = _answerer_tools(url, eval_set, options.publisher_version)
            if policy is not None:
                policy = policy.with_network(_destinations(options, url, tools, allowed_hosts))
                label = policy.label
            allowed = [isolation.claude_tool_name(t) for t in tools]
            withheld = [isolation.claude_tool_name(t) for t in others]
            header_vars = header_variables(url) if options.mcp_url else {}
            if not pinned:
                run.update_info(answererPromptSha=prompt_sha)
            if claude_version is not None:
                run.update_info(claudeCodeVersion=claude_version)
            # What the answers are retrieved against: the version the endpoint reports, and the
            # headers sent by the variables' names (never their values).
            run.update_info(publisherVersion=version,
                            mcpHeaders={h: "$" + v for h, v in header_vars.items()} or None)
            # Once answered unsealed, a run stays so: its unsealed attempts are still in it.
            if run.info.get("sandbox") != seal.NO_SANDBOX:
                run.update_info(sandbox=label)
            shared = _Shared(queue=iter(plan.todo), total=len(plan.todo), budget=budget,
                             max_failures=options.max_failures)
            ctx = _Context(run=run, eval_set=eval_set, options=options,
                           prompt=render_prompt(template, eval_set), mcp_url=url,
                           protected=protected, log=log, shared=shared, progress=progress,
                           claude=claude, allowed=allowed, withheld=withheld, api=api,
                           view=view, policy=policy, header_vars=header_vars)
            log.write("start", answerer=spec.label, command=redact(spec.template or ""),
                      mcp_url=url, local=options.local, prompt=str(prompt_path),
                      prompt_sha=prompt_sha, samples=options.samples, planned=len(plan.todo),
                      skipped=len(plan.skipped), max_turns=options.max_turns,
                      timeout_s=options.timeout, max_cost_usd=options.max_cost_usd,
                      spent_before_usd=round(budget.spent, 6), parallel=options.parallel,
                      sandbox=label, allow_list=policy.allow_list() if policy else None,
                      claude_code_version=claude_version)
            progress(f"answering {len(plan.todo)} attempt(s) with {spec.label} over {url}"
                     + (f" ({len(plan.skipped)} already recorded, skipped)" if plan.skipped else ""))
            try:
                with _sigterm_as_exit():
                    outcomes = _run_all(ctx, plan.todo)
            except BaseException:
                log.write("stop", reason="interrupted", kind="interrupted",
                          spent_usd=round(budget.spent, 6))
                progress("interrupted: the attempts recorded so far are kept; the same command "
                         f"resumes, skipping them: {commands.this_command()}")
                raise
            log.write("stop", reason=shared.stopped, kind=shared.stop_kind,
                      recorded=sum(1 for o in outcomes if o.outcome == "recorded"),
                      spent_usd=round(budget.spent, 6))
        if shared.stop_kind == "failures":
            run.update_info(status="aborted")
    return HarnessResult(**base, mcp_url=url, outcomes=outcomes, stopped=shared.stopped,
                         stop_kind=shared.stop_kind, spent_usd=budget.spent,
                         unknown_cost=budget.unknown, local=options.local, sandbox=label)


def sealed_protected(eval_set: EvalSet, run: Run) -> list[Path]:
    """What a sealed answerer must never reach, even through a bind: the kit's evals/, the set
    (its truth package included) and the run (harness.jsonl and harness.lock with it)."""
    return sorted({Path(p).resolve() for p in (paths.EVALS_DIR, eval_set.dir,
                                               eval_set.truth_dir, run.dir)})


def _check_sandbox_flags(options: HarnessOptions, protected: list[Path]) -> list[Path]:
    """--sandbox-bind and --no-sandbox checked against the answerer and the protected folders
    (UsageError, exit 2); the extra read-only binds, resolved."""
    spec = options.answerer
    if spec.kind == "anthropic" and (not options.sandbox or options.sandbox_binds):
        flag = "--no-sandbox" if not options.sandbox else "--sandbox-bind"
        raise UsageError(f"{flag}: anthropic:{spec.model} runs in-process with no file, shell or "
                         "process tools; there is no program to seal (it needs neither flag)")
    if spec.kind == "anthropic" and options.allow_hosts:
        raise UsageError(f"--allow-host: anthropic:{spec.model} runs in-process and reaches only "
                         "the endpoint and the Messages API; there is no sandbox to open")
    for flag, given in (("--sandbox-bind", options.sandbox_binds),
                        ("--allow-host", options.allow_hosts)):
        if not options.sandbox and given:
            raise UsageError(f"{flag} goes with a sealed run; drop it or drop --no-sandbox")
    return sandbox.check_sandbox_binds(options.sandbox_binds, protected,
                                       temp_base=isolation.temp_base(
                                           isolation.protected_paths(*protected)))


def _policy(options: HarnessOptions, claude: str | None, protected: list[str],
            sealed_from: list[Path], extra: list[Path]) -> sandbox.SandboxPolicy:
    """The run's sandbox: bwrap found and able to make one (exit 3 otherwise), the answerer's
    program resolved on the PATH it will get, and the allow-list built."""
    spec = options.answerer
    bwrap = sandbox.find_bwrap()
    version = sandbox.bwrap_version(bwrap)
    search = isolation.child_environment(os.environ, protected, Path.cwd()).get("PATH")
    if spec.kind == "claude-code":
        program = sandbox.program_binds(spec.kind, claude or "claude", search_path=search)
    else:
        first, rest = sandbox.command_program(spec.template or "", search)
        program = sandbox.program_binds(spec.kind, first, rest, search_path=search)
    return sandbox.make_policy(bwrap, version, program=program, extra=extra,
                               protected=sealed_from, temp_base=isolation.temp_base(protected),
                               env_names=sandbox.allowed_env_names(spec.kind, [
                                   *options.pass_env, *_header_names(options)]))


def _destinations(options: HarnessOptions, url: str, tools: list[str],
                  allowed: list[network.Destination]) -> network.NetworkAllowList:
    """Where the run's sealed answerers may connect: the endpoint (with --local, each try its
    own client), the model API when the answerer calls one (claude-code, or a command given
    ANTHROPIC_BASE_URL or ANTHROPIC_API_KEY), and each --allow-host (refused when it is one of
    those: exit 2)."""
    mcp = network.mcp_destination(url, tools=tools, per_try_prefix=answerer_client_prefix(url)
                                  if options.local else None)
    kit = [mcp]
    passed = set(options.pass_env)
    if options.answerer.kind == "claude-code" or passed & {"ANTHROPIC_BASE_URL",
                                                          "ANTHROPIC_API_KEY"}:
        kit.append(network.model_destination(os.environ.get("ANTHROPIC_BASE_URL")))
    network.check_destinations(kit, allowed)
    return network.NetworkAllowList((*kit, *allowed))


def _header_names(options: HarnessOptions) -> list[str]:
    """The environment variables a hosted endpoint's headers read (--mcp-header): the sealed
    answerer needs them to expand its MCP configuration's ${VAR} references."""
    return list(header_variables(options.mcp_url).values()) if options.mcp_url else []


def _claude_code(run: Run, options: HarnessOptions, protected: list[str],
                 progress: Callable[[str], None]) -> tuple[str, str]:
    """The Claude Code executable and the version it reports (exit 3 when there is none, or it
    will not say); a run answered by one version refuses another (exit 2), as it refuses
    another prompt: one run, one answerer."""
    env = isolation.child_environment(os.environ, protected, Path.cwd(), claude_cli.CLI_ENV)
    exe = claude_cli.find_claude(options.claude, env)
    version = claude_cli.claude_version(exe, env)
    recorded = run.info.get("claudeCodeVersion")
    if recorded and not claude_cli.same_version(recorded, version):
        shown = claude_cli.parse_version(recorded) or recorded
        raise UsageError(f"{run.dir.name}: its attempts were answered by Claude Code {shown}; "
                         f"{exe} is {version}. One run, one answerer: make a new run with "
                         "new_run.py for this version")
    pinned = claude_cli.pinned_version()
    note = "the kit's pinned install" if exe == claude_cli.PINNED_EXE else str(exe)
    if version != pinned:
        note += f"; the kit pins {pinned}"
    progress(f"claude-code: Claude Code {version} ({note})")
    return str(exe), version


def _run_all(ctx: _Context, todo: list[PlannedAttempt]) -> list[AttemptOutcome]:
    """Work through the queue with `parallel` threads; every planned attempt gets one outcome."""
    results: dict[tuple[str, int | None], AttemptOutcome] = {}
    results_lock = threading.Lock()

    def worker() -> None:
        while True:
            planned = ctx.shared.next()
            if planned is None:
                return
            try:
                outcome = _answer_one(ctx, planned)
            except KitError as exc:
                # The kit could not write what the attempt produced (an artifact, the ledger):
                # say so on this attempt and stop, rather than let the thread die unheard.
                ctx.shared.stop("failures", f"{planned.label}: {exc}")
                ctx.progress(f"[!] {planned.label}: {exc}; the run stops")
                outcome = AttemptOutcome(planned.qid, planned.sample, "failed", 1,
                                         failure=str(exc))
            with results_lock:
                results[(planned.qid, planned.sample)] = outcome

    threads = [threading.Thread(target=worker, name=f"answerer-{i}", daemon=True)
               for i in range(max(1, ctx.options.parallel))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): start nothing more and end the answerers now running,
        # which sit in sessions of their own and would otherwise outlive the harness.
        ctx.shared.stop("interrupted", "interrupted")
        command.kill_running()
        raise
    return [results.get((p.qid, p.sample)) or AttemptOutcome(p.qid, p.sample, "not_run", 0)
            for p in todo]


def _answer_one(ctx: _Context, planned: PlannedAttempt) -> AttemptOutcome:
    """Up to 1 + retries tries of one attempt, until one is recorded or the run stops."""
    shared, options = ctx.shared, ctx.options
    failure: str | None = None
    tries = 0
    for try_no in range(1, options.retries + 2):
        if shared.stop_event.is_set():
            return AttemptOutcome(planned.qid, planned.sample, "not_run", tries, failure=failure)
        if options.answerer.kind != "anthropic" and shared.budget.exhausted():
            shared.stop("budget", f"--max-cost-usd {options.max_cost_usd:g} spent "
                                  f"(${shared.budget.spent:.4f}); no new attempt started")
            return AttemptOutcome(planned.qid, planned.sample, "not_run", tries, failure=failure)
        tries = try_no
        outcome = _try(ctx, planned, try_no)
        if outcome.outcome in ("recorded", "budget_stop") or shared.stop_kind == "interrupted":
            return outcome
        failure = outcome.failure
        count = shared.failed_once()
        if count >= shared.max_failures:
            shared.stop("failures", f"{count} harness failures in a row; the last: {failure}")
        last = try_no == options.retries + 1 or shared.stop_event.is_set()
        ctx.progress(f"[!] {planned.label}: harness failure (try {try_no} of "
                     f"{options.retries + 1}): {failure}"
                     + ("; the run stops" if count >= shared.max_failures
                        else "" if last else "; trying again"))
        if count >= shared.max_failures:
            return AttemptOutcome(planned.qid, planned.sample, "failed", tries, failure=failure)
        if not last:
            time.sleep(RETRY_PAUSE_S * try_no)
    done = shared.finished_once()
    ctx.progress(f"[{done}/{shared.total}] {planned.label} not recorded: {failure}")
    return AttemptOutcome(planned.qid, planned.sample, "failed", tries, failure=failure)


def _try(ctx: _Context, planned: PlannedAttempt, try_no: int) -> AttemptOutcome:
    """One try: run the answerer in a fresh space, then record it or log why it was not one."""
    options = ctx.options
    started = time.monotonic()
    url = ctx.attempt_url()
    with isolation.attempt_space(ctx.protected, question=planned.question, prompt=ctx.prompt,
                                 mcp_url=url, header_vars=ctx.header_vars) as space:
        if options.answerer.kind == "anthropic":
            return _try_api(ctx, planned, try_no, space, started, url)
        if ctx.policy is None:
            return _try_command(ctx, planned, try_no, space, started)
        # Sealed: the try's gateway listens while the answerer runs, and only then.
        with open_gateway(ctx.policy.network.for_try(url), space.root) as (gate, relay_config):
            return _try_command(ctx, planned, try_no, space, started, gate=gate,
                                relay_config=relay_config)


def _command_argv(ctx: _Context, planned: PlannedAttempt, space: isolation.AttemptSpace) -> list[str]:
    spec = ctx.options.answerer
    if spec.kind == "claude-code":
        return claude_cli.claude_argv(ctx.claude or "claude", question=planned.question,
                                      prompt=ctx.prompt, mcp_config=space.mcp_config,
                                      max_turns=ctx.options.max_turns, allowed=ctx.allowed,
                                      withheld=ctx.withheld, model=spec.model)
    values = {"question_file": str(space.question_file), "prompt_file": str(space.prompt_file),
              "mcp_config": str(space.mcp_config), "workdir": str(space.workdir),
              "max_turns": str(ctx.options.max_turns), "qid": planned.qid,
              "sample": "_" if planned.sample is None else str(planned.sample)}
    return ["/bin/sh", "-c", command.fill_template(spec.template or "", values)]


def _stderr_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _try_command(ctx: _Context, planned: PlannedAttempt, try_no: int,
                 space: isolation.AttemptSpace, started: float, *, gate: Gateway | None = None,
                 relay_config: Path | None = None) -> AttemptOutcome:
    options = ctx.options
    cap = options.max_output_mb << 20
    # The variables the MCP configuration's headers refer to (${VAR}) go to the answerer as
    # they are (into the sandbox too: the policy's allow-list names them); nothing writes their
    # values anywhere. Claude Code also gets its own settings (claude_cli.CLI_ENV).
    extra = {v: os.environ.get(v, "") for v in ctx.header_vars.values()}
    if options.answerer.kind == "claude-code":
        extra.update(claude_cli.CLI_ENV)
    env = isolation.child_environment(os.environ, ctx.protected, space.workdir, extra=extra)
    argv = _command_argv(ctx, planned, space)
    wrapper = None
    if ctx.policy is not None:
        # The values go to bwrap through its environment, never its command line (which every
        # process of the machine can read); bwrap hands exactly these to the answerer. Claude
        # Code's own settings (claude_cli.CLI_ENV) name nothing of the kit's and go too.
        # Its network: the relay inside, and the proxy variables when a destination needs them.
        env = {**sandbox.sandbox_environment(os.environ, ctx.policy.env_names,
                                             path_value=env.get("PATH"), workdir=space.workdir),
               **(extra or {}), **ctx.policy.network.proxy_environment()}
        sockets = relay_config.parent if relay_config is not None else None
        wrapper = [ctx.policy.bwrap, *ctx.policy.options(workdir=space.workdir,
                                                          inputs=space.question_file.parent,
                                                          sockets=sockets)]
        argv = ctx.policy.command(argv, relay_config)
    child = command.run_child(argv, cwd=space.workdir, env=env, wrapper=wrapper,
                              timeout=options.timeout, stdout_path=space.stdout,
                              stderr_path=space.stderr, max_stdout_bytes=cap)
    scan = command.scan_stream(space.stdout)
    verdict = command.classify(child, scan, timeout=options.timeout, max_stdout_bytes=cap)
    stderr = _stderr_text(space.stderr)
    cost = scan.result.get("total_cost_usd") if scan.result else None
    cost = cost if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
    common: dict[str, Any] = {"qid": planned.qid, "sample": planned.sample, "try_no": try_no,
                              "exit_status": child.exit_status, "status": child.status_text(),
                              "seconds": round(child.seconds, 3), "timed_out": child.timed_out,
                              "stdout_bytes": child.stdout_bytes}
    if gate is not None and gate.refusals:
        # What the gateway refused the answerer (the first ones, and how many in all).
        common.update(network_refused=gate.refused, network_refusals=gate.refusals)
    if not verdict.is_attempt and ctx.shared.stop_kind == "interrupted":
        # The child was ended because the harness was interrupted (Ctrl-C, SIGTERM): not a
        # harness failure, and nothing is counted against the answerer.
        ctx.log.write("try", outcome="interrupted", failure="interrupted", **common)
        return AttemptOutcome(planned.qid, planned.sample, "not_run", try_no,
                              failure="interrupted", seconds=child.seconds)
    if not verdict.is_attempt:
        said = [line.strip() for line in stderr.splitlines() if line.strip()]
        failure = verdict.failure or "not an attempt"
        secrets = Redactor().learn(stderr)  # a secret the stderr shows anywhere, blanked everywhere
        if said:
            failure += f"; its stderr ends: {secrets.text(said[-1])[:200]}"
        if cost is not None:
            ctx.shared.budget.add(cost)
        ctx.log.write("try", outcome="failed", failure=failure, cost_usd=cost,
                      stderr_tail=secrets.text(stderr[-STDERR_TAIL_CHARS:]), **common)
        return AttemptOutcome(planned.qid, planned.sample, "failed", try_no,
                              failure=failure, seconds=child.seconds)
    if verdict.cut_off:
        command.close_cut_off_stream(space.stdout, timeout=options.timeout,
                                     seconds=child.seconds, torn_tail=scan.torn_tail)
    outcome = _record(ctx, planned, try_no, space, started, stderr=stderr, common=common)
    if outcome.outcome == "recorded":
        ctx.shared.budget.add(outcome.cost_usd)
    return outcome


def _try_api(ctx: _Context, planned: PlannedAttempt, try_no: int,
             space: isolation.AttemptSpace, started: float, url: str) -> AttemptOutcome:
    options = ctx.options
    assert ctx.api is not None
    common = {"qid": planned.qid, "sample": planned.sample, "try_no": try_no}
    try:
        api_loop.run_api_session(ctx.api, mcp_url=url, question=planned.question,
                                 system_prompt=ctx.prompt, workdir=space.workdir,
                                 max_turns=options.max_turns,
                                 timeout=options.timeout, budget=ctx.shared.budget,
                                 transcript=space.stdout)
    except api_loop.BudgetStop as exc:
        why = (f"--max-cost-usd {options.max_cost_usd:g} would be exceeded by the next model call "
               f"(${ctx.shared.budget.spent:.4f} spent); no new call made")
        ctx.shared.stop("budget", why)
        ctx.log.write("try", outcome="budget_stop", failure=str(exc), cost_usd=exc.cost_usd,
                      seconds=round(time.monotonic() - started, 3), **common)
        return AttemptOutcome(planned.qid, planned.sample, "budget_stop", try_no,
                              cost_usd=exc.cost_usd, failure=why)
    except api_loop.SessionFailed as exc:
        ctx.log.write("try", outcome="failed", failure=str(exc), cost_usd=exc.cost_usd,
                      seconds=round(time.monotonic() - started, 3), **common)
        return AttemptOutcome(planned.qid, planned.sample, "failed", try_no, failure=str(exc),
                              cost_usd=exc.cost_usd)
    return _record(ctx, planned, try_no, space, started, stderr="",
                   common={**common, "seconds": round(time.monotonic() - started, 3)})


def _record(ctx: _Context, planned: PlannedAttempt, try_no: int, space: isolation.AttemptSpace,
            started: float, *, stderr: str, common: dict[str, Any]) -> AttemptOutcome:
    """Record the session through record_attempt (the moment it ends) and keep its stderr."""
    try:
        rec = record_attempt(ctx.run.dir, ctx.eval_set.dir, planned.qid, planned.sample,
                             transcript=space.stdout)
    except InputError as exc:
        where = f"stdout line {exc.line}" if exc.line else "stdout"
        failure = f"the transcript could not be read: {where}: {exc.message}"
        ctx.log.write("try", outcome="failed", failure=failure,
                      stderr_tail=Redactor().learn(stderr).text(stderr[-STDERR_TAIL_CHARS:]),
                      **common)
        return AttemptOutcome(planned.qid, planned.sample, "failed", try_no, failure=failure)
    stderr_path = None
    if stderr.strip():
        written = ctx.run.write_artifact(planned.qid, planned.sample, "stderr.txt",
                                         Redactor().learn(stderr).copy_text(stderr))
        stderr_path = ctx.run.relpath(written)
    attempt = _recorded_attempt(ctx, planned) or {}
    seconds = time.monotonic() - started
    outcome = AttemptOutcome(planned.qid, planned.sample, "recorded", try_no,
                             attempt_event_id=rec.attempt_event_id, submitted=rec.submitted,
                             truncated=is_truncated(attempt.get("truncated")),
                             contaminated=rec.contaminated, num_turns=attempt.get("num_turns"),
                             cost_usd=attempt.get("cost_usd"), seconds=seconds)
    ctx.log.write("try", outcome="recorded", attempt_event_id=rec.attempt_event_id,
                  transcript_path=rec.transcript_path, stderr_path=stderr_path,
                  voided=rec.voided, truncated=outcome.truncated, run_error=attempt.get("run_error"),
                  cost_usd=outcome.cost_usd, **common)
    done = ctx.shared.recorded_once()
    ctx.progress(f"[{done}/{ctx.shared.total}] {planned.label} {outcome_words(outcome)}")
    return outcome


def _recorded_attempt(ctx: _Context, planned: PlannedAttempt) -> dict[str, Any] | None:
    """The attempt just recorded, from the run's one live view (taking in only what was appended
    since it was last read), never a fresh read of the whole ledger per attempt."""
    key = ctx.run.key(planned.qid, planned.sample)
    if ctx.view is None:
        return ctx.run.attempt(planned.qid, planned.sample)
    with ctx.shared.lock:  # one thread at a time takes in the appended bytes
        ctx.view.refresh()
        return ctx.view.attempt(key)


# ---------------------------------------------------------------- the text rendering

def render_text(result: HarnessResult) -> str:
    """What a person reads after a run: counts, spend, why it stopped, and the next command."""
    recorded, failed = result.count("recorded"), result.count("failed")
    not_run = result.count("not_run") + result.count("budget_stop")
    lines = [f"run_answers {result.run_dir}: recorded {recorded} of {result.planned} planned "
             f"attempt(s) with {result.answerer}"
             + (f"; {result.skipped} already recorded, skipped" if result.skipped else "")]
    if result.sandbox is not None:
        lines.append(f"  {seal.UNSEALED}: answered without the sandbox" if result.unsealed
                     else f"  sandbox: {result.sandbox}")
    if result.planned == 0:
        lines.append("  nothing to do: every selected attempt is recorded (--redo QIDS runs "
                     "chosen ones again)")
    truncated = [o for o in result.outcomes if o.truncated]
    contaminated = [o for o in result.outcomes if is_contaminated(o.contaminated)]
    if truncated:
        lines.append("  truncated: " + ", ".join(attempt_label(o.qid, o.sample) for o in truncated)
                     + " (the run will read INCOMPLETE; --redo them, perhaps with a larger "
                       "--timeout or --max-turns)")
    if contaminated:
        lines.append("  contaminated: " + ", ".join(attempt_label(o.qid, o.sample)
                                                    for o in contaminated)
                     + " (check_contamination.py says why; fix the answerer, then --redo them)")
    if failed:
        lines.append("  not recorded (harness failures, see the log): "
                     + ", ".join(f"{attempt_label(o.qid, o.sample)} ({o.failure})"
                                 for o in result.outcomes
                                 if o.outcome == "failed"))
    if not_run:
        lines.append(f"  not run: {not_run} attempt(s); re-run the same command to resume")
    if result.stopped:
        lines.append(f"  STOPPED: {result.stopped}")
    spend = f"  answerers have spent ${result.spent_usd:.4f} on this run"
    if result.max_cost_usd is not None:
        spend += f" (cap ${result.max_cost_usd:g})"
    if result.unknown_cost:
        spend += f"; {result.unknown_cost} attempt(s) of unknown cost not counted"
    lines.append(spend)
    lines.append(f"  harness log: {result.harness_log}")
    if recorded:
        endpoint = commands.endpoint_flag(result.mcp_url, result.local)
        lines.append(f"  next: {commands.score_run(result.run_dir, result.set_dir, endpoint=endpoint)}")
    return "\n".join(lines)
