"""Entry point of one slot: `python -m spark_apps.runtime.run --app NAME --slot blue|green`.

Runs under plain `python` (local mode) or spark-submit (a cluster master). Exit code 0 after a
requested stop, 1 when the query failed, 2 for bad arguments or a bad app definition, 3 for a
staged launch never promoted (spark_apps.runtime.hold).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from baton.apps import AppDefinitionError, load_app
from baton.driver_wrapper import HOLD_ARG, HOLD_TIMEOUT_ARG
from baton.records import Slot
from baton.settings import Settings


def main(argv: list[str] | None = None) -> int:
    settings = Settings.load()
    # The runtime's own warnings (a takeover, a lease not renewed) go to the slot's log with a time.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(prog="spark_apps.runtime.run")
    ap.add_argument("--app", required=True, help="app name (include/apps/<name>.yaml) or a path to a definition")
    ap.add_argument("--slot", required=True, choices=[s.value for s in Slot])
    ap.add_argument("--generation", type=int, default=0)
    ap.add_argument("--bootstrap", default=settings.kafka_bootstrap)
    ap.add_argument("--state-dir", type=Path, default=settings.state_dir)
    ap.add_argument("--starting-offsets", default="earliest")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    ap.add_argument(HOLD_ARG, type=Path, default=None, metavar="DRIVER_JSON",
                    help="a staged launch (baton.launcher.stage): start up, then hold until this record names it")
    ap.add_argument(HOLD_TIMEOUT_ARG, type=float, default=600.0, help="a staged launch never promoted exits after this")
    args = ap.parse_args(argv)
    try:
        app = load_app(args.app)
    except AppDefinitionError as exc:
        print(f"bad app definition: {exc}", file=sys.stderr)
        return 2
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--conf {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        conf[key] = value
    from spark_apps.runtime.harness import Harness
    from spark_apps.runtime.hold import Hold

    hold = Hold(args.hold_until_recorded, args.hold_timeout_s) if args.hold_until_recorded is not None else None
    code = Harness(app, Slot(args.slot), args.bootstrap, args.state_dir, args.generation, conf,
                   args.starting_offsets, hold=hold).run()
    # The query has stopped and its last status is out: a late SIGTERM (a stop backing up the control
    # request) must not turn this clean exit into a signal death while the JVM shuts down.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(main())
