"""`python -m baton.local up|down|status|reset|demo` (also the `baton` console script)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

from baton.local.platform import Platform
from baton.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="baton", description="Baton's embedded local platform")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the broker, create the topics, start Airflow")
    up.add_argument("--no-airflow", action="store_true", help="broker and topics only")
    sub.add_parser("down", help="stop everything the platform started")
    sub.add_parser("status", help="what runs, on which ports, and how to log in")
    sub.add_parser(
        "reset", help="stop the platform and delete its data (checkpoints, Airflow's database, logs) to start over"
    )
    sub.add_parser("demo", help="up, start click_counts under load, show it live until Ctrl-C, then down")
    apps = sub.add_parser("apps", help="every app's slots: role, version, lag, rates, lease")
    apps.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (2 if omitted) until Ctrl-C",
    )
    one = sub.add_parser("app", help="one app's slots, and its history of handoffs and lifecycle changes")
    one.add_argument("name")
    one.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (2 if omitted) until Ctrl-C",
    )
    metrics = sub.add_parser("metrics", help="serve the apps' Prometheus metrics over plain HTTP (an exporter)")
    metrics.add_argument("--port", type=int, default=9464)
    metrics.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback only)")
    args = parser.parse_args(argv)

    if args.command == "metrics":
        return serve_metrics(Settings.load().kafka_bootstrap, args.host, args.port)
    if args.command in ("apps", "app"):
        return show_apps(Settings.load().kafka_bootstrap, getattr(args, "name", None), args.watch)

    platform = Platform(Settings.load())
    if args.command == "up":
        from baton.local.procs import StartError

        try:
            platform.up(with_airflow=not args.no_airflow)
        except StartError as exc:  # it names the process and its log: no traceback needed
            print(f"baton: {exc}", file=sys.stderr)
            return 1
    elif args.command == "down":
        platform.down()
    elif args.command == "status":
        print(platform.status())
    elif args.command == "reset":
        from baton.local.reset import reset

        reset(platform)
    elif args.command == "demo":
        return demo(platform)
    return 0


def show_apps(bootstrap: str, name: str | None, watch: float | None) -> int:
    from baton.app_table import app_detail, apps_table
    from baton.apps import AppDefinitionError, load_registry
    from baton.status_feed import StatusFeed

    try:
        registry = load_registry()
    except AppDefinitionError as exc:
        print(f"baton: {exc}", file=sys.stderr)
        return 2
    if name is not None and name not in registry:
        print(f"baton: no app {name!r} is registered (known: {', '.join(sorted(registry)) or 'none'})", file=sys.stderr)
        return 2
    if watch is not None and watch <= 0:
        print("baton: --watch takes a positive number of seconds", file=sys.stderr)
        return 2
    logging.getLogger("baton.status_feed.kafka").setLevel(logging.CRITICAL)  # the error is said below, once
    feed = StatusFeed(bootstrap, status_tail=5_000, timeout_s=5.0)
    while True:
        try:
            feed.refresh()
            views = feed.views(registry)
        except Exception as exc:  # the broker down or unreachable: say so, keep watching
            text = f"baton: cannot read Baton's topics from {bootstrap}: {exc}"
            if watch is None:
                print(text, file=sys.stderr)
                return 1
        else:
            # views() has one view per registered app, and `name` is registered (checked above)
            text = app_detail(next(v for v in views if v.app == name)) if name is not None else apps_table(views)
        if watch is None:
            try:
                print(text)
            except BrokenPipeError:  # piped into `head`: what it took was shown
                sys.stderr.close()
            return 0
        print(
            "\x1b[2J\x1b[H" + time.strftime("%H:%M:%S ") + f"(every {watch:g} s, Ctrl-C to stop)\n" + text, flush=True
        )
        try:
            time.sleep(watch)
        except KeyboardInterrupt:
            return 0


def serve_metrics(bootstrap: str, host: str, port: int) -> int:
    """An exporter for a scraper that cannot authenticate to Airflow: the same metrics as the Baton
    page's /baton/metrics, read from the broker at each scrape."""
    from prometheus_client import CollectorRegistry, start_http_server

    from baton.metrics import ViewCollector
    from baton.status_feed import StatusFeed

    feed = StatusFeed(bootstrap, status_tail=2_000)

    class Fresh(ViewCollector):
        def __init__(self):
            super().__init__(())

        def collect(self):
            feed.refresh()
            self.views = feed.views()
            yield from super().collect()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fresh())
    server, _thread = start_http_server(port, addr=host, registry=registry)
    print(f"baton metrics: http://{host}:{port}/metrics (broker {bootstrap}); Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
    return 0


def demo(platform: Platform) -> int:
    from baton.local.demo import Demo, DemoFailed
    from baton.local.procs import StartError

    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    # Ctrl-C, a kill, or the terminal closed: each stops the demo and everything it started.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    shown = Demo(platform, say=say_if_heard)
    failed = 0
    try:
        platform.up(say=say_if_heard)
        if not stop["now"]:
            shown.start(should_stop=lambda: stop["now"])
        if not stop["now"]:
            shown.watch(should_stop=lambda: stop["now"])
    except (DemoFailed, StartError) as exc:  # known failures: the reason and the way out, no traceback
        say_if_heard(f"\ndemo: {exc}")
        failed = 1
    finally:
        say_if_heard("\nstopping ...")
        shown.stop()
        platform.down(say=say_if_heard)
    return failed


def say_if_heard(text: str) -> None:
    """Print, unless nobody reads any more (a closed terminal or pipe): the demo's stop must go on."""
    try:
        print(text, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
