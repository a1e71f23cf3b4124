"""Scheduled jobs: operator-defined cron runs, each an ordinary turn with its own card.

`CHATOPS_SCHEDULED_JOBS` holds a JSON list of jobs (see `ScheduledJob`); `chatops scheduler`
adds each to its APScheduler instance. A run is written exactly as the ingress writes a
mention: a `ChatEvent` from the `scheduler` author, classified by the policy table and
submitted through the queue's one script, so a worker runs it, the card is kept live, the
settle lands in the books (a completed answer in `automation`), and the card's Stop button, a
"stop" reply in its thread and the kill switch all stop it.

Where the card goes. Every platform adapter posts a card as a reply in a thread (Slack
`thread_ts`, Feishu a reply in the root message's topic), and the session (what a Stop button
or a "stop" reply is routed to) is keyed by that thread's root. A card posted as a new
top-level message would root a thread of its own whose id is known only after the post, so
neither its button nor a reply in its thread would reach the run's session. So each run starts
a thread: the scheduler posts a short top-level notice naming the job through the platform's
`ChannelPoster` (`bot.publishing.channel_posts`), and the run's event carries the root's
workspace and thread (Slack's team and `ts`, Feishu's tenant and root `message_id`), so the
run's card follows in that thread like any mention's card. On the console a thread is any id
the client names: the run's id names it, under a notice of its own. The root's idempotency
key is the run's id, so Feishu posts it once even when a firing is retried.

Exactly once per fire time, across any number of schedulers. Every scheduler fires every job
(the leader lock is not consulted: a hand-over mid-minute could fire twice or not at all).
The run's event id is derived from (job id, scheduled fire time), so two schedulers firing
the same run agree on it; the first to claim it (`SET NX`, kept as long as the queue's
dedupe markers) starts the thread and submits the run, the other does nothing. The submit
script dedupes on that event id as well. A scheduler that dies between its claim and its
submit loses that one run (it is never fired twice); the next fire time runs as usual.

`tools` narrows a job's runs to some of the worker's tools (by name, e.g. `["http_get",
"prometheus_query"]`; `[]` is none): it travels with the run's event to the worker, which
offers only those. Omitted, a run has every tool of the worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import redis.asyncio as aioredis
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from agent_core import map_redis_errors
from bot.errors import BotConfigError
from bot.events import AuthorKind, ChatEvent, Platform
from bot.intake.queue import DEDUPE_TTL_S, Queue
from bot.intake.routing import RoutingOutcome, route_event
from bot.keys import BotKeys
from bot.publishing.channel_posts import ChannelPoster
from bot.settings import Settings
from bot.worker.clients import channel_posters
from cards import Notice

__all__ = [
    "MISFIRE_GRACE_S",
    "ScheduledJob",
    "ScheduledJobs",
    "latest_fire_time",
    "parse_jobs",
    "root_notice",
    "run_event_id",
    "scheduled_jobs_from",
]

log = logging.getLogger(__name__)

MISFIRE_GRACE_S = 60
"""A run may start this late (a busy loop, a paused process) and still be fired; later, it is
skipped. Missed runs are coalesced into the latest one."""
FIRE_TIMEOUT_S = 30.0
"""Bound of one firing (the thread's first message and the submit)."""

_JobId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ScheduledJob(BaseModel):
    """One entry of `CHATOPS_SCHEDULED_JOBS`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: _JobId
    """Names the job in logs, in its runs' ids and in the thread's first message."""
    cron: _Text
    """Five crontab fields: minute, hour, day of month, month, day of week. Weekdays by name
    (`mon-fri`): APScheduler 3 numbers them from Monday = 0, crontab from Sunday = 0."""
    timezone: _Text = "UTC"
    """IANA zone the cron fields are read in (`Europe/Berlin`)."""
    platform: Platform
    channel: _Text
    """Slack channel id; Feishu chat id (`oc_…`); console channel name."""
    prompt: _Text
    """The task, as a person would write it after the mention."""
    tools: tuple[_Text, ...] | None = None
    """The worker's tools a run may use, by name; omitted: all of them."""
    second: _Text | None = None
    """Optional crontab-style seconds field (default: at second 0). Meant for tests and
    demos that need several runs a minute."""

    def trigger(self) -> CronTrigger:
        """The job's APScheduler trigger.

        Raises:
            ValueError: The cron fields or the time zone are not valid.
        """
        zone = ZoneInfo(self.timezone)  # ZoneInfoNotFoundError is a KeyError, not ValueError
        fields = self.cron.split()
        if len(fields) == 5 and re.search(r"\d", fields[4]):
            raise ValueError(
                f"day of week {fields[4]!r}: use names (mon-fri, sun): APScheduler 3 numbers "
                "weekdays from Monday = 0, crontab from Sunday = 0"
            )
        parsed = CronTrigger.from_crontab(self.cron, timezone=zone)
        if self.second is None:
            return parsed
        minute, hour, day, month, day_of_week = fields
        return CronTrigger(
            second=self.second,
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=day_of_week,
            timezone=zone,
        )


def parse_jobs(raw: str) -> tuple[ScheduledJob, ...]:
    """Parse `CHATOPS_SCHEDULED_JOBS` (empty: no jobs), checking every trigger.

    Raises:
        BotConfigError: Not a JSON list of jobs, or a job is invalid (named in the message).
    """
    if not raw.strip():
        return ()
    try:
        entries: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BotConfigError(f"CHATOPS_SCHEDULED_JOBS is not JSON: {exc}") from exc
    if not isinstance(entries, list):
        raise BotConfigError("CHATOPS_SCHEDULED_JOBS must be a JSON list of jobs")
    jobs: list[ScheduledJob] = []
    for n, entry in enumerate(entries):
        name = entry.get("id") if isinstance(entry, dict) else None
        label = f"job {name!r}" if isinstance(name, str) and name else f"job #{n + 1}"
        job = _job(entry, label)
        if any(known.id == job.id for known in jobs):
            raise BotConfigError(f"CHATOPS_SCHEDULED_JOBS: {label} is defined twice")
        jobs.append(job)
    return tuple(jobs)


def _job(entry: object, label: str) -> ScheduledJob:
    try:
        job = ScheduledJob.model_validate(entry)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
        )
        raise BotConfigError(f"CHATOPS_SCHEDULED_JOBS: {label}: {problems}") from exc
    try:
        job.trigger()
    except ZoneInfoNotFoundError as exc:
        raise BotConfigError(
            f"CHATOPS_SCHEDULED_JOBS: {label}: unknown time zone {job.timezone!r}"
        ) from exc
    except ValueError as exc:
        raise BotConfigError(f"CHATOPS_SCHEDULED_JOBS: {label}: cron: {exc}") from exc
    return job


def run_event_id(job_id: str, fire_time: datetime) -> str:
    """The event id of a job's run at `fire_time`: the same in every scheduler process.

    The time is taken in UTC to the second, so the zone a trigger reports it in does not
    matter.
    """
    stamp = fire_time.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"scheduled-{job_id}-{stamp}"


def latest_fire_time(
    trigger: CronTrigger, now: datetime, grace_s: float = MISFIRE_GRACE_S
) -> datetime | None:
    """The trigger's latest fire time at or before `now`, within `grace_s` (None: none).

    APScheduler 3 calls a job with its own arguments only: the scheduled run time reaches the
    executor (`submit_job(job, run_times)`) and the `EVENT_JOB_SUBMITTED` listeners, never the
    function. The job is due once `now` reaches its fire time, and with `coalesce=True` the
    run it is given is the latest missed one, no older than `misfire_grace_time`; so inside
    the run, the latest fire time in (now - grace, now] is the scheduled time, computed alike
    by every scheduler, with no state kept between runs.
    """
    latest = None
    fire: datetime | None = trigger.get_next_fire_time(None, now - timedelta(seconds=grace_s))
    while fire is not None and fire <= now:
        latest = fire
        fire = trigger.get_next_fire_time(fire, fire + timedelta(microseconds=1))
    return latest


def root_notice(job: ScheduledJob, fire_time: datetime) -> Notice:
    """The top-level message a run's thread starts with: the job, when, and its task."""
    local = fire_time.astimezone(ZoneInfo(job.timezone)).strftime("%Y-%m-%d %H:%M")
    return Notice(
        title=f"Scheduled job {job.id}",
        lines=(job.prompt,),
        fields=(("Scheduled for", f"{local} {job.timezone}"),),
    )


class ScheduledJobs:
    """Fires the configured jobs: one run per job and fire time, whichever scheduler fires."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: BotKeys,
        jobs: Sequence[ScheduledJob],
        posters: Mapping[Platform, ChannelPoster],
        holder: str,
    ) -> None:
        """Wire the jobs to their queue and the platforms' posters (which start each thread).

        Raises:
            BotConfigError: A job's platform is not configured.
        """
        for job in jobs:
            if job.platform not in posters:
                raise BotConfigError(
                    f"CHATOPS_SCHEDULED_JOBS: job {job.id!r}: platform {job.platform} is not "
                    "configured"
                )
        self._redis = redis
        self._keys = keys
        self._queue = Queue(redis, keys)
        self.jobs = tuple(jobs)
        self._posters = posters
        self._holder = holder
        self._triggers = {job.id: job.trigger() for job in jobs}

    def add_to(self, scheduler: Any) -> None:
        """Add every job to an APScheduler 3 scheduler."""
        for job in self.jobs:
            scheduler.add_job(
                self.fire,
                self._triggers[job.id],
                args=[job],
                id=f"scheduled:{job.id}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=MISFIRE_GRACE_S,
            )

    async def fire(self, job: ScheduledJob, now: datetime | None = None) -> str:
        """Fire `job`'s run that is due now; return what happened, for logs and tests.

        `started`, `fired elsewhere` (another scheduler claimed it), `duplicate` (the queue
        had the run already), `not due`, or `failed` (logged; the run is lost, the next fire
        time runs).
        """
        fire_time = latest_fire_time(self._triggers[job.id], now or datetime.now(UTC))
        if fire_time is None:
            return "not due"
        run_id = run_event_id(job.id, fire_time)
        try:
            async with asyncio.timeout(FIRE_TIMEOUT_S):
                outcome = await self._fire(job, fire_time, run_id)
        except Exception:
            log.exception("scheduled job %s: run %s failed", job.id, run_id)
            return "failed"
        log.info("scheduled job %s: run %s %s", job.id, run_id, outcome)
        return outcome

    async def _fire(self, job: ScheduledJob, fire_time: datetime, run_id: str) -> str:
        claim = f"{self._keys.root}:scheduled:{run_id}"
        with map_redis_errors("claim a scheduled run"):
            claimed = await self._redis.set(claim, self._holder, nx=True, ex=DEDUPE_TTL_S)
        if not claimed:
            return "fired elsewhere"
        poster = self._posters[job.platform]
        root = await poster.post_root(job.channel, root_notice(job, fire_time), key=run_id)
        event = ChatEvent(
            platform=job.platform,
            event_id=run_id,
            workspace=root.workspace,
            channel=job.channel,
            thread=root.thread,
            message_id="",  # deduped on the event id alone
            author=f"scheduler:{job.id}",
            author_name=f"scheduled job {job.id}",
            author_kind=AuthorKind.SCHEDULER,
            text=job.prompt,
            sent_at=fire_time.timestamp(),
            tools=job.tools,
        )
        outcome = await route_event(self._queue, event)
        return "started" if outcome is RoutingOutcome.START else outcome.value


def scheduled_jobs_from(
    settings: Settings,
    *,
    redis: aioredis.Redis,
    keys: BotKeys,
    platforms: Sequence[Platform],
    holder: str,
) -> ScheduledJobs:
    """The configured jobs, ready to add to a scheduler.

    Args:
        settings: `CHATOPS_SCHEDULED_JOBS` and the platforms' credentials.
        redis: The scheduler's client.
        keys: The key names in use.
        platforms: The platforms configured in this deployment.
        holder: This scheduler's name (kept in the claims, for operators).

    Raises:
        BotConfigError: A job is invalid or its platform is not configured.
    """
    jobs = parse_jobs(settings.scheduled_jobs)
    wanted = {job.platform for job in jobs} & set(platforms)
    posters = channel_posters(settings, sorted(wanted), redis=redis)
    return ScheduledJobs(redis=redis, keys=keys, jobs=jobs, posters=posters, holder=holder)
