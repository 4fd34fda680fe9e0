"""`python -m baton.local up|down|status|demo` (also the `baton` console script)."""

from __future__ import annotations

import argparse
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
    sub.add_parser("demo", help="up, show the platform, keep running until Ctrl-C, then down")
    args = parser.parse_args(argv)

    platform = Platform(Settings.load())
    if args.command == "up":
        platform.up(with_airflow=not args.no_airflow)
    elif args.command == "down":
        platform.down()
    elif args.command == "status":
        print(platform.status())
    elif args.command == "demo":
        return demo(platform)
    return 0


def demo(platform: Platform) -> int:
    from baton.local.demo import run_demo

    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        platform.up()
        run_demo(platform, should_stop=lambda: stop["now"])
        print("\nRunning. Press Ctrl-C to stop everything.", flush=True)
        while not stop["now"]:
            time.sleep(0.5)
    finally:
        print("\nstopping ...", flush=True)
        platform.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
