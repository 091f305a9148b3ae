"""Deploy a frozen graph as one Spark Structured Streaming query (see `_plan` for the shapes)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..graph import FrozenGraph, Graph
from ._driver import DriverStage, log_dir, stage_dir
from ._errors import TranslationError
from ._feeder import SourceFeeder
from ._group_reads import GroupReader, publish_group_parts, reader_of
from ._group_reads import changed_since_planned as group_parts_changed
from ._inputs import SparkInput
from ._keyed import KEYED_OUT_DDL, ROUTED_DDL, STATE_DDL, Hosted, group_function, make_router, spread_labels
from ._metrics import list_accumulator
from ._outputs import SparkOutput, check_outputs, clear_commits, with_outputs
from ._pipeline import PipelinedStage
from ._plan import Mode, Plan, plan
from ._reads import (
    PART_DDL,
    ReadPlan,
    changed_since_planned,
    part_reader,
    parts_published,
    plan_parts,
    publish_parts,
    read_log,
)
from ._rows import ROW_DDL
from ._session import DEFAULT_CONF
from ._source import BUNDLE_ITEMS, dump_payload, route_of
from ._stages import (
    JOIN_ROUTED_DDL,
    NextStage,
    joined_group_function,
    make_join_router,
    stage_processor,
)

__all__ = ["Deployment", "deploy", "keyed_stages", "stage_hosts"]


@dataclass
class Deployment:
    """A running (or finished) query, its plan, and the driver stage holding the sinks
    (run by ``pipeline``, a batch behind Spark)."""

    plan: Plan
    query: Any
    stage: DriverStage
    checkpoint: str
    pipeline: PipelinedStage
    temporary: bool = False  # the checkpoint is a temporary directory, removed at the end
    feeders: tuple[SourceFeeder, ...] = ()
    reads: Any = None  # `_reads.read_log`: which task read each part of a source Spark reads
    tasks: Any = None  # `_metrics.list_accumulator`: each keyed group's task (`stage_spread`)

    def stage_spread(self) -> dict[int, dict[str, Any]]:
        """Per keyed stage: its tasks, key groups, partitions and Python workers, and the share
        of its busy time with two or more of its tasks running (`_metrics.spread`)."""
        from ._metrics import spread

        return spread(self.tasks.value) if self.tasks is not None else {}

    @property
    def read_tasks(self) -> list[tuple[int, int, int, int]]:
        """Each part of a source read by Spark's tasks, as ``(part, stage, partition, worker
        pid)``, in the order the reads were reported (sorted by part)."""
        return sorted(self.reads.value) if self.reads is not None else []

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query (with ``available_now`` it stops once its sources ended and
        every row went through); re-raise what failed in it, or in a source."""
        try:
            if timeout is None:
                self.query.awaitTermination()
            elif not self.query.awaitTermination(timeout):
                return False
            self._raise_source_error()
            return True
        finally:
            if not self.query.isActive:
                self._finish()

    def stop(self) -> None:
        for feeder in self.feeders:
            feeder.stop()
        self.query.stop()
        self._finish()

    def abandon(self) -> None:
        """End what runs in Python (feeders, the driver stage) when Spark's JVM is gone and the
        query can no longer be asked anything."""
        with contextlib.suppress(Exception):  # (a driver-stage batch that failed with the JVM)
            self._finish()

    def _raise_source_error(self) -> None:
        for feeder in self.feeders:
            if feeder.error is not None:
                raise feeder.error

    def _finish(self) -> None:
        for feeder in self.feeders:
            feeder.stop()
        try:
            self.pipeline.close()
        finally:
            if self.temporary:  # nothing can resume from it: no deployment was given its name
                shutil.rmtree(self.checkpoint, ignore_errors=True)


def keyed_stages(graph: FrozenGraph, p: Plan, labels: list[int], state_dir: str | None
                 ) -> tuple[Hosted, DriverStage]:
    """Keyed mode's first stage (what each of its key groups runs) and the driver stage after
    the last stage."""
    hosts, stage = stage_hosts(graph, p, labels, state_dir)
    return hosts[0][0], stage


def _copies(graph: FrozenGraph, members: Sequence[str]) -> bool:
    """Whether every window mark out of a stage is a copy that each of its groups forwards."""
    return all(graph.operator(m).operator.window_punctuation == "preserving" for m in members)


def stage_hosts(graph: FrozenGraph, p: Plan, labels: list[int], state_dir: str | None
                ) -> tuple[list[tuple[Hosted, NextStage | None]], DriverStage]:
    """Every keyed stage's host with how its output reaches the next stage (None: the driver
    stage), and the driver stage. A stage of G groups uses the first G ``labels``."""
    stages = p.stages
    hosts: list[tuple[Hosted, NextStage | None]] = []
    for n, st in enumerate(stages):
        partition_by = graph.operator(st.members[0]).inputs[0].partition_by
        before = stages[n - 1] if n else None
        hosted = Hosted(graph, tuple(st.members), st.entry,
                        partition_by if isinstance(partition_by, str) else None,
                        tuple(labels[:st.groups]),
                        channels=before.groups if before else 1,
                        copied_marks=_copies(graph, before.members) if before else True,
                        entries=tuple(p.entries) if n == 0 else (),
                        reads=_group_reader(graph, p, labels) if n == 0 else None)
        nxt = None
        if n + 1 < len(stages):
            after = stages[n + 1]
            key = graph.operator(after.members[0]).inputs[0].partition_by
            nxt = NextStage(key, after.groups, tuple(labels[:after.groups]))
        hosts.append((hosted, nxt))
    last = stages[-1]
    n_out = len(graph.operator(last.members[-1]).outputs)
    stage = DriverStage(graph, p.driver, [(last.members[-1], port) for port in range(n_out)],
                        [last.groups] * n_out, state_dir=state_dir,
                        copied_marks=_copies(graph, last.members))
    return hosts, stage


def _group_reader(graph: FrozenGraph, p: Plan, labels: list[int]) -> GroupReader | None:
    read = p.group_read
    if read is None:
        return None
    assert p.keyed is not None
    return reader_of(graph, read.source, p.keyed, labels[:p.groups])


def _join_keys(graph: FrozenGraph, p: Plan) -> list[Any]:
    """For each source stream of a keyed Join, the equality key of the side it feeds."""
    assert p.keyed is not None
    join = graph.operator(p.keyed)
    op: Any = join.operator  # a Join (the plan checked)
    keys = op.equality_keys
    by_source = {inp.connections[0].operator: port for port, inp in enumerate(join.inputs)}
    return [keys[by_source[name]] for name in p.sources]


class _Fixed:
    """Every key group hosts the same operators (picklable, unlike a lambda in a closure)."""

    def __init__(self, hosted: Hosted) -> None:
        self.hosted = hosted

    def __call__(self, key: tuple[Any, ...]) -> Hosted:
        return self.hosted


_GROUPS_FILE = "riverbed-key-groups.json"
_PLAN_FILE = "riverbed-plan.json"
_JOB_FILE = "riverbed-job.json"


def _read_record(checkpoint: str, name: str) -> dict[str, Any] | None:
    """One of the small JSON records riverbed keeps in the checkpoint directory (None: none)."""
    path = os.path.join(checkpoint, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        record: dict[str, Any] = json.load(f)
    return record


def _write_record(checkpoint: str, name: str, record: dict[str, Any]) -> None:
    """Write a record whole or not at all (a crash leaves the old one, or none)."""
    os.makedirs(checkpoint, exist_ok=True)
    path = os.path.join(checkpoint, name)
    with open(f"{path}.tmp", "w") as f:
        json.dump(record, f)
    os.replace(f"{path}.tmp", path)


def _claim(checkpoint: str, job: str, *, write: bool = True) -> None:
    """The checkpoint directory belongs to one job: another job's would restore its offsets
    and state (Spark finds every source read already, and the run does nothing)."""
    record = _read_record(checkpoint, _JOB_FILE)
    if record is None:
        if write:
            _write_record(checkpoint, _JOB_FILE, {"job": job})
    elif record.get("job") != job:
        raise TranslationError(None, f"the checkpoint {checkpoint!r} was written by job "
                                     f"{record.get('job')!r}, and this job is {job!r}: restoring "
                                     "it would continue another job; give this job a checkpoint "
                                     "directory of its own")


def _same_plan(checkpoint: str, p: Plan, *, write: bool = True) -> None:
    """The checkpoint's state and offsets fit the plan that wrote them only: a restart with
    another mode, or with operators moved between stages and the driver, read keyed state as a
    driver's (a KeyError traceback) or asked Spark for state it never stored. The plan's shape
    is kept with the checkpoint, and a restart under another is refused before Spark starts."""
    shape = {"mode": p.mode, "stages": [list(st.members) for st in p.stages],
             "driver": list(p.driver), "reads": sorted(p.reads)}
    saved = _read_record(checkpoint, _PLAN_FILE)
    if saved is None:
        if write:
            _write_record(checkpoint, _PLAN_FILE, shape)
    elif _but_driver(saved) != _but_driver(shape) \
            or not set(shape["driver"]) <= set(saved.get("driver", ())):
        # (an operator gone from the driver stage leaves state no one restores: fine; one added
        # there has none to restore, and the driver stage's restore cannot start it)
        moved = sorted(set(saved.get("reads", ())) ^ {str(name) for name in shape["reads"]})
        why = "".join(f"; source {name!r} now: {p.notes[name]}" for name in moved if name in p.notes)
        raise TranslationError(None, f"the checkpoint {checkpoint!r} was written by another plan "
                                     f"({_shape_text(saved)}); this deployment's is "
                                     f"{_shape_text(shape)}: its state and offsets would not fit"
                                     f"{why}. Run the graph as it was (the same --mode, the same "
                                     "input), or give it a new checkpoint directory")


def _shape_text(shape: dict[str, Any]) -> str:
    parts = [f"mode {shape.get('mode')}"]
    parts += [f"stage {i + 1}: {', '.join(members)}" for i, members in enumerate(shape.get("stages", []))]
    if shape.get("driver"):
        parts.append(f"driver: {', '.join(shape['driver'])}")
    if shape.get("reads"):
        parts.append(f"read in parts: {', '.join(shape['reads'])}")
    return "; ".join(parts)


def _but_driver(shape: dict[str, Any]) -> dict[str, Any]:
    """A plan record without its driver stage's operators (compared on their own)."""
    return {k: v for k, v in shape.items() if k != "driver"}


def _saved_groups(checkpoint: str) -> dict[str, Any] | None:
    return _read_record(checkpoint, _GROUPS_FILE)


def refuse_checkpoint(frozen: FrozenGraph, checkpoint: str, mode: Mode) -> None:
    """What deploying refuses of an existing checkpoint directory (another job's, another
    plan's), checked before Spark starts: the refusal came after the seconds Spark takes to
    start, and its log. Without key groups recorded (a driver-mode query's), the plan is made
    with the session's default number of groups, as `deploy` makes it then."""
    if not os.path.isdir(checkpoint):
        return
    _claim(checkpoint, frozen.name, write=False)
    if _read_record(checkpoint, _PLAN_FILE) is None:
        return
    saved = _saved_groups(checkpoint)
    asked = saved.get("asked") if saved is not None else None
    groups = asked if isinstance(asked, int) else int(DEFAULT_CONF["spark.sql.shuffle.partitions"])
    p = plan(frozen, mode, groups=groups)
    _same_plan(checkpoint, p, write=False)
    for i, name in enumerate(p.sources):
        if name in p.reads:
            _refuse_changed_files(checkpoint, name, i, grouped=p.reads[name].grouped, graph=frozen)


def _refuse_changed_files(checkpoint: str, source: str, index: int, *, grouped: bool = False,
                          graph: FrozenGraph | None = None) -> None:
    """A restart reads source ``index``'s remaining parts as planned by the first run: refused
    if a file they were cut from changed since (`changed_since_planned`; ``grouped``: parts the
    key groups read, `_group_reads.changed_since_planned`, which also refuses files added since
    to the source's listing: ``graph`` has the source)."""
    directory = os.path.join(checkpoint, f"riverbed-parts-{index}")
    if grouped:
        assert graph is not None
        src: Any = graph.operator(source).operator  # (a ParquetSource: the plan made it grouped)
        problem = group_parts_changed(directory, src.files())
    else:
        problem = changed_since_planned(directory)
    if problem is not None:
        raise TranslationError(source, problem)


ROUTING = 2  # how keys map to groups: 2 routes keys Python finds equal together (`same_key`)
_STILL_ROUTED = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "rstring", "ustring"})  # declared key types whose groups did not move


def _routing_unchanged(graph: FrozenGraph, p: Plan) -> bool:
    """Whether every key the plan routes is a declared int or string attribute: their groups
    are the same under routing 1 and 2. Floats, bools, key functions, Join keys and undeclared
    schemas may have moved."""
    for stage in p.stages:
        head = graph.operator(stage.members[0])
        if head.name == p.keyed and p.entries:
            return False  # a Join's equality keys
        for port, inp in enumerate(head.inputs):
            key = inp.partition_by
            schema = graph.input_schema(head.name, port)
            if not isinstance(key, str) or schema is None or schema.type_of(key) not in _STILL_ROUTED:
                return False
    return True


def _one_group_why(p: Plan) -> str:
    """Why the plan's one-group stages are one group, for a refusal of a checkpoint keyed in
    more (an older riverbed keyed a discardAge window by its partitions)."""
    one = "; ".join(f"{st.members[0]!r}: {p.notes[st.members[0]]}" for st in p.stages
                    if st.groups == 1 and st.members[0] in p.notes)
    return (f" ({one}; a checkpoint of another riverbed may have keyed it otherwise: give the job a "
            "new checkpoint directory)") if one else ""


def _key_groups(checkpoint: str, saved: dict[str, Any] | None, asked: int, groups: int,
                choose: Any, *, unchanged: bool = True, why: str = "") -> list[int]:
    """The key groups' labels, kept with the checkpoint: a restart routes every key to the group
    whose stored state holds it, whatever the new session's shuffle partitions are.
    ``unchanged``: the graph's keys map to the same groups under every `ROUTING`."""
    if saved is not None:
        if saved["groups"] != groups:
            raise TranslationError(None, f"the checkpoint {checkpoint!r} holds windows in "
                                         f"{saved['groups']} key groups; this deployment would use "
                                         f"{groups}{why}")
        if saved.get("routing", 1) != ROUTING:
            if not unchanged:
                raise TranslationError(
                    None, f"the checkpoint {checkpoint!r} was written when keys Python finds equal "
                          "(3 and 3.0, True and 1, -0.0 and 0.0) could go to different key groups; "
                          "this graph's keys (not all declared ints or strings) may now go to other "
                          "groups than the ones holding their state: give it a new checkpoint "
                          "directory")
            _write_record(checkpoint, _GROUPS_FILE, {**saved, "routing": ROUTING})
        return [int(x) for x in saved["labels"]]
    labels: list[int] = choose()
    _write_record(checkpoint, _GROUPS_FILE, {"asked": asked, "groups": groups, "labels": labels,
                                             "routing": ROUTING})
    return labels


SLOW_START = 8  # a run's first micro-batch is this many times smaller than the others


def _source_frame(spark: Any, graph: FrozenGraph, sources: list[tuple[str, int]], *, max_rows: int,
                  spool: str, feeders: list[SourceFeeder], route: Any = None, round_rows: int = 1,
                  stream_column: bool = False) -> Any:
    """The graph's ``sources`` (name, index) as one stream of rows, at most ``max_rows`` of each
    a micro-batch, cut at multiples of ``round_rows`` (see `SourceFeeder`; the feeder is added
    to ``feeders`` and started: the caller stops it if the query does not start). The first
    micro-batch of a run is smaller (`SLOW_START`): the query starts on it while the sources
    make the next. With ``stream_column`` the rows of source ``index`` have ``stream = index``."""
    first = max(1, max_rows // round_rows // SLOW_START) * round_rows
    directory = os.path.join(spool, f"riverbed-source-{sources[0][1]}")
    feeder = SourceFeeder([dump_payload((graph, name, index, route)) for name, index in sources],
                          directory, ROW_DDL if route is None else ROUTED_DDL, first=first,
                          size=max_rows, name=",".join(name for name, _ in sources),
                          streams=[index for _, index in sources] if stream_column else None)
    feeders.append(feeder)
    os.makedirs(directory, exist_ok=True)  # Spark checks the path exists when the frame is made
    feeder.start()  # now: its first file is made while the rest of the query is built and started
    return (spark.readStream.schema(feeder.ddl).option("maxFilesPerTrigger", 1)
            .option("cleanSource", "delete").parquet(directory))


def _parts_frame(spark: Any, graph: FrozenGraph, rp: ReadPlan, index: int, *, max_rows: int,
                 spool: str, log: Any, route: Any = None) -> Any:
    """Source ``rp`` read by Spark's tasks (`_reads`): its parts' descriptions, a micro-batch
    of one part per task, spread over the tasks, each read into rows (routed with ``route``)."""
    from ._keyed import ROUTED_DDL

    tasks = max(1, int(spark.sparkContext.defaultParallelism))
    directory = os.path.join(spool, f"riverbed-parts-{index}")
    if not parts_published(directory):
        publish_parts(directory, plan_parts(graph, rp, records=max_rows, tasks=tasks), tasks)
    else:
        _refuse_changed_files(spool, rp.source, index)
    frame = (spark.readStream.schema(PART_DDL).option("maxFilesPerTrigger", 1).parquet(directory)
             .repartition(tasks))
    return frame.mapInPandas(part_reader(graph, rp, index, route, log),
                             ROW_DDL if route is None else ROUTED_DDL)


def _group_parts_frame(spark: Any, graph: FrozenGraph, source: str, labels: list[int], *,
                       max_rows: int, spool: str) -> Any:
    """Source ``source`` read by the key groups themselves (`_group_reads`): a row per group and
    part, planned and published once, a micro-batch of about ``max_rows`` source rows each."""
    from ._keyed import ROUTED_DDL

    directory = os.path.join(spool, "riverbed-parts-0")
    if not parts_published(directory):
        publish_group_parts(directory, graph, source, labels, index=0, max_rows=max_rows)
    else:
        _refuse_changed_files(spool, source, 0, grouped=True, graph=graph)
    return spark.readStream.schema(ROUTED_DDL).option("maxFilesPerTrigger", 1).parquet(directory)


def _check_inputs(inputs: Mapping[str, SparkInput], available_now: bool) -> None:
    """Refuse, before the query is made, an input whose columns are missing, and an endless one
    (MQTT) in a query that runs until its sources end: Spark's availableNow read one
    micro-batch of it and the query stopped, exit 0, the rest left in the spool."""
    for name, given in inputs.items():
        if available_now and given.endless:
            raise TranslationError(name, "an MQTT stream (mqtt_input) has no end, and this query "
                                         "would run only until its sources end: it read one "
                                         "micro-batch and stopped. Give it a processing-time "
                                         "trigger: riverbed spark run --trigger '1 second' (from "
                                         "Python: deploy(..., available_now=False, "
                                         "processing_time='1 second'))")
        given.check_columns(name)


def _watch_feeders(query: Any, feeders: list[SourceFeeder], available_now: bool) -> None:
    """Stop the query when a source failed (`await_termination` raises its error), and with
    ``available_now`` once every source ended and the query took what they published
    (Spark's file source has no end of its own)."""
    for feeder in feeders:
        feeder.finished.wait()
        if feeder.error is not None:
            with contextlib.suppress(Exception):  # (the JVM gone: nothing to stop)
                query.stop()
            return
    if available_now:
        try:
            query.processAllAvailable()
        except Exception:  # the query failed; `await_termination` raises its error
            return
        with contextlib.suppress(Exception):  # (the JVM gone: nothing to stop)
            query.stop()


def deploy(graph: Graph | FrozenGraph, spark: Any, *, mode: Mode = "auto", checkpoint: str | None = None,
           available_now: bool = True, processing_time: str | None = None,
           max_records_per_batch: int = 100_000, groups: int | None = None,
           inputs: Mapping[str, SparkInput] | None = None,
           outputs: Mapping[str, SparkOutput] | None = None) -> Deployment:
    """Start ``graph`` on ``spark``; returns at once (see `Deployment.await_termination`).

    ``checkpoint`` is the query's checkpointLocation (a fresh temporary one if
    None, removed when the deployment ends); restarting with the same directory
    resumes windows, operators and sources where the last completed micro-batch
    left them.
    ``available_now`` runs until the sources end (micro-batches of at most
    ``max_records_per_batch`` items); otherwise the query keeps running with
    ``processing_time`` triggers (for example ``"1 second"``).
    ``inputs`` replaces sources by Spark streams (`SparkInput`, e.g.
    `mqtt_input`); such a graph runs in driver mode. ``outputs`` replaces sinks by Spark's
    writers (`SparkOutput`), written once per committed micro-batch.
    """
    frozen = graph.freeze() if isinstance(graph, Graph) else graph
    if outputs:
        frozen = with_outputs(frozen, outputs)
    start = functools.partial(_deploy, frozen, spark, mode=mode, available_now=available_now,
                              processing_time=processing_time, groups=groups, inputs=inputs,
                              max_records_per_batch=max_records_per_batch)
    if checkpoint is not None:
        return start(checkpoint, temporary=False)
    temporary = tempfile.mkdtemp(prefix=f"riverbed-{frozen.name}-")
    try:
        return start(temporary, temporary=True)
    except BaseException:  # refused or failed to start: nothing will ever use it
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _deploy(frozen: FrozenGraph, spark: Any, checkpoint: str, *, temporary: bool, mode: Mode,
            available_now: bool, processing_time: str | None, max_records_per_batch: int,
            groups: int | None, inputs: Mapping[str, SparkInput] | None) -> Deployment:
    from pyspark.sql import functions as F

    inputs = dict(inputs or {})
    _check_inputs(inputs, available_now)
    check_outputs(spark, frozen)
    _claim(checkpoint, frozen.name)
    saved = _saved_groups(checkpoint)
    n_groups = groups or (saved["asked"] if saved else int(spark.conf.get("spark.sql.shuffle.partitions")))
    p = plan(frozen, mode, groups=n_groups, inputs=set(inputs))
    _same_plan(checkpoint, p)
    os.makedirs(checkpoint, exist_ok=True)
    feeders: list[SourceFeeder] = []

    def start() -> Deployment:
        log = read_log(spark) if p.reads else None
        tasks = list_accumulator(spark) if p.mode == "keyed" else None
        if p.mode == "driver":
            # The graph's own sources share one feeder, so each batch holds a share of every one.
            own = [(name, i) for i, name in enumerate(p.sources)
                   if name not in inputs and name not in p.reads]
            frames = [inputs[name].rows(i).withColumn("stream", F.lit(i))
                      for i, name in enumerate(p.sources) if name in inputs]
            frames.extend(_parts_frame(spark, frozen, p.reads[name], i, max_rows=max_records_per_batch,
                                       spool=checkpoint, log=log).withColumn("stream", F.lit(i))
                          for i, name in enumerate(p.sources) if name in p.reads)
            if own:
                frames.append(_source_frame(spark, frozen, own, max_rows=max_records_per_batch,
                                            spool=checkpoint, feeders=feeders, stream_column=True))
            df = frames[0]
            for f in frames[1:]:
                df = df.unionByName(f)
            df = df.withColumn("chan", F.lit(0))
            streams = [p.reads[name].stream if name in p.reads else (name, 0) for name in p.sources]
            stage = DriverStage(frozen, [*inputs, *p.driver], streams, [1] * len(streams),
                                state_dir=stage_dir(checkpoint), emitted=set(inputs))
        else:
            assert p.keyed is not None
            most = max(st.groups for st in p.stages)
            labels = _key_groups(checkpoint, saved, n_groups, most, lambda: spread_labels(spark, most),
                                 unchanged=_routing_unchanged(frozen, p), why=_one_group_why(p))
            hosts, stage = stage_hosts(frozen, p, labels, stage_dir(checkpoint))
            (hosted, nxt), later = hosts[0], hosts[1:]
            if p.entries:  # a Join: both sources in one stream, routed by each side's equality key
                source = _source_frame(spark, frozen, [(name, i) for i, name in enumerate(p.sources)],
                                       max_rows=max_records_per_batch, spool=checkpoint, feeders=feeders,
                                       stream_column=True)
                df = source.mapInPandas(make_join_router(_join_keys(frozen, p), labels[:p.groups]),
                                        JOIN_ROUTED_DDL).groupBy("grp").applyInPandasWithState(
                    joined_group_function(hosted, nxt, tasks), KEYED_OUT_DDL, STATE_DDL, "append",
                    "NoTimeout")
            elif p.pre_chain:  # the stateless chain runs first, then routes its output
                router = make_router(frozen, p.pre_chain, (p.sources[0], 0), p.keyed, groups=p.groups,
                                     labels=labels[:p.groups])
                read = p.reads.get(p.sources[0])
                source = (_parts_frame(spark, frozen, read, 0, max_rows=max_records_per_batch,
                                       spool=checkpoint, log=log)
                          if read is not None else
                          _source_frame(spark, frozen, [(p.sources[0], 0)], max_rows=max_records_per_batch,
                                        spool=checkpoint, feeders=feeders))
                routed = source.mapInPandas(router, ROUTED_DDL)
            elif p.group_read is not None:  # each key group reads its share
                routed = _group_parts_frame(spark, frozen, p.sources[0], labels[:p.groups],
                                            max_rows=max_records_per_batch, spool=checkpoint)
            elif p.sources[0] in p.reads:  # Spark's tasks read the source in parts, routing as they go
                size = min(BUNDLE_ITEMS, max_records_per_batch)
                routed = _parts_frame(spark, frozen, p.reads[p.sources[0]], 0, max_rows=max_records_per_batch,
                                      spool=checkpoint, log=log,
                                      route=route_of(frozen, p.keyed, p.groups, size, labels[:p.groups]))
            else:  # the source routes its rows itself, in bundles: about max_records items a batch
                size = min(BUNDLE_ITEMS, max_records_per_batch)
                rounds = max(1, max_records_per_batch // size)
                routed = _source_frame(spark, frozen, [(p.sources[0], 0)], max_rows=rounds * p.groups,
                                       spool=checkpoint, feeders=feeders, round_rows=p.groups,
                                       route=route_of(frozen, p.keyed, p.groups, size, labels[:p.groups]))
            if not p.entries:
                df = routed.groupBy("grp").applyInPandasWithState(
                    group_function(_Fixed(hosted), bundle_output=True, next_stage=nxt, log=tasks),
                    KEYED_OUT_DDL, STATE_DDL, "append", "NoTimeout")
            for n, (hosted, nxt) in enumerate(later, 2):  # each later stage: repartitioned by its key
                df = df.withColumnRenamed("stream", "grp").groupBy("grp").transformWithStateInPandas(
                    stage_processor(hosted, nxt, stage=n, log=tasks), KEYED_OUT_DDL, "append", "None")
        if stage.last_batch < 0:  # a fresh start: no commit a SparkOutput holds is this run's
            clear_commits(frozen)
        pipeline = PipelinedStage(stage, log_dir(checkpoint))

        def on_batch(batch: Any, batch_id: int) -> None:
            try:
                pipeline.process(batch, batch_id)
            finally:
                for feeder in feeders:
                    feeder.batch_done()

        try:  # (a trigger Spark refuses, e.g. a bad processing_time, must not leak the pipeline)
            writer = (df.writeStream.foreachBatch(on_batch)
                      .option("checkpointLocation", os.path.join(checkpoint, "spark"))
                      .queryName(f"riverbed-{frozen.name}"))
            if available_now and feeders:
                # Not Spark's availableNow: that trigger reads only the files present when the
                # query starts, and the feeders publish while it runs (`_watch_feeders` ends it).
                writer = writer.trigger(processingTime="0 seconds")
            elif available_now:
                writer = writer.trigger(availableNow=True)
            else:
                writer = writer.trigger(processingTime=processing_time or "1 second")
            query = writer.start()
        except BaseException:
            pipeline.close()
            raise
        if feeders:
            threading.Thread(target=_watch_feeders, args=(query, feeders, available_now), daemon=True,
                             name="riverbed-watch-feeders").start()
        return Deployment(p, query, stage, checkpoint, pipeline, temporary, tuple(feeders), log, tasks)

    try:  # the feeders start as their frames are made (`_source_frame`)
        return start()
    except BaseException:
        for feeder in feeders:
            feeder.stop()
        raise
