"""Deliver rows of the ``alerts`` table to Prometheus Alertmanager (API v2).

Plain Python (requests), no Dagster: the alerting sensor calls ``deliver`` and
keeps the state it returns in its cursor.

Mapping of one ``alerts`` row to an Alertmanager alert (``alert_to_payload``):

- labels (identity and routing): ``alertname`` (one per detector:
  ``scheduling_blocked`` -> ``GpuSchedulingBlocked``), ``severity`` (page | ticket |
  dashboard), ``cause_family``, ``region``, ``alert_id``. Alertmanager
  identifies an alert by its label set, so labels hold only these stable
  values; everything that changes while an alert is open is an annotation.
- annotations: ``summary``, ``description``, ``runbook`` (URL or text),
  ``runbook_url`` (the runbook's page under a configurable base URL),
  ``usd_per_hour`` (two decimals), ``scope``, ``first_partition_start``
  when the row has it, and ``reopened`` when the alert was re-opened.
- ``startsAt`` = ``opened_at``; ``endsAt`` = ``resolved_at`` for a resolved
  alert (Alertmanager resolves it), else ``now + ttl`` (see ``deliver`` for
  the resend cadence that keeps it firing).
- ``generatorURL``: optional link back, e.g. the Dagster UI page of the
  ``alerts`` asset.

Times without a time zone are taken as UTC (all our tables store UTC).
"""

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import requests

from gpu_health.constants import RUNBOOK_PATH, SEVERITIES
from gpu_health.storage.warehouse import masked_url

REQUIRED_KEYS = (
    "alert_id",
    "opened_at",
    "severity",
    "cause_family",
    "region",
    "scope",
    "summary",
    "usd_per_hour",
    "runbook",
)
DEFAULT_ALERTNAME = "GpuGoodputLoss"  # a row that names no detector
# A firing alert's endsAt is "now + DEFAULT_TTL"; deliver() must run at least
# every RESEND_INTERVAL so that Alertmanager sees ~4 resends before endsAt
# (the ratio Prometheus uses: endsAt = 4 x max(resend delay, eval interval)).
RESEND_INTERVAL = timedelta(minutes=5)
DEFAULT_TTL = 4 * RESEND_INTERVAL
# Example generator URL: the Dagster UI page of the alerts asset. "{alert_id}"
# in a generator URL is replaced by the (URL-quoted) alert id.
DAGSTER_ALERTS_ASSET_URL = "http://localhost:3000/assets/alerts"
POST_BATCH_SIZE = 500


class AlertmanagerError(RuntimeError):
    """Alertmanager refused a request (4xx) or stayed unreachable / 5xx after retries."""

    def __init__(self, message: str, status_code: int | None = None, body: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.pending = 0  # payloads of the failed delivery not yet taken (set by ``deliver_report``)


# --------------------------------------------------------------------------
# Row -> payload


def _is_null(value: Any) -> bool:
    if value is None:
        return True
    try:
        differs = value != value  # True for NaN and NaT
    except (TypeError, ValueError):
        return False
    if type(differs).__name__ == "NAType":  # pandas' NA compares to NA
        return True
    try:
        return bool(differs)
    except (TypeError, ValueError):  # an array-like value: not a null
        return False


def _required(alert: Mapping[str, Any], key: str) -> Any:
    if key not in alert:
        raise KeyError(f"alert row is missing required key {key!r} (has: {sorted(map(str, alert))})")
    value = alert[key]
    if _is_null(value):
        raise ValueError(f"alert row has a null {key!r} (alert_id={alert.get('alert_id')!r})")
    return value


def _optional(alert: Mapping[str, Any], key: str) -> Any:
    value = alert.get(key)
    return None if _is_null(value) else value


def _to_utc(value: Any, key: str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    elif not isinstance(value, datetime) and hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if not isinstance(value, datetime):
        raise TypeError(f"{key!r} must be a datetime or an ISO 8601 string, got {type(value).__name__}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def rfc3339(value: datetime) -> str:
    """``2026-11-20T10:05:00Z`` (fractional seconds only when present)."""
    return _to_utc(value, "time").isoformat().replace("+00:00", "Z")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def is_resolved(alert: Mapping[str, Any]) -> bool:
    """A row is resolved when it has a non-null ``resolved_at``."""
    return _optional(alert, "resolved_at") is not None


def _reopened(scope: Any) -> str | None:
    """"<when> (episode n)" of an alert the lifecycle re-opened (its scope's history), else None: a re-opened alert
    keeps its alert_id and opened_at, so Alertmanager gets the same labels (fingerprint) and startsAt as its first
    page, and this annotation says why it fires again."""
    try:
        history = json.loads(str(scope)).get("history") or {}
    except (ValueError, AttributeError):
        return None
    if not isinstance(history, dict) or "reopened_at" not in history:
        return None
    return f"{history['reopened_at']} (episode {history.get('episodes', 2)})"


def alertname_of(detector: str) -> str:
    """``scheduling_blocked`` -> ``GpuSchedulingBlocked``: one alertname per detector, in the CamelCase Prometheus
    rules use, so that Alertmanager's grouping by alertname (deploy/alertmanager.yml) groups like with like."""
    return "Gpu" + "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", detector) if part)


def runbook_url(runbook: str, base_url: str | None) -> str | None:
    """The runbook's page as a URL: the repository path the runbook text ends with (``Runbook: docs/...``), under
    ``base_url`` (where the repository's docs are served, e.g. its web view); None without either."""
    found = RUNBOOK_PATH.search(runbook.strip())
    if not base_url or not found:
        return None
    return base_url.rstrip("/") + "/" + found.group(1).lstrip("/")


def alert_to_payload(
    alert: Mapping[str, Any],
    *,
    now: datetime | None = None,
    ttl: timedelta = DEFAULT_TTL,
    generator_url: str | None = None,
    runbook_base_url: str | None = None,
) -> dict[str, Any]:
    """One ``alerts`` row as an Alertmanager v2 alert.

    Extra keys are ignored; a missing required key raises ``KeyError`` naming
    it, a null one ``ValueError``; an unknown severity ``ValueError``.
    ``alertname`` comes from the row's ``alertname`` if present, else from its
    ``detector`` (:func:`alertname_of`), else ``DEFAULT_ALERTNAME``. ``description`` defaults to the summary.
    ``generator_url`` may contain ``{alert_id}``.
    """
    values = {key: _required(alert, key) for key in REQUIRED_KEYS}
    severity = str(values["severity"])
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r} (alert_id={values['alert_id']!r})")
    alert_id = str(values["alert_id"])
    try:
        usd_per_hour = float(values["usd_per_hour"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"usd_per_hour must be a number, got {values['usd_per_hour']!r}") from exc
    if not math.isfinite(usd_per_hour):
        raise ValueError(f"usd_per_hour must be finite, got {usd_per_hour!r}")

    annotations = {
        "summary": _text(values["summary"]),
        "description": _text(_optional(alert, "description") or values["summary"]),
        "runbook": _text(values["runbook"]),
        "usd_per_hour": f"{usd_per_hour:.2f}",
        "scope": _text(values["scope"]),
    }
    link = runbook_url(annotations["runbook"], runbook_base_url)
    if link:
        annotations["runbook_url"] = link
    reopened = _reopened(values["scope"])
    if reopened:
        annotations["reopened"] = reopened
    first_partition_start = _optional(alert, "first_partition_start")
    if first_partition_start is not None:
        annotations["first_partition_start"] = rfc3339(_to_utc(first_partition_start, "first_partition_start"))

    starts_at = _to_utc(values["opened_at"], "opened_at")
    resolved_at = _optional(alert, "resolved_at")
    if resolved_at is not None:
        ends_at = _to_utc(resolved_at, "resolved_at")
    else:
        ends_at = _to_utc(now or datetime.now(UTC), "now") + ttl
    if ends_at < starts_at:
        raise ValueError(f"alert {alert_id!r} ends ({rfc3339(ends_at)}) before it starts ({rfc3339(starts_at)})")

    payload: dict[str, Any] = {
        "labels": {
            "alertname": _text(_optional(alert, "alertname") or (alertname_of(str(_optional(alert, "detector")))
                                                                  if _optional(alert, "detector") else DEFAULT_ALERTNAME)),
            "severity": severity,
            "cause_family": _text(values["cause_family"]),
            "region": _text(values["region"]),
            "alert_id": alert_id,
        },
        "annotations": annotations,
        "startsAt": rfc3339(starts_at),
        "endsAt": rfc3339(ends_at),
    }
    if generator_url:
        payload["generatorURL"] = generator_url.replace("{alert_id}", quote(alert_id, safe=""))
    return payload


def payload_hash(payload: Mapping[str, Any], resolved: bool) -> str:
    """Content hash of a payload, ignoring a firing alert's moving ``endsAt``."""
    content = {key: value for key, value in payload.items() if resolved or key != "endsAt"}
    content["resolved"] = resolved
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return digest[:16]


# --------------------------------------------------------------------------
# HTTP client


class AlertmanagerClient:
    """Small client for Alertmanager's v2 API.

    Connection errors, timeouts and 5xx answers are retried ``retries`` times
    with exponential backoff (``backoff``, ``2 * backoff``, ...); a 4xx raises
    ``AlertmanagerError`` at once with the response body. Posting alerts is
    idempotent (same labels = same alert), so retrying a POST is safe.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 5,
        retries: int = 3,
        backoff: float = 0.5,
        session: requests.Session | None = None,
    ):
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.base_url}{path}"
        attempts = self.retries + 1
        last_error = ""
        for attempt in range(attempts):
            try:
                response = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response
                body = response.text
                if response.status_code < 500:
                    raise AlertmanagerError(
                        f"Alertmanager rejected {method} {masked_url(url)}: HTTP {response.status_code}: {body}",
                        status_code=response.status_code,
                        body=body,
                    )
                last_error = f"HTTP {response.status_code}: {body}"
            if attempt + 1 < attempts:
                time.sleep(self.backoff * 2**attempt)
        raise AlertmanagerError(
            f"{method} {masked_url(url)} failed after {attempts} attempt(s); last error: {last_error}")

    def post(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """POST ``/api/v2/alerts`` (a list of payloads from ``alert_to_payload``)."""
        self._request("POST", "/api/v2/alerts", json=list(alerts))

    def get(
        self,
        active: bool = True,
        silenced: bool = True,
        inhibited: bool = True,
        unprocessed: bool = True,
        filter: list[str] | None = None,  # noqa: A002 - the API's own name
        receiver: str | None = None,
    ) -> list[dict[str, Any]]:
        """GET ``/api/v2/alerts``. Resolved alerts are never listed.

        ``filter`` takes matchers such as ``['alert_id="a1"', 'severity=~"page|ticket"']``.
        """
        params: list[tuple[str, str]] = [
            ("active", str(active).lower()),
            ("silenced", str(silenced).lower()),
            ("inhibited", str(inhibited).lower()),
            ("unprocessed", str(unprocessed).lower()),
        ]
        params += [("filter", matcher) for matcher in filter or []]
        if receiver is not None:
            params.append(("receiver", receiver))
        return self._request("GET", "/api/v2/alerts", params=params).json()

    def status(self) -> dict[str, Any]:
        """GET ``/api/v2/status`` (version, cluster, loaded configuration)."""
        return self._request("GET", "/api/v2/status").json()


# --------------------------------------------------------------------------
# Delivery


def _records(alerts_frame: Any) -> list[Mapping[str, Any]]:
    if hasattr(alerts_frame, "to_dict"):  # a pandas DataFrame
        return alerts_frame.to_dict("records")
    return list(alerts_frame)


def _state_value(severity: str, digest: str) -> str:
    return f"{severity}:{digest}"


def deliver(
    client: AlertmanagerClient, alerts_frame: Any, already_sent: Mapping[str, str], **options
) -> tuple[int, dict[str, str]]:
    """``deliver_report`` (same arguments and keyword options) reduced to ``(sent_count, new_state)``."""
    report = deliver_report(client, alerts_frame, already_sent, **options)
    return report.sent, report.state


def deliver_report(
    client: AlertmanagerClient,
    alerts_frame: Any,
    already_sent: Mapping[str, str],
    *,
    now: datetime | None = None,
    ttl: timedelta = DEFAULT_TTL,
    generator_url: str | None = None,
    runbook_base_url: str | None = None,
) -> "Delivery":
    """Post what Alertmanager must hear about; return a ``Delivery`` (count, new state, odd rows).

    ``alerts_frame``: rows of the ``alerts`` table (a DataFrame or an iterable
    of mappings), normally every alert that is open or resolved recently.
    ``already_sent``: the state returned by the previous call (``{}`` at first),
    ``alert_id -> "<severity>:<content hash>"``; a sensor keeps it as its
    cursor (``json.dumps``).

    What is posted:

    - every firing alert, every call. A firing alert carries
      ``endsAt = now + ttl`` (20 min by default), so this must run at least
      every ``RESEND_INTERVAL`` (5 min; i.e. a sensor with
      ``minimum_interval_seconds <= 300``) to resend it ~4 times before it
      would expire. New and updated alerts are thus posted at once; if
      delivery stops, Alertmanager resolves them itself ``ttl`` after the
      last send.
    - a resolved alert (``resolved_at`` set, ``endsAt = resolved_at``) when
      its content differs from what was last sent, so once.
    - when an alert's severity changed (escalation ticket -> page), a resolve
      (``endsAt = now``) for the old label set, which Alertmanager otherwise
      keeps as a separate alert until its ``endsAt``.

    Alerts that vanish from the frame are dropped from the state; a firing one
    expires in Alertmanager at its last ``endsAt``. Nothing is posted for
    them since their labels are no longer known.

    One odd row never stops the others (``tolerant_payload``): a value an
    annotation carries (a NaN or infinite ``usd_per_hour``, a null summary) is
    replaced by a placeholder and named in a ``data_warning`` annotation, so the
    page still goes out; a row that cannot be identified or timed (null
    ``alert_id`` or ``opened_at``, an unknown severity, an unreadable time) is
    left out, named in ``Delivery.skipped`` with the reason, and keeps the state
    it had, so it goes out once fixed.

    ``sent`` is the number of alert payloads posted. If a post fails,
    ``AlertmanagerError`` propagates (its ``pending`` says how many payloads
    were not taken) and the caller keeps its old state, so the next call sends
    everything again. Re-posting what Alertmanager already took is harmless:
    an alert is its label set, and the same label set is the same alert.
    """
    now = _to_utc(now or datetime.now(UTC), "now")
    payloads: list[dict[str, Any]] = []
    new_state: dict[str, str] = {}
    skipped: dict[str, str] = {}
    repaired: dict[str, list[str]] = {}
    for index, row in enumerate(_records(alerts_frame)):
        try:
            payload, notes = tolerant_payload(row, now=now, ttl=ttl, generator_url=generator_url,
                                              runbook_base_url=runbook_base_url)
        except (KeyError, ValueError, TypeError, OverflowError) as exc:
            raw_id = row.get("alert_id") if isinstance(row, Mapping) else None
            known = not _is_null(raw_id)
            skipped[f"alert_id={raw_id!r}" if known else f"row {index}"] = f"{type(exc).__name__}: {exc}"
            if known and str(raw_id) in already_sent:
                new_state[str(raw_id)] = already_sent[str(raw_id)]
            continue
        labels = payload["labels"]
        alert_id, severity = labels["alert_id"], labels["severity"]
        if alert_id in new_state:
            raise ValueError(f"alert_id {alert_id!r} appears more than once in the alerts frame")
        resolved = is_resolved(row)
        state = _state_value(severity, payload_hash(payload, resolved))
        new_state[alert_id] = state
        if notes:
            repaired[alert_id] = notes

        previous = already_sent.get(alert_id)
        previous_severity = previous.split(":", 1)[0] if previous else None
        if previous_severity and previous_severity != severity and previous_severity in SEVERITIES:
            old_ends_at = max(now, _to_utc(row["opened_at"], "opened_at"))
            payloads.append(
                {
                    "labels": {**labels, "severity": previous_severity},
                    "annotations": payload["annotations"],
                    "startsAt": payload["startsAt"],
                    "endsAt": rfc3339(old_ends_at),
                }
            )
        if not resolved or previous != state:
            payloads.append(payload)

    for start in range(0, len(payloads), POST_BATCH_SIZE):
        try:
            client.post(payloads[start : start + POST_BATCH_SIZE])
        except AlertmanagerError as err:
            err.pending = len(payloads) - start
            raise
    return Delivery(len(payloads), new_state, skipped, repaired)


@dataclass(frozen=True)
class Delivery:
    """What one ``deliver_report`` call did."""

    sent: int  # alert payloads posted
    state: dict[str, str]  # the new ``already_sent`` (a sensor's cursor)
    skipped: dict[str, str] = field(default_factory=dict)  # "alert_id=..." or "row N" -> why it was left out
    repaired: dict[str, list[str]] = field(default_factory=dict)  # alert_id -> values sent as placeholders


# Placeholders for values an annotation or a routing label cannot carry: the alert still goes out
# (a page with an unknown cost is still a page) and its data_warning annotation says what was odd.
MISSING_TEXT = "(missing)"
UNKNOWN_LABEL = "unknown"
UNKNOWN_COST = "unknown"


def tolerant_payload(alert: Mapping[str, Any], **options) -> tuple[dict[str, Any], list[str]]:
    """``alert_to_payload`` (same keyword options) for a row with odd values; return ``(payload, notes)``.

    Values that only describe the alert are replaced, never fatal: a null or
    missing ``summary`` / ``runbook`` / ``scope`` becomes ``MISSING_TEXT``, a
    null ``cause_family`` / ``region`` label becomes ``UNKNOWN_LABEL`` (routing
    by severity still works), a ``usd_per_hour`` that is not a finite number is
    sent as ``UNKNOWN_COST``, an unreadable ``first_partition_start`` is left
    out. Each replacement is a note, and the notes travel in the alert's
    ``data_warning`` annotation. What identifies or times the alert
    (``alert_id``, ``severity``, ``opened_at``, ``resolved_at``) is never
    guessed: a bad one raises as in ``alert_to_payload``.
    """
    if not isinstance(alert, Mapping):
        raise TypeError(f"an alert row must be a mapping, got {type(alert).__name__}")
    row = dict(alert)
    notes: list[str] = []
    for key, placeholder in (("summary", MISSING_TEXT), ("runbook", MISSING_TEXT), ("scope", MISSING_TEXT),
                             ("cause_family", UNKNOWN_LABEL), ("region", UNKNOWN_LABEL)):
        if _is_null(row.get(key)):
            row[key] = placeholder
            notes.append(f"{key} missing")
    cost = row.get("usd_per_hour")
    try:
        cost_ok = math.isfinite(float(cost))
    except (TypeError, ValueError, OverflowError):
        cost_ok = False
    if not cost_ok:
        notes.append(f"usd_per_hour is not a finite number ({_text(cost)[:40]})")
        row["usd_per_hour"] = 0.0
    if not _is_null(row.get("first_partition_start")):
        try:
            _to_utc(row["first_partition_start"], "first_partition_start")
        except (TypeError, ValueError, OverflowError):
            notes.append(f"first_partition_start unreadable ({_text(row['first_partition_start'])[:40]})")
            row["first_partition_start"] = None
    payload = alert_to_payload(row, **options)
    if not cost_ok:
        payload["annotations"]["usd_per_hour"] = UNKNOWN_COST
    if notes:
        payload["annotations"]["data_warning"] = "; ".join(notes)
    return payload, notes


def sent_state_from_cursor(cursor: str | None) -> dict[str, str]:
    """Parse a sensor cursor written as ``json.dumps(new_state)`` (``None`` -> ``{}``)."""
    if not cursor:
        return {}
    state = json.loads(cursor)
    if not isinstance(state, dict):
        raise ValueError("alert delivery cursor must be a JSON object of alert_id -> state")
    return {str(key): str(value) for key, value in state.items()}


def active_alert_ids(alerts: Iterable[Mapping[str, Any]]) -> set[str]:
    """``alert_id`` labels of alerts returned by ``AlertmanagerClient.get``."""
    return {alert["labels"]["alert_id"] for alert in alerts if "alert_id" in alert.get("labels", {})}
