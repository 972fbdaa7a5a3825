"""`synapse prune`: forget memories by policy (to the trash), restore, compact, purge."""
from __future__ import annotations

from typing import List, Optional

import typer

from . import output
from .common import JSON_OPTION, check_tags, confirm_destructive, lock_timeout, store_path
from .common import QUIET_OPTION, complete, no_record, parse_time_option
from .exits import USAGE, UserError


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)


def _summary(report: dict) -> str:
    parts = []
    for name, ids in report.get("policies", {}).items():
        parts.append(f"{name}: {len(ids)} matched")
    prot = report.get("protected") or {}
    if prot:
        parts.append(f"protected: {len(prot.get('pinned', []))} pinned, "
                     f"{len(prot.get('unresolved', []))} unresolved")
    verb = "would trash" if report.get("dry_run") else "trashed"
    n = len(report.get("selected" if report.get("dry_run") else "trashed", []))
    if "policies" in report:
        parts.append(f"{verb} {n}")
    if "restored" in report:
        parts.append(f"restored {len(report['restored'])}")
    if "restore" in report:  # a dry run's
        parts.append(f"would restore {len(report['restore'])}")
    if report.get("not_in_trash"):
        parts.append(f"{len(report['not_in_trash'])} not in the trash")
    for held in report.get("already_live", []):
        parts.append(f"{held['id']} left in the trash: record {held['live_id']} already holds "
                     "its text")
    if "would_remove" in report:
        parts.append(f"would remove {len(report['would_remove'])} records for good"
                     + (f" ({len(report['derived_nodes'])} derived semantic nodes among "
                        f"them)" if report.get("derived_nodes") else ""))
    if report.get("compacted"):
        parts.append(f"{'purged' if report['purged'] else 'compacted'}: removed "
                     f"{report['removed_records']} records"
                     + (f", reclaimed {report['bytes_reclaimed']} bytes"
                        if "bytes_reclaimed" in report else ""))  # not said under a scope
    return "; ".join(parts) or "nothing to do"


def _no_record(rid) -> UserError:
    return no_record(rid, "nothing was changed; ids are in the output of ingest and recall, "
                          "and --compact removes trashed ones for good")


def prune(
    decayed: Optional[float] = typer.Option(
        None, "--decayed", metavar="BELOW",
        help="Records whose retention (1 when new, fading with time unless recalled) times "
             "importance is below BELOW at --at."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME",
                                     help="When --decayed is evaluated (default: now)."),
    dormant: bool = typer.Option(
        False, "--dormant",
        help="Semantic nodes consolidation archived as dormant (activation below "
             "dormancy_epsilon for dormancy_windows windows in a row)."),
    low_utility: Optional[float] = typer.Option(
        None, "--low-utility", metavar="BELOW",
        help="Records whose utility (storage_strength/2) is below BELOW, and those consolidation "
             "marked prune_candidate (use 0 for only those)."),
    before: Optional[str] = typer.Option(None, "--before", metavar="TIME",
                                         help="Records formed before TIME (ISO 8601 / epoch ms)."),
    ids: List[int] = typer.Option([], "--id", metavar="N", min=1, max=2**64 - 1,
                                  help="This record (repeatable); also prunes unresolved ones."),
    tags: List[str] = typer.Option([], "--tag", metavar="TAG",
                                   help="Records carrying TAG (repeatable; speaker:NAME, "
                                        "session:ID, source:PATH work too)."),
    query: Optional[str] = typer.Option(
        None, "--query", metavar="TEXT",
        help="Forget what matches TEXT (dense + BM25 hybrid recall above --min-similarity); "
             "the matches are shown first."),
    min_similarity: float = typer.Option(0.45, "--min-similarity", metavar="COS",
                                         help="Similarity floor of --query matches."),
    match: str = typer.Option("any", "--match", metavar="any|all",
                              autocompletion=complete("any", "all"),
                              help="Select records matching any policy (default) or all."),
    within: List[str] = typer.Option(
        [], "--within", metavar="TAG",
        help="Scope, not a policy: only records carrying TAG (repeated: every one) are "
             "selected or shown (e.g. --within user:bob: nothing of another user is listed); "
             "--compact/--purge empty only their part of the trash."),
    restore: List[int] = typer.Option(
        [], "--restore", metavar="ID", min=1, max=2**64 - 1,
        help="Take this record out of the trash (repeatable); one whose input (text, tags, "
             "time) was ingested again since stays there (already_live)."),
    compact: bool = typer.Option(
        False, "--compact",
        help="Empty the trash: rewrite the store without tombstoned records (no restore after)."),
    purge: bool = typer.Option(
        False, "--purge",
        help="Compact, then delete every other copy (migration .bak files, extract.cache, "
             "derived semantic nodes): the right to be forgotten."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Confirm (needed when stdin is not a terminal)."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Forget memories: policies move records to the trash, --compact/--purge remove them.

    Policies combine (--match any|all); pinned records are never pruned, unresolved ones only
    by --id. Trashed records are ignored by recall and can be restored until --compact or
    --purge. After --purge the text of the removed records is in no file of the store.

    Example: synapse prune --before 2024-01-01 --tag session:old --dry-run
    Example: synapse prune --query "my bank password" --purge --yes
    Example: synapse prune --within user:bob --query "bank PIN" --dry-run
    """
    from .. import api
    from ..engine import arguments as a
    from ..engine.maintenance import prune as pr
    from ..engine.store import Store, StoreWriter

    a.choice(match, "--match", ("any", "all"))  # the checks api.prune makes (exit 2)
    if query is not None and not query.strip():
        raise UserError("--query is empty: give the text whose matches to prune", code=USAGE)
    a.real(decayed, "--decayed", 0.0), a.real(low_utility, "--low-utility", 0.0)
    a.real(min_similarity, "--min-similarity", -1.0, 1.0)
    check_tags(tags), check_tags(within, "--within")
    policy = pr.PrunePolicy(decayed_below=decayed, at_ms=parse_time_option(at, "--at"), dormant=dormant,
                            low_utility_below=low_utility, before_ms=parse_time_option(before, "--before"),
                            ids=tuple(ids), tags=tuple(tags), query=query,
                            min_similarity=min_similarity, match=match, within=tuple(within))
    active = policy.active()
    if restore and (active or compact or purge or within):
        raise UserError("--restore cannot be combined with policies, --within, --compact or "
                        "--purge", code=USAGE)
    if not (active or restore or compact or purge):
        raise UserError("nothing to do: give a policy (--decayed, --dormant, --low-utility, "
                        "--before, --id, --tag, --query), --restore, --compact or --purge",
                        code=USAGE)
    if at is not None and decayed is None:
        raise UserError("--at only applies to --decayed", code=USAGE)
    report: dict = {"dry_run": dry_run}
    # a dry run only reads: no writer lock, so it works on a read-only store
    opened = Store.open(store_path()) if dry_run else \
        StoreWriter.open(store_path(), lock_timeout=lock_timeout())
    with opened as w:
        if restore:
            api.require_records(w, restore, unknown=_no_record)
            if dry_run:  # what the real run would restore, and why it would leave the rest
                report.update(pr.restore_plan(w, restore))
            else:
                report.update(pr.restore(w, restore))
        else:
            api.require_pruned_ids(w, policy, unknown=_no_record)
            sel = pr.select(w, policy) if active else pr.Selection()
            if active:
                report.update(sel.as_dict())
            if query is not None and sel.query_matches and output.Out.stderr_is_tty() \
                    and not json:
                output.warn(f"--query matches ({len(sel.query_matches)}):")
                for q in sel.query_matches[:50]:
                    output.warn(f"  {q['id']:>8}  {q['similarity']:.3f}  {q['text'][:100]!r}")
            if dry_run:
                if compact or purge:
                    report.update(pr.compaction_plan(w, policy, sel, purge))
            else:
                what = []
                if sel.selected:
                    what.append(f"moving {len(sel.selected)} record(s) to the trash")
                if purge:
                    what.append("purging the trash (permanent)")
                elif compact:
                    what.append("compacting (the trash is emptied, permanently)")
                if what:
                    confirm_destructive(" and ".join(what), yes)
                report.update(pr.prune(w, policy, compact_after=compact, purge=purge,
                                       selection=sel))
    if report.get("pinned_derived_nodes"):
        output.warn(f"synapse: purge {'would remove' if dry_run else 'removed'} "
                    f"{len(report['pinned_derived_nodes'])} pinned "
                    "semantic node(s) derived from the purged records (they may quote them): "
                    + " ".join(map(str, report["pinned_derived_nodes"])))
    if json or not output.Out.stdout_is_tty():
        output.emit(report)
    else:
        output.stdout_console().print(_summary(report))
