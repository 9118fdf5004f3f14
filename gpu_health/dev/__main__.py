"""``python -m gpu_health.dev COMMAND``: the steps of ``scripts/dev.sh`` that need Python."""

import argparse
import sys

import pandas as pd


def _start(args) -> None:
    from gpu_health.partitions import recent_start

    print(recent_start(pd.Timestamp.now(tz="UTC"), args.days))


def _rebase(args) -> None:
    from gpu_health.dev.scenario import anchor, write_rebased
    from gpu_health.sim.scenario import parse_duration

    text = args.incident_in.strip()
    # a leading "-": the incident began that long ago, inside the sensor's first hour (it pages on the first runs)
    sign = -1 if text.startswith("-") else 1
    at = pd.Timestamp.now(tz="UTC") + sign * parse_duration(text.lstrip("-"))
    moved = write_rebased(args.scenario, at, args.out)
    print(f"dev scenario: {args.scenario} re-based, its first incident starts at {anchor(moved):%Y-%m-%d %H:%M} UTC "
          f"({args.out})", file=sys.stderr)


def _alertmanager_config(args) -> None:
    from pathlib import Path

    from gpu_health.dev.alerts import dev_config

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(dev_config(Path(args.production).read_text(), args.webhook))


def _webhook(args) -> None:
    from gpu_health.dev.alerts import serve_webhook

    serve_webhook(args.log, args.host, args.port)


def _backfill(args) -> None:
    from gpu_health.dev.backfill import submit_once

    try:
        submit_once(args.graphql, args.start, args.marker, ui_url=args.ui)
    except (RuntimeError, TimeoutError, OSError) as err:
        print(f"dev backfill: not submitted: {err}", file=sys.stderr, flush=True)
        sys.exit(1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpu_health.dev",
                                     description="The steps of scripts/dev.sh (make dev) that need Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start", help="print the partition start DAYS before now (the day's beginning, UTC)")
    p.add_argument("--days", type=float, default=2.0, help="how far back the partitions start (default 2)")
    p.set_defaults(run=_start)
    p = sub.add_parser("rebase", help="write SCENARIO moved so that its first incident starts INCIDENT_IN from now")
    p.add_argument("scenario", help="a scenario YAML, e.g. scenarios/smoke/02_gpu_fell_off_bus.yaml")
    p.add_argument("--incident-in", default="5m", help="from now to the first incident's start (e.g. 5m, 1h; -30m: "
                   "30 minutes ago, write --incident-in=-30m)")
    p.add_argument("--out", required=True, help="where the re-based scenario is written")
    p.set_defaults(run=_rebase)
    p = sub.add_parser("alertmanager-config", help="deploy/alertmanager.yml with the local webhook as every notifier")
    p.add_argument("production", help="the production configuration (deploy/alertmanager.yml)")
    p.add_argument("--webhook", required=True, help="the webhook's URL, e.g. http://127.0.0.1:9099/")
    p.add_argument("--out", required=True, help="where the configuration is written")
    p.set_defaults(run=_alertmanager_config)
    p = sub.add_parser("webhook", help="serve the webhook that appends each notification to LOG (JSON lines)")
    p.add_argument("--log", default="var/alerts/webhook.jsonl", help="the JSON-lines file (default %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, required=True, help="port to listen on")
    p.set_defaults(run=_webhook)
    p = sub.add_parser("backfill", help="submit make dev's backfill once (waits for the webserver and the sensor)")
    p.add_argument("--graphql", required=True, help="the webserver's GraphQL URL, e.g. http://127.0.0.1:3000/graphql")
    p.add_argument("--start", required=True, help="the first 5-minute partition to backfill (a key, e.g. 2026-12-04-00:00)")
    p.add_argument("--marker", default="var/dagster_home/dev_backfill.json", help="the file recording the submission")
    p.add_argument("--ui", default="", help="the UI's URL, to print the backfill's page")
    p.set_defaults(run=_backfill)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
