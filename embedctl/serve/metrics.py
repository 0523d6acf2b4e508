"""Prometheus metrics of one service (its own registry: two apps in one process never share counters)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self, search_depth: Any, write_depth: Any):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("embedctl_requests", "HTTP requests answered", ["endpoint", "status"], registry=r)
        self.latency = Histogram("embedctl_request_seconds", "Time to answer a request", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.documents = Gauge("embedctl_documents", "Live documents in the version searched", registry=r)
        self.version = Gauge("embedctl_index_version", "Committed index version searched", registry=r)
        self.search_batch = Histogram("embedctl_search_batch_queries", "Queries per encoder micro-batch",
                                      buckets=BATCH_BUCKETS, registry=r)
        self.commits = Counter("embedctl_commits", "Commits made by the service", ["kind"], registry=r)
        self.commit_requests = Histogram("embedctl_commit_requests", "Write requests grouped per commit",
                                         buckets=BATCH_BUCKETS, registry=r)
        self.commit_seconds = Histogram("embedctl_commit_seconds", "Time of one commit (encode + write + fsync)",
                                        buckets=LATENCY_BUCKETS, registry=r)
        queue = Gauge("embedctl_queue_depth", "Requests waiting for the encoder or the writer", ["queue"], registry=r)
        queue.labels("search").set_function(search_depth)
        queue.labels("write").set_function(write_depth)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_version(self, version: int, documents: int) -> None:
        self.version.set(version)
        self.documents.set(documents)

    def observe_commit(self, kind: str, requests: int, items: int, seconds: float) -> None:
        self.commits.labels(kind).inc()
        self.commit_requests.observe(requests)
        self.commit_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
