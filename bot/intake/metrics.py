"""The ingress's Prometheus metrics, on a registry of its own (so tests and apps don't share)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from bot.process.loop_lag import lag_histogram

__all__ = ["IngressMetrics"]


class IngressMetrics:
    """Counters for what the ingress accepted, refused and could not take; its loop's lag."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            "chatops_ingress_events",
            "Inbound events by platform and outcome (start, steer, stop, duplicate, ignored, ...)",
            ["platform", "outcome"],
            registry=self.registry,
        )
        self._event_children: dict[tuple[str, str], Counter] = {}
        self.rejected = Counter(
            "chatops_ingress_rejected",
            "Requests refused, by platform and HTTP status",
            ["platform", "status"],
            registry=self.registry,
        )
        self.alerts = Counter(
            "chatops_ingress_alerts",
            "Alert notifications by sender and outcome (accepted, duplicate, unrouted, ignored)",
            ["sender", "outcome"],
            registry=self.registry,
        )
        self.unreplicated = Counter(
            "chatops_ingress_unreplicated",
            "Events accepted before a replica acknowledged them (CHATOPS_REDIS_WAIT_REPLICAS): a "
            "failover right then could lose them",
            registry=self.registry,
        )
        self.unavailable = Counter(
            "chatops_ingress_unavailable",
            "Events answered 503 because Redis could not take them in time",
            registry=self.registry,
        )

        self.oldest_analysis = Gauge(
            "chatops_oldest_live_analysis_seconds",
            "Age of the oldest analysis a worker holds (read from Redis at scrape time); alert "
            "when it exceeds an hour: Feishu cards cannot be updated after 14 days",
            registry=self.registry,
        )
        self.killswitch = Gauge(
            "chatops_killswitch_on",
            "1 while the kill switch is on (read from Redis at scrape time)",
            registry=self.registry,
        )
        self.event_loop_lag = lag_histogram(self.registry)
        """Fed by the lifespan's `bot.process.loop_lag` monitor."""

    def event(self, platform: str, outcome: str) -> None:
        """Count one inbound event.

        The labelled child is looked up once per label pair: `labels()` takes a lock and builds
        a tuple on every call, and this runs on the webhook's hot path.
        """
        child = self._event_children.get((platform, outcome))
        if child is None:
            child = self._event_children[platform, outcome] = self.events.labels(platform, outcome)
        child.inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
