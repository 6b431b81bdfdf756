"""`agentos bench knowledge`: parse arguments, run, write the report. Also runnable alone::

    python -m agentos_bench.knowledge --scale 0.02

Heavy imports happen in the handler, so registering the command costs the CLI nothing.
"""

from __future__ import annotations

import argparse

from agentos_bench.common.cli import BenchCommand, add_output_arguments, add_plan_arguments, command_line, in_work_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    from agentos_bench.knowledge.plan import KnowledgePlan

    p.add_argument("--backend", choices=["sqlite", "postgres"], default=KnowledgePlan.backend)
    add_plan_arguments(
        p,
        KnowledgePlan(),
        scale="sizes x this (1: 10k and 100k chunks, 200 queries)",
        postgres_url="with --backend postgres (a fresh schema, dropped after)",
        dimensions=None,
        seed=None,
        budget_s="per query configuration: after 20 queries, stop measuring once this much time is spent",
    )
    add_output_arguments(p)


def run_command(args: argparse.Namespace, command: str | None = None) -> int:
    """Run the bench, write the report, print the files written and the verdict."""
    from agentos.mock.loop import run_loop
    from agentos_bench.common.cli import plan_from_args, print_report, report_stem
    from agentos_bench.knowledge.bench import run_knowledge
    from agentos_bench.knowledge.plan import KnowledgePlan
    from agentos_bench.knowledge.report import build_report, write_knowledge_report

    if args.scale <= 0 or args.dimensions < 1:
        raise SystemExit("agentos bench knowledge: --scale must be > 0 and --dimensions >= 1")
    if args.backend == "postgres" and not args.postgres_url:
        raise SystemExit("agentos bench knowledge: --backend postgres needs --postgres-url")
    plan = plan_from_args(KnowledgePlan, args, command=command_line(command))
    result = in_work_dir(args.keep_dir, "agentos-knowledge-", lambda work: run_loop(run_knowledge(plan, work)))
    report = build_report(plan, result)
    s = report["summary"]
    print_report(
        write_knowledge_report(report, args.out_dir, report_stem(f"knowledge-{args.backend}", args.name)),
        f"query p95 at {s['largest_chunks']} chunks: {s['p95_ms_largest']} ms; "
        f"recall@10 vector {s['vector_recall_min']}, hybrid {s['hybrid_recall_min']}",
    )
    return 0


HELP = "knowledge: ingest rate, query p50/p95 at 10k/100k chunks, recall@10"
COMMAND = BenchCommand("knowledge", HELP, "agentos_bench.knowledge", __doc__, add_arguments, run_command)
main = COMMAND.main
