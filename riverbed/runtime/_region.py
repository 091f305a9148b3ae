"""A consistent region at run time: its checkpoints, and its resets when something in it fails.

A region checkpoints its members together: its sources emit a barrier, every member reports
its state once the barrier aligned on the connections inside the region, and the last report
commits the checkpoint to the region's store. When a member fails (an exception that no
error port takes), a checkpoint takes longer than ``drain_timeout``, or a reset does not
finish within ``reset_timeout``, the region resets in place (SPL's consistent-region reset):
every member's task is cancelled, what is in flight inside the region is dropped (inboxes,
outputs not handed over, held items), every member is restored from the last committed
checkpoint (or its initial state), and the members run again: sources replay from their
checkpointed positions, so transactional sinks end with exactly the output of a run that
never failed. ``max_consecutive_reset_attempts`` resets without a checkpoint committed in
between fail the job, naming the operator, the tuple and the attempts.

Members inside a parallel region run in its worker processes: its host (`ParallelHost`) restores,
resets, restarts and tells them of commits, and when the region's sources are replicated there,
the host starts each checkpoint at every replica.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..core import RegionMetrics, RestoreRefused, reusable_state, same_key, state_to_restore
from ..graph import CheckpointBarrier, ConsistentRegion, Operator
from ..windows import same_clause
from ._clock import RealClock
from ._parallel import channel_states
from ._unsaved import UnsavedState

if TYPE_CHECKING:
    from ._clock import Clock
    from ._job import Job
    from ._runner import OperatorRunner

__all__ = ["CheckpointSink", "Region", "RegionFailed", "RegionState"]


class StoredCheckpoint(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def job(self) -> str: ...

    @property
    def time_ns(self) -> int: ...

    @property
    def states(self) -> Mapping[str, Any]: ...


class CheckpointSink(Protocol):
    """Where a region's checkpoints go (`riverbed.checkpoint` stores satisfy this)."""

    def save(self, checkpoint_id: int, states: Mapping[str, Any], *, job: str, time_ns: int) -> None: ...

    def latest_good(self) -> StoredCheckpoint | None: ...


class RegionState(enum.Enum):
    PROCESSING = "processing"
    DRAINING = "draining"  # a checkpoint is under way
    RESETTING = "resetting"
    FAILED = "failed"


class RegionFailed(Exception):
    """A region failed ``max_consecutive_reset_attempts`` times in a row without a checkpoint."""


@dataclass(slots=True)
class _Pending:
    id: int
    states: dict[str, Any]
    started: int  # the job clock's ns when it started, for its drain duration and timeout
    waiters: list[asyncio.Future[bool]]


class Region:
    """One consistent region of a running job (``spec`` None: the one over the whole job that
    ``--checkpoint-dir`` makes when the graph declares none)."""

    def __init__(self, job: Job, name: str, spec: ConsistentRegion | None,
                 members: list[OperatorRunner], store: CheckpointSink) -> None:
        self.job = job
        self.name = name
        self.spec = spec
        self.members = members
        self.member_names = frozenset(r.name for r in members)
        self.store = store
        self.period: float | None = spec.period if spec is not None else None
        self.drain_timeout = spec.drain_timeout if spec is not None else 180.0
        self.reset_timeout = spec.reset_timeout if spec is not None else 180.0
        self.max_attempts = spec.max_consecutive_reset_attempts if spec is not None else 5
        self.operator_driven = spec is not None and spec.trigger == "operator_driven"
        self.heals = spec is not None  # the job's implicit region heals if its sources replay
        self.state = RegionState.PROCESSING
        self.pending: _Pending | None = None
        self.last_committed: int | None = None
        self.next_id = 1
        self.restored_from: int | None = None
        self.suspend_at: int | None = None
        self.committed_ids: deque[int] = deque()
        self.initial: dict[str, Any] = {}  # each member's own snapshot when the job started
        self.metrics = RegionMetrics(name, members=len(members))
        self._resetting: asyncio.Task[None] | None = None
        self._periodic: asyncio.Task[Any] | None = None  # `periodic`'s task while it waits
        self._consecutive = 0
        # The wall time of the last save, kept clear after it on a real clock: a save longer
        # than the period (it runs on the event loop) started the next checkpoint at once.
        self._quiet_until: int | None = None
        self._slow_told = False
        self._timers_told: set[str] = set()  # operators warned of timers no checkpoint holds
        self._last_failure: BaseException | None = None
        self._failed_at: int | None = None
        self._phases: dict[str, float] = {}  # the last reset's phases: stop, load, restore (ms)
        # The last committed checkpoint's states, kept to reset from without decoding it
        # (`riverbed.core.reusable_state`); None when one of them could not be kept.
        self._kept: tuple[int, dict[str, Any]] | None = None
        for r in members:
            barrier_conns = [i for i, c in enumerate(r.core.connections) if c.operator in self.member_names]
            r.core.join_region(name, barrier_conns)
            r.region = self
        # Parallel regions inside: their operators run in worker processes, which the host
        # (`ParallelHost`) restores, resets, restarts and tells of commits, not their runners.
        self.hosts = [h for h in job.parallel if h.members[0] in self.member_names]
        self.hosted = frozenset(n for h in self.hosts for n in h.members)
        self._unsaved = UnsavedState(r for r in members if r.name not in self.hosted)

    @property
    def label(self) -> str:
        """The region as messages name it: the job-wide region (``--checkpoint-dir``, name '')
        is "the job's consistent region", not "consistent region ''"."""
        return f"consistent region {self.name!r}" if self.name else "the job's consistent region"

    @property
    def log_name(self) -> str:
        """The region in log fields: "job" for the job-wide region, whose name is '' (as the
        status view, Prometheus and the console call it)."""
        return self.name or "job"

    # ------------------------------------------------------------ restore on start

    def restore_latest(self) -> None:
        """At start: continue from the newest good checkpoint of this region's store."""
        newest = getattr(self.store, "newest_id", None)
        self.next_id = ((newest() if callable(newest) else None) or 0) + 1  # ids keep increasing
        held = getattr(self.store, "held_ids", None)
        if callable(held):  # an earlier run's checkpoints: the members hear when they are dropped
            self.committed_ids = deque(held())
        for r in self.members:
            self.initial[r.name] = r.core.guard(r.op.snapshot)
        if not self.job.restore_enabled:
            return
        latest = self.store.latest_good()
        if latest is None:
            return
        # Refused before anything ran, in one line (`riverbed run` exits 2, and a supervisor
        # does not restart it): another job's store, then another graph's.
        if latest.job != self.job.name:
            raise RestoreRefused(
                f"checkpoint {latest.id} was taken by job {latest.job!r}, and this job is "
                f"{self.job.name!r}: restoring it would continue another job's state; give this "
                "job a checkpoint directory of its own (or the name it had)")
        missing = [r.name for r in self.members if r.name not in latest.states]
        if missing:
            raise RestoreRefused(
                f"checkpoint {latest.id} has no state for operator(s) {', '.join(missing)}: it "
                "was taken from a different graph of the same job name; give this graph a "
                "checkpoint directory of its own")
        states = dict(latest.states)
        for r in self.members:
            if r.name not in self.hosted:
                states[r.name] = self._outside_region(latest.id, r.name, states[r.name])
            self._check_ports(latest.id, r.name, r.odef, r.core.port_shapes, states[r.name],
                              connections=len(r.core.connections))
        gone = sorted(set(latest.states) - {r.name for r in self.members})
        if gone:
            self.job.log_region("state left behind", region=self.label, checkpoint=latest.id,
                                operators=gone, hint="these operators are not in the graph any "
                                "more: their checkpointed state is not restored")
        self.job.clock.resume_at(latest.time_ns)  # (before any operator is activated)
        self._keep(latest.id, states)  # before a restore could change them
        for h in self.hosts:
            h.restore_on_start(latest)  # refuses a checkpoint taken with another width or key
        for r in self.members:
            if r.name not in self.hosted:
                r.restore_on_start(states[r.name], latest.id)
        self.restored_from = self.last_committed = latest.id
        self.metrics.last_committed = latest.id
        self.next_id = max(self.next_id, latest.id + 1)

    @staticmethod
    def _outside_region(checkpoint_id: int, name: str, state: Any) -> Any:
        """The state of an operator the graph now runs in the job's process: a parallel region's
        of width 1 is its one channel's; of more, refused (its keys' state is split over the
        channels' states: the restore failed once the job ran, exit 1, retried)."""
        channels = channel_states(state)
        if channels is None:
            return state
        if len(channels) == 1:
            return channels[0]
        raise RestoreRefused(
            f"checkpoint {checkpoint_id}: operator {name!r} was checkpointed in a parallel region "
            f"of width {len(channels)}, and the graph now runs it outside any region; its keys' "
            "state is split over the channels. Run it in its region again (e.g. -p "
            f"width={len(channels)}), or give the job a new checkpoint directory")

    @staticmethod
    def _check_ports(checkpoint_id: int, name: str, odef: Any, now: list[list[str | None]],
                     state: Any, *, connections: int) -> None:
        """Refuse a state whose input ports had another window clause or partition key than
        the graph's now, or whose operator had other connections: a changed clause failed the
        restore once the job ran (exit 1, retried), a changed key merged the old partitions into
        the new ones (exit 0)."""
        channels = channel_states(state)
        if channels:
            state = channels[0]  # a parallel region's: each channel's has the same ports
        saved = state.get("ports") if isinstance(state, dict) else None
        if saved is None:
            return  # (a state of an older riverbed, or not a core's)
        for port, (was, is_) in enumerate(zip(saved, now, strict=False)):
            window = odef.inputs[port].window  # (``time(1)`` is ``time(1.0)``: one window)
            if list(was) != list(is_) and not (same_key(was[1], is_[1]) and (
                    was[0] == is_[0] or (window is not None and same_clause(was[0], window)))):
                raise RestoreRefused(
                    f"checkpoint {checkpoint_id}: operator {name!r} input port {port} had window "
                    f"{was[0]!r} partitioned by {was[1]!r}, and now has {is_[0]!r} partitioned by "
                    f"{is_[1]!r}: its windows' state would not fit; run the graph as it was, or "
                    "give it a new checkpoint directory")
        if len(saved) != len(now):
            raise RestoreRefused(f"checkpoint {checkpoint_id}: operator {name!r} had {len(saved)} "
                                 f"input port(s) and now has {len(now)}; run the graph as it was, "
                                 "or give it a new checkpoint directory")
        finals = state.get("finals")
        if isinstance(finals, list) and len(finals) != connections:
            raise RestoreRefused(f"checkpoint {checkpoint_id}: operator {name!r} had {len(finals)} "
                                 f"input connection(s) and now has {connections}: what each had "
                                 "received would go to another; run the graph as it was, or give "
                                 "it a new checkpoint directory")

    # ---------------------------------------------------------------- checkpoints

    @property
    def finished(self) -> bool:
        return all(r.core.finished for r in self.members)

    def start_checkpoint(self) -> int | None:
        """Start a checkpoint now (None: one is under way, the region resets, or it ended)."""
        if self.pending is not None or self.state is not RegionState.PROCESSING or self.finished:
            return None
        checkpoint_id = self.next_id
        self.next_id += 1
        self.pending = _Pending(checkpoint_id, {}, self.job.clock.now(), [])
        self.state = RegionState.DRAINING
        for r in self.members:
            core = r.core
            if core.finished:
                self.report(checkpoint_id, r.name, core.final_state)
            elif r.name in self.hosted:
                continue  # in worker processes: barriers reach it there (replicas: see below)
            elif r.odef.kind == "source":
                r.start_checkpoint(checkpoint_id)  # (at once, if it waits for the clock)
            elif core.inputs_ended or not any(c.operator in self.member_names
                                              for c in core.connections):
                # No barrier can reach it (its inputs ended but it still holds items, like
                # Delay): it starts the checkpoint itself, in order in its task.
                r.put_control(CheckpointBarrier(checkpoint_id, self.name))
        for h in self.hosts:
            if h.sources and self.pending is not None:  # (the reports may have committed it)
                h.start_checkpoint(checkpoint_id)  # replicated sources start it in every worker
        return checkpoint_id

    def report(self, checkpoint_id: int, operator: str, state: Any) -> None:
        pending = self.pending
        if pending is None or pending.id != checkpoint_id or self.state is RegionState.RESETTING:
            return  # (a reset is coming: the checkpoint under way will not commit)
        pending.states[operator] = state
        if len(pending.states) == len(self.members):
            self._commit(pending)

    def operator_finished(self, runner: OperatorRunner) -> None:
        pending = self.pending
        if pending is not None and runner.name not in pending.states:
            self.report(pending.id, runner.name, runner.core.final_state)
        task = self._periodic
        if task is not None and self.finished and task is not asyncio.current_task():
            # Its last member ended: no checkpoint comes any more, and the job must not wait
            # for the periodic task's next look (up to half the period or drain_timeout).
            self._periodic = None
            task.cancel()

    def _commit(self, pending: _Pending) -> None:
        started = time.monotonic()
        clock = self.job.clock
        now = clock.now()
        self.store.save(pending.id, pending.states, job=self.job.name, time_ns=now)
        self._keep(pending.id, pending.states)
        m = self.metrics
        took = time.monotonic() - started
        m.checkpoint_ms = took * 1000
        if isinstance(clock, RealClock) and self.period is not None:
            self._quiet_until = clock.now() + int(took * 1e9)
            if took > self.period / 2 and not self._slow_told:
                self._slow_told = True
                self.job.log_region("checkpoint_slow", region=self.log_name, checkpoint=pending.id,
                                    seconds=round(took, 3), period=self.period,
                                    hint="saving a checkpoint stops the job's other work; it "
                                         "took over half the checkpoint period, and the next "
                                         "waits as long after it: raise --checkpoint-period")
        m.drain_ms = (now - pending.started) / 1e6
        m.checkpoints += 1
        m.last_committed = self.last_committed = pending.id
        self.pending = None
        self.state = RegionState.PROCESSING
        self._consecutive = self.metrics.consecutive_resets = 0
        self._retire(pending.id)
        for h in self.hosts:
            h.committed(pending.id)
        for r in self.members:
            if r.name in self.hosted:
                continue
            r.core.guard(r.op.on_checkpoint_committed, None, pending.id)
            if r.odef.kind != "source" and any(o.has_output for o in r.core.outputs):
                r.wake()  # what the operator submitted in the callback goes out
        for waiter in pending.waiters:
            if not waiter.done():
                waiter.set_result(True)
        for r in self.members:
            if r.name in self._timers_told or r.name in self.hosted \
                    or type(r.op).restore is not Operator.restore:
                continue
            timers = r.core.live_timers
            if timers:
                self._timers_told.add(r.name)
                self.job.log_region("operator_timers_not_checkpointed", operator=r.name,
                                    timers=timers,
                                    hint="call_at() timers are not in a checkpoint: after a "
                                         "restart or a reset they are gone; keep what they "
                                         "would do in snapshot() and set them again in restore()")
        for name, attributes in self._unsaved.committed():
            self.job.log_region("operator_state_not_checkpointed", operator=name,
                                attributes=attributes,
                                hint="these attributes changed between two checkpoints, and the "
                                     "operator has no snapshot(): they are not in the checkpoint "
                                     "and start over after a restart; return them from "
                                     "snapshot() and take them back in restore()")
        if pending.id == self.suspend_at:
            self.job.region_suspended(self)

    def _keep(self, checkpoint_id: int, states: Mapping[str, Any]) -> None:
        """Keep a committed checkpoint's states for resets (a region that never heals keeps
        nothing)."""
        self._kept = None
        if not self.heals:
            return
        kept: dict[str, Any] = {}
        for r in self.members:
            state = reusable_state(states.get(r.name))
            if state is None:
                return
            kept[r.name] = state
        self._kept = (checkpoint_id, kept)

    def _retire(self, checkpoint_id: int) -> None:
        """The store keeps ``keep_last`` checkpoints: tell the members which one it dropped."""
        self.committed_ids.append(checkpoint_id)
        keep = getattr(self.store, "keep_last", None)
        while isinstance(keep, int) and len(self.committed_ids) > keep:
            old = self.committed_ids.popleft()
            for r in self.members:
                if r.name not in self.hosted:
                    r.core.guard(r.op.retire_checkpoint, None, old)

    def request_consistent(self) -> asyncio.Future[bool]:
        """Checkpoint the region now (SPL's ``makeConsistent``): a future that is True once the
        checkpoint committed, False if the region was reset first (or cannot checkpoint)."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.pending is None:
            self.start_checkpoint()
        pending = self.pending
        if pending is None:
            waiter.set_result(False)
        else:
            pending.waiters.append(waiter)
        return waiter

    async def periodic(self) -> None:
        """Checkpoints every ``period``; a checkpoint over ``drain_timeout`` resets the region."""
        period_ns = int(self.period * 1e9) if self.period is not None else None
        clock = self.job.clock
        due = clock.now() + period_ns if period_ns is not None else None
        check_ns = int(min(self.drain_timeout, self.period or self.drain_timeout) * 1e9 / 2)
        self._periodic = asyncio.current_task()
        try:
            await self._periodically(clock, due, period_ns, check_ns)
        finally:
            self._periodic = None

    async def _periodically(self, clock: Clock, due: int | None, period_ns: int | None,
                            check_ns: int) -> None:
        while not self.finished:
            wake = clock.now() + check_ns if due is None else min(due, clock.now() + check_ns)
            await clock.sleep_until(max(wake, clock.now() + 1))
            if self.job.stopping:
                return  # the stop took its own checkpoint; later ones would hold ended operators
            pending = self.pending
            if pending is not None and clock.now() - pending.started > self.drain_timeout * 1e9:
                self.fail(None, TimeoutError(f"checkpoint {pending.id} of {self.label} "
                                             f"took over drain_timeout={self.drain_timeout:g} s"))
                continue
            quiet = self._quiet_until
            if due is not None and clock.now() >= due and (quiet is None or clock.now() >= quiet):
                due = max(due + period_ns, clock.now())  # type: ignore[operator]
                self.start_checkpoint()
            elif due is not None and quiet is not None and clock.now() < quiet:
                due = max(due, quiet)

    # ---------------------------------------------------------------------- resets

    def fail(self, runner: OperatorRunner | None, exc: BaseException) -> None:
        """A member failed (or a checkpoint timed out): reset the region, unless a reset is
        already under way; too many in a row fail the job."""
        self._last_failure = exc
        if self._resetting is not None and not self._resetting.done():
            return
        if not self.heals or self.job.stopping or self.job.suspended:
            self.job.fail_job(exc)
            return
        self._consecutive += 1
        self.metrics.consecutive_resets = self._consecutive
        if self._consecutive > self.max_attempts:
            self.state = RegionState.FAILED
            self.metrics.state = self.state.value
            self.job.fail_job(RegionFailed(
                f"{self.label} failed {self._consecutive} times in a row "
                f"(max_consecutive_reset_attempts={self.max_attempts}) without a checkpoint in "
                f"between; the last failure: {exc}"))
            return
        self._failed_at = self.job.clock.now()
        self.state = RegionState.RESETTING
        self.job.log_region("region reset", region=self.log_name, attempt=self._consecutive,
                            reason=str(exc), to_checkpoint=self.last_committed)
        self._resetting = self.job.spawn(self._reset(), f"{self.job.name}/{self.name}/reset")

    async def _reset(self) -> None:
        self.state = RegionState.RESETTING
        self.metrics.state = self.state.value
        pending = self.pending
        self.pending = None
        if pending is not None:
            for waiter in pending.waiters:
                if not waiter.done():
                    waiter.set_result(False)
        try:
            await asyncio.wait_for(self._reset_members(), self.reset_timeout)
        except Exception as exc:  # a restore that raised or took too long: one more attempt
            self._resetting = None
            self.state = RegionState.PROCESSING
            self.fail(None, exc if not isinstance(exc, TimeoutError) else TimeoutError(
                f"reset of {self.label} took over reset_timeout={self.reset_timeout:g} s"))
            return
        self.state = RegionState.PROCESSING
        self.metrics.resets += 1
        self.metrics.state = self.state.value
        if self._failed_at is not None:
            self.metrics.last_recovery_ms = (self.job.clock.now() - self._failed_at) / 1e6
        self._resetting = None
        self.job.log_region("region recovered", level="info", region=self.log_name,
                            checkpoint=self.last_committed, resets=self.metrics.resets,
                            recovery_ms=round(self.metrics.last_recovery_ms, 1),
                            **{k: round(v, 1) for k, v in self._phases.items()})
        for r in self.members:
            if r.name not in self.hosted:
                r.start(resume=True)
        for h in self.hosts:
            h.start()

    async def _reset_members(self) -> None:
        phases = self._phases = {}
        started = time.monotonic()
        for r in self.members:
            r.cancel()
        for h in self.hosts:
            h.cancel()
        await asyncio.gather(*(r.stopped() for r in self.members), *(h.stopped() for h in self.hosts))
        phases["stop_ms"] = (time.monotonic() - started) * 1000
        states: Mapping[str, Any] | None = None
        checkpoint: Any = None
        kept = self._kept
        if self.last_committed is not None:
            if kept is not None and kept[0] == self.last_committed:  # never with hosted members:
                states = {name: state_to_restore(state)  # their states are not core states
                          for name, state in kept[1].items()}
            else:
                load = getattr(self.store, "load", None)
                checkpoint = load(self.last_committed) if callable(load) else self.store.latest_good()
                states = checkpoint.states if checkpoint is not None else None
        phases["load_ms"] = (time.monotonic() - started) * 1000 - phases["stop_ms"]
        for r in self.members:
            r.purge()
        for h in self.hosts:
            h.reset(checkpoint)
        for r in self.members:
            if r.name in self.hosted:
                continue
            state = states[r.name] if states is not None else None
            r.core.reset(state, initial_operator_state=self.initial.get(r.name))
            r.wake()  # the operator's restore may already have submitted (held items due)
        phases["restore_ms"] = (time.monotonic() - started) * 1000 - phases["stop_ms"] - phases["load_ms"]
