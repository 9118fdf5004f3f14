"""Alerts in ``make dev``: ``deploy/alertmanager.yml``'s routes with a webhook on this machine as every receiver.

:func:`dev_config` keeps the production file's grouping, routes, timings and inhibition, and points each receiver
that notifies someone (PagerDuty, the ticket bridge) at a local webhook instead; a receiver that notifies nobody
(``dashboard-null``) stays silent, as in production. :func:`serve_webhook` is that webhook: a small HTTP server
that appends every notification Alertmanager posts (its standard webhook JSON, with the time it arrived) as one
line to a JSON-lines file the user can read (``var/alerts/webhook.jsonl``), and prints a line per notification.
"""

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

NOTIFIER_SUFFIX = "_configs"  # pagerduty_configs, webhook_configs, email_configs ...: a receiver's notifiers


def dev_config(production_text: str, webhook_url: str) -> str:
    """``production_text`` (an Alertmanager configuration) with every notifying receiver replaced by one webhook
    to ``webhook_url`` (resolved notifications too, so the log shows an incident end as well)."""
    config = yaml.safe_load(production_text)
    receivers = []
    for receiver in config.get("receivers") or []:
        if any(key.endswith(NOTIFIER_SUFFIX) for key in receiver):
            receiver = {"name": receiver["name"], "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}
        receivers.append(receiver)
    config["receivers"] = receivers
    header = "# deploy/alertmanager.yml for make dev: every notifier is the local webhook (gpu_health/dev/alerts.py)\n"
    return header + yaml.safe_dump(config, sort_keys=False)


def _summary(payload) -> str:
    """One line for the terminal: status, receiver and each alert's name, severity and region."""
    if not isinstance(payload, dict):
        return "a notification that is not Alertmanager's JSON"
    alerts = payload.get("alerts") or []
    names = ", ".join(f"{a.get('labels', {}).get('alertname', '?')} ({a.get('labels', {}).get('severity', '?')}, "
                      f"{a.get('labels', {}).get('region', '?')})" for a in alerts[:5])
    more = f" and {len(alerts) - 5} more" if len(alerts) > 5 else ""
    return f"{payload.get('status', '?')} to {payload.get('receiver', '?')}: {names}{more}"


def make_server(log_path: str | Path, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """The webhook server (not yet serving: call ``serve_forever``); ``port`` 0 takes a free one
    (``server.server_port``). A body that is not JSON is kept as text: nothing posted is lost."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the name http.server calls
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", errors="replace")
            try:
                payload = json.loads(body)
            except json.JSONDecodeError:
                payload = body
            line = {"received_at": datetime.now(UTC).isoformat(timespec="seconds"), "path": self.path,
                    "notification": payload}
            with lock, log_path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(line, sort_keys=True) + "\n")
            print(f"alert webhook: {_summary(payload)} (appended to {log_path})", flush=True)
            self.send_response(200)
            self.end_headers()

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature; the summary line says it
            pass

    return ThreadingHTTPServer((host, port), Handler)


def serve_webhook(log_path: str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve the webhook until interrupted."""
    server = make_server(log_path, host, port)
    print(f"alert webhook: listening on http://{host}:{server.server_port}/, appending to {log_path}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
