"""Choosing a provider from its spec string, and the command-line flags that name one."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from malloy_evals.core import cli
from malloy_evals.core.errors import InputError, UsageError
from malloy_evals.llm.base import ROLES, Provider

KINDS = ("anthropic", "replay", "host", "hand")
RECORD_WITH_REPLAY = "--record records a live provider; it cannot wrap replay"


def make_provider(spec: str, *, role: str, set_dir: Path | None, record_dir: Path | None = None,
                  host_mode: str | None = None, host_dir: Path | None = None,
                  host_root: Path | None = None, max_cost_usd: float | None = None, dry_run: bool = False,
                  concurrency: int = 4, batch: bool = False, **anthropic_options: Any) -> Provider:
    """The provider a spec names; with record_dir, wrapped so every reply is recorded there."""
    if role not in ROLES:
        raise UsageError(f"role {role!r} is not one of {', '.join(ROLES)}")
    kind, arg = parse_spec(spec)
    # Each provider's module is imported when it is chosen: parsing flags needs none of them.
    from malloy_evals.llm.anthropic import AnthropicProvider
    from malloy_evals.llm.hand import HandProvider
    from malloy_evals.llm.host import HostProvider
    from malloy_evals.llm.replay import RecordingProvider, ReplayProvider

    provider: Provider
    if kind == "anthropic":
        provider = AnthropicProvider(arg, max_cost_usd=max_cost_usd, dry_run=dry_run,
                                     concurrency=concurrency, batch=batch, **anthropic_options)
    elif kind == "replay":
        folder = Path(arg) if arg else (Path(set_dir) / "recordings" / role) if set_dir else None
        if folder is None:
            raise UsageError("replay needs a folder: replay:DIR, or --set")
        provider = ReplayProvider(folder, role=role, set_dir=set_dir)
        if record_dir is not None:
            raise UsageError(RECORD_WITH_REPLAY)
    elif kind == "host":
        provider = HostProvider(host_mode or "", host_dir, role=role, host_root=host_root)
    else:
        provider = HandProvider(Path(arg))
    if record_dir is not None:
        provider = RecordingProvider(provider, Path(record_dir))
    return provider


def default_record_dir(set_dir: Path | None, role: str) -> Path | None:
    return Path(set_dir) / "recordings" / role if set_dir else None


def parse_spec(spec: str) -> tuple[str, str]:
    """`kind:arg` of a provider spec, refusing one that names no provider (a usage error)."""
    kind, _, arg = spec.partition(":")
    if kind not in KINDS or (kind == "host" and arg):
        raise UsageError(f"unknown provider {spec!r}: use anthropic:<model>, replay[:DIR], host, "
                         "or hand:FILE")
    if kind == "anthropic" and not arg:
        raise UsageError("anthropic needs a model: anthropic:<model>")
    if kind == "hand" and not arg:
        raise UsageError("hand needs the replies file: hand:FILE")
    return kind, arg


def provider_spec(value: str) -> str:
    """argparse type: a provider spec, checked when the command line is read (exit 2): its
    syntax, and that a hand:FILE or replay:DIR it names exists."""
    try:
        kind, arg = parse_spec(value)
        if kind == "hand":
            cli.existing_file(arg)
        elif kind == "replay" and arg:
            cli.existing_dir(arg)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_provider_arguments(p: argparse.ArgumentParser, flag: str, *, host: bool = True) -> None:
    """The provider flags every LLM-using script shares (one spelling everywhere). A script
    without `host` (no --emit / --ingest to drive it) does not offer it in its help. Every
    combination is decided with the rest of the command line (exit 2), before any provider is
    made."""
    hand = "hand:FILE (replies you wrote, by key: reference/hand-replies.md)"
    p.add_argument(flag, required=True, metavar="PROVIDER", type=provider_spec,
                   help=f"anthropic:<model> | replay[:DIR] | host | {hand}" if host
                   else f"anthropic:<model> | replay[:DIR] | {hand} (host is not offered here)")
    p.add_argument("--record", nargs="?", const="", default=None, metavar="DIR",
                   help="record every reply (default folder: <set>/recordings/<role>/)")
    p.add_argument("--max-cost-usd", type=cli.dollars, default=None,
                   help="no new call once this many dollars are spent")
    p.add_argument("--dry-run", action="store_true", help="count calls and tokens; call nothing")
    p.add_argument("--batch", action="store_true", help="use the Message Batches API (anthropic)")
    p.add_argument("--concurrency", type=cli.at_least_one, default=4,
                   help="parallel calls at most (anthropic)")
    if host:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--emit", action="store_true", help="host: write the request and stop")
        g.add_argument("--ingest", action="store_true", help="host: read the host's reply")
    else:
        p.set_defaults(emit=False, ingest=False)  # every parsed command line carries both
    dest = flag.lstrip("-").replace("-", "_")

    def combination(args: argparse.Namespace) -> str | None:
        kind = vars(args)[dest].partition(":")[0]
        if kind == "host" and not host:
            # This script has no --emit / --ingest, so "needs --emit or --ingest" would name
            # flags it does not accept.
            return (f"this script does not take {flag} host (it has no --emit / --ingest); use "
                    "anthropic:<model>, replay[:DIR] or hand:FILE")
        if host and kind == "host" and not (args.emit or args.ingest):
            return f"{flag} host needs --emit or --ingest"
        if host and kind != "host" and (args.emit or args.ingest):
            return f"--emit and --ingest go with {flag} host"
        if kind == "replay" and args.record is not None:
            return RECORD_WITH_REPLAY
        if kind == "anthropic":
            from malloy_evals.llm.anthropic import unpriced_cap

            return unpriced_cap(vars(args)[dest].partition(":")[2], args.max_cost_usd,
                                args.dry_run)
        return None

    cli.add_check(p, combination)


def provider_from_args(args: argparse.Namespace, flag_attr: str, *, role: str,
                       set_dir: Path | None, host_dir: Path | None = None,
                       host_root: Path | None = None) -> Provider:
    """make_provider from the flags of add_provider_arguments (every one of them is on `args`)."""
    record_dir = None if args.record is None else (Path(args.record) if args.record else
                                                   default_record_dir(set_dir, role))
    host_mode = "emit" if args.emit else ("ingest" if args.ingest else None)
    return make_provider(vars(args)[flag_attr], role=role, set_dir=set_dir,
                         record_dir=record_dir, host_mode=host_mode, host_dir=host_dir,
                         host_root=host_root, max_cost_usd=args.max_cost_usd,
                         dry_run=args.dry_run, concurrency=args.concurrency, batch=args.batch)


def provider_stats(provider: Provider) -> dict | None:
    """Calls, tokens and dollars a provider spent, when it counts them."""
    stats = provider.call_stats()
    return stats.to_json() if stats is not None else None


_KEY_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,250}$")


def check_key(key: str) -> str:
    """Keys become file names: refuse anything that could leave the recordings folder."""
    if not _KEY_SAFE.match(key) or ".." in key:
        raise InputError(None, None, f"unsafe recording key {key!r}")
    return key
