"""The ``riverbed`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .supervise import SUPERVISOR_ENV

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    # No abbreviations: `--restart 1` was taken as `--restarts 1`, and the supervisor, which
    # removes `--restarts` from its child's arguments by name, started a supervisor again and
    # again (a chain of processes without end).
    parser = argparse.ArgumentParser(prog="riverbed", allow_abbrev=False,
                                     description="IBM Streams window semantics for Python")
    sub = parser.add_subparsers(dest="command", required=True)
    trace = sub.add_parser("trace", allow_abbrev=False,
                           help="replay window trace cases and print the events they raise")
    trace.add_argument("--flavor", choices=["java", "cpp"], default=None,
                       help="which IBM runtime to reproduce (default: each case's own "
                            "\"runtime\", java for a case of either)")
    trace.add_argument("--host", default="windows", choices=("windows", "runtime", "spark"),
                       help="where to replay: the window library (default), a one-operator job "
                            "in the asyncio runtime on the virtual clock, or the Spark bridge's "
                            "keyed stage (all cases in one query)")
    trace.add_argument("--out", metavar="DIR",
                       help="write DIR/<case stem>.jsonl per case instead of printing")
    trace.add_argument("cases", nargs="+", metavar="CASE.json")
    run = sub.add_parser("run", allow_abbrev=False,
                           help="run a graph script on the asyncio runtime")
    run.add_argument("script", metavar="graph.py", help="a script defining build(params) or graph")
    run.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                     help="a graph parameter for build(params); VALUE is JSON when it parses")
    run.add_argument("--log-format", choices=("auto", "json", "console"), default="auto",
                     help="log lines as JSON or for people (auto: console on a terminal)")
    run.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                     help="the least severe log lines shown (default: info)")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="serve Prometheus metrics on 127.0.0.1:PORT")
    run.add_argument("--linger", type=float, default=0.0, metavar="SECONDS",
                     help="after the job finishes, keep --metrics-port and --console serving its "
                          "final counts for SECONDS (a signal ends it sooner), for a last scrape")
    run.add_argument("--no-status", dest="status", action="store_false",
                     help="no live status view")
    run.add_argument("--status-interval", type=float, default=1.0, metavar="SECONDS",
                     help="how often the live status view is drawn (default: 1)")
    run.add_argument("--virtual-clock", action="store_true",
                     help="run on simulated time: time jumps to the next timer when idle")
    run.add_argument("--checkpoint-dir", metavar="DIR",
                     help="checkpoint the job into DIR (RocksDB) and resume from its last good "
                          "checkpoint on start")
    run.add_argument("--checkpoint-period", metavar="PERIOD",
                     help="take a checkpoint every PERIOD (5s, 500ms, 2m); needs --checkpoint-dir")
    run.add_argument("--restarts", type=int, default=0, metavar="N",
                     help="run the job in a process of its own and start it again, up to N times, "
                          "when it dies (kill -9, out of memory, a failure); with --checkpoint-dir "
                          "it resumes from the newest good checkpoint")
    run.add_argument("--console", metavar="[HOST:]PORT",
                     help="serve a live web console of the job at http://HOST:PORT/ (HOST defaults "
                          "to 127.0.0.1; PORT 0 picks a free one)")
    graph = sub.add_parser("graph", allow_abbrev=False,
                           help="draw a graph script's graph without running it")
    graph.add_argument("script", metavar="graph.py")
    graph.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    graph.add_argument("--format", "-f", dest="fmt", choices=("svg", "dot", "mermaid"), default="svg",
                       help="svg (laid out by Graphviz's dot), dot or mermaid text (default: svg)")
    graph.add_argument("--output", "-o", metavar="FILE", help="write FILE instead of standard output")
    spark = sub.add_parser("spark", allow_abbrev=False,
                           help="deploy a graph script onto Spark Structured Streaming")
    spark.add_argument("action", choices=("run", "explain"),
                       help="run: deploy and wait for the query; explain: how each operator translates")
    spark.add_argument("script", metavar="graph.py")
    spark.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    spark.add_argument("--master", default="local[2]", help="Spark master URL (default: local[2])")
    spark.add_argument("--checkpoint", metavar="DIR",
                       help="the query's checkpoint location; a restart with it resumes the windows")
    spark.add_argument("--mode", choices=("auto", "driver", "keyed"), default="auto",
                       help="keyed: windows per key group in Spark's state store; driver: the whole "
                            "graph in the driver per micro-batch; auto: keyed where it is exact")
    spark.add_argument("--trigger", metavar="INTERVAL",
                       help="keep running with this processing-time trigger (e.g. '1 second'); "
                            "default: run until the sources end (availableNow)")
    spark.add_argument("--max-records", type=int, default=100_000,
                       help="items per micro-batch from each source (default 100000); a file "
                            "Spark's tasks read in parallel goes in ranges of at least 4 KiB a "
                            "task, and one read whole (`riverbed spark explain` says which) in "
                            "one batch, so their batches may hold more")
    ckpt = sub.add_parser("checkpoints", allow_abbrev=False,
                           help="what a checkpoint directory holds; repair a damaged one")
    ckpt.add_argument("action", choices=("list", "show", "repair"),
                      help="list: every checkpoint and its status; show: one checkpoint's states; "
                           "repair: rebuild a damaged store with RocksDB's repair (stop the job first)")
    ckpt.add_argument("directory", metavar="DIR")
    ckpt.add_argument("id", nargs="?", type=int, help="checkpoint id for show (default: the newest)")
    demo = sub.add_parser("demo", allow_abbrev=False,
                           help="run an SPL window over a generated sensor stream")
    demo.add_argument("--window", default="sliding, count(10), count(5), partitioned, partitionCount(100)",
                      help="the SPL window clause")
    demo.add_argument("--sensors", type=int, default=5)
    demo.add_argument("--readings", type=int, default=60)
    demo.add_argument("--flavor", choices=["java", "cpp"], default="java")
    demo.add_argument("--seed", type=int, default=7)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C in a command that does not catch it itself (`riverbed graph` while its script
        # builds, `trace`, `demo`): one line and the shell's code for it, not a traceback.
        # (`riverbed run` and `riverbed spark run` stop their jobs themselves.)
        print("riverbed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Its output went to a reader that stopped (``riverbed demo | head``): nothing more to
        # say, and nothing to say it to. Python's own flush at exit would raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "run" and args.restarts and not os.environ.get(SUPERVISOR_ENV):
        # (a job process its supervisor started never supervises: a second guard against a chain)
        if args.restarts < 0:
            print(f"riverbed run: --restarts {args.restarts}: expected a number >= 0", file=sys.stderr)
            return 2
        from .runtime import configure_logging, get_logger
        from .supervise import child_arguments, supervise

        configure_logging(args.log_format, args.log_level, route_stdlib=True)
        return supervise(child_arguments(argv), args.restarts, get_logger("riverbed-supervisor"))
    if args.command == "trace":
        from .trace import main as trace_main

        return trace_main(args.cases, args.flavor, args.host, args.out)
    if args.command == "run":
        from .run import run

        return run(args.script, params=args.param, log_format=args.log_format,
                   log_level=args.log_level, metrics_port=args.metrics_port, status=args.status,
                   status_interval=args.status_interval, virtual_clock=args.virtual_clock,
                   checkpoint_dir=args.checkpoint_dir, checkpoint_period=args.checkpoint_period,
                   console=args.console, linger=args.linger)
    if args.command == "graph":
        from .console import graph_command

        return graph_command(args.script, params=args.param, fmt=args.fmt, output=args.output)
    if args.command == "spark":
        from .spark_bridge import spark_command

        return spark_command(args.action, args.script, params=args.param, master=args.master,
                             checkpoint=args.checkpoint, mode=args.mode, trigger=args.trigger,
                             max_records=args.max_records)
    if args.command == "checkpoints":
        from .run import checkpoints_command

        return checkpoints_command(args.action, args.directory, args.id)
    from .demo import main as demo_main

    return demo_main(args.window, args.sensors, args.readings, args.flavor, args.seed)
