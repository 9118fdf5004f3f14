"""``make dev``'s backfill, submitted once: the partitions before the live sensor's first, then the day before.

``make dev`` starts the partitions a couple of days back (:func:`gpu_health.partitions.recent_start`); the
five-minute sensor starts an hour back (its initial look-back) and follows the clock from there. The rest of the
window is computed once, as Dagster backfills submitted through the webserver's GraphQL API (the call the UI's
"Launch backfill" makes): the daemon runs them and the UI's Backfills page shows their progress.

1. ``five_minute_job`` over the partition start .. the partition before the sensor's first, read from the sensor's
   cursor once it has ticked, so the backfill and the sensor never compute the same partition. The job's assets
   backfill a range as one run (their backfill policy): one run, in time order, each partition reading the
   look-backs the earlier ones wrote.
2. Once that run succeeded, ``daily_job`` for the day before the sensor's first partition: finance has a settled
   day (its 288 partitions computed) from the first minutes, not only after the 00:20 schedule.

The backfills' runs carry a queue priority above the sensor's (``dagster/priority``): the daemon's run queue is
first in, first out, and the backfill is only planned after the sensor's first tick, which queues the sensor's
first hour (twelve runs, two at a time on the dev instance) ahead of it; without it the history would wait behind
that hour, and the hour would be computed before the history its look-backs read.

These are job backfills, not one asset backfill of both: an asset backfill refuses a range of today's 5-minute
partitions, whose KPIs read today's ``cost_capacity``, a daily partition that exists only once the day is over.

A marker file records each submission: a restart submits nothing again (the sensor's cursor carries on from where
it stopped) and only waits for what is left (the daily backfill); a backfill of the same title already in the
instance counts as submitted. Remove the marker (it sits in the Dagster instance's directory) to backfill again.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import requests

from gpu_health.constants import PARTITION, PARTITION_FREQ
from gpu_health.polling import poll
from gpu_health.steps.readiness import SensorCursor, partition_key, partition_start

SENSOR = "five_minute_partition_sensor"
FIVE_MINUTE_JOB, DAILY_JOB = "five_minute_job", "daily_job"
TITLES = {FIVE_MINUTE_JOB: "make dev: the partitions before the live sensor's",
          DAILY_JOB: "make dev: finance of the day before"}
DAY_FMT = "%Y-%m-%d"  # the daily partitions' keys (dg.DailyPartitionsDefinition)
_DONE = {"SUCCESS", "FAILURE", "CANCELED"}
# Dagster's run-queue priority tag (higher first, default 0): the history before the sensor's queued hour
PRIORITY_TAGS = [{"key": "dagster/priority", "value": "1"}]

_REPOS = """{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name }
  partitionSets { name pipelineName }
  sensors { name sensorState { typeSpecificData { ... on SensorData { lastCursor } } } } } } } }"""
_BACKFILLS = "{ partitionBackfillsOrError(limit: 100) { ... on PartitionBackfills { results { id title } } } }"
_RUNS = """query($id: String!) { runsOrError(filter: {tags: [{key: "dagster/backfill", value: $id}]}) {
  ... on Runs { results { status } } } }"""
_LAUNCH = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on Error { message } } }"""


@dataclass(frozen=True)
class Plan:
    five_minute: list[str]  # the 5-minute partition keys, oldest first (empty: the sensor starts at the start)
    day: str | None  # the daily partition; None: the window holds no day before the sensor's

    def describe(self) -> str:
        five = (f"{len(self.five_minute)} 5-minute partitions {self.five_minute[0]} .. {self.five_minute[-1]}"
                if self.five_minute else "no 5-minute partition")
        return five + (f", then finance of {self.day}" if self.day else "")


def sensor_start(cursor_text: str | None) -> pd.Timestamp | None:
    """The first partition the sensor requested (or waits for), from its cursor; None before its first tick."""
    cursor = SensorCursor.loads(cursor_text)
    if cursor.versions:
        return partition_start(min(cursor.versions))
    return cursor.next_start


def plan(start_key: str, sensor_first: pd.Timestamp) -> Plan:
    """What the backfills hold: the 5-minute partitions from ``start_key`` to the one before ``sensor_first``,
    and the day before ``sensor_first``'s day when it is inside the partitions."""
    start = partition_start(start_key)
    keys = [partition_key(t) for t in pd.date_range(start, sensor_first - PARTITION, freq=PARTITION_FREQ)]
    day = sensor_first.normalize() - pd.Timedelta(days=1)
    return Plan(keys, day.strftime(DAY_FMT) if day >= start.normalize() else None)


class GraphQL:
    """The few calls to the webserver's GraphQL API the backfill needs."""

    def __init__(self, url: str, timeout: float = 60.0):
        self.url, self.timeout = url, timeout

    def __call__(self, query: str, variables: dict | None = None) -> dict:
        response = requests.post(self.url, json={"query": query, "variables": variables or {}}, timeout=self.timeout)
        if response.status_code >= 400:
            raise RuntimeError(f"{self.url} answered HTTP {response.status_code}: {response.text[:500]}")
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(f"GraphQL error from {self.url}: {body['errors'][0].get('message')}")
        return body["data"]

    def wait(self, what: str, probe, timeout_s: float, every_s: float = 5.0):
        """``probe()``'s first answer that is not None, polled until ``timeout_s``; a server not up yet (or too
        busy to answer) is waited for too."""
        return poll(f"{what} at {self.url}", probe, timeout_s, every_s)

    def _repos(self) -> list[dict]:
        return self(_REPOS)["repositoriesOrError"].get("nodes", [])

    def sensor_cursor(self) -> str | None:
        for repo in self._repos():
            for sensor in repo["sensors"]:
                if sensor["name"] == SENSOR:
                    return (sensor["sensorState"].get("typeSpecificData") or {}).get("lastCursor")
        return None

    def backfill_titled(self, title: str) -> str | None:
        results = self(_BACKFILLS)["partitionBackfillsOrError"].get("results") or []
        return next((b["id"] for b in results if b.get("title") == title), None)

    def runs_done(self, backfill_id: str) -> list[str] | None:
        """The statuses of the backfill's runs once every one has ended (None while any has not, or none exists)."""
        statuses = [r["status"] for r in self(_RUNS, {"id": backfill_id})["runsOrError"].get("results", [])]
        return statuses if statuses and set(statuses) <= _DONE else None

    def launch(self, job: str, partition_names: list[str], title: str) -> str:
        found = [(repo, ps["name"]) for repo in self._repos() for ps in repo["partitionSets"]
                 if ps["pipelineName"] == job]
        if not found:
            raise RuntimeError(f"no partition set of {job} in the code location")
        repo, partition_set = found[0]
        selector = {"partitionSetName": partition_set,
                    "repositorySelector": {"repositoryLocationName": repo["location"]["name"],
                                           "repositoryName": repo["name"]}}
        answer = self(_LAUNCH, {"params": {"selector": selector, "partitionNames": partition_names,
                                           "title": title, "tags": PRIORITY_TAGS}})["launchPartitionBackfill"]
        if answer["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(f"{job}'s backfill was refused: {answer['__typename']}: {answer.get('message')}")
        return answer["backfillId"]


def _submit(gql: GraphQL, job: str, names: list[str], marker: Path, record: dict, ui_url: str) -> str:
    backfill_id = gql.backfill_titled(TITLES[job]) or gql.launch(job, names, TITLES[job])
    record[job] = backfill_id
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    where = f"; progress: {ui_url.rstrip('/')}/runs/b/{backfill_id}" if ui_url else ""
    print(f"dev backfill: {job} {backfill_id} over {names[0]} .. {names[-1]} ({len(names)}){where}", flush=True)
    return backfill_id


def submit_once(graphql_url: str, start_key: str, marker: str | Path, *, ui_url: str = "",
                timeout_s: float = 900.0, run_timeout_s: float = 6 * 3600.0) -> dict:
    """Submit what the marker does not record yet (waiting for the webserver, for the sensor's first tick, and for
    the 5-minute backfill's run before the daily one); returns the marker's record."""
    marker = Path(marker)
    record = json.loads(marker.read_text()) if marker.exists() else {}
    if DAILY_JOB in record or record.get("plan") == "nothing":
        print(f"dev backfill: submitted already ({marker}; remove it to backfill again)", flush=True)
        return record
    gql = GraphQL(graphql_url)
    if "day" not in record:
        first = gql.wait(f"the first tick of {SENSOR}", lambda: sensor_start(gql.sensor_cursor()), timeout_s)
        the_plan = plan(start_key, first)
        print(f"dev backfill: the sensor starts at {partition_key(first)}: {the_plan.describe()}", flush=True)
        record.update(day=the_plan.day, plan="" if the_plan.five_minute or the_plan.day else "nothing")
        if the_plan.five_minute:
            _submit(gql, FIVE_MINUTE_JOB, the_plan.five_minute, marker, record, ui_url)
        else:
            marker.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    if record.get(FIVE_MINUTE_JOB):
        statuses = gql.wait(f"the run of backfill {record[FIVE_MINUTE_JOB]}",
                            lambda: gql.runs_done(record[FIVE_MINUTE_JOB]), run_timeout_s, every_s=30.0)
        if set(statuses) != {"SUCCESS"}:
            print(f"dev backfill: the 5-minute backfill ended {sorted(set(statuses))}: finance of {record['day']} "
                  f"is left to the daily schedule", flush=True)
            return record
    if record.get("day"):
        _submit(gql, DAILY_JOB, [record["day"]], marker, record, ui_url)
    return record
